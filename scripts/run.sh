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
HOME_VOLUME="${HOME_VOLUME:-open-bot-home}"
VIEWER_PORTS="${VIEWER_PORTS:-6080-6087}" # host ports for the containers' 6080-6087

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
  IMAGE="$IMAGE" bash scripts/build-image.sh
  docker rm -f "$NAME" >/dev/null 2>&1 || true
  # The token reaches botd as a root-only file, never as an environment
  # variable (`docker inspect` would show it). A token file owned by root is
  # bind-mounted read-only; otherwise (docker run by a user in the docker
  # group) it is copied over stdin into a root-only volume mounted read-only.
  if [ "$(stat -c %u "$TOKEN_FILE")" = 0 ]; then
    secret=(-v "$TOKEN_FILE:/run/secrets/botd_token:ro")
  else
    docker volume create "$NAME-secrets" >/dev/null
    docker run --rm -i --entrypoint sh -v "$NAME-secrets:/s" "$IMAGE" \
      -c 'umask 077 && cat >/s/botd_token && chown 0:0 /s/botd_token && chmod 0600 /s/botd_token' <"$TOKEN_FILE"
    secret=(-v "$NAME-secrets:/run/secrets:ro")
  fi
  docker run -d --name "$NAME" --restart unless-stopped --shm-size=1g \
    -p "127.0.0.1:$PORT:7000" -p "127.0.0.1:$VIEWER_PORTS:6080-6087" \
    -v "$HOME_VOLUME:/home" "${secret[@]}" \
    "$IMAGE" >/dev/null
  say_how
  echo "runs in Docker: container $NAME (image $IMAGE), /home on the volume $HOME_VOLUME"
  echo "logs: docker logs -f $NAME    stop: docker stop $NAME"
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
