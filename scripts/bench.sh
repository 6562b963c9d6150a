#!/usr/bin/env bash
# bench.sh — `make bench`: runs every package's Go benchmarks that measure the
# figures the issues name, and prints one table. Benchmarks, never timed tests.
# Integration benchmarks need root and the provisioned tools (scripts/provision.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
# The workspace export/import benchmark writes ~3 GB of temp files; it only
# runs with BENCH_BIG=1 (default here, `BENCH_BIG=0 make bench` skips it).
export BENCH_BIG="${BENCH_BIG:-1}"
# BENCH_ONLY (an extended regexp) runs only the BENCHES lines it matches
# (each is "package|regexp|benchtime"), e.g. BENCH_ONLY=EgressCurl or
# BENCH_ONLY='EgressCurl|ColdStart|SyncRoundReal'; the Postgres and Docker
# steps are then skipped (and so are the image figures).
BENCH_ONLY="${BENCH_ONLY:-}"
# BenchmarkEgressCurl's transfer size (bytes, or with K/M/G): 256 MiB by
# default, EGRESS_BENCH_BYTES=1G for the figure the issue asks for.
export EGRESS_BENCH_BYTES="${EGRESS_BENCH_BYTES:-256M}"
# As root on Debian, the tools the integration benchmarks drive (the same
# provisioning as `make test`; seconds when present), then the binaries.
if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ]; then
  bash scripts/provision.sh
fi
make --no-print-directory build >&2
# The store figures need Postgres beside SQLite (installed and started here
# when missing, like CI does).
if [ -z "$BENCH_ONLY" ] && [ -z "${WORKER_TEST_DATABASE_URL:-}" ] && [ "$(id -u)" = 0 ]; then
  WORKER_TEST_DATABASE_URL="$(bash scripts/postgres.sh)"
  export WORKER_TEST_DATABASE_URL
fi

# The Docker figures (providers, replacement, image) need an engine and the
# image: as root, start an engine when none answers (stopping it at the end
# only if this run started it) and build the image (seconds when cached).
claim="$(mktemp)"
out="$(mktemp)"
trap 'bash scripts/docker-engine.sh stop "$claim" || true; rm -f "$claim" "$out"' EXIT
if [ -z "$BENCH_ONLY" ] && [ "$(id -u)" = 0 ]; then
  bash scripts/docker-engine.sh start "$claim"
fi
docker_ok=0
if [ -z "$BENCH_ONLY" ] && docker info >/dev/null 2>&1; then
  docker_ok=1
  IMAGE="${IMAGE:-open-bot/computer:dev}" bash scripts/build-image.sh >&2
elif [ -z "$BENCH_ONLY" ]; then
  echo "bench: no Docker engine answers; the docker figures are left out" >&2
fi

# The Kubernetes test cluster (scripts/kube.sh, as `make test` starts it)
# for BenchmarkPool's kubernetes figures; stopped at exit when started here.
kube_started=0
if [ "$docker_ok" = 1 ] && [ "$(id -u)" = 0 ] && [ -z "${KUBE_TEST_KUBECONFIG:-}" ]; then
  bash scripts/kube.sh status >/dev/null 2>&1 || kube_started=1
  if kc="$(KUBE_COMPUTER_IMAGE="${IMAGE:-open-bot/computer:dev}" bash scripts/kube.sh start 2>/dev/null)"; then
    export KUBE_TEST_KUBECONFIG="$kc"
  else
    echo "bench: the Kubernetes test cluster did not start; the kubernetes figures are left out" >&2
  fi
fi
trap 'if [ "$kube_started" = 1 ]; then bash scripts/kube.sh stop >/dev/null 2>&1 || true; fi; bash scripts/docker-engine.sh stop "$claim" || true; rm -f "$claim" "$out"' EXIT

