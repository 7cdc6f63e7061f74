//! src/bpf/intf.h as bindgen translated it (build.rs): the definitions the
//! BPF side and this crate share.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code
)]
#![allow(clippy::all)]
include!(concat!(env!("OUT_DIR"), "/bpf_intf.rs"));
