#!/usr/bin/env bash
# Unpacks Debian 12's own QEMU 7.2 beside the installed QEMU 10, for
# measuring what the lab requires QEMU 10 for (docs/lab.md, "The
# emulator"): `vsched bench soak --qemu "$(bash bench/old-qemu.sh)"
# --allow-old-qemu`. Installs nothing: the packages are downloaded and
# unpacked under ~/.cache/vsched/lab/qemu-7.2, and a wrapper there runs the
# old binary with its own firmware. Prints the wrapper's path.
set -euo pipefail
dir="${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/vsched/lab/qemu-7.2"
wrapper="$dir/qemu-system-x86_64"
if [ ! -x "$wrapper" ]; then
  mkdir -p "$dir/debs"
  # Debian 12's QEMU, its modules (the TCG accelerator among them) and its
  # firmware, whatever the latest 7.2 build is.
  packages=()
  for p in qemu-system-x86 qemu-system-common qemu-system-data; do
    # awk reads to the end: an early exit would break apt-cache's pipe.
    v=$(apt-cache madison "$p" | awk '$3 ~ /^1:7\.2/ && v == "" {v = $3} END {print v}')
    [ -n "$v" ] || { echo "no QEMU 7.2 ($p) in this host's apt sources" >&2; exit 1; }
    packages+=("$p=$v")
  done
  (cd "$dir/debs" && apt-get download -q "${packages[@]}" >&2)
  for d in "$dir"/debs/*.deb; do dpkg-deb -x "$d" "$dir/root"; done
  cat > "$wrapper" <<WRAP
#!/bin/sh
# Its own accelerator modules: the installed QEMU's do not fit it.
QEMU_MODULE_DIR="$dir/root/usr/lib/x86_64-linux-gnu/qemu" exec "$dir/root/usr/bin/qemu-system-x86_64" -L "$dir/root/usr/share/qemu" -L /usr/share/seabios "\$@"
WRAP
  chmod +x "$wrapper"
fi
echo "$wrapper"
