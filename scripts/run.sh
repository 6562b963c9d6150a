#!/usr/bin/env bash
# run.sh — `make run`: the whole system on its embedded defaults.
#
# The worker (the control plane; SQLite, secret key and token under
# $DATA_DIR, default ~/.open-bot/worker) is always the entry point. It makes
# one Team computer through its default provider: docker where a Docker
# engine answers and has the computer image (built here with `make image`
# when the engine lacks it), local otherwise (botd as the worker's child on
# this host: root on Debian, provisioned by scripts/provision.sh).
# WORKER_PROVIDER=local|docker forces one; WORKER_PROVIDER=e2b makes it a
# sandbox of E2B's API at E2B_API_URL (the emulator, apps/worker/cmd/e2b-emulator;
# E2B's own service was never tried) with E2B_API_KEY or E2B_API_KEY_FILE;
# WORKER_PROVIDER=daytona one of Daytona's API at DAYTONA_API_URL (the
# emulator, apps/worker/cmd/daytona-emulator; Daytona's own service was never
# tried) with DAYTONA_API_KEY or DAYTONA_API_KEY_FILE; WORKER_PROVIDER=box one
# of Box's API at BOX_API_URL (the emulator, apps/worker/cmd/box-emulator; Box's
# own service was never tried) with BOX_API_KEY or BOX_API_KEY_FILE. The script prints the worker URL,
# where its token is and how to start a first run; tokens are never printed.
# Operator actions (adopt, dashboard sign-in links, attach) go through the
# worker's operator socket, $DATA_DIR/operator.sock (root or this user only),
# which the CLI uses by default; WORKER_TOKEN never reaches them.
# Ctrl-C stops the worker (local computers stop with it; a docker computer's
# container keeps running and is reconnected by the next `make run`).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

STATE_DIR="${OPEN_BOT_STATE_DIR:-$HOME/.open-bot}"
export DATA_DIR="${DATA_DIR:-$STATE_DIR/worker}"
export WORKER_IMAGE="${WORKER_IMAGE:-${IMAGE:-open-bot/computer:dev}}"
WORKER_PORT="${WORKER_PORT:-7100}"
export WORKER_URL="http://127.0.0.1:$WORKER_PORT"
# The worker makes its token in $DATA_DIR/worker-token (0600) on first start;
# the CLI below finds it there through DATA_DIR.
TOKEN_FILE="${WORKER_TOKEN_FILE:-$DATA_DIR/worker-token}"
CAP_FILE="$STATE_DIR/capability"
mkdir -p "$STATE_DIR"
chmod 700 "$STATE_DIR"

want="${WORKER_PROVIDER:-}"
case "$want" in "" | local | docker | e2b | daytona | box) ;; *)
  echo "make run: WORKER_PROVIDER must be local, docker, e2b, daytona or box (or unset), not \"$want\"" >&2
  exit 1
  ;;
esac
root_debian=no
[ "$(id -u)" = 0 ] && [ -f /etc/debian_version ] && root_debian=yes
engine_answers() { command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; }
# WORKER_PROVIDER=docker on a machine with no engine: install Debian's
# docker.io and start dockerd (it keeps running after Ctrl-C, with the
# computer's container; `scripts/docker-engine.sh stop` stops it).
if [ "$want" = docker ] && ! engine_answers; then
  if [ "$root_debian" != yes ]; then
    echo "make run: WORKER_PROVIDER=docker but no Docker engine answers, and starting one needs root on Debian." >&2
    exit 1
  fi
  bash scripts/docker-engine.sh start
fi
engine=no
engine_answers && engine=yes
if [ "$want" = e2b ]; then
  # e2b: the machine is a sandbox behind E2B_API_URL; this host only builds.
  if [ -z "${E2B_API_KEY:-}${E2B_API_KEY_FILE:-}" ]; then
    echo "make run: WORKER_PROVIDER=e2b needs E2B_API_KEY or E2B_API_KEY_FILE (and E2B_API_URL for the emulator)" >&2
    exit 1
  fi
  [ "$root_debian" != yes ] || bash scripts/provision.sh --build
elif [ "$want" = daytona ]; then
  # daytona: the machine is a sandbox behind DAYTONA_API_URL; this host only
  # builds.
  if [ -z "${DAYTONA_API_KEY:-}${DAYTONA_API_KEY_FILE:-}" ]; then
    echo "make run: WORKER_PROVIDER=daytona needs DAYTONA_API_KEY or DAYTONA_API_KEY_FILE (and DAYTONA_API_URL for the emulator)" >&2
    exit 1
  fi
  [ "$root_debian" != yes ] || bash scripts/provision.sh --build
elif [ "$want" = box ]; then
  # box: the machine is a box behind BOX_API_URL; this host only builds.
  if [ -z "${BOX_API_KEY:-}${BOX_API_KEY_FILE:-}" ]; then
    echo "make run: WORKER_PROVIDER=box needs BOX_API_KEY or BOX_API_KEY_FILE (and BOX_API_URL for the emulator)" >&2
    exit 1
  fi
  [ "$root_debian" != yes ] || bash scripts/provision.sh --build
