#!/usr/bin/env bash
# provision.sh — make this Debian machine (or image) an open-bot computer.
#
# Idempotent: every step checks before it changes anything, so a second run on
# a provisioned machine only verifies (target: under 10 s). Used by the
# Dockerfile and by CI on a bare Debian host. Needs root, no standard input.
set -euo pipefail

CODEX_VERSION="${CODEX_VERSION:-0.171.0}"
BOTS_GID=1100
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root_dir="$(cd "$here/.." && pwd)"
export DEBIAN_FRONTEND=noninteractive

log() { printf 'provision: %s\n' "$*" >&2; }

if [ "$(id -u)" != 0 ]; then
  echo "provision.sh must run as root" >&2
  exit 1
fi

packages=(
  # the desktop
  xvfb xfce4-session xfwm4 xfce4-panel xfdesktop4 thunar xfce4-terminal mousepad
  dbus-x11 x11-utils x11-xserver-utils
  # the tools botd drives it with
  xdotool scrot x11vnc xauth novnc
  # the browser and its fonts
  chromium fonts-noto-core fonts-noto-cjk fonts-noto-color-emoji
  # everyday command-line tools for the teammates
  git jq ripgrep python3 curl zip unzip ca-certificates procps psmisc iproute2
  util-linux tini bubblewrap
  # Node.js for the Codex CLI from npm
  nodejs npm
)
# Building botd on this machine (CI, `make run` on a host) needs cgo and the
# static libturbojpeg; the image builds botd in its own stage and skips these.
if [ "${PROVISION_BUILD_TOOLS:-1}" = 1 ]; then
  packages+=(libturbojpeg0-dev gcc libc6-dev make)
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

# Codex CLI, pinned.
have_codex="$(codex --version 2>/dev/null | awk '{print $NF}' || true)"
if [ "$have_codex" != "$CODEX_VERSION" ]; then
  log "installing @openai/codex@$CODEX_VERSION"
  npm install -g --no-fund --no-audit "@openai/codex@$CODEX_VERSION" >/dev/null
fi

# Group and users.
if ! getent group bots >/dev/null; then
  groupadd -g "$BOTS_GID" bots
fi
for u in desktop bot; do
  if ! id "$u" >/dev/null 2>&1; then
    useradd -m -s /bin/bash -G bots "$u"
  elif ! id -nG "$u" | tr ' ' '\n' | grep -qx bots; then
    usermod -aG bots "$u"
  fi
done

# rootfs over /.
if [ -d "$root_dir/rootfs" ]; then
  cp -a --no-preserve=ownership "$root_dir/rootfs/." /
fi

log "ok"
