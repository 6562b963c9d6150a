#!/usr/bin/env bash
# build-image.sh — `make image`: build the computer image (IMAGE, default
# open-bot/computer:dev) on the Docker engine that answers here.
#
# 1. The base (BASE_IMAGE, default debian:trixie-slim): used if the engine has
#    it, pulled if a registry answers, otherwise made here from Debian's
#    packages: `debootstrap --variant=minbase trixie` from the Debian mirror apt
#    uses on this machine (DEBIAN_MIRROR overrides), imported under BASE_IMAGE.
# 2. botd and the worker: built static by this machine's Go toolchain into
#    build/image/ (the whole build context, with provision.sh and rootfs/; see
#    .dockerignore), so the Dockerfile's first stage only carries binaries.
# 3. docker build. The legacy builder and BuildKit both tag only a finished
#    build, so a build that fails mid-way leaves IMAGE as it was.
#
# Needs root for debootstrap (only when the base is made here). As root on
# Debian it installs what it uses and starts an engine when none answers.
# IMAGE_PREBUILD=1 makes only the base and the Dockerfile's system stage.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

IMAGE="${IMAGE:-open-bot/computer:dev}"
BASE_IMAGE="${BASE_IMAGE:-debian:trixie-slim}"
BASE_SUITE="${BASE_SUITE:-trixie}"
GO="${GO:-go}"
DOCKERFILE="${DOCKERFILE:-images/computer/Dockerfile}"
OUT=build/image

log() { printf 'make image: %s\n' "$*" >&2; }
# The stages, one "step n/N: name" line each as it begins (plain lines, on a
# terminal or not), and the time they took at the end.
STEPS=4
STEP=0
# build_ca: npm inside the build trusts what it trusts on this machine: the
# file named by BUILD_CA_FILE, else NODE_EXTRA_CA_CERTS (set where a
# TLS-intercepting proxy stands between this machine and the npm registry);
# empty otherwise. Written only when it changed (the engine's cache).
build_ca() {
  local ca="${BUILD_CA_FILE:-${NODE_EXTRA_CA_CERTS:-}}"
  if [ -n "$ca" ] && [ -s "$ca" ]; then
    cmp -s "$ca" "$OUT/build-ca.crt" || cp "$ca" "$OUT/build-ca.crt"
  else
    [ -e "$OUT/build-ca.crt" ] && [ ! -s "$OUT/build-ca.crt" ] || : >"$OUT/build-ca.crt"
  fi
}
# image_go_build BOTD WORKER: the image's two binaries (see step 3). Both
# with the flags the Makefile gives every go command (-trimpath, the pure-Go
# resolver and user lookup), so they reuse make build's and the tests'
# compiled packages; the worker without cgo (its JPEG encoder's pure-Go
# form), botd with libjpeg-turbo linked in statically.
image_go_build() {
  CGO_ENABLED=1 "$GO" build -trimpath -tags osusergo,netgo -ldflags '-s -w -linkmode external -extldflags "-static"' -o "$1" ./apps/botd &&
    CGO_ENABLED=0 "$GO" build -trimpath -tags osusergo,netgo -ldflags '-s -w' -o "$2" ./apps/worker
}
step() {
  STEP=$((STEP + 1))
  log "step $STEP/$STEPS: $* (${SECONDS}s so far)"
}
die() {
  log "$*"
  exit 1
}

# A full disk shows up as ENOSPC somewhere deep in a tool's output, or not
# at all (debootstrap says only "Couldn't download"); name it.
free_mb() { df -Pm "$1" 2>/dev/null | awk 'NR==2 {print $4}'; }
check_space() {
  local dir="$1" need_mb="$2" hint="$3" avail
  [ "${IMAGE_SKIP_SPACE_CHECK:-0}" = 1 ] && return 0
  avail="$(free_mb "$dir")"
  if [ -n "$avail" ] && [ "$avail" -lt "$need_mb" ]; then
    die "only ${avail} MB free on the filesystem of $dir; this step needs about ${need_mb} MB ($hint)"
  fi
}
# explain_failure WHAT LOG DIR=MB...: die, saying the disk is full when the
# log says so, or when a DIR's filesystem has less than the MB the step needs
# (tools that clean up after a failed write leave some space behind).
explain_failure() {
  local what="$1" logf="$2" d need avail
  shift 2
  if grep -qiE 'no space left on device|ENOSPC' "$logf" 2>/dev/null; then
    die "$what failed: the disk is full (no space left on device); free space and run make image again"
  fi
  for d in "$@"; do
    need="${d##*=}"
    d="${d%=*}"
    avail="$(free_mb "$d")"
    if [ -n "$avail" ] && [ "$avail" -lt "$need" ]; then
      die "$what failed, most likely because the disk is full: only ${avail} MB free on the filesystem of $d, about ${need} MB needed; free space and run make image again"
    fi
  done
  die "$what failed; see the output above"
}