elif [ "$want" = local ] || { [ -z "$want" ] && [ "$engine" = no ]; }; then
  # botd runs on this host, as root, with the desktop tools.
  if [ "$root_debian" != yes ]; then
    echo "make run: no Docker engine answers, and the local provider needs root on Debian." >&2
    exit 1
  fi
  bash scripts/provision.sh
else
  # docker: this host only builds (cgo, libturbojpeg, debootstrap for the
  # image's base); the desktop lives in the image.
  [ "$root_debian" != yes ] || bash scripts/provision.sh --build
  if ! docker image inspect "$WORKER_IMAGE" >/dev/null 2>&1; then
    echo "make run: a Docker engine answers but has no $WORKER_IMAGE: building it (make image; the first build takes about 10 minutes)" >&2
    IMAGE="$WORKER_IMAGE" bash scripts/build-image.sh
  fi
fi
make build >/dev/null

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait; }
trap cleanup EXIT INT TERM
WORKER_LISTEN="127.0.0.1:$WORKER_PORT" bin/worker serve >>"$STATE_DIR/worker.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do
  curl -fsS -o /dev/null "$WORKER_URL/healthz" 2>/dev/null && break
  kill -0 "${pids[0]}" 2>/dev/null || { echo "make run: the worker exited; see $STATE_DIR/worker.log:" >&2; tail -5 "$STATE_DIR/worker.log" >&2; exit 1; }
  sleep 0.2
done
serving="$(grep 'worker: serving' "$STATE_DIR/worker.log" | tail -1)"

# Capabilities live in the worker's memory only: adopt the computer an
# earlier `make run` made (a new capability, through the operator socket),
# or create one on the default provider.
id="$(bin/worker computers list | awk 'NR > 1 && $3 != "attach" && $5 != "destroyed" {print $1; exit}')"
if [ -n "$id" ]; then
  capa="$(bin/worker computers adopt --json "$id" | sed -n 's/.*"capability":"\([^"]*\)".*/\1/p')"
else
  echo "make run: creating a computer (the first boot of a machine takes a minute)..." >&2
  out="$(bin/worker computers create --json --team local)"
  id="$(printf '%s' "$out" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')"
  capa="$(printf '%s' "$out" | sed -n 's/.*"capability":"\([^"]*\)".*/\1/p')"
fi
[ -n "$id" ] && [ -n "$capa" ] || { echo "make run: could not create or adopt a computer; see $STATE_DIR/worker.log" >&2; exit 1; }
(umask 077 && printf '%s\n' "$capa" >"$CAP_FILE")
WORKER_CAPABILITY="$capa" bin/worker computers add-bot "$id" alice >/dev/null 2>&1 || true
row="$(bin/worker computers list | awk -v id="$id" '$1 == id')"
provider="$(printf '%s' "$row" | awk '{print $3}')"
state="$(printf '%s' "$row" | awk '{print $5}')"

cat <<TXT

open-bot is running: ${serving#worker: }
  worker URL:  $WORKER_URL   (health: $WORKER_URL/healthz)
  token:       $TOKEN_FILE   (0600; never printed)
  computer:    $id   provider $provider, state $state; bot "alice" added
  capability:  $CAP_FILE   (0600; a worker restart forgets it: \`DATA_DIR=$DATA_DIR bin/worker computers adopt $id\`
               mints a new one, as the operator: this user on this host, through $DATA_DIR/operator.sock)
  dashboard:   DATA_DIR=$DATA_DIR bin/worker dashboard   (a one-time sign-in link, through the operator socket)
  first run:   export WORKER_URL=$WORKER_URL WORKER_TOKEN_FILE=$TOKEN_FILE WORKER_CAPABILITY=\$(cat $CAP_FILE)
               bin/worker runs start --computer $id --bot alice --prompt "Open example.org and tell me its title" --watch
               (the model: set MODEL_UPSTREAM_URL, MODEL_API_KEY_FILE and WORKER_MODEL before \`make run\`;
                the worker hands them to the computer's botd)
  MCP client:  $WORKER_URL/mcp with X-Computer-Capability and X-Bot-Id: alice, or the local bridge
               WORKER_TOKEN_FILE=$TOKEN_FILE WORKER_CAPABILITY_FILE=$CAP_FILE bin/worker mcp --stdio --bot alice
  checkpoint:  bin/worker computers checkpoint $id   (in a shell with the first run's exports:
               the computer routes need WORKER_CAPABILITY)
  logs:        $STATE_DIR/worker.log
  clean up:    bin/worker computers destroy $id   (with those exports too; removes the machine and its home)
Ctrl-C stops the worker.
TXT
wait -n "${pids[@]}"
