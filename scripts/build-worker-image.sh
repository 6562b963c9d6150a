#!/usr/bin/env bash
# build-worker-image.sh — `make worker-image`: build the worker's own
# container image (WORKER_IMAGE_TAG, default open-bot/worker:dev) on the
# Docker engine that answers here, from this checkout alone: no registry.
#
# 1. bin/worker built static by this machine's Go toolchain (CGO_ENABLED=0:
#    the SQLite driver is modernc's, pure Go) into build/worker-image/.
# 2. The rest of the image beside it in build/worker-image/rootfs/: /etc/passwd
#    and /etc/group (root; `worker`, uid 10001), this host's CA bundle
#    (WORKER_IMAGE_CA_FILE, default /etc/ssl/certs/ca-certificates.crt), /tmp.
# 3. docker build FROM scratch (images/worker/Dockerfile) with
#    build/worker-image/ as the whole context. Files are replaced only when
#    their content changed, so Docker's layer cache (per machine) keeps a
#    rebuild of unchanged sources to a second or two.
#
# The variable is WORKER_IMAGE_TAG, not WORKER_IMAGE: WORKER_IMAGE is the
# worker's setting for the computer image, and a shell that exports it for
# the worker must not retag the computer image here.
#
# Needs no root. As root on Debian it starts an engine when none answers
# (scripts/docker-engine.sh; left running, like `make image`).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

TAG="${WORKER_IMAGE_TAG:-open-bot/worker:dev}"
GO="${GO:-go}"
CA_FILE="${WORKER_IMAGE_CA_FILE:-/etc/ssl/certs/ca-certificates.crt}"
DOCKERFILE=images/worker/Dockerfile
OUT=build/worker-image

log() { printf 'make worker-image: %s\n' "$*" >&2; }
STEPS=3
STEP=0
step() {
  STEP=$((STEP + 1))
  log "step $STEP/$STEPS: $* (${SECONDS}s so far)"
}
die() {
  log "$*"
  exit 1
}

step "the Docker engine"
if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ] && [ -z "${DOCKER_HOST:-}" ] && ! docker info >/dev/null 2>&1; then
  bash scripts/docker-engine.sh start
fi
docker info >/dev/null 2>&1 || die "no Docker engine answers here (as root, this script starts one; or: sudo scripts/docker-engine.sh start)"
[ -s "$CA_FILE" ] || die "no CA bundle at $CA_FILE (apt-get install ca-certificates, or set WORKER_IMAGE_CA_FILE)"

# One build at a time per checkout (test processes may ask at once).
mkdir -p "$OUT"
exec 9>"$OUT/.lock"
if ! flock -n 9; then
  log "waiting for another make worker-image in this checkout"
  flock 9
fi

# put SRC DST MODE: install SRC at DST with MODE, only when the content or
# the mode differs (the engine's cache sees an unchanged file as unchanged).
put() {
  local src="$1" dst="$2" mode="$3"
  if ! cmp -s "$src" "$dst" || [ "$(stat -c %a "$dst")" != "$mode" ]; then
    mkdir -p "$(dirname "$dst")"
    cp "$src" "$dst.new"
    chmod "$mode" "$dst.new"
    mv -f "$dst.new" "$dst"
  fi
}

step "go build the worker (CGO_ENABLED=0, static)"
CGO_ENABLED=0 "$GO" build -trimpath -tags osusergo,netgo -ldflags '-s -w' -o "$OUT/worker.build" ./apps/worker ||
  die "go build of the worker failed; see the output above"
put "$OUT/worker.build" "$OUT/worker" 755
rm -f "$OUT/worker.build"

root="$OUT/rootfs"
mkdir -p "$root/etc/ssl/certs" "$root/tmp" "$root/var/lib/open-bot"
chmod 0755 "$root" "$root/etc" "$root/etc/ssl" "$root/etc/ssl/certs" "$root/var" "$root/var/lib" "$root/var/lib/open-bot"
chmod 1777 "$root/tmp"
tmpf="$(mktemp)"
trap 'rm -f "$tmpf"' EXIT
printf '%s\n' 'root:x:0:0:root:/root:/nonexistent' 'worker:x:10001:10001:open-bot worker:/var/lib/open-bot/worker:/nonexistent' >"$tmpf"
put "$tmpf" "$root/etc/passwd" 644
printf '%s\n' 'root:x:0:' 'worker:x:10001:' >"$tmpf"
put "$tmpf" "$root/etc/group" 644
put "$CA_FILE" "$root/etc/ssl/certs/ca-certificates.crt" 644

# The context is rootfs/ and the binary, nothing else (not the lock).
printf '%s\n' '*' '!rootfs' '!worker' >"$tmpf"
put "$tmpf" "$OUT/.dockerignore" 644

step "docker build -t $TAG (FROM scratch)"
if ! docker build --force-rm -f "$DOCKERFILE" -t "$TAG" "$OUT"; then
  die "docker build failed; see the output above"
fi
log "built $TAG in ${SECONDS}s"
