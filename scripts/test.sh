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
# Not root (a laptop): nothing is installed; the tests that need root, the
# tools, an engine or Postgres skip, and under CI=true they fail instead.
# TEST_SETUP=0 skips the set-up steps.
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
trap 'bash scripts/docker-engine.sh stop "$claim" >/dev/null 2>&1 || true; rm -f "$claim"' EXIT
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

make --no-print-directory build
"$GO" vet "${PKGS[@]}"
if docker info >/dev/null 2>&1; then
  IMAGE="$IMAGE" IMAGE_SKIP_PROVISION=1 bash scripts/build-image.sh
else
  log "no Docker engine answers; the image tests skip (fail under CI=true)"
fi
"$GO" test -count=1 -timeout "$TEST_TIMEOUT" "${PKGS[@]}"