# Each line: package, benchmark regexp, benchtime. Add yours here.
BENCHES=(
  "./apps/botd|BenchmarkBotd|1x"
  # issue 7: a tool call relayed worker -> botd -> back vs botd directly (p50),
  # and the scripted end-to-end run's wall time.
  "./apps/worker|BenchmarkToolRelay|1x"
  "./apps/worker|BenchmarkE2ERun|1x"
  # issue 33.7: a worker group of three on Postgres: a relayed tool call's
  # extra cost (p50/p99), calls/s through 1 and 3 workers, failover over 10
  # SIGKILLs (p50/max).
  "./apps/worker|BenchmarkWorkerGroup|1x"
  # issue 3 (screens): ensure -> running on a fresh screen id each start
  # (p50, max; target <= 2 s), one click through the HTTP API with its JSON
  # and base64 JPEG to the observation (200 samples: p50/p90/p99; target <=
  # settle + 40 ms), and the RSS/PSS of one idle screen's processes.
  "./apps/botd/internal/screen|BenchmarkScreen|1x"
  # issue 23.8: recording one screen while it changes (a terminal running
  # top; full-screen noise), H.264 (what botd records) beside VP9: ffmpeg's
  # CPU per wall second (cpu/s) and the file's MB per minute.
  "./apps/botd/internal/screen|BenchmarkRecording|1x"
  # issue 6: /exec round trip for `true` (p50_ms, p99_ms), and export/import
  "./apps/botd/internal/execsvc|BenchmarkExecTrue|500x"
  "./apps/botd/internal/workspace|BenchmarkExportImport|1x"
  # issue 15: checkpoint (store Put) and restore (verified Open, read to the
  # end) time and MB/s of the same generated 1 GiB / 10,000-file workspace,
  # local and S3 (gofakes3 in-process) stores (BENCH_BIG=1).
  "./apps/worker/internal/homes|BenchmarkHomeStore|1x"
  # issue 4: egress throughput through the SOCKS proxy vs straight loopback,
  # both modes in one run, up (client sends) and down (target sends), median
  # of 15 paired rounds of 128 MiB (targets: direct >= 0.8, tunnel >= 0.5),
  # and connection setup p50 per mode.
  "./apps/botd/internal/egress|BenchmarkThroughputRatio|1x"
  "./apps/botd/internal/egress|BenchmarkConnect|500x"
  # the ceiling on this machine: plain loopback vs one bare splice relay
  # (direct mode's hops), two in a row (tunnel mode's TCP hops), and the
  # same two pumping through user space (copy2: the ceiling of a websocket
  # tunnel, whose two ends must read and write every byte).
  "./apps/botd/internal/egress|^BenchmarkRelayCeiling$|1x"
  # issue 24.5: egress as a user meets it: curl downloading (GET, the server
  # sendfiles) and uploading (PUT) EGRESS_BENCH_BYTES, best of three, over
  # plain loopback, `socat -b 262144` (the naive relay), the proxy in direct
  # mode (server allowed by EGRESS_ALLOW) and in tunnel mode; rate, ratio to
  # socat (goal direct >= 1.0) and the relay's CPU per byte, with a bare
  # splice relay beside them (what direct mode relayed with before).
  # The server is a process of its own. Printed again as the egress table.
  "./apps/botd/internal/egress|^BenchmarkEgressCurl$|1x"
  # issue 8: viewer link to the first full frame (through the relay), relay
  # vs direct x11vnc latency of a frame update, x11vnc CPU per idle screen
  # with one viewer (target < 2% of a core).
  "./apps/botd/internal/vnc|^BenchmarkVNC|1x"
  # issue 3 (desktop): native capture (MIT-SHM + XFixes cursor + the JPEG
  # encoder named in the benchmark) p50/p90/p99 vs a `scrot -p -q 72` process
  # (what a user runs) and vs scrot's own grab+encode (its Imlib2 calls in a
  # running process, no process start), in turn on the same Xvfb frame (an
  # XFCE wallpaper; a busy ~200 kB frame); unchanged-frame capture p50
  # (target <= 5 ms); exact Unicode typing into mousepad, chars/s (>= 50).
  "./apps/botd/internal/desktop|^BenchmarkCaptureVsScrot$|200x"
  "./apps/botd/internal/desktop|^BenchmarkCaptureUnchanged$|500x"
  "./apps/botd/internal/desktop|^BenchmarkTypeExact$|3x"
  # why input is XTEST: a click on botd's own X connection vs an xdotool process.
  "./apps/botd/internal/desktop|^BenchmarkClickVsXdotool$|100x"
  # issue 5 (browser): cold start to first page ready (launch Chromium over
  # the DevTools pipe on a private Xvfb, open a local page via SOCKS, read
  # it) p50/p90 over 30 starts (target <= 1.2 s p50); read-page p50 on a
  # ~1 MB page; one CookieSync round with 4 browsers, steady state: merge +
  # jar I/O on in-memory stores, and with 4 real Chromium processes and an
  # 875-cookie jar (target <= 40 ms p50), counting what the rounds wrote
  # into the browsers and the jar. issue 24.6: each beside its floor from
  # the same run (floor-p50_ms, x-floor): the cold start beside the same
  # Chromium started bare on the same display with a fresh profile (goal
  # <= 1.3x), the sync round beside one parallel Storage.getCookies from the
  # same four browsers (goal <= 2x). Printed again as the floors table.
  "./apps/botd/internal/browser|^BenchmarkColdStart$|30x"
  "./apps/botd/internal/browser|^BenchmarkReadPage1MB$|30x"
  "./apps/botd/internal/cookies|^BenchmarkSyncRound$|50x"
  "./apps/botd/internal/cookies|^BenchmarkSyncRoundRealBrowsers$|30x"
  # issue 13 (providers): per provider (local, single-screen over local,
  # docker): provision -> first successful observe p50 of 3, stop -> start
  # -> observe, destroy p50, PSS of one idle computer (no screen) and with
  # one screen. Docker needs an engine and the image (make image).
  "./apps/worker/internal/providers|^BenchmarkProviders$|1x"
  # issue 12 (control plane): store ops/s for lease acquire+release and
  # run-event append, SQLite and Postgres (WORKER_TEST_DATABASE_URL); the
  # worker's idle RSS (its tool-relay overhead is BenchmarkToolRelay above).
  "./apps/worker/internal/store|^BenchmarkStore$|2000x"
  "./apps/worker|^BenchmarkWorkerIdleRSS$|1x"
  # issue 16: user lease -> the agent's running action failed (mean, max).
  "./apps/botd/internal/screen|^BenchmarkScreenTakeoverCutoff$|20x"
  # issue 15: replacement -> first observe with the restored home: a machine
  # destroyed behind the worker, `recover` (provision + import of the latest
  # checkpoint, 64 MiB + 2,000 files) to the first computer_observe through
  # the worker, p50 of 3, local and docker (docker needs the image).
  "./apps/worker|^BenchmarkReplacement$|1x"
  # issue 15: takeover request -> worker control link -> first full frame
  # through the worker's relay (p50, max).
  "./apps/worker|^BenchmarkTakeoverFirstFrame$|1x"
  # issue 34: CDP through the worker (worker -> botd -> the screen's
  # Chromium over its pipe) vs a bare headless Chromium's own DevTools
  # websocket on this machine: connect -> first Page.navigate answered (p50
  # of 5) and a Runtime.evaluate round trip (p50 of 50), with the ratios;
  # OSWorld's guest screenshot (PNG) and accessibility tree (p50 of 20).
  "./apps/worker|^BenchmarkAgentProtocols$|1x"
  # issue 21: the command-driven desktop machine's observe (docker exec of
  # xdotool + `scrot -p -q 72`, the JPEG back through the exec stream) on
  # the e2b-desktop stand-in, p50/p90 of 50; issue 31: beside it the same
  # machine with its held stream (observe from the worker's RFB session).
  "./apps/worker/internal/machines/desktop|^BenchmarkDesktopObserve$|50x"
  # issue 31: on one desktop sandbox of the E2B emulator and one of the
  # Daytona emulator (snapshot desktop), samples interleaved: the desktop
  # machine by commands, the same machine with its held stream, and the
  # vendor's own JS SDK on the same sandbox (@e2b/desktop screenshot(),
  # @daytonaio/sdk computerUse.screenshot.takeCompressed(); node and npm
  # from scripts/provision.sh, the SDK npm ci-ed from its lock: missing,
  # the benchmark fails): observe and a click round trip (settle included)
  # p50/p90 of 20, a view link's dial to its first whole frame p50/p90,
  # the SDK screenshot p50/p90, observe p50 over the SDK
  # screenshot p50 (x_sdk_p50, goal <= 0.1 for the held stream), and the
  # worker CPU per idle held stream (getrusage over 10 s live vs 10 s
  # closed, median of 1 s windows; goal < 1 % of a core).
  "./apps/worker/internal/providers/e2b|^BenchmarkE2BDesktopHeldObserve$|1x"
  "./apps/worker/internal/providers/daytona|^BenchmarkDaytonaDesktopHeldObserve$|1x"
  # issue 31: the same on one box of the Box emulator, without an SDK
  # column (Box publishes no screenshot SDK).
  "./apps/worker/internal/providers/box|^BenchmarkBoxDesktopHeldObserve$|1x"
  # issue 21.5: the same figures on the E2B emulator (in-process, template
  # open-bot: botd in a sandbox container behind the adapter's forwarder and
  # the emulator's port routing) and on docker, one row each per figure:
  # provision -> first observation's JPEG (p50/p90 of 3 new computers), a
  # full observe (fresh lease, JPEG) and an unchanged one, a click round
  # trip with its observation (settle included), and checkpoint/restore of
  # the same home (export of a workspace with 8 MiB of random files, import
  # into a fresh computer: tar MB, p50 ms and MB/s of 3). Then the
  # command-driven desktop machine's observe beside botd's on one display
  # (a docker computer's screen :1, driven by both; p50/p90 of 30 each).
  "./apps/worker/internal/providers|^BenchmarkE2BVsDocker$|1x"
  "./apps/worker/internal/providers|^BenchmarkDesktopVsBotdObserve$|1x"
  # issue 22.6: the same figures on the Daytona emulator, snapshot open-bot
  # (botd behind the sandbox's preview URL) and snapshot desktop (the
  # command-driven desktop machine over the toolbox), beside docker's.
  "./apps/worker/internal/providers|^BenchmarkDaytonaVsDocker$|1x"
  # issue 22 (box): provision -> first observation's JPEG (p50/p90 of 2 new
  # computers) and a full observe (fresh lease; p50/p90 of 20) on the Box
  # emulator (the command-driven desktop machine over Box's command API)
  # beside docker, in one run.
  "./apps/worker/internal/providers|^BenchmarkBoxVsDocker$|1x"
  # issue 23: elements on the 30-page corpus (testdata/elements): per page
  # the visible interactive elements found and hit by a real click at their
  # box centre (goal >= 98 %), the misses, observe with vs without elements
  # p50/p90 (goal: <= 30 ms added at p50), the elements JSON beside the
  # JPEG; and the box sources compared (one DOMSnapshot vs getBoxModel per
  # node). Printed again as the elements table.
  "./apps/botd/internal/browser|^BenchmarkElements$|1x"
  # issue 23, desktop programs: the desktop corpus (the panel, mousepad, one
  # of its menus, xfce4-terminal, Thunar) found and hit through AT-SPI per
  # program (goal >= 90 %), the misses, and observe with vs without
  # elements on that desktop (p50/p90) with the JSON beside the JPEG.
  "./apps/botd/internal/screen|^BenchmarkDesktopElements$|1x"
  # issue 24.3 (warm pool): per provider (local, docker, kubernetes on the
  # test cluster; docker and kubernetes need the image), side by side: create -> first observe (create, add a bot, its
  # first computer_observe) p50/p90 of 6 without a pool (cold-) and from
  # WORKER_POOL=<kind>=1 (pool-), the create alone (p50), and one idle
  # pooled machine's CPU (% of a core over 5 s) and PSS (its processes).
  "./apps/worker|^BenchmarkPool$|1x"
  # issue 30.6: where a run's agent loop runs: run start (POST /runs sent)
  # -> the run's first model request read by the model, and one tool round
  # trip (the answer asking for shell `true` flushed -> the next request,
  # carrying its output, read), p50/p90 of 10 runs x 4 calls after a
  # warm-up, scripted model: the worker runtime and Codex in the machine
  # on docker, the worker runtime on E2B desktop (emulator; a machine run
  # is refused there), ratios to docker/worker. Printed again as the
  # runtimes table.
  "./apps/worker|^BenchmarkRuntimeLatency$|1x"
)

