#!/usr/bin/env bash
# kube.sh: a real single-node Kubernetes cluster for the project's tests,
# built from source (tools/kube, k8s.io/kubernetes v1.34.4) on this machine.
#
#   scripts/kube.sh build     build tools/kube into the per-machine cache (only when its source changed)
#   scripts/kube.sh start     install what is missing, build, start containerd (its own instance), etcd,
#                             kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet;
#                             import the pause and computer images; wait for the node to be Ready
#   scripts/kube.sh stop      stop all of it, remove its pods, mounts and bridge (caches are kept)
#   scripts/kube.sh status    what runs
#   scripts/kube.sh smoke     a pod of the computer image; botd answers through the API server's proxy
#   scripts/kube.sh restart C stop and start one component (containerd, etcd, apiserver, …, kubelet)
#   scripts/kube.sh pid C     a running component's pid
#   scripts/kube.sh kubectl … kubectl with the admin kubeconfig
#   scripts/kube.sh env       prints `export KUBECONFIG=…`
#
# Each start of a stopped cluster is a fresh cluster: new CA and certificates,
# empty etcd, empty kubelet directory. Images already in its containerd stay.
# Everything listens on loopback, except the kubelet on the bridge address it
# makes (obk0, 10.201.0.1), which only this machine and its pods reach.
# docs/kubernetes.md has the details. Runs as root, with no stdin.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
export PATH="/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
umask 022

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="$REPO/tools/kube"

# Where things live.
STATE=/var/lib/open-bot-kube          # pki, etcd, kubelet, containerd root (images), configs
RUN=/run/open-bot-kube                # pids, containerd state and socket
LOGS=/var/log/open-bot-kube           # one log per component
CACHE=/var/cache/open-bot/kube        # built binaries by source hash, and their Go build cache
PKI="$STATE/pki"
ADMIN_KUBECONFIG="$STATE/admin.kubeconfig"
SOCK="$RUN/containerd/containerd.sock"

# Network: a bridge of our own; the node's address is the pods' gateway.
BRIDGE=obk0
NODE_IP=10.201.0.1
POD_SUBNET=10.201.0.0/24
SERVICE_CIDR=10.202.0.0/24 # no kube-proxy: ClusterIPs are not routed (the API server's proxy and port-forward work)
SERVICE_IP=10.202.0.1
NODE_NAME=open-bot-kube
API_PORT=16443
ETCD_PORT=12379
ETCD_PEER_PORT=12380
KCM_PORT=10257
SCHED_PORT=10259
KUBELET_PORT=10250
KUBELET_HEALTHZ_PORT=10248
FWD_CHAIN=OBK-FORWARD

COMPUTER_IMAGE="${KUBE_COMPUTER_IMAGE:-open-bot/computer:dev}"
PAUSE_REPO=open-bot/kube-pause

COMPONENTS=(containerd etcd apiserver controller-manager scheduler hostpath-provisioner kubelet)

log() { printf '%s kube.sh: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
  printf 'kube.sh: error: %s\n' "$*" >&2
  exit 1
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

require_root() { [ "$(id -u)" = 0 ] || die "run as root (it starts containerd and a kubelet)"; }

[[ "$COMPUTER_IMAGE" =~ ^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9._-]+)?$ ]] || die "KUBE_COMPUTER_IMAGE '$COMPUTER_IMAGE' is not an image reference"

# ---------------------------------------------------------------- build --

k8s_version() {
  awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3; exit } $1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$SRC/go.mod"
}

# The cache key: tools/kube's go.mod, go.sum and .go files, the Go toolchain
# and the build recipe (cmd_build's own text: flags, ldflags).
src_hash() {
  (
    cd "$SRC"
    find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    go version 2>/dev/null || echo "no go"
    declare -f cmd_build
  ) | sha256sum | cut -c1-16
}

