#!/usr/bin/env bash
# provision.sh — make this Debian machine (or image) an open-bot computer.
#
# Idempotent: every step checks before it changes anything, so a second run on
# a provisioned machine only verifies (target: under 10 s). Used by the
# Dockerfile and by CI on a bare Debian host. Needs root, no standard input.
#
#   provision.sh          the whole computer: desktop, browser, Codex, users,
#                         rootfs, and (unless PROVISION_BUILD_TOOLS=0) what
#                         building needs
#   provision.sh --build  only what building the project and its image needs
#                         on this host (cgo, libturbojpeg, make, debootstrap):
#                         `make image` and `make run` with the docker provider
set -euo pipefail
only_build=0
case "${1:-}" in
--build) only_build=1 ;;
"") ;;
*)
  echo "usage: provision.sh [--build]" >&2
  exit 2
  ;;
esac

CODEX_VERSION="${CODEX_VERSION:-0.171.0}"
BOTS_GID=1100
# Fixed ids above useradd's UID_MAX (60000), so no host user is ever given
# desktop's or bot's uid (a host user sharing it could read what they read).
DESKTOP_UID=60100
BOT_UID=60101
BOTD_HOME="${BOTD_HOME:-/home}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root_dir="$(cd "$here/.." && pwd)"
export DEBIAN_FRONTEND=noninteractive

log() { printf 'provision: %s\n' "$*" >&2; }

if [ "$(id -u)" != 0 ]; then
  echo "provision.sh must run as root" >&2
  exit 1
fi

# Building on this machine (CI, `make test`, `make run`, `make image`) needs
# cgo and the static libturbojpeg, make, and debootstrap (the image's base is
# made from Debian's packages where no registry answers); the image builds
# botd on the host and skips these (PROVISION_BUILD_TOOLS=0). socat is
# `make bench`'s naive relay, the baseline egress is measured against. protoc
# (with the well-known .proto files) is only for `go generate` of the E2B envd
# client (apps/worker/internal/providers/e2b/envd); building uses the
# checked-in code.
build_packages=(libturbojpeg0-dev gcc libc6-dev make debootstrap socat protobuf-compiler libprotobuf-dev)
packages=(
  # the desktop
  xvfb xfce4-session xfwm4 xfce4-panel xfdesktop4 thunar xfce4-terminal mousepad
  dbus-x11 x11-utils x11-xserver-utils
  # desktop elements: each screen's accessibility bus (the session bus
  # activates at-spi-bus-launcher) and GTK's bridge onto it
  at-spi2-core libatk-adaptor
  # the tools botd drives it with
  xdotool scrot x11vnc xauth novnc xclip
  # screen recordings (x11grab to H.264 in fragmented MP4)
  ffmpeg
  # the browser and its fonts
  chromium fonts-noto-core fonts-noto-cjk fonts-noto-color-emoji
  # everyday command-line tools for the teammates
  git jq ripgrep python3 curl zip unzip ca-certificates procps psmisc iproute2
  util-linux tini bubblewrap
  # Node.js for the Codex CLI from npm
  nodejs npm
)
if [ "$only_build" = 1 ]; then
  packages=("${build_packages[@]}")
elif [ "${PROVISION_BUILD_TOOLS:-1}" = 1 ]; then
  packages+=("${build_packages[@]}")
fi

# One dpkg-query for all of them keeps a re-run fast.
installed="$(dpkg-query -W -f='${Package} ${Status}\n' "${packages[@]}" 2>/dev/null | awk '/install ok installed/ {print $1}' || true)"
missing=()
for p in "${packages[@]}"; do
  grep -qx "$p" <<<"$installed" || missing+=("$p")
done
# node/npm may come from elsewhere on a developer machine (e.g. NodeSource).
if command -v npm >/dev/null 2>&1; then
  tmp=()
  for p in "${missing[@]}"; do [ "$p" = npm ] || [ "$p" = nodejs ] || tmp+=("$p"); done
  missing=("${tmp[@]}")
fi
if [ "${#missing[@]}" -gt 0 ]; then
  log "installing ${missing[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ "$only_build" = 1 ]; then
  log "ok (build tools)"
  exit 0
fi

# Codex CLI, pinned.
have_codex="$(codex --version 2>/dev/null | awk '{print $NF}' || true)"
if [ "$have_codex" != "$CODEX_VERSION" ]; then
  log "installing @openai/codex@$CODEX_VERSION"
  npm install -g --no-fund --no-audit "@openai/codex@$CODEX_VERSION" >/dev/null
fi
# Codex's native binary exec-only (group and others lose read): a process
# its user cannot read is not dumpable, so the bot can kill its Codex but never
# take its stdin/stdout (pidfd_getfd) or memory. botd makes it so too, but
# here the image gets it in its package layer (in a container botd's chmod
# would copy the binary into every container's writable layer).
while IFS= read -r -d '' native; do
  chmod go-r "$native"
done < <(find "$(npm root -g)/@openai/codex" -path '*/bin/codex' -type f -print0 2>/dev/null)

# Group and users, with fixed ids. A user or group made earlier with other
# ids is migrated (usermod/groupmod), and what it owned under BOTD_HOME is
# handed over to the new id.
migrate_owner() { # flag old new
  [ -d "$BOTD_HOME" ] && find "$BOTD_HOME" -xdev "$1" "$2" -exec "${3}" -h "$4" {} + 2>/dev/null || true
}
cur_gid="$(getent group bots | cut -d: -f3 || true)"
if [ -z "$cur_gid" ]; then
  groupadd -g "$BOTS_GID" bots
elif [ "$cur_gid" != "$BOTS_GID" ]; then
  log "moving group bots from gid $cur_gid to $BOTS_GID"
  groupmod -g "$BOTS_GID" bots
  migrate_owner -gid "$cur_gid" chgrp "$BOTS_GID"
fi
for pair in "desktop:$DESKTOP_UID" "bot:$BOT_UID"; do
  u="${pair%%:*}" want="${pair##*:}"
  if ! id "$u" >/dev/null 2>&1; then
    getent group "$u" >/dev/null || groupadd -g "$want" "$u"
    useradd -m -s /bin/bash -u "$want" -g "$u" -G bots "$u"
    continue
  fi
  old_uid="$(id -u "$u")" old_gid="$(id -g "$u")"
  if [ "$old_uid" != "$want" ]; then
    log "moving user $u from uid $old_uid to $want"
    # usermod refuses while $u runs processes: stop botd first.
    if ! usermod -u "$want" "$u"; then
      echo "provision.sh: cannot move $u to uid $want while it runs processes; stop botd (and anything running as $u) and run provision.sh again" >&2
      exit 1
    fi
    migrate_owner -uid "$old_uid" chown "$want"
  fi
  if [ "$(getent group "$u" | cut -d: -f3)" = "$old_gid" ] && [ "$old_gid" != "$want" ] && ! getent group "$want" >/dev/null; then
    log "moving group $u from gid $old_gid to $want"
    groupmod -g "$want" "$u"
    migrate_owner -gid "$old_gid" chgrp "$want"
  fi
  if ! id -nG "$u" | tr ' ' '\n' | grep -qx bots; then
    usermod -aG bots "$u"
  fi
done

# rootfs over /.
if [ -d "$root_dir/rootfs" ]; then
  cp -a --no-preserve=ownership "$root_dir/rootfs/." /
fi

log "ok"
