#!/usr/bin/env bash
# Installs what building vsched needs (from Debian when missing) and builds
# it: ./target/release/vsched. The README's main command runs this first.
#
# Build dependencies beyond Rust: a C compiler (the preloaded runtime's C
# tests), and for the sched_ext scheduler (crates/sched) clang-19 to compile
# BPF, libclang for bindgen, and libelf/zlib to link libbpf statically.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
command -v clang-19 >/dev/null 2>&1 || need_apt+=(clang-19)
[ -e /usr/lib/llvm-19/lib/libclang.so ] || need_apt+=(libclang-19-dev)
[ -e /usr/lib/x86_64-linux-gnu/libelf.a ] || need_apt+=(libelf-dev)
[ -e /usr/lib/x86_64-linux-gnu/libz.a ] || need_apt+=(zlib1g-dev)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)
command -v cargo >/dev/null 2>&1 || [ -x "${HOME:-/root}/.cargo/bin/cargo" ] || need_apt+=(cargo rustc)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "vsched: needs these Debian packages: ${need_apt[*]}; run as root or install them" >&2
    exit 1
  fi
  echo "== installing ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi
export PATH="${HOME:-/root}/.cargo/bin:$PATH"

echo "== build ($(cargo --version))"
cargo build --release "$@"
