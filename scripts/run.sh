#!/usr/bin/env bash
# run.sh — `make run`: start the computer with sensible defaults.
#
# Where a Docker engine answers: build the image and run it (API and viewer
# ports published on loopback, /home on a named volume). Otherwise, as root on
# Debian: provision this host and run botd on it in the foreground.
# Either way a token is generated on first run into a 0600 file and never
# printed; this script prints where it is.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

STATE_DIR="${OPEN_BOT_STATE_DIR:-$HOME/.open-bot}"
TOKEN_FILE="${BOTD_TOKEN_FILE:-$STATE_DIR/token}"
PORT="${BOTD_PORT:-7000}"
IMAGE="${IMAGE:-open-bot/computer:dev}"
NAME="${CONTAINER_NAME:-open-bot-computer}"

if [ ! -s "$TOKEN_FILE" ]; then
  mkdir -p "$(dirname "$TOKEN_FILE")"
  (umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TOKEN_FILE")
fi
chmod 600 "$TOKEN_FILE"

say_how() {
  cat <<TXT

open-bot computer is starting.
  API:    http://127.0.0.1:$PORT   (health: /healthz, no token)
  token:  $TOKEN_FILE   (mode 0600; keep it secret)
  try:    curl -s -H "Authorization: Bearer \$(cat $TOKEN_FILE)" http://127.0.0.1:$PORT/health

TXT
}

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  docker build -f images/computer/Dockerfile -t "$IMAGE" .
  docker rm -f "$NAME" >/dev/null 2>&1 || true
  # The token is copied in as root's 0600 file (docker cp without -a makes
  # it root's), never bind-mounted: a mounted file keeps the host user's
  # uid, which desktop or bot could share inside the container.
  docker create --name "$NAME" --restart unless-stopped --shm-size=1g \
    -p "127.0.0.1:$PORT:7000" -p 127.0.0.1:6080-6087:6080-6087 \
    -v open-bot-home:/home \
    -e BOTD_TOKEN_FILE=/etc/botd-token \
    "$IMAGE" >/dev/null
  docker cp "$TOKEN_FILE" "$NAME:/etc/botd-token"
  docker start "$NAME" >/dev/null
  say_how
  echo "logs: docker logs -f $NAME"
  exit 0
fi

if [ "$(id -u)" != 0 ] || [ ! -f /etc/debian_version ]; then
  echo "make run: no Docker engine answers, and running on the host needs root on Debian." >&2
  exit 1
fi
bash scripts/provision.sh
make build
install -D -m 0755 bin/botd /opt/botd/botd
say_how
echo "botd runs in the foreground; Ctrl-C stops it and every process it started."
export BOTD_TOKEN_FILE="$TOKEN_FILE"
export BOTD_LISTEN="${BOTD_LISTEN:-:$PORT}"
exec /opt/botd/botd
