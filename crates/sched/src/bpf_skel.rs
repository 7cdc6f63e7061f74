//! The skeleton libbpf-cargo generated for src/bpf/main.bpf.c (build.rs).
#![allow(clippy::all, clippy::undocumented_unsafe_blocks)]
include!(concat!(env!("OUT_DIR"), "/bpf_skel.rs"));
