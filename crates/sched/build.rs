//! Compiles src/bpf/main.bpf.c with clang (BPF target) against the sched_ext
//! headers and vmlinux.h that scx_cargo bundles, and generates the Rust
//! skeleton (bpf_skel.rs) and the shared definitions of intf.h (bpf_intf.rs).
//!
//! Set BPF_CLANG to choose the compiler; scripts/test.sh and
//! scripts/install.sh point it at Debian's clang-19.

fn main() {
    scx_cargo::BpfBuilder::new()
        .expect("setting up the BPF build (is clang installed? see BPF_CLANG)")
        .enable_intf("src/bpf/intf.h", "bpf_intf.rs")
        .enable_skel("src/bpf/main.bpf.c", "bpf")
        .build()
        .expect("building the BPF scheduler");
    // Every part the BPF side includes (main.bpf.c, *.bpf.h, policy.h).
    println!("cargo:rerun-if-changed=src/bpf");
}