step "tools and the Docker engine"
# As root on Debian, install what this build uses (cgo, libturbojpeg,
# debootstrap: `provision.sh --build`, seconds when present) and start an
# engine when none answers; it keeps running afterwards, like any machine's
# engine (`scripts/docker-engine.sh stop` stops it).
if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ] && [ "${IMAGE_SKIP_PROVISION:-0}" != 1 ]; then
  bash scripts/provision.sh --build
  # Only this machine's own engine is started here; a DOCKER_HOST elsewhere
  # is the caller's to start.
  if [ -z "${DOCKER_HOST:-}" ] && ! docker info >/dev/null 2>&1; then
    bash scripts/docker-engine.sh start
  fi
fi
docker info >/dev/null 2>&1 || die "no Docker engine answers here (as root, this script starts one; or: sudo scripts/docker-engine.sh start)"

# One build at a time per checkout (test packages may ask at once): they share
# build/image and the base.
mkdir -p "$OUT"
exec 9>"$OUT/.lock"
if ! flock -n 9; then
  log "waiting for another make image in this checkout"
  flock 9
fi

# Debian's mirror as apt is configured on this machine: the first repository
# whose Release file says Origin: Debian, Label: Debian (not -Security).
# LABEL=Debian-Security gives the security mirror (empty when none).
debian_mirror() {
  local label="${1:-Debian}"
  if [ "$label" = Debian ] && [ -n "${DEBIAN_MIRROR:-}" ]; then
    echo "$DEBIAN_MIRROR"
    return
  fi
  local m
  m="$(apt-get indextargets --format '$(ORIGIN)|$(LABEL)|$(REPO_URI)' 2>/dev/null |
    awk -F'|' -v l="$label" '$1 == "Debian" && $2 == l {print $3; exit}')"
  if [ "$label" != Debian ]; then
    echo "${m%/}"
    return
  fi
  if [ -z "$m" ]; then
    # Not yet `apt-get update`d: read sources.list(.d) directly.
    m="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null |
      grep -oE '(https?|file)://[^ ]*/debian/?( |$)' | grep -v -- '-security' | head -n1 | tr -d ' ')"
  fi
  [ -n "$m" ] || die "cannot find a Debian mirror in apt's configuration; set DEBIAN_MIRROR"
  echo "${m%/}"
}

make_base() {
  command -v debootstrap >/dev/null 2>&1 || die "the base $BASE_IMAGE is absent and cannot be pulled, and debootstrap is missing (apt-get install debootstrap)"
  [ "$(id -u)" = 0 ] || die "the base $BASE_IMAGE is absent and cannot be pulled; making it with debootstrap needs root"
  local mirror tmp logf id
  mirror="$(debian_mirror)"
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/open-bot-base.XXXXXX")"
  logf="$tmp.log"
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp' '$logf'" EXIT
  check_space "$tmp" 600 "set TMPDIR to a roomier place"
  log "making $BASE_IMAGE: debootstrap --variant=minbase $BASE_SUITE from $mirror"
  if ! debootstrap --variant=minbase "$BASE_SUITE" "$tmp/root" "$mirror" >"$logf" 2>&1; then
    tail -n 20 "$logf" >&2
    explain_failure "debootstrap" "$logf" "$tmp=600"
  fi
  # Updates and security fixes, as in the official image.
  local sec
  sec="$(debian_mirror Debian-Security)"
  {
    echo "deb $mirror $BASE_SUITE main"
    echo "deb $mirror $BASE_SUITE-updates main"
    [ -z "$sec" ] || echo "deb $sec $BASE_SUITE-security main"
  } >"$tmp/root/etc/apt/sources.list"
  # Like the official slim image: dpkg leaves out documentation, manuals and
  # translations (about 180 MB of the computer image), apt fetches no
  # translations and keeps no downloaded packages.
  mkdir -p "$tmp/root/etc/dpkg/dpkg.cfg.d" "$tmp/root/etc/apt/apt.conf.d"
  cat >"$tmp/root/etc/dpkg/dpkg.cfg.d/docker" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
CFG
  echo 'Acquire::Languages "none";' >"$tmp/root/etc/apt/apt.conf.d/docker-no-languages"
  echo 'APT::Keep-Downloaded-Packages "false";' >"$tmp/root/etc/apt/apt.conf.d/docker-clean"
  find "$tmp/root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete 2>/dev/null || true
  rm -rf "$tmp/root/usr/share/man/"* "$tmp/root/usr/share/info/"* "$tmp/root/usr/share/locale/"*
  # No apt lists, caches or docs to ship.
  rm -rf "$tmp/root/var/lib/apt/lists/"* "$tmp/root/var/cache/apt/"*.bin "$tmp/root/var/cache/apt/archives/"*.deb
  # Import untagged, tag only when the whole tree went in: a tar that dies
  # half-way must not leave a half base under BASE_IMAGE.
  if ! id="$(tar -C "$tmp/root" --numeric-owner -c . 2>>"$logf" | docker import -c 'CMD ["bash"]' -c 'ENV LANG=C.UTF-8' - 2>>"$logf")" ||
    [ -z "$id" ]; then
    [ -n "${id:-}" ] && docker rmi "$id" >/dev/null 2>&1
    cat "$logf" >&2
    explain_failure "docker import of the base" "$logf" "$(docker info --format '{{.DockerRootDir}}' 2>/dev/null || echo /var/lib/docker)=600"
  fi
  docker tag "$id" "$BASE_IMAGE"
  rm -rf "$tmp" "$logf"
  trap - EXIT
  log "made $BASE_IMAGE ($id)"
}