# Print "Benchmark...  value unit  value unit ..." lines as a table. The awk
# program is one single-quoted string: no apostrophe may appear in it (one
# did once, and broke make bench at the very end). ns/op is
# the figure when the benchmark looped (N > 1); for a one-shot benchmark
# (N = 1) it is just the length of the run, so it is left out.
table_awk='/^Benchmark/ {
  name = $1; sub(/-[0-9]+$/, "", name); line = ""
  for (i = 3; i < NF; i += 2) {
    if ($(i+1) != "ns/op" || NF == 4 || $2 > 1) line = line sprintf("%s %s   ", $i, $(i+1))
  }
  printf "%-58s %s\n", name, line
}'
# issue 24: the figures that only mean something beside a baseline from the
# same run, side by side. Same rule as above: no apostrophe in these.
egress_awk='/^BenchmarkEgressCurl/ {
  for (i = 3; i < NF; i += 2) v[$(i+1)] = $i
  printf "\negress: curl, %s MiB each way, best of 3 (goal: direct >= 1.00x socat)\n", v["MiB"]
  printf "%-10s %12s %10s %14s %12s %10s %14s\n", "path", "down MB/s", "x socat", "relay cpu ns/B", "up MB/s", "x socat", "relay cpu ns/B"
  n = split("loopback socat direct tunnel splice", p, " ")
  for (k = 1; k <= n; k++) {
    d = p[k]; ds = (d == "socat") ? 1 : v["down-" d "/socat"]; us = (d == "socat") ? 1 : v["up-" d "/socat"]
    dc = (d == "loopback") ? "-" : v["down-" d "-cpu-ns/B"]; uc = (d == "loopback") ? "-" : v["up-" d "-cpu-ns/B"]
    printf "%-10s %12s %9.2fx %14s %12s %9.2fx %14s\n", d, v["down-" d "-MB/s"], ds, dc, v["up-" d "-MB/s"], us, uc
  }
}'
floors_awk='/^BenchmarkColdStart|^BenchmarkSyncRoundRealBrowsers/ {
  delete v
  for (i = 3; i < NF; i += 2) v[$(i+1)] = $i
  if (!("x-floor" in v)) next
  if (!hdr) { printf "\nfloors: each figure beside its floor from the same run\n%-44s %10s %10s %8s %6s\n", "figure", "p50 ms", "floor ms", "ratio", "goal"; hdr = 1 }
  if ($1 ~ /ColdStart/) printf "%-44s %10s %10s %7.2fx %6s\n", "browser cold start -> first page (bare)", v["p50_ms"], v["floor-p50_ms"], v["x-floor"], "1.3x"
  else printf "%-44s %10s %10s %7.2fx %6s\n", "CookieSync round, 4 browsers (getCookies)", v["p50_ms"], v["floor-p50_ms"], v["x-floor"], "2x"
}'
# issue 23: the elements corpus table, as BenchmarkElements logged it.
elements_awk='!/desktop-elements-table: / && /elements-table: |elements-boxes: / {
  if (!hdr) { printf "\nelements: per corpus page (found+hit of the visible interactive elements; observe ms with/without elements; sizes)\n"; hdr = 1 }
  line = $0; sub(/^.*elements-(table|boxes): /, "", line); print line
}'
# issue 23: the desktop corpus table, as BenchmarkDesktopElements printed it.
desktop_elements_awk='/desktop-elements-table: / {
  if (!hdr) { printf "\ndesktop elements: per program (found of the listed controls, hit of the clicked elements via AT-SPI); observe ms with/without\n"; hdr = 1 }
  line = $0; sub(/^.*desktop-elements-table: /, "", line); print line
}'
# issue 30.6: the runtimes table, as BenchmarkRuntimeLatency logged it.
runtimes_awk='/runtime-table: / {
  if (!hdr) { printf "\nruntimes: run start -> first model request, one shell true round trip (model asks -> result back at the model); ms, p50/p90 of 10 runs x 4 calls; cold 1st: the warm-up run; x: p50 beside docker/worker; tool p50: the same shell true through the direct tool API, no model\n"; hdr = 1 }
  line = $0; sub(/^.*runtime-table: /, "", line); print line
}'
# Check the table programs now, not after an hour of benchmarks.
for prog in "$table_awk" "$egress_awk" "$floors_awk" "$elements_awk" "$desktop_elements_awk" "$runtimes_awk"; do awk "$prog" </dev/null; done

