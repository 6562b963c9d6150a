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
# the other packages (scripts/worker-shards.sh) on 4 CPUs or more;
# WORKER_SHARDS=1 forces the shards, WORKER_SHARDS=0 one process. Each
# shard's verbose log: build/test-logs/.
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
}
trap cleanup EXIT
if [ "$setup" = yes ]; then
  bash scripts/provision.sh
  bash scripts/docker-engine.sh start "$claim"
  if [ -z "${WORKER_TEST_DATABASE_URL:-}" ]; then
    WORKER_TEST_DATABASE_URL="$(bash scripts/postgres.sh)"
    export WORKER_TEST_DATABASE_URL
  fi
else
  log "not root on Debian (or TEST_SETUP=0): nothing is installed or started; tests that need what is missing skip (fail under CI=true)"
fi

# The Kubernetes test cluster (scripts/kube.sh): its binary builds beside
# the image (a per-machine cache: minutes cold, nothing warm), then it
# starts with the image imported; its tests get KUBE_TEST_KUBECONFIG.
# TEST_KUBE=0 leaves it out (its tests skip; fail under CI=true).
kube_build_pid=""
kube_log="$PWD/build/test-logs/kube.log"
if [ "$setup" = yes ] && [ "${TEST_KUBE:-1}" = 1 ]; then
  mkdir -p "$(dirname "$kube_log")"
  bash scripts/kube.sh build >"$kube_log" 2>&1 &
  kube_build_pid=$!
fi

make --no-print-directory build
"$GO" vet "${PKGS[@]}"
if docker info >/dev/null 2>&1; then
  IMAGE="$IMAGE" IMAGE_SKIP_PROVISION=1 bash scripts/build-image.sh
else
  log "no Docker engine answers; the image tests skip (fail under CI=true)"
fi

if [ -n "$kube_build_pid" ]; then
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
  if [ "$kube_ok" = no ] && [ "${CI:-}" = true ]; then
    log "CI=true: the Kubernetes tests cannot run without the cluster"
    exit 1
  fi
fi

# apps/worker holds most of the suite's time in one package whose tests run
# one after another; it runs as shards (scripts/worker-shards.sh: the shard
# list and the rule for which tests may share one), each its own process
# of one test binary, beside `go test` of every other package.
# Default: shards on a machine of 4 or more CPUs, one process below that
# (on the 2-core shared machine the vendor shard's in-container start-up
# deadlines missed with two shards beside the other packages: docs,
# "CI time"); WORKER_SHARDS=1 or 0 chooses.
WORKER_PKG=github.com/open-bot/computer/apps/worker
if [ -z "${WORKER_SHARDS:-}" ]; then
  if [ "$(nproc 2>/dev/null || echo 1)" -ge 4 ]; then WORKER_SHARDS=1; else WORKER_SHARDS=0; fi
  log "WORKER_SHARDS=$WORKER_SHARDS ($(nproc 2>/dev/null || echo '?') CPUs): apps/worker $( [ "$WORKER_SHARDS" = 0 ] && echo 'runs as one process' || echo 'runs as shards')"
fi
mapfile -t LISTED < <("$GO" list "${PKGS[@]}")
REST=()
sharded=no
for p in "${LISTED[@]}"; do
  if [ "$p" = "$WORKER_PKG" ] && [ "${WORKER_SHARDS:-1}" != 0 ]; then
    sharded=yes
  else
    REST+=("$p")
  fi
done
if [ "$sharded" = no ]; then
  "$GO" test -count=1 -timeout "$TEST_TIMEOUT" "${LISTED[@]}"
  exit 0
fi

# shellcheck source=scripts/worker-shards.sh
. scripts/worker-shards.sh
logs="$PWD/build/test-logs"
mkdir -p "$logs"
bin="$logs/worker.test"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; cleanup' EXIT

start=$(date +%s)
rest_rc=0
if [ "${#REST[@]}" -gt 0 ]; then
  "$GO" test -count=1 -timeout "$TEST_TIMEOUT" "${REST[@]}" &
  rest_pid=$!
  pids+=("$rest_pid")
fi
"$GO" test -c -o "$bin" ./apps/worker

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
runshard() { # name mode regex
  local name=$1 mode=$2 re=$3 log="$logs/worker-$1.log" t=() s rc=0 secs
  for n in "${ALL[@]}"; do
    local hit=no
    if [[ "$n" =~ ^($re)$ ]]; then hit=yes; fi
    if { [ "$mode" = run ] && [ "$hit" = yes ]; } || { [ "$mode" = skip ] && [ "$hit" = no ]; }; then
      t+=("$n")
    fi
  done
  log "worker shard $name (${#t[@]} tests): ${t[*]}"
  s=$(date +%s)
  (cd apps/worker && exec "$bin" -test.v -test.paniconexit0 -test.timeout "$TEST_TIMEOUT" "-test.$mode" "^($re)\$") >"$log" 2>&1 || rc=$?
  secs=$(( $(date +%s) - s ))
  if [ "$rc" = 0 ]; then
    grep -E '^--- (PASS|SKIP)' "$log" | sed "s/^/    [$name] /" || true
    printf 'ok  \t%s [shard %s, %d tests]\t%ds\n' "$WORKER_PKG" "$name" "${#t[@]}" "$secs"
  else
    # each failed test's whole output (and an unfinished one's: a panic
    # or the timeout), not the passing ones'
    awk '/^=== RUN   [^\/]*$/ { buf = "" }
      { buf = buf $0 "\n" }
      /^--- (PASS|SKIP): / { buf = "" }
      /^--- FAIL: / { printf "%s", buf; buf = "" }
      END { printf "%s", buf }' "$log" | sed "s/^/[$name] /"
    printf 'FAIL\t%s [shard %s, %d tests]\t%ds (log: %s)\n' "$WORKER_PKG" "$name" "${#t[@]}" "$secs" "$log"
  fi
  return "$rc"
}
shard_pids=()
for i in "${!WORKER_SHARD_NAMES[@]}"; do
  re="${WORKER_SHARD_TESTS[$i]// /|}"
  runshard "${WORKER_SHARD_NAMES[$i]}" run "$re" &
  shard_pids+=("$!")
  pids+=("$!")
done
runshard "$WORKER_SHARD_REST" skip "$named_re" &
shard_pids+=("$!")
pids+=("$!")

failed=0
for p in "${shard_pids[@]}"; do
  wait "$p" || failed=1
done
if [ -n "${rest_pid:-}" ]; then
  wait "$rest_pid" || rest_rc=$?
fi
log "tests took $(( $(date +%s) - start ))s (apps/worker in $(( ${#WORKER_SHARD_NAMES[@]} + 1 )) shards; logs in $logs)"
if [ "$failed" != 0 ] || [ "$rest_rc" != 0 ]; then
  exit 1
fi
