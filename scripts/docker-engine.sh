#!/usr/bin/env bash
# docker-engine.sh — make sure a Docker engine answers here, and stop only what
# this caller started.
#
#   scripts/docker-engine.sh start [CLAIM]  install Debian's docker.io if
#                                           docker/dockerd are missing, start
#                                           dockerd if no engine answers, wait
#                                           until `docker info` answers
#   scripts/docker-engine.sh stop [CLAIM]   stop dockerd only if `start` started it
#   scripts/docker-engine.sh status         exit 0 when an engine answers
#
# CLAIM is a file of the caller's (e.g. from mktemp): `start` writes dockerd's
# pid into it only when it started dockerd, and `stop CLAIM` stops only that
# dockerd. So a run that found an engine answering (another run's, or the
# machine's) never stops it, even when two runs overlap. Without CLAIM, the
# machine-wide record $OPEN_BOT_ENGINE_DIR/dockerd.pid (default
# /run/open-bot-engine) is used: `stop` stops whatever dockerd any `start`
# started. Needs root to install or start anything.
set -euo pipefail

STATE="${OPEN_BOT_ENGINE_DIR:-/run/open-bot-engine}"
PIDFILE="$STATE/dockerd.pid"
CLAIM="${2:-}"
LOG="$STATE/dockerd.log"
WAIT="${DOCKER_ENGINE_WAIT_SECONDS:-60}"
export DEBIAN_FRONTEND=noninteractive

log() { printf 'docker-engine: %s\n' "$*" >&2; }
answers() { command -v docker >/dev/null 2>&1 && timeout 10 docker info >/dev/null 2>&1; }

# ours [FILE]: FILE (default the machine-wide record) names a live dockerd.
ours() {
  local f="${1:-$PIDFILE}" pid comm
  [ -s "$f" ] || return 1
  pid="$(cat "$f")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
  [ "$comm" = dockerd ]
}

start() {
  if answers; then
    log "an engine answers already ($(docker info --format '{{.ServerVersion}}' 2>/dev/null))"
    return 0
  fi
  case "${DOCKER_HOST:-}" in
  "" | unix:///var/run/docker.sock | unix:///run/docker.sock) ;;
  *)
    log "no Docker engine answers at DOCKER_HOST=$DOCKER_HOST; this script starts only this machine's own engine"
    return 1
    ;;
  esac
  if [ "$(id -u)" != 0 ]; then
    log "no Docker engine answers, and starting one needs root"
    return 1
  fi
  if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    log "installing Debian's docker.io"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends docker.io >/dev/null
  fi
  mkdir -p "$STATE"
  chmod 0700 "$STATE"
  if ! ours; then
    log "starting dockerd (log: $LOG)"
    # setsid: the engine outlives this shell and its job control; the pid we
    # record is dockerd's own. Every descriptor past stderr is closed first:
    # a daemon that inherits its caller's would hold them for its whole life
    # (seen: a `flock LOCK make test` whose lock dockerd kept, so every later
    # flock waited forever; a caller's `$(...)` pipe would never end either).
    (
      for fd in /proc/$BASHPID/fd/*; do
        n="${fd##*/}"
        [ "$n" -gt 2 ] && eval "exec $n>&-"
      done
      exec setsid dockerd >>"$LOG" 2>&1 </dev/null
    ) &
    echo $! >"$PIDFILE"
    [ -z "$CLAIM" ] || echo $! >"$CLAIM"
  fi
  local deadline=$((SECONDS + WAIT))
  until answers; do
    if ! ours; then
      log "dockerd exited during start; last lines of $LOG:"
      tail -n 20 "$LOG" >&2 || true
      rm -f "$PIDFILE"
      return 1
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "dockerd did not answer within ${WAIT}s; see $LOG"
      return 1
    fi
    sleep 0.5
  done
  log "engine answers ($(docker info --format '{{.ServerVersion}}' 2>/dev/null)), started by this script"
}

stop() {
  local rec="${CLAIM:-$PIDFILE}"
  if ! ours "$rec"; then
    [ -n "$CLAIM" ] || rm -f "$PIDFILE"
    log "no dockerd started by this script${CLAIM:+ for this caller} is running; nothing to stop"
    return 0
  fi
  local pid
  pid="$(cat "$rec")"
  log "stopping dockerd $pid (started by this script)"
  kill -TERM "$pid"
  local deadline=$((SECONDS + 30))
  while [ -e "/proc/$pid" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.5; done
  if [ -e "/proc/$pid" ]; then
    log "dockerd $pid ignored SIGTERM for 30s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDFILE"
  [ -z "$CLAIM" ] || : >"$CLAIM"
}

case "${1:-start}" in
start) start ;;
stop) stop ;;
status)
  if answers; then echo "engine answers"; else
    echo "no Docker engine answers"
    exit 1
  fi
  ;;
*)
  echo "usage: $0 start [CLAIM]|stop [CLAIM]|status" >&2
  exit 2
  ;;
esac