# The machine may be shared: say how loaded it was around the run.
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
for b in "${BENCHES[@]}"; do
  if [ -n "$BENCH_ONLY" ] && ! grep -Eq -- "$BENCH_ONLY" <<<"$b"; then
    continue
  fi
  IFS='|' read -r pkg re time <<<"$b"
  echo "bench: $pkg $re" >&2
  one="$(mktemp)"
  if ! go test -run '^$' -bench "$re" -benchtime "$time" -count 1 -timeout 30m "$pkg" >"$one" 2>&1; then
    cat "$one" >>"$out"
    echo "bench: $pkg failed:" >&2
    tail -20 "$one" >&2
    rm -f "$one"
    exit 1
  fi
  cat "$one" >>"$out"
  # A skipped benchmark prints no figures: say so, loudly, with its reason.
  if grep -q -- '--- SKIP: Benchmark' "$one"; then
    echo "bench: $pkg $re SKIPPED, no figures:" >&2
    grep -A3 -- '--- SKIP: Benchmark' "$one" >&2 || true
  fi
  rm -f "$one"
done

# issue 14: image size, no-change rebuild, run -> healthy, stop -> exited,
# observe inside the container vs on the host (needs a Docker engine).
if [ "$docker_ok" = 1 ]; then
  echo "bench: scripts/bench-image.sh" >&2
  bash scripts/bench-image.sh >>"$out" || { echo "bench: image failed" >&2; exit 1; }
fi

printf '\n%-58s %s\n' "benchmark" "figures"
printf '%-58s %s\n' "---------" "-------"
awk "$table_awk" "$out"

awk "$egress_awk" "$out"
awk "$floors_awk" "$out"
awk "$elements_awk" "$out"
awk "$desktop_elements_awk" "$out"
awk "$runtimes_awk" "$out"
printf '\nload average before: %s   after: %s   (%s cores)\n' "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)" "$(nproc)"
