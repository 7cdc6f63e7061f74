//! The channel between vsched's runtime and its scheduler, as Rust sees
//! it: where the scheduler pins it and its layout (version 2), mirroring
//! crates/sched/src/bpf/intf.h, where it is defined and explained.
//! A test in crates/sched/src/channel.rs checks this mirror against the
//! bindings generated from that header, field by field.

/// Where `vsched sched` pins the channel's map while it runs (bpffs).
pub const PIN: &str = "/sys/fs/bpf/vsched/channel";
/// The same, NUL-terminated, for the runtime's raw bpf(2) call.
pub const PIN_C: &core::ffi::CStr = c"/sys/fs/bpf/vsched/channel";

/// "vsch" (intf.h VS_CHANNEL_MAGIC).
pub const MAGIC: u32 = 0x6863_7376;
/// The layout this mirror describes (intf.h VS_CHANNEL_VERSION).
pub const VERSION: u32 = 2;
/// Slots, one per thread id modulo this (intf.h VS_CHANNEL_SLOTS).
pub const SLOTS: usize = 4096;

/// intf.h `struct vs_channel_header`.
#[repr(C)]
#[derive(Debug)]
pub struct Header {
    pub magic: u32,
    pub version: u32,
    pub slots: u32,
    pub live: u32,
    pub marked: u32,
    pub reserved: [u32; 11],
}

/// intf.h `struct vs_channel_slot`.
#[repr(C)]
#[derive(Debug)]
pub struct Slot {
    pub tid: u32,
    pub waiting: u32,
    /// Written by the scheduler: the CPU the thread runs on plus one.
    pub on_cpu: u32,
    /// Written by the scheduler: its vCPU's switch-offs while it ran.
    pub switch_offs: u32,
    /// Written by the scheduler: when its slice ends (ns, monotonic).
    pub slice_end_ns: u64,
    /// Written by the scheduler: its vCPU's predicted switch-off.
    pub switch_off_ns: u64,
    /// Written by the thread: it reads the four fields above.
    pub wants_run: u32,
    pub reserved: [u32; 7],
}

/// intf.h `struct vs_channel`: the map's one value, which is what a
/// mapping of the map holds from its first byte.
#[repr(C)]
pub struct Channel {
    pub header: Header,
    pub slots: [Slot; SLOTS],
}

/// Bytes a mapping of the channel covers.
pub const SIZE: usize = core::mem::size_of::<Channel>();

/// The slot a thread id uses.
pub fn slot_of(tid: u32) -> usize {
    tid as usize % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_one_cache_line_and_the_header_another() {
        assert_eq!(core::mem::size_of::<Slot>(), 64);
        assert_eq!(core::mem::size_of::<Header>(), 64);
        assert_eq!(SIZE, 64 * (SLOTS + 1));
    }

    #[test]
    fn the_pin_path_and_its_c_form_agree() {
        assert_eq!(PIN_C.to_str().unwrap(), PIN);
    }
}
