#!/usr/bin/env bash
# test.sh — `make test`: set this machine up for the tests, then run them all.
#
# As root on Debian, everything the tests use is installed and started from
# the project's own files, so a fresh machine needs nothing else:
#   scripts/provision.sh       the desktop tools, Chromium, Codex, users, cgo
#                              and debootstrap (seconds when already there)
#   scripts/docker-engine.sh   Debian's docker.io and dockerd when no engine
#                              answers (stopped at exit only if started here)
#   scripts/postgres.sh        Debian's PostgreSQL and a test database, unless
#                              WORKER_TEST_DATABASE_URL is set
#   scripts/build-image.sh     the computer image (seconds when nothing changed)
#   scripts/kube.sh            a single-node Kubernetes cluster built from
#                              source (cached per machine), stopped at exit
#                              when this run started it
# Not root (a laptop): nothing is installed; the tests that need root, the
# tools, an engine or Postgres skip, and under CI=true they fail instead.
# TEST_SETUP=0 skips the set-up steps. apps/worker runs as shards beside
# the other packages (scripts/worker-shards.sh); WORKER_SHARDS=0 runs it as
# one process. Each shard's verbose log: build/test-logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
GO="${GO:-go}"
IMAGE="${IMAGE:-open-bot/computer:dev}"
TEST_TIMEOUT="${TEST_TIMEOUT:-75m}"
read -r -a PKGS <<<"${PKGS:-./apps/botd/... ./apps/worker/... ./pkg/shared/...}"

log() { printf 'make test: %s\n' "$*" >&2; }

setup=no
if [ "${TEST_SETUP:-1}" = 1 ] && [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ]; then
  setup=yes
fi
claim="$(mktemp)"
kube_started=no
cleanup() {
  if [ "$kube_started" = yes ]; then bash scripts/kube.sh stop >/dev/null 2>&1 || true; fi
  bash scripts/docker-engine.sh stop "$claim" >/dev/null 2>&1 || true
  rm -f "$claim"
  if [ -n "${OPENBOT_TEST_BIN:-}" ]; then rm -rf "$OPENBOT_TEST_BIN"; fi
}
trap cleanup EXIT
t_setup=$(date +%s)
if [ "$setup" = yes ]; then
  bash scripts/provision.sh
  bash scripts/docker-engine.sh start "$claim"
  if [ -z "${WORKER_TEST_DATABASE_URL:-}" ]; then
    WORKER_TEST_DATABASE_URL="$(bash scripts/postgres.sh)"
    export WORKER_TEST_DATABASE_URL
  fi
  log "set-up (provision, engine, database) took $(( $(date +%s) - t_setup ))s"
else
  log "not root on Debian (or TEST_SETUP=0): nothing is installed or started; tests that need what is missing skip (fail under CI=true)"
fi

# The order, so that the machine is never idle while something waits:
#   1. in the background: the cluster's binary (scripts/kube.sh build: a
#      per-machine cache, minutes cold, nothing warm) and the image's base
#      (debootstrap on a new machine); `make build` meanwhile;
#   2. the tests of the packages that need no image, no Docker, no cluster
#      and no Postgres (apps/botd/..., pkg/shared/...) start in the
#      background, with `go vet` and apps/worker's test binary; the image;
#   3. apps/worker's shards that need no cluster (all but "cluster");
#   4. the cluster starts with the image imported (waiting for its build),
#      then (KUBE_TEST_KUBECONFIG set) the other packages' tests in one
#      `go test` and apps/worker's "cluster" shard;
#   5. once the early packages' tests are done, the worker's packages after
#      its providers package in a `go test` of their own.
# TEST_KUBE=0 leaves the cluster out (its tests skip; fail under CI=true).
# Each phase's time is printed ("make test: … took Ns").
t_all=$(date +%s)
took() { log "$1 took $(( $(date +%s) - $2 ))s"; }
logs="$PWD/build/test-logs"
mkdir -p "$logs"
pids=()
killtree() { local c; for c in $(pgrep -P "$1" 2>/dev/null); do killtree "$c"; done; kill "$1" 2>/dev/null || true; }
trap 'for p in "${pids[@]}"; do killtree "$p"; done; cleanup' EXIT