KUBE=""
PAUSE_BIN=""
cmd_build() {
  command -v go >/dev/null || die "go is not on PATH (expected in /usr/local/go/bin)"
  local hash dir t0 ver
  hash="$(src_hash)"
  dir="$CACHE/$hash"
  KUBE="$dir/kube"
  PAUSE_BIN="$dir/pause"
  if [ -x "$KUBE" ] && [ -x "$PAUSE_BIN" ]; then
    log "build: cached $KUBE"
    return 0
  fi
  mkdir -p "$CACHE"
  exec 8>"$CACHE/.lock"
  flock 8
  if [ -x "$KUBE" ] && [ -x "$PAUSE_BIN" ]; then
    exec 8>&-
    return 0
  fi
  ver="$(k8s_version)"
  [[ "$ver" =~ ^v1\.([0-9]+)\.[0-9]+$ ]] || die "cannot read k8s.io/kubernetes's version from $SRC/go.mod"
  local minor="${BASH_REMATCH[1]}"
  local ld=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$ver -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  local tmp="$dir.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  log "build: tools/kube ($ver) -> $dir (a cold build takes a long while; GOCACHE=$CACHE/go-build)"
  t0="$(now)"
  (
    cd "$SRC"
    export GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 GOCACHE="$CACHE/go-build"
    go build -trimpath -ldflags "-s -w$ld" -o "$tmp/kube" . &&
      go build -trimpath -ldflags "-s -w" -o "$tmp/pause" ./pause
  ) || {
    rm -rf "$tmp"
    die "build of tools/kube failed"
  }
  rm -rf "$dir"
  mv "$tmp" "$dir"
  log "build: done in $(since "$t0")s"
  # Binaries of older sources go; the Go build cache stays.
  local d
  for d in "$CACHE"/*; do
    [ "$d" = "$dir" ] && continue
    [[ "$(basename "$d")" =~ ^[0-9a-f]{16}$ ]] && rm -rf "$d"
  done
  exec 8>&-
}

# ------------------------------------------------------------- packages --

# Debian's packages this script uses, by the command that shows each is there.
ensure_packages() {
  local -a want=()
  command -v containerd >/dev/null || want+=(containerd)
  command -v runc >/dev/null || want+=(runc)
  [ -x /usr/lib/cni/bridge ] || want+=(containernetworking-plugins)
  command -v iptables >/dev/null || want+=(iptables)
  command -v conntrack >/dev/null || want+=(conntrack)
  command -v ip >/dev/null || want+=(iproute2)
  command -v curl >/dev/null || want+=(curl ca-certificates)
  command -v flock >/dev/null || want+=(util-linux)
  command -v mount >/dev/null || want+=(mount)
  if [ "${#want[@]}" -gt 0 ]; then
    log "installing ${want[*]}"
    apt-get update -qq >/dev/null || die "apt-get update failed"
    apt-get install -y -qq --no-install-recommends "${want[@]}" >/dev/null </dev/null ||
      die "apt-get install ${want[*]} failed"
  fi
  command -v docker >/dev/null ||
    die "docker is needed to build the pause image and to export the computer image (scripts/docker-engine.sh installs and starts it)"
  docker info >/dev/null 2>&1 || die "the Docker engine does not answer (scripts/docker-engine.sh starts it)"
}

# ------------------------------------------------------------ processes --

pidfile() { echo "$RUN/pids/$1.pid"; }

# The pid of a component if it runs, else nothing. A pid is ours only while
# its executable is still the one we started (pids are reused).
running_pid() {
  local f pid exe want
  f="$(pidfile "$1")"
  [ -s "$f" ] || return 1
  read -r pid want <"$f" || true
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 1
  exe="${exe% (deleted)}"
  [ "$exe" = "$want" ] || return 1
  echo "$pid"
}

# launch NAME EXE ARGS...: runs it in its own session, stdin closed, output
# appended to $LOGS/NAME.log; records "pid exe" once the exe is exec'd.
launch() {
  local name="$1" exe="$2"
  shift 2
  local pf
  pf="$(pidfile "$name")"
  rm -f "$pf"
  printf '\n===== %s start %s\n' "$(date -Is)" "$name" >>"$LOGS/$name.log"
  # The child writes its own pid then execs, so the pid is the component's.
  # shellcheck disable=SC2016 # expanded by that child
  setsid bash -c 'printf "%s %s\n" "$$" "$1" >"$2.tmp" && mv "$2.tmp" "$2" && shift 2 && exec "$@"' \
    kube-launch "$exe" "$pf" "$exe" "$@" </dev/null >>"$LOGS/$name.log" 2>&1 8>&- 9>&- &
  for _ in $(seq 1 50); do
    [ -s "$pf" ] && break
    sleep 0.1
  done
  [ -s "$pf" ] || die "$name did not start (see $LOGS/$name.log)"
}

# stop_component NAME [SECONDS]: TERM, then KILL after SECONDS (default 20).
stop_component() {
  local name="$1" wait="${2:-20}" pid
  if pid="$(running_pid "$name")"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 $((wait * 10))); do
      [ -d "/proc/$pid" ] || break
      sleep 0.1
    done
    if [ -d "/proc/$pid" ]; then
      log "$name ($pid) did not stop in ${wait}s: KILL"
      kill -KILL "$pid" 2>/dev/null || true
      sleep 0.5
    fi
    log "stopped $name ($pid)"
  fi
  rm -f "$(pidfile "$name")"
}

# wait_for WHAT SECONDS LOGNAME CMD...: until CMD succeeds; on time-out, the
# component's log tail and an error.
wait_for() {
  local what="$1" secs="$2" logname="$3"
  shift 3
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if [ -n "$logname" ] && ! running_pid "$logname" >/dev/null; then
      tail -n 30 "$LOGS/$logname.log" >&2 || true
      die "$logname exited while waiting for $what (log: $LOGS/$logname.log)"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      [ -n "$logname" ] && { tail -n 30 "$LOGS/$logname.log" >&2 || true; }
      die "$what: not after ${secs}s${logname:+ (log: $LOGS/$logname.log)}"
    fi
    sleep 0.5
  done
}

kc() { "$KUBE" kubectl --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }

# ------------------------------------------------------------- network --

net_up() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge || die "cannot make bridge $BRIDGE"
  fi
  ip addr replace "$NODE_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  # Pods reach this host only: forwarded traffic from or to the bridge goes
  # nowhere else, and pods never reach each other (bridged frames pass
  # FORWARD, net.bridge.bridge-nf-call-iptables). The bridge plugin does
  # not enforce NetworkPolicy; this is the test cluster's stand-in for the
  # default deny each computer's NetworkPolicy asks of a real one (another
  # team's pod is unreachable from a bot's shell). The worker reaches botd
  # by port-forward, which the kubelet dials inside the pod: no bridge.
  [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] || modprobe br_netfilter 2>/dev/null || true
  if [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
    sysctl -qw net.bridge.bridge-nf-call-iptables=1 || log "warning: cannot set net.bridge.bridge-nf-call-iptables: pods may reach each other"
  else
    log "warning: no br_netfilter here: bridged traffic skips iptables, pods may reach each other"
  fi
  iptables -w -N "$FWD_CHAIN" 2>/dev/null || true
  iptables -w -F "$FWD_CHAIN"
  iptables -w -A "$FWD_CHAIN" -i "$BRIDGE" -o "$BRIDGE" -j DROP
  iptables -w -A "$FWD_CHAIN" -i "$BRIDGE" -j DROP
  iptables -w -A "$FWD_CHAIN" -o "$BRIDGE" -j DROP
  iptables -w -C FORWARD -j "$FWD_CHAIN" 2>/dev/null || iptables -w -I FORWARD 1 -j "$FWD_CHAIN"
}

net_down() {
  while iptables -w -C FORWARD -j "$FWD_CHAIN" 2>/dev/null; do
    iptables -w -D FORWARD -j "$FWD_CHAIN"
  done
  iptables -w -F "$FWD_CHAIN" 2>/dev/null || true
  iptables -w -X "$FWD_CHAIN" 2>/dev/null || true
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link del "$BRIDGE" && log "removed bridge $BRIDGE"
  fi
  rm -rf "$STATE/cni/ipam"
}

# ---------------------------------------------------------- containerd --

write_containerd_config() {
  local pause_ref="$1"
  mkdir -p "$STATE/cni/net.d" "$STATE/cni/ipam" "$STATE/containerd" "$STATE/containerd-opt" "$RUN/containerd" "$RUN/runc"
  cat >"$STATE/containerd.toml" <<EOF
# Written by scripts/kube.sh: the test cluster's own containerd (not Docker's).
version = 2
root = "$STATE/containerd"
state = "$RUN/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[debug]
  address = "$RUN/containerd/debug.sock"

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$STATE/containerd-opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$pause_ref"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    # This machine's root lacks CAP_SYS_RESOURCE (nested sandboxes often
    # do): no oom_score_adj below containerd's own (the pause container's
    # -998 would make runc fail "failed to update /proc/self/oom_score_adj").
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          BinaryName = "$(command -v runc)"
          Root = "$RUN/runc"
          SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "$STATE/cni/net.d"
      max_conf_num = 1
EOF
  cat >"$STATE/cni/net.d/10-open-bot-kube.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "open-bot-kube",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$POD_SUBNET", "gateway": "$NODE_IP" }]],
        "routes": [{ "dst": "0.0.0.0/0" }],
        "dataDir": "$STATE/cni/ipam"
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF
}

ctr_() { ctr --address "$SOCK" --namespace k8s.io "$@"; }

start_containerd() {
  launch containerd "$(command -v containerd)" --config "$STATE/containerd.toml"
  wait_for "containerd's socket" 60 containerd ctr --address "$SOCK" version
}

# --------------------------------------------------------------- images --

# import_image NAME DOCKER_REF: docker save | ctr import, unless containerd
# already holds the image of the same Docker image id. Returns 1 (said in
# the log) when the import fails. (grep without -q:
# one that quits at the first match can end ctr with SIGPIPE, and under
# pipefail a found image then reads as missing; seen in a CI run.)
import_image() {
  local name="$1" ref="$2" id have=""
  id="$(docker image inspect --format '{{.Id}}' "$ref")" || die "docker has no image $ref"
  [ -s "$STATE/images/$name.id" ] && have="$(cat "$STATE/images/$name.id")"
  local cref="docker.io/$ref"
  if [ "$have" = "$id" ] && ctr_ images ls -q | grep -xF "$cref" >/dev/null; then
    log "image $ref: already in containerd ($id)"
    return 0
  fi
  local t0
  t0="$(now)"
  log "image $ref: importing into containerd ($id)"
  mkdir -p "$STATE/images"
  if ! docker save "$ref" | ctr_ images import - >>"$LOGS/images.log" 2>&1; then
    log "importing $ref into containerd failed (log: $LOGS/images.log): $(tail -n 1 "$LOGS/images.log" | cut -c1-300)"
    return 1
  fi
  if ! ctr_ images ls -q | grep -xF "$cref" >/dev/null; then
    log "containerd has no $cref after the import (log: $LOGS/images.log)"
    return 1
  fi
  echo "$id" >"$STATE/images/$name.id"
  log "image $ref: imported in $(since "$t0")s"
}

# The pause image: the static pause program FROM scratch, tagged by its hash.
pause_ref() { echo "$PAUSE_REPO:$(sha256sum "$PAUSE_BIN" | cut -c1-12)"; }

build_pause_image() {
  local ref
  ref="$(pause_ref)"
  if ! docker image inspect "$ref" >/dev/null 2>&1; then
    local ctx
    ctx="$(mktemp -d)"
    cp "$PAUSE_BIN" "$ctx/pause"
    printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$ctx/Dockerfile"
    docker build -q -t "$ref" "$ctx" >>"$LOGS/images.log" 2>&1 || {
      rm -rf "$ctx"
      die "docker build of the pause image failed (log: $LOGS/images.log)"
    }
    rm -rf "$ctx"
  fi
  import_image pause "$ref"
}

# import_images: the pause image and the computer image into containerd.
import_images() {
  build_pause_image || return 1
  if docker image inspect "$COMPUTER_IMAGE" >/dev/null 2>&1; then
    import_image computer "$COMPUTER_IMAGE" || return 1
  else
    log "WARNING: docker has no $COMPUTER_IMAGE (scripts/build-image.sh builds it): not imported; pods of it cannot start"
  fi
}

# -------------------------------------------------------- control plane --

write_configs() {
  cat >"$STATE/scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $PKI/scheduler.kubeconfig
leaderElection:
  leaderElect: false
EOF
  cat >"$STATE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
containerRuntimeEndpoint: unix://$SOCK
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
# No cluster DNS, and pods get no resolvers of this host's: nothing in them
# resolves names off the machine.
resolvConf: ""
maxPods: 50
# The imported images (imagePullPolicy: Never) must never be collected,
# and a busy shared disk must not evict the test pods.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
serializeImagePulls: false
podLogsDir: $LOGS/pods
# The kubelet's own oom_score_adj: the default -999 needs CAP_SYS_RESOURCE.
oomScoreAdj: 0
# No KUBE-FIREWALL chain in the host's INPUT and OUTPUT: it guards against
# kube-proxy's route_localnet, and there is no kube-proxy here.
makeIPTablesUtilChains: false
EOF
}

start_etcd() {
  mkdir -p "$STATE/etcd"
  launch etcd "$KUBE" etcd --data-dir "$STATE/etcd" \
    --listen-client "http://127.0.0.1:$ETCD_PORT" --listen-peer "http://127.0.0.1:$ETCD_PEER_PORT"
  wait_for "etcd health" 60 etcd curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health"
}

start_apiserver() {
  launch apiserver "$KUBE" apiserver \
    --bind-address=127.0.0.1 --secure-port="$API_PORT" --advertise-address="$NODE_IP" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --client-ca-file="$PKI/ca.crt" \
    --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$PKI/ca.crt" \
    --kubelet-preferred-address-types=InternalIP \
    --service-account-key-file="$PKI/sa.pub" \
    --service-account-signing-key-file="$PKI/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NodeRestriction \
    --allow-privileged=false \
    --profiling=false \
    --v=1
  wait_for "the API server's /readyz" 120 apiserver kc get --raw /readyz
  # The API server's client certificate may use the kubelet API (logs,
  # exec, port-forward).
  kc get clusterrolebinding open-bot-kube-apiserver-kubelet >/dev/null 2>&1 ||
    kc create clusterrolebinding open-bot-kube-apiserver-kubelet \
      --clusterrole=system:kubelet-api-admin --user=kube-apiserver-kubelet-client >/dev/null
}

start_controller_manager() {
  launch controller-manager "$KUBE" controller-manager \
    --kubeconfig="$PKI/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$PKI/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$PKI/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file="$PKI/sa.key" \
    --root-ca-file="$PKI/ca.crt" \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --profiling=false \
    --v=1
}

start_scheduler() {
  launch scheduler "$KUBE" scheduler \
    --config="$STATE/scheduler.yaml" \
    --authentication-kubeconfig="$PKI/scheduler.kubeconfig" \
    --authorization-kubeconfig="$PKI/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" \
    --profiling=false \
    --v=1
}

# The cluster's storage: `kube hostpath-provisioner` (tools/kube/hostpath)
# makes the default StorageClass open-bot-local and a directory under
# $STATE/volumes per claim.
start_provisioner() {
  mkdir -p "$STATE/volumes"
  launch hostpath-provisioner "$KUBE" hostpath-provisioner \
    --kubeconfig "$ADMIN_KUBECONFIG" --root "$STATE/volumes"
  wait_for "the default StorageClass" 60 hostpath-provisioner kc get storageclass open-bot-local
}

start_kubelet() {
  mkdir -p "$STATE/kubelet"
  launch kubelet "$KUBE" kubelet \
    --config="$STATE/kubelet.yaml" \
    --kubeconfig="$PKI/kubelet.kubeconfig" \
    --root-dir="$STATE/kubelet" \
    --hostname-override="$NODE_NAME" \
    --node-ip="$NODE_IP" \
    --v=1
}

node_ready() {
  [ "$(kc get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

all_running() {
  local c
  for c in "${COMPONENTS[@]}"; do
    running_pid "$c" >/dev/null || return 1
  done
}

any_running() {
  local c
  for c in "${COMPONENTS[@]}"; do
    running_pid "$c" >/dev/null && return 0
  done
  return 1
}

cmd_start() {
  require_root
  local t0
  t0="$(now)"
  mkdir -p "$STATE" "$RUN/pids" "$LOGS" "$CACHE"
  chmod 700 "$STATE" "$RUN"
  exec 9>"$RUN/.lock"
  # A second start waits for the first, then finds the cluster running.
  flock -w 900 9 || die "another kube.sh start/stop held the lock for 15 minutes"
  if all_running; then
    find_kube || cmd_build
    # Running: never restarted from here (others may be using it); a
    # moment of unreadiness under load is waited out.
    local deadline=$((SECONDS + 60))
    until kc get --raw /readyz >/dev/null 2>&1 && node_ready; do
      [ "$SECONDS" -lt "$deadline" ] ||
        die "the cluster runs but is not healthy after 60s (API server /readyz, node Ready); see $LOGS/, then scripts/kube.sh stop && scripts/kube.sh start"
      sleep 1
    done
    log "already running (admin kubeconfig: $ADMIN_KUBECONFIG)"
    # A computer image rebuilt since: imported now (running pods keep theirs).
    if docker image inspect "$COMPUTER_IMAGE" >/dev/null 2>&1; then
      import_image computer "$COMPUTER_IMAGE" || die "the running cluster's containerd did not take $COMPUTER_IMAGE; scripts/kube.sh stop && scripts/kube.sh start clears its image store"
    fi
    echo "$ADMIN_KUBECONFIG"
    return 0
  fi
  if any_running || [ -n "$(ls -A "$RUN/pids" 2>/dev/null)" ]; then
    log "a partly running or unhealthy cluster is left: stopping it first"
    stop_all
  fi
  ensure_packages
  cmd_build
  # The last run's logs become NAME.log.1 (one generation kept).
  local f
  for f in "$LOGS"/*.log; do
    [ -f "$f" ] && mv -f "$f" "$f.1"
  done
  rm -rf "$LOGS/pods.1"
  [ -d "$LOGS/pods" ] && mv "$LOGS/pods" "$LOGS/pods.1"
  log "logs: $LOGS/"
  # A start that fails leaves nothing running (its logs stay).
  trap 'log "start failed: stopping what it started (logs: $LOGS/)"; stop_all' EXIT

  # A fresh cluster: no certificates, etcd data or kubelet state of a last run.
  cleanup_mounts
  rm -rf "$PKI" "$STATE/etcd" "$STATE/kubelet" "$STATE/volumes" "$ADMIN_KUBECONFIG"
  net_up
  local pref
  pref="docker.io/$(pause_ref)"
  write_containerd_config "$pref"
  start_containerd
  log "containerd up ($(since "$t0")s)"
  # containerd's image store holds only images imported from Docker's: one
  # a killed import or a killed machine left inconsistent (seen: "parent
  # snapshot ... does not exist" after a restart mid-import) is cleared
  # and everything imported again, once.
  if ! import_images; then
    log "clearing containerd's image store ($STATE/containerd) and importing again"
    stop_component containerd 30
    cleanup_mounts
    rm -rf "$STATE/containerd" "$STATE/images"
    start_containerd
    import_images || die "importing the images into a cleared containerd failed too (log: $LOGS/images.log)"
  fi

  "$KUBE" certs --dir "$PKI" --node-name "$NODE_NAME" --node-ip "$NODE_IP" \
    --apiserver "https://127.0.0.1:$API_PORT" --service-ip "$SERVICE_IP" || die "making certificates failed"
  cp "$PKI/admin.kubeconfig" "$ADMIN_KUBECONFIG.tmp"
  chmod 600 "$ADMIN_KUBECONFIG.tmp"
  mv "$ADMIN_KUBECONFIG.tmp" "$ADMIN_KUBECONFIG"
  write_configs

  start_etcd
  log "etcd up ($(since "$t0")s)"
  start_apiserver
  log "kube-apiserver up ($(since "$t0")s)"
  start_controller_manager
  start_scheduler
  start_provisioner
  start_kubelet
  wait_for "node $NODE_NAME Ready" 180 kubelet node_ready
  wait_for "the default service account" 60 controller-manager kc -n default get serviceaccount default
  trap - EXIT
  log "node $NODE_NAME Ready: cluster up in $(since "$t0")s"
  log "admin kubeconfig: $ADMIN_KUBECONFIG   logs: $LOGS/"
  echo "$ADMIN_KUBECONFIG"
}

# --------------------------------------------------------------- stop --

# Unmounts whatever the kubelet and containerd left mounted under our
# directories, deepest first.
cleanup_mounts() {
  local m
  while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "cannot unmount $m"
  done < <(awk -v a="$STATE/" -v b="$RUN/" '{ p = $5; gsub(/\\040/, " ", p) } index(p, a) == 1 || index(p, b) == 1 { print p }' /proc/self/mountinfo | sort -r)
}

# The shims of our containerd (never Docker's): their -address is our socket.
our_shims() {
  local p args
  for p in /proc/[0-9]*; do
    [ -r "$p/cmdline" ] || continue
    args="$({ tr '\0' '\n' <"$p/cmdline"; } 2>/dev/null)" || continue
    case "$args" in
      *containerd-shim*) ;;
      *) continue ;;
    esac
    if grep -qxF -- "$SOCK" <<<"$args"; then
      echo "${p#/proc/}"
    fi
  done
}

stop_all() {
  local had=0
  any_running && had=1
  stop_component kubelet 30
  if running_pid containerd >/dev/null && [ -n "$KUBE" ] && [ -x "$KUBE" ]; then
    "$KUBE" cri-clean --endpoint "unix://$SOCK" --timeout 90s >>"$LOGS/stop.log" 2>&1 ||
      log "removing pod sandboxes reported errors (log: $LOGS/stop.log)"
    # Anything the CRI left (tasks outside pods): kill and delete.
    local t
    for t in $(ctr_ tasks ls -q 2>/dev/null); do
      ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
      ctr_ tasks delete -f "$t" >/dev/null 2>&1 || true
    done
  fi
  stop_component hostpath-provisioner
  stop_component scheduler
  stop_component controller-manager
  # Its graceful termination takes a second or two; a CRD whose conversion
  # webhook has no server can hold it much longer (then KILL: etcd is fine).
  stop_component apiserver 10
  stop_component etcd
  stop_component containerd 30
  local pid
  for pid in $(our_shims); do
    log "killing a shim left by containerd ($pid)"
    kill -KILL "$pid" 2>/dev/null || true
  done
  cleanup_mounts
  net_down
  # The kubelet's cgroups (/kubepods in each hierarchy), now empty.
  find /sys/fs/cgroup/*/kubepods -depth -type d -exec rmdir {} + 2>/dev/null || true
  rm -f "$RUN/pids/"*.pid
  if [ "$had" = 1 ]; then log "stopped"; else log "nothing was running"; fi
}

