#!/usr/bin/env bash
# Runs vsched's whole test suite, installing what it needs first.
# Needs root (or CAP_SYS_NICE) for the noisy-neighbour tests, which create a
# SCHED_FIFO neighbour on a vCPU.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
command -v cargo >/dev/null 2>&1 || [ -x "$HOME/.cargo/bin/cargo" ] || need_apt+=(cargo rustc)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "== installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}"
fi
export PATH="$HOME/.cargo/bin:$PATH"

echo "== cargo $(cargo --version)"
echo "== build"
cargo build --release --workspace --all-targets
echo "== tests"
# Integration tests serialise themselves (they probe the whole machine).
cargo test --release --workspace --all-targets