kube_build_pid=""
kube_log="$logs/kube.log"
if [ "$setup" = yes ] && [ "${TEST_KUBE:-1}" = 1 ]; then
  bash scripts/kube.sh build >"$kube_log" 2>&1 &
  kube_build_pid=$!
  pids+=("$kube_build_pid")
fi
# The image's base and its system stage (debootstrap and the packages on a
# new machine: minutes, mostly download and unpacking; seconds when cached)
# beside the Go build; the image itself waits for them.
have_docker=no
if docker info >/dev/null 2>&1; then have_docker=yes; fi
base_pid=""
if [ "$have_docker" = yes ]; then
  ( t=$(date +%s); rc=0
    IMAGE="$IMAGE" IMAGE_PREBUILD=1 IMAGE_SKIP_PROVISION=1 bash scripts/build-image.sh >"$logs/image-base.log" 2>&1 || rc=$?
    took "the image's base and system stage (rc=$rc)" "$t"; exit "$rc" ) &
  base_pid=$!
  pids+=("$base_pid")
fi

t=$(date +%s)
make --no-print-directory build
took "make build" "$t"
# The tests run these two programs instead of linking their own in every
# test process (pkg/shared/testbin): a root-owned 0755 directory, so the
# computers' users can run botd from it and none can change it.
OPENBOT_TEST_BIN="$(mktemp -d)"
chmod 0755 "$OPENBOT_TEST_BIN"
install -m 0755 bin/botd bin/worker "$OPENBOT_TEST_BIN/"
export OPENBOT_TEST_BIN