cmd_stop() {
  require_root
  mkdir -p "$RUN/pids" "$LOGS"
  exec 9>"$RUN/.lock"
  flock -w 300 9 || die "another kube.sh start/stop is running"
  # The binary for cri-clean: a cached one; stop builds nothing.
  find_kube || log "no kube binary cached: pod sandboxes are not removed through the CRI"
  stop_all
}

src_hash_path() { echo "$CACHE/$(src_hash)/kube"; }

# The binary to talk to a running cluster with: the current source's if it
# is built, else whichever build is cached (the cluster may predate an edit).
find_kube() {
  local k
  k="$(src_hash_path)"
  if [ ! -x "$k" ]; then
    for k in "$CACHE"/*/kube; do
      [ -x "$k" ] && break
    done
  fi
  [ -x "$k" ] || return 1
  KUBE="$k"
}

# -------------------------------------------------------------- status --

cmd_status() {
  local c pid up=0
  for c in "${COMPONENTS[@]}"; do
    if pid="$(running_pid "$c")"; then
      printf '%-20s running (pid %s)\n' "$c" "$pid"
      up=$((up + 1))
    else
      printf '%-20s stopped\n' "$c"
    fi
  done
  if [ "$up" = 0 ]; then
    echo "cluster: stopped"
    return 3
  fi
  if find_kube && kc get --raw /readyz >/dev/null 2>&1; then
    echo "api server: https://127.0.0.1:$API_PORT ready; admin kubeconfig: $ADMIN_KUBECONFIG"
    kc get nodes -o wide 2>&1 || true
  else
    echo "api server: not answering"
  fi
  echo "logs: $LOGS/"
  [ "$up" = "${#COMPONENTS[@]}" ] || return 1
}

# ------------------------------------------------------------- restart --

# restart COMPONENT: stops one component and starts it again with the same
# configuration, on the running cluster (the fault tests: a kubelet
# restarted, an API server gone for a while). `pid COMPONENT` prints its pid
# (e.g. for SIGSTOP/SIGCONT).
# component_lock NAME: NAME is a component and the cluster runs; holds the
# start/stop lock on fd 9.
component_lock() {
  require_root
  case "$1" in
    containerd | etcd | apiserver | controller-manager | scheduler | hostpath-provisioner | kubelet) ;;
    *) die "one of ${COMPONENTS[*]}" ;;
  esac
  exec 9>"$RUN/.lock"
  flock -w 300 9 || die "another kube.sh start/stop is running"
  find_kube || die "not built (scripts/kube.sh build)"
}

# stop_one NAME: NAME stopped (the apiserver's grace 10 s, others 30 s).
stop_one() {
  local grace=30
  [ "$1" = apiserver ] && grace=10
  stop_component "$1" "$grace"
}

# start_one NAME: NAME started again (the kubelet: until the node is Ready).
start_one() {
  case "$1" in
    containerd) start_containerd ;;
    etcd) start_etcd ;;
    apiserver) start_apiserver ;;
    controller-manager) start_controller_manager ;;
    scheduler) start_scheduler ;;
    hostpath-provisioner) start_provisioner ;;
    kubelet)
      start_kubelet
      wait_for "node $NODE_NAME Ready" 180 kubelet node_ready
      ;;
  esac
}

cmd_restart() {
  local c="${1:-}"
  component_lock "$c"
  all_running || die "the cluster is not running (scripts/kube.sh start)"
  local t0
  t0="$(now)"
  stop_one "$c"
  start_one "$c"
  log "restarted $c in $(since "$t0")s"
}

# stop-component / start-component: a fault held for as long as a test
# wants (restart is both at once). start-component starts NAME only when it
# is not running.
cmd_stop_component() {
  local c="${1:-}"
  component_lock "$c"
  stop_one "$c"
}

cmd_start_component() {
  local c="${1:-}"
  component_lock "$c"
  if running_pid "$c" >/dev/null; then
    log "$c already runs"
    return 0
  fi
  local t0
  t0="$(now)"
  start_one "$c"
  log "started $c in $(since "$t0")s"
}

# --------------------------------------------------------------- smoke --

# A pod of the computer image run as the docker provider runs it (botd as
# root with the runtime's default capabilities, its token from a root-only
# file, /dev/shm of 1 GiB), reached through the API server's pod proxy.
cmd_smoke() {
  require_root
  if ! { find_kube && all_running && kc get --raw /readyz >/dev/null 2>&1; }; then
    die "the cluster is not running (scripts/kube.sh start)"
  fi
  docker image inspect "$COMPUTER_IMAGE" >/dev/null 2>&1 || die "docker has no $COMPUTER_IMAGE (scripts/build-image.sh)"
  import_image computer "$COMPUTER_IMAGE" || die "containerd did not take $COMPUTER_IMAGE"

  local ns pod=botd token tmp
  ns="smoke-$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n')"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"; kc delete namespace "$ns" --wait=false >/dev/null 2>&1 || true' EXIT
  (umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/botd_token")
  token="$(cat "$tmp/botd_token")"

  local t0
  t0="$(now)"
  kc create namespace "$ns" >/dev/null
  wait_for "service account default in $ns" 60 "" kc -n "$ns" get serviceaccount default
  kc -n "$ns" create secret generic botd-token --from-file=botd_token="$tmp/botd_token" >/dev/null
  kc -n "$ns" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $pod
  labels: { app.kubernetes.io/name: open-bot-computer }
spec:
  hostname: computer
  automountServiceAccountToken: false
  enableServiceLinks: false
  terminationGracePeriodSeconds: 5
  securityContext:
    seccompProfile: { type: RuntimeDefault }
  containers:
    - name: computer
      image: $COMPUTER_IMAGE
      imagePullPolicy: Never
      env:
        - { name: BOTD_TOKEN_FILE, value: /run/secrets/botd_token }
        - { name: MAX_SCREENS, value: "1" }
      ports:
        - { name: botd, containerPort: 7000 }
      # botd runs as root and starts the bot's and the desktop's processes
      # as their users. Measured on this cluster (drop ALL, then add back):
      # without CHOWN, DAC_OVERRIDE or FOWNER botd cannot prepare /home/bot
      # and exits; without SETUID or SETGID it cannot start any process as
      # bot (codex, /exec); without KILL a command of bot's outlives its
      # timeout. The rest of the runtime's default set is not needed for
      # that, nor is privilege escalation (no setuid binaries are used).
      securityContext:
        privileged: false
        allowPrivilegeEscalation: false
        capabilities:
          drop: [ALL]
          add: [CHOWN, DAC_OVERRIDE, FOWNER, SETUID, SETGID, KILL]
      volumeMounts:
        # subPath: the file itself, bind-mounted. A whole secret volume
        # shows its keys as symlinks (botd_token -> ..data/botd_token), and
        # botd opens its token file with O_NOFOLLOW and refuses to start.
        - { name: token, mountPath: /run/secrets/botd_token, subPath: botd_token, readOnly: true }
        - { name: home, mountPath: /home }
        - { name: shm, mountPath: /dev/shm }
  volumes:
    - name: token
      secret: { secretName: botd-token, defaultMode: 0400 }
    - name: home
      emptyDir: {}
    - name: shm
      emptyDir: { medium: Memory, sizeLimit: 1Gi }
EOF
  log "smoke: pod $ns/$pod created; waiting for Running"
  if ! kc -n "$ns" wait --for=jsonpath='{.status.phase}'=Running "pod/$pod" --timeout=180s >/dev/null; then
    kc -n "$ns" describe pod "$pod" >&2 || true
    die "smoke: pod $ns/$pod is not Running after 180s"
  fi
  local t_running
  t_running="$(since "$t0")"
  local path="/api/v1/namespaces/$ns/pods/$pod:7000/proxy/healthz" answer="" deadline=$((SECONDS + 120))
  until answer="$(kc get --raw "$path" 2>/dev/null)" && [ -n "$answer" ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      kc -n "$ns" logs "$pod" --tail=40 >&2 || true
      die "smoke: botd did not answer $path within 120s of Running"
    fi
    sleep 0.2
  done
  local t_answer
  t_answer="$(since "$t0")"
  echo "smoke: GET $path -> $answer"
  echo "smoke: create -> Running ${t_running}s, create -> first answer from botd ${t_answer}s"

  # botd's token-checked API, as the worker reaches it: a port-forward
  # (the API server's proxy drops the Authorization header once it has
  # authenticated the caller, so a bearer token cannot go through it).
  local pf_log="$tmp/port-forward.log" port="" pf_pid
  kc -n "$ns" port-forward "pod/$pod" :7000 --address 127.0.0.1 >"$pf_log" 2>&1 &
  pf_pid=$!
  for _ in $(seq 1 100); do
    port="$(sed -n 's/^Forwarding from 127\.0\.0\.1:\([0-9]*\) -> 7000$/\1/p' "$pf_log" | head -1)"
    [ -n "$port" ] && break
    sleep 0.1
  done
  if [ -z "$port" ]; then
    kill "$pf_pid" 2>/dev/null || true
    cat "$pf_log" >&2
    die "smoke: kubectl port-forward did not start"
  fi
  local health code
  code="$(curl -sS -o "$tmp/health" -w '%{http_code}' --max-time 10 "http://127.0.0.1:$port/health")" || code=fail
  [ "$code" = 401 ] || {
    kill "$pf_pid" 2>/dev/null || true
    die "smoke: /health without the token answered $code, want 401"
  }
  health="$(curl -fsS --max-time 10 -H @<(printf 'Authorization: Bearer %s\n' "$token") "http://127.0.0.1:$port/health")" || {
    kill "$pf_pid" 2>/dev/null || true
    die "smoke: /health with the token failed through the port-forward"
  }
  local ran
  ran="$(curl -fsS --max-time 20 -H @<(printf 'Authorization: Bearer %s\n' "$token") \
    -X POST --data '{"argv":["id","-un"]}' "http://127.0.0.1:$port/exec")" || ran="failed"
  kill "$pf_pid" 2>/dev/null || true
  wait "$pf_pid" 2>/dev/null || true
  echo "smoke: port-forward GET /health without token -> 401; with token -> ${health:0:300}"
  echo "smoke: port-forward POST /exec [id -un] -> ${ran:0:300}"
  [[ "$ran" == *'"stdout":"bot\n"'* ]] || die "smoke: botd did not run a command as bot"

  kc delete namespace "$ns" --wait=true --timeout=120s >/dev/null || die "smoke: deleting namespace $ns failed"
  trap - EXIT
  rm -rf "$tmp"
  echo "smoke: ok (namespace $ns deleted)"
}

# ------------------------------------------------------------------ main --

case "${1:-}" in
  build)
    cmd_build
    echo "$KUBE"
    ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  smoke) cmd_smoke ;;
  restart) cmd_restart "${2:-}" ;;
  stop-component) cmd_stop_component "${2:-}" ;;
  start-component) cmd_start_component "${2:-}" ;;
  pid)
    running_pid "${2:-}" || die "${2:-(none)} is not running"
    ;;
  kubectl)
    shift
    find_kube || die "not built (scripts/kube.sh build)"
    kc "$@"
    ;;
  env) echo "export KUBECONFIG=$ADMIN_KUBECONFIG" ;;
  *) die "usage: scripts/kube.sh build|start|stop|status|smoke|restart|stop-component|start-component COMPONENT|pid COMPONENT|kubectl ARGS...|env" ;;
esac
