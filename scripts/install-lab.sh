#!/usr/bin/env bash
# Installs what the VM lab needs: QEMU 10 or newer (older QEMU crashes
# guests that load a sched_ext scheduler; docs/lab.md, "The emulator"), a
# static busybox for the guests, and mmdebstrap, which builds the root of
# Debian guests (layouts with root = "debian", e.g. the package's check
# under systemd). scripts/test.sh runs it; run it yourself
# before `vsched lab` or `vsched bench sched` on a new machine (as root).
#
# Debian 13 and later carry QEMU 10 themselves. On Debian 12 QEMU 10 comes
# from bookworm-backports, installed through a private apt configuration
# (its own source list and package lists in a temporary directory), so the
# host's apt sources stay as they were: later upgrades follow bookworm.
set -euo pipefail

min_major=10

# The installed QEMU's major version; 0 when there is none or it says no
# version we can read.
qemu_major() {
  local m=""
  if command -v qemu-system-x86_64 >/dev/null 2>&1; then
    m=$(qemu-system-x86_64 --version 2>/dev/null | sed -n '1s/.*version \([0-9]*\)\..*/\1/p' || true)
  fi
  echo "${m:-0}"
}

apt_install() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

have_busybox() { [ -x /bin/busybox ] || [ -x /usr/bin/busybox ]; }
have_mmdebstrap() { command -v mmdebstrap >/dev/null 2>&1; }
if have_busybox && have_mmdebstrap && [ "$(qemu_major)" -ge "$min_major" ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "vsched: the lab needs QEMU $min_major+, busybox-static and mmdebstrap; installing them needs root" >&2
  exit 1
fi

if ! have_busybox || ! have_mmdebstrap; then
  apt-get update -qq
  apt_install busybox-static mmdebstrap
fi

if [ "$(qemu_major)" -ge "$min_major" ]; then
  exit 0
fi

. /etc/os-release
if [ "${ID:-}" = debian ] && [ "${VERSION_ID:-}" = 12 ]; then
  echo "== installing QEMU $min_major+ from bookworm-backports (private apt configuration)"
  private=$(mktemp -d)
  chmod 755 "$private"  # apt downloads as its own user, _apt
  trap 'rm -rf "$private"' EXIT
  mkdir -p "$private/lists/partial"
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  cat > "$private/sources.list" <<LIST
deb [signed-by=$keyring] http://deb.debian.org/debian bookworm main
deb [signed-by=$keyring] http://deb.debian.org/debian bookworm-updates main
deb [signed-by=$keyring] http://deb.debian.org/debian-security bookworm-security main
deb [signed-by=$keyring] http://deb.debian.org/debian bookworm-backports main
LIST
  apt_opts=(-o "Dir::Etc::SourceList=$private/sources.list"
            -o "Dir::Etc::SourceParts=$private/no-parts"
            -o "Dir::State::Lists=$private/lists")
  apt-get "${apt_opts[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive apt-get "${apt_opts[@]}" install -y -qq \
    --no-install-recommends -t bookworm-backports qemu-system-x86
else
  echo "== installing qemu-system-x86"
  apt-get update -qq
  apt_install qemu-system-x86
fi

if [ "$(qemu_major)" -lt "$min_major" ]; then
  echo "vsched: QEMU is still older than $min_major ($(qemu-system-x86_64 --version | head -1));" \
       "install QEMU $min_major or newer from your distribution's backports" >&2
  exit 1
fi
qemu-system-x86_64 --version | head -1
