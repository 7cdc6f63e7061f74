#!/usr/bin/env bash
# Builds scx_bpfland, an independent sched_ext scheduler published on
# crates.io, into the lab's cache (~/.cache/vsched/lab/scx/bin/), for
# `vsched bench soak`'s scx_bpfland variant: what sched_ext itself does to
# a guest, apart from anything vsched does. Not part of vsched; its BPF
# object is GPL-2.0 like vsched's own. Takes several minutes the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
# What a libbpf-rs build needs: clang for BPF, libclang for bindgen, libelf, zlib.
need=()
command -v clang-19 >/dev/null 2>&1 || need+=(clang-19)
[ -e /usr/lib/llvm-19/lib/libclang.so ] || need+=(libclang-19-dev)
[ -e /usr/lib/x86_64-linux-gnu/libelf.a ] || need+=(libelf-dev)
[ -e /usr/lib/x86_64-linux-gnu/libz.a ] || need+=(zlib1g-dev)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
export PATH="${HOME:-/root}/.cargo/bin:$PATH"
# The version the soak's figures in docs/lab.md were measured with.
version=1.1.4
root="${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/vsched/lab/scx"
if [ -x "$root/bin/scx_bpfland" ] && "$root/bin/scx_bpfland" --version 2>/dev/null | grep -q "$version"; then
  exit 0
fi
# scx_cargo compiles BPF with $BPF_CLANG (default `clang`, which Debian names clang-19).
BPF_CLANG="${BPF_CLANG:-clang-19}" cargo install --locked scx_bpfland --version "$version" --root "$root"
