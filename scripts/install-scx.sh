#!/usr/bin/env bash
# Builds scx_bpfland, an independent sched_ext scheduler published on
# crates.io, into the lab's cache (~/.cache/vsched/lab/scx/bin/), for
# `vsched bench soak`'s scx_bpfland variant: what sched_ext itself does to
# a guest, apart from anything vsched does. Not part of vsched; its BPF
# object is GPL-2.0 like vsched's own. Takes several minutes the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh >/dev/null  # clang, libelf, zlib: what a libbpf-rs build needs
export PATH="${HOME:-/root}/.cargo/bin:$PATH"
# The version the soak's figures in docs/lab.md were measured with.
version=1.1.4
root="${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/vsched/lab/scx"
if [ -x "$root/bin/scx_bpfland" ] && "$root/bin/scx_bpfland" --version 2>/dev/null | grep -q "$version"; then
  exit 0
fi
cargo install --locked scx_bpfland --version "$version" --root "$root"
