#!/usr/bin/env bash
# build-e2b-desktop.sh — build open-bot/e2b-desktop:dev (DESKTOP_IMAGE), a
# local stand-in for E2B's stock desktop template, from the computer image
# (IMAGE, default open-bot/computer:dev; build that first with
# scripts/build-image.sh, which calls this script at its end). Idempotent:
# the engine's cache makes a rebuild of an unchanged base take seconds.
# The build context is images/e2b-desktop alone.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${IMAGE:-open-bot/computer:dev}"
DESKTOP_IMAGE="${DESKTOP_IMAGE:-open-bot/e2b-desktop:dev}"
log() { printf 'make image: %s\n' "$*" >&2; }
docker info >/dev/null 2>&1 || { log "no Docker engine answers here"; exit 1; }
docker image inspect "$IMAGE" >/dev/null 2>&1 || { log "$IMAGE is missing: run scripts/build-image.sh first"; exit 1; }
log "docker build -t $DESKTOP_IMAGE (base $IMAGE)"
docker build --force-rm -q --build-arg "BASE_IMAGE=$IMAGE" -t "$DESKTOP_IMAGE" images/e2b-desktop >/dev/null
log "built $DESKTOP_IMAGE"
