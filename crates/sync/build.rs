// Compiles the C helpers that make waits cancellation points (see csrc/cancel.c).
fn main() {
    println!("cargo:rerun-if-changed=csrc/cancel.c");
    cc::Build::new()
        .file("csrc/cancel.c")
        .flag("-fexceptions")
        .flag("-pthread")
        .compile("vsched_cancel");
}