step "the base image $BASE_IMAGE"
if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  log "$BASE_IMAGE is here"
elif [ "${BASE_PULL:-1}" = 1 ] && timeout "${PULL_TIMEOUT_SECONDS:-60}" docker pull -q "$BASE_IMAGE" >/dev/null 2>&1; then
  log "pulled $BASE_IMAGE"
else
  log "$BASE_IMAGE is absent and cannot be pulled (BASE_PULL=${BASE_PULL:-1})"
  make_base
fi

# IMAGE_PREBUILD=1: only the base and the Dockerfile's system stage (the
# packages and Codex: the longest step on a new machine), left in the
# engine's cache; no Go. make test starts it at once, beside the Go build.
if [ "${IMAGE_PREBUILD:-0}" = 1 ]; then
  mkdir -p "$OUT"
  build_ca
  prelog="$(mktemp)"
  trap 'rm -f "$prelog"' EXIT
  log "docker build --target system (the packages and Codex, cached for the image)"
  if ! docker build --force-rm --target system --build-arg "BASE_IMAGE=$BASE_IMAGE" -f "$DOCKERFILE" . >"$prelog" 2>&1; then
    cat "$prelog" >&2
    explain_failure "docker build --target system" "$prelog" "$(docker info --format '{{.DockerRootDir}}' 2>/dev/null || echo /var/lib/docker)=3000"
  fi
  log "the base $BASE_IMAGE and the system stage are ready (IMAGE_PREBUILD=1) in ${SECONDS}s"
  exit 0
fi

step "go build botd and the worker"
# botd with cgo and the static libturbojpeg, fully static (osusergo, netgo) so
# it runs on any base; the worker is pure Go.
mkdir -p "$OUT"
check_space "$OUT" 200 "the Go build writes build/image and Go's build cache"
gologf="$(mktemp)"
trap 'rm -f "$gologf"' EXIT
if ! image_go_build "$OUT/botd.new" "$OUT/worker.new" 2> >(tee "$gologf" >&2); then
  rm -f "$OUT/botd.new" "$OUT/worker.new"
  explain_failure "go build (needs Go and libturbojpeg0-dev: scripts/provision.sh installs them)" "$gologf" "$OUT=200" "$("$GO" env GOCACHE 2>/dev/null || echo "$OUT")=200"
fi
# Replace only when the content changed, so the engine's cache still matches.
for b in botd worker; do
  if cmp -s "$OUT/$b.new" "$OUT/$b"; then rm -f "$OUT/$b.new"; else mv -f "$OUT/$b.new" "$OUT/$b"; fi
done

droot="$(docker info --format '{{.DockerRootDir}}' 2>/dev/null || echo /var/lib/docker)"
check_space "$droot" 3000 "the engine's data-root; free space or move Docker's data-root"
build_ca
buildlog="$(mktemp)"
trap 'rm -f "$gologf" "$buildlog"' EXIT
step "docker build -t $IMAGE (base $BASE_IMAGE)"
if ! docker build --force-rm --build-arg "BASE_IMAGE=$BASE_IMAGE" -f "$DOCKERFILE" -t "$IMAGE" . 2>&1 | tee "$buildlog"; then
  explain_failure "docker build" "$buildlog" "$droot=3000"
fi

# The local stand-in for E2B's stock desktop template, built on the image
# just made (the command-driven desktop machine's tests and the E2B
# emulator's `desktop` template use it).
if [ "${IMAGE_SKIP_DESKTOP:-0}" != 1 ]; then
  IMAGE="$IMAGE" bash scripts/build-e2b-desktop.sh
fi
log "built $IMAGE in ${SECONDS}s"