# apps/worker holds most of the suite's time in one package whose tests run
# one after another; it runs as shards (scripts/worker-shards.sh: the shard
# list and the rule for which tests may share one), each its own process
# of one test binary, beside `go test` of every other package. Default:
# shards; WORKER_SHARDS=0 runs it as one process inside `go test`.
WORKER_PKG=github.com/open-bot/computer/apps/worker
WORKER_SHARDS="${WORKER_SHARDS:-1}"
mapfile -t LISTED < <("$GO" list "${PKGS[@]}")
EARLY=()
LATE=()
AFTER_EARLY=()
LC_COLLATE=C # the comparison below, byte by byte
sharded=no
for p in "${LISTED[@]}"; do
  case "$p" in
    github.com/open-bot/computer/apps/botd | github.com/open-bot/computer/apps/botd/* | \
    github.com/open-bot/computer/pkg/shared | github.com/open-bot/computer/pkg/shared/*)
      EARLY+=("$p") ;;
    "$WORKER_PKG")
      if [ "$WORKER_SHARDS" != 0 ]; then sharded=yes; else LATE+=("$p"); fi ;;
    *)
      # The worker's packages after its providers package (the vendors'
      # providers and emulators, rfb, store, testbotd, …) wait for the
      # early packages instead, see below.
      if [[ "$p" > "$WORKER_PKG/internal/providers" && "$p" == "$WORKER_PKG"/* ]]; then
        AFTER_EARLY+=("$p")
      else
        LATE+=("$p")
      fi ;;
  esac
done

# Each `go test` here runs one test binary at a time (-p 1): beside the
# shards, -p 2 made seven test processes of desktops, browsers and vendor
# sandboxes at once, a load of 30-40 on two cores, and the waits that poll
# (a sandbox's command per look) burnt the CPU the tests needed: rehearsal
# 29 took 41 min warm, the vendors shard 2,317 s against 258 s alone, and
# three tests missed under the load.
#
# gotest NAME PKG...: that `go test` of the packages, in the background
# (GOTEST_P: its -p, default 1).
test_pids=()
gotest() {
  local name=$1; shift
  ( t=$(date +%s); rc=0
    "$GO" test -p "${GOTEST_P:-1}" -count=1 -timeout "$TEST_TIMEOUT" "$@" || rc=$?
    took "$name (rc=$rc)" "$t"; exit "$rc" ) &
  test_pids+=("$!")
  pids+=("$!")
}

t_tests=$(date +%s)
early_pid=""
if [ "${#EARLY[@]}" -gt 0 ]; then
  log "starting the tests of ${#EARLY[@]} packages that need no image, engine, cluster or database"
  gotest "the early packages' tests" "${EARLY[@]}"
  early_pid=$!
fi

bin="$logs/worker.test"
compile_pid=""
if [ "$sharded" = yes ]; then
  ( t=$(date +%s); "$GO" test -c -o "$bin" ./apps/worker && took "apps/worker's test binary" "$t" ) &
  compile_pid=$!
  pids+=("$compile_pid")
fi
# go vet beside the rest, niced: nothing waits for it but the end (its
# result counts there)
( t=$(date +%s); rc=0; nice -n 10 "$GO" vet "${PKGS[@]}" || rc=$?; took "go vet (rc=$rc)" "$t"; exit "$rc" ) &
vet_pid=$!
pids+=("$vet_pid")
if [ "$have_docker" = yes ]; then
  if ! wait "$base_pid"; then
    log "the image's base or system stage failed ($logs/image-base.log):"; tail -n 30 "$logs/image-base.log" >&2
  fi
  t=$(date +%s)
  IMAGE="$IMAGE" IMAGE_SKIP_PROVISION=1 bash scripts/build-image.sh
  took "the image" "$t"
else
  log "no Docker engine answers; the image tests skip (fail under CI=true)"
fi


if [ "$sharded" = yes ]; then
  if ! wait "$compile_pid"; then
    log "apps/worker's test binary did not build"
    exit 1
  fi
  # shellcheck source=scripts/worker-shards.sh
  . scripts/worker-shards.sh
  # every top-level test, and the shard each falls in
  mapfile -t ALL < <(cd apps/worker && "$bin" -test.list '.*' | grep '^Test')
  named_re=""
  for tests in "${WORKER_SHARD_TESTS[@]}"; do
    for t in $tests; do named_re+="${named_re:+|}$t"; done
  done
  for tests in "${WORKER_SHARD_TESTS[@]}"; do
    for t in $tests; do
      if ! printf '%s\n' "${ALL[@]}" | grep -qx -- "$t"; then
        log "scripts/worker-shards.sh names $t, which apps/worker does not have (renamed or removed? a renamed test runs in the last shard)"
      fi
    done
  done
  nshards=$(( ${#WORKER_SHARD_NAMES[@]} + 1 ))
  runshard() { # index name mode regex
    local idx=$1 name=$2 mode=$3 re=$4 log="$logs/worker-$2.log" t=() s rc=0 secs
    for n in "${ALL[@]}"; do
      local hit=no
      if [[ "$n" =~ ^($re)$ ]]; then hit=yes; fi
      if { [ "$mode" = run ] && [ "$hit" = yes ]; } || { [ "$mode" = skip ] && [ "$hit" = no ]; }; then
        t+=("$n")
      fi
    done
    log "worker shard $name (${#t[@]} tests): ${t[*]}"
    s=$(date +%s)
    # WORKER_TEST_SHARD: the shard's own band of loopback ports (freeAddr)
    (cd apps/worker && WORKER_TEST_SHARD="$idx/$nshards" exec "$bin" -test.v -test.paniconexit0 -test.timeout "$TEST_TIMEOUT" "-test.$mode" "^($re)\$") >"$log" 2>&1 || rc=$?
    secs=$(( $(date +%s) - s ))
    if [ "$rc" = 0 ]; then
      grep -E '^--- (PASS|SKIP)' "$log" | sed "s/^/    [$name] /" || true
      printf 'ok  \t%s [shard %s, %d tests]\t%ds\n' "$WORKER_PKG" "$name" "${#t[@]}" "$secs"
    else
      # each failed test's whole output (and an unfinished one's: a panic
      # or the timeout), not the passing ones'; its --- FAIL lines as go test
      # prints them (unprefixed), the rest prefixed with the shard
      awk '/^=== RUN   [^\/]*$/ { buf = "" }
        { buf = buf $0 "\n" }
        /^--- (PASS|SKIP): / { buf = "" }
        /^--- FAIL: / { printf "%s", buf; buf = "" }
        END { n = split(buf, l, "\n"); for (i = 1; i < n; i++) if (l[i] !~ /^ +--- (PASS|SKIP): /) print l[i] }' "$log" | sed "/^--- FAIL: /!s/^/[$name] /"
      printf 'FAIL\t%s [shard %s, %d tests]\t%ds (log: %s)\n' "$WORKER_PKG" "$name" "${#t[@]}" "$secs" "$log"
    fi
    return "$rc"
  }
  # the shards that need no cluster start now, the others once it is up
  for i in "${!WORKER_SHARD_NAMES[@]}"; do
    if [ "${WORKER_SHARD_NAMES[$i]}" != "$WORKER_SHARD_CLUSTER" ]; then
      runshard "$i" "${WORKER_SHARD_NAMES[$i]}" run "${WORKER_SHARD_TESTS[$i]// /|}" &
      test_pids+=("$!")
      pids+=("$!")
    fi
  done
  runshard "$(( nshards - 1 ))" "$WORKER_SHARD_REST" skip "$named_re" &
  test_pids+=("$!")
  pids+=("$!")
fi

if [ -n "$kube_build_pid" ]; then
  t=$(date +%s)
  kube_ok=yes
  if ! wait "$kube_build_pid"; then
    kube_ok=no
    log "scripts/kube.sh build failed ($kube_log):"; tail -n 30 "$kube_log" >&2
  fi
  if [ "$kube_ok" = yes ]; then
    bash scripts/kube.sh status >/dev/null 2>&1 || kube_started=yes
    if KUBE_COMPUTER_IMAGE="$IMAGE" bash scripts/kube.sh start >>"$kube_log" 2>&1; then
      export KUBE_TEST_KUBECONFIG=/var/lib/open-bot-kube/admin.kubeconfig
      log "Kubernetes test cluster up (KUBE_TEST_KUBECONFIG=$KUBE_TEST_KUBECONFIG; log $kube_log)"
    else
      kube_ok=no
      log "scripts/kube.sh start failed ($kube_log):"; tail -n 30 "$kube_log" >&2
    fi
  fi
  took "the cluster (waiting for its build, then start)" "$t"
  if [ "$kube_ok" = no ] && [ "${CI:-}" = true ]; then
    log "CI=true: the Kubernetes tests cannot run without the cluster"
    exit 1
  fi
fi

# One `go test` for all of them (at its -p): two of them beside the early
# packages and the shards made nine test processes of desktops and browsers
# at a load of 40 on 2 cores, and start-up deadlines missed (rehearsal 28).
if [ "${#LATE[@]}" -gt 0 ]; then
  gotest "the tests of the other ${#LATE[@]} packages" "${LATE[@]}"
fi
if [ "$sharded" = yes ]; then
  for i in "${!WORKER_SHARD_NAMES[@]}"; do
    if [ "${WORKER_SHARD_NAMES[$i]}" = "$WORKER_SHARD_CLUSTER" ]; then
      runshard "$i" "${WORKER_SHARD_NAMES[$i]}" run "${WORKER_SHARD_TESTS[$i]// /|}" &
      test_pids+=("$!")
      pids+=("$!")
    fi
  done
fi

# The packages after the worker's providers package run once the early
# packages' tests are done, as a third `go test` in their place: one
# `go test` of all the late packages was the run's tail, alone on a
# half-idle machine for its last 9 minutes (rehearsal 33: it ended 540 s
# after the others), while starting it at once would add to the load the
# others already saturate.
failed=0
if [ "${#AFTER_EARLY[@]}" -gt 0 ]; then
  if [ -n "$early_pid" ]; then
    wait "$early_pid" || failed=1
    rest=()
    for p in "${test_pids[@]}"; do [ "$p" = "$early_pid" ] || rest+=("$p"); done
    test_pids=("${rest[@]}")
  fi
  # -p 2: by then the shards are ending and the machine has room; with
  # -p 1 this go test alone took 573 s in rehearsal 34, linking its 35 test
  # binaries one after another.
  GOTEST_P=2 gotest "the tests of the ${#AFTER_EARLY[@]} packages after the worker's providers" "${AFTER_EARLY[@]}"
fi
for p in "${test_pids[@]}" $vet_pid; do
  wait "$p" || failed=1
done
took "the tests" "$t_tests"
took "all of make test after the set-up" "$t_all"
if [ "$failed" != 0 ]; then
  exit 1
fi
