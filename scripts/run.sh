#!/usr/bin/env bash
# run.sh — `make run`: start the computer with sensible defaults.
#
# Where a Docker engine answers (and RUN_MODE is not "host"): build the image and run it (API and viewer
# ports published on loopback, /home on a named volume). Otherwise, as root on
# Debian: provision this host, run botd and the worker (the control plane,
# SQLite under $STATE_DIR/worker) with one computer attached to that botd,
# and print the worker URL, where its token is and how to start a first run.
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

if [ "${RUN_MODE:-}" != host ] && command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
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
  docker cp "$TOKEN_FILE" "$NAME:/etc/botd-token"
  docker start "$NAME" >/dev/null
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

# botd and the worker (SQLite under $STATE_DIR/worker) in the background;
# the worker gets one computer attached to this botd.
WORKER_PORT="${WORKER_PORT:-7100}"
WORKER_URL="http://127.0.0.1:$WORKER_PORT"
export DATA_DIR="${DATA_DIR:-$STATE_DIR/worker}"
CAP_FILE="$STATE_DIR/capability"
mkdir -p "$DATA_DIR"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait; }
trap cleanup EXIT INT TERM
BOTD_TOKEN_FILE="$TOKEN_FILE" BOTD_LISTEN="${BOTD_LISTEN:-:$PORT}" /opt/botd/botd >>"$STATE_DIR/botd.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 600); do
  curl -fsS -o /dev/null -H "Authorization: Bearer $(cat "$TOKEN_FILE")" "http://127.0.0.1:$PORT/health" 2>/dev/null && break
  sleep 0.2
done
WORKER_LISTEN="127.0.0.1:$WORKER_PORT" WORKER_PROVIDER=attach bin/worker serve >>"$STATE_DIR/worker.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 150); do curl -fsS -o /dev/null "$WORKER_URL/healthz" 2>/dev/null && break; sleep 0.2; done
export WORKER_URL WORKER_TOKEN_FILE="$DATA_DIR/worker-token"
# Capabilities live in the worker's memory only: adopt the computer made on
# an earlier run (a new capability), or create it.
id="$(bin/worker computers list --json | sed -n 's/.*"id":"\([^"]*\)".*/\1/p' | head -1)"
if [ -n "$id" ]; then
  capa="$(bin/worker computers adopt --json "$id" | sed -n 's/.*"capability":"\([^"]*\)".*/\1/p')"
else
  out="$(bin/worker computers create --json --team local --provider attach \
    --attach-url "http://127.0.0.1:$PORT" --attach-token-file "$TOKEN_FILE")"
  id="$(printf '%s' "$out" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')"
  capa="$(printf '%s' "$out" | sed -n 's/.*"capability":"\([^"]*\)".*/\1/p')"
fi
(umask 077 && printf '%s\n' "$capa" >"$CAP_FILE")
WORKER_CAPABILITY="$capa" bin/worker computers add-bot "$id" alice >/dev/null 2>&1 || true
say_how
cat <<TXT
worker (control plane):
  URL:         $WORKER_URL
  token:       $DATA_DIR/worker-token   (0600)
  computer:    $id (attached to the botd above; bot "alice" added)
  capability:  $CAP_FILE   (0600; a worker restart forgets it, \`worker computers adopt\` mints a new one)
  first run:   export WORKER_TOKEN_FILE=$DATA_DIR/worker-token WORKER_CAPABILITY=\$(cat $CAP_FILE)
               bin/worker runs start --computer $id --bot alice --prompt "Open example.org and tell me its title" --watch
               (Codex needs a model: WORKER_MODEL / WORKER_MODEL_PROVIDER and botd's CODEX_CONFIG_EXTRA_FILE)
  logs:        $STATE_DIR/botd.log, $STATE_DIR/worker.log
Ctrl-C stops the worker, botd and every process botd started.
TXT
wait -n "${pids[@]}"
