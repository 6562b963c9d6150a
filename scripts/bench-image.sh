#!/usr/bin/env bash
# bench-image.sh — the computer image's figures, printed as Go-benchmark-style
# lines (scripts/bench.sh can append them to its table):
#
#   BenchmarkImage/size              image size (MB, as `docker images` shows it)
#   BenchmarkImage/build             no-change `make image` (s); with
#                                    BENCH_IMAGE_COLD=1 also a cold
#                                    `docker build --no-cache` (s; downloads
#                                    every Debian package again)
#   BenchmarkImage/lifecycle         docker run → healthy, docker stop → exited (s)
#   BenchmarkImage/observe           POST /screens/{id}/observe, a full frame
#                                    each time (fresh lease), p50/p90 ms, for
#                                    botd inside the container and botd on this
#                                    host, same client (curl on the host)
#
# Needs a Docker engine (scripts/docker-engine.sh start) and, for the host
# side, root and the provisioned tools. Uses 127.0.0.1 ports 36000-36999 and
# X displays 530-539; removes every container and volume it made.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

IMAGE="${IMAGE:-open-bot/computer:dev}"
N="${BENCH_IMAGE_OBSERVES:-30}"
NAME="openbot-bench-$$"
VOL="openbot-bench-home-$$"
PORT=36010
HOST_PORT=36020
work="$(mktemp -d)"
chmod 0755 "$work"
host_pid=""

cleanup() {
  docker rm -f "$NAME" >/dev/null 2>&1 || true
  docker volume rm -f "$VOL" >/dev/null 2>&1 || true
  if [ -n "$host_pid" ] && kill -0 "$host_pid" 2>/dev/null; then
    kill -TERM "$host_pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$host_pid" 2>/dev/null || break; sleep 0.25; done
  fi
  rm -rf "$work"
}
trap cleanup EXIT

say() { printf 'bench-image: %s\n' "$*" >&2; }
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", b - a}'; }
# pct FILE P: the P-th percentile (nearest rank) of the numbers in FILE.
pct() { sort -n "$1" | awk -v p="$2" '{v[NR]=$1} END {i=int((p/100)*NR+0.999); if (i<1) i=1; printf "%.1f", v[i]}'; }

docker info >/dev/null 2>&1 || {
  say "no Docker engine answers (scripts/docker-engine.sh start)"
  exit 1
}

# --- build ---
IMAGE="$IMAGE" bash scripts/build-image.sh >/dev/null 2>&1 # warm the cache
t0="$(now)"
IMAGE="$IMAGE" bash scripts/build-image.sh >/dev/null 2>&1
rebuild="$(secs "$t0" "$(now)")"
cold=""
if [ "${BENCH_IMAGE_COLD:-0}" = 1 ]; then
  say "cold build (--no-cache): downloads every package again"
  t0="$(now)"
  docker build --no-cache -q -f images/computer/Dockerfile -t "$IMAGE" . >/dev/null
  cold="$(secs "$t0" "$(now)")"
fi
size_mb="$(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f", $1/1000/1000}')"

# --- lifecycle ---
token="$work/botd_token"
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$token")
TOK="$(cat "$token")"
docker volume create "$VOL" >/dev/null
t0="$(now)"
docker run -d --name "$NAME" --shm-size=1g -p "127.0.0.1:$PORT:7000" -v "$VOL:/home" \
  -v "$token:/run/secrets/botd_token:ro" "$IMAGE" >/dev/null
until [ "$(docker inspect -f '{{.State.Health.Status}}' "$NAME")" = healthy ]; do
  [ "$(docker inspect -f '{{.State.Running}}' "$NAME")" = true ] || {
    docker logs --tail 30 "$NAME" >&2
    exit 1
  }
  sleep 0.2
done
healthy="$(secs "$t0" "$(now)")"

api() { # api BASE METHOD PATH [JSON]
  curl -fsS -X "$2" -H "Authorization: Bearer $TOK" -H 'Content-Type: application/json' \
    ${4:+--data "$4"} "$1$3"
}
lease_id() { sed -n 's/.*"leaseId":"\([^"]*\)".*/\1/p'; }

# observe_p BASE OUT: N full-frame observes of screen "bench" on BASE.
observe_p() {
  local base="$1" out="$2" lid
  for _ in $(seq 1 60); do
    api "$base" GET /health 2>/dev/null | grep -q '"ok":true' && break
    sleep 1
  done
  api "$base" POST /screens/bench/start '{}' >/dev/null
  : >"$out"
  for _ in $(seq 1 "$N"); do
    lid="$(api "$base" POST /screens/bench/lease '{"kind":"agent","holder":"bench","ttlSeconds":60}' | lease_id)"
    curl -fsS -o /dev/null -w '%{time_total} %{size_download}\n' -X POST -H "Authorization: Bearer $TOK" \
      -H 'Content-Type: application/json' --data "{\"leaseId\":\"$lid\"}" \
      "$base/screens/bench/observe" | awk '$2 < 10000 {print "bench-image: observe returned no full frame" > "/dev/stderr"; exit 1}
        {printf "%.1f\n", $1*1000}' >>"$out"
    api "$base" DELETE "/screens/bench/lease/$lid" >/dev/null
  done
}

observe_p "http://127.0.0.1:$PORT" "$work/in.txt"

t0="$(now)"
docker stop -t 10 "$NAME" >/dev/null
stopped="$(secs "$t0" "$(now)")"
exit_code="$(docker inspect -f '{{.State.ExitCode}}' "$NAME")"

# --- the same observes against botd on this host ---
host_line="host: skipped (needs root, bin/botd and the provisioned tools)"
if [ "$(id -u)" = 0 ] && command -v codex >/dev/null && command -v Xvfb >/dev/null; then
  make -s build >/dev/null
  mkdir -p "$work/home"
  BOTD_TOKEN_FILE="$token" BOTD_HOME="$work/home" BOTD_LISTEN="127.0.0.1:$HOST_PORT" \
    SOCKS_LISTEN=127.0.0.1:36022 DISPLAY_BASE=530 \
    VIEW_PORT_BASE=36200 ./bin/botd >"$work/host.log" 2>&1 &
  host_pid=$!
  observe_p "http://127.0.0.1:$HOST_PORT" "$work/host.txt"
  host_line=""
fi

printf 'BenchmarkImage/size\t1\t%s MB\n' "$size_mb"
printf 'BenchmarkImage/build\t1\t%s rebuild_s%s\n' "$rebuild" "${cold:+	$cold cold_s}"
printf 'BenchmarkImage/lifecycle\t1\t%s run_to_healthy_s\t%s stop_to_exited_s\t%s exit_code\n' "$healthy" "$stopped" "$exit_code"
printf 'BenchmarkImage/observe\t1\t%s container_p50_ms\t%s container_p90_ms' "$(pct "$work/in.txt" 50)" "$(pct "$work/in.txt" 90)"
if [ -z "$host_line" ]; then
  printf '\t%s host_p50_ms\t%s host_p90_ms\n' "$(pct "$work/host.txt" 50)" "$(pct "$work/host.txt" 90)"
else
  printf '\n'
  say "$host_line"
fi
