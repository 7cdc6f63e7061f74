//! The channel between vsched's runtime and its scheduler, as Rust sees
//! it: where the scheduler pins it and its layout (version 3), mirroring
//! crates/sched/src/bpf/intf.h, where it is defined and explained.
//! A test in crates/sched/src/channel.rs checks this mirror against the
//! bindings generated from that header, field by field.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// Where `vsched sched` pins the channel's map while it runs (bpffs).
pub const PIN: &str = "/sys/fs/bpf/vsched/channel";
/// The same, NUL-terminated, for the runtime's raw bpf(2) call.
pub const PIN_C: &core::ffi::CStr = c"/sys/fs/bpf/vsched/channel";

/// "vsch" (intf.h VS_CHANNEL_MAGIC).
pub const MAGIC: u32 = 0x6863_7376;
/// The layout this mirror describes (intf.h VS_CHANNEL_VERSION).
pub const VERSION: u32 = 3;
/// Slots, one per thread id modulo this (intf.h VS_CHANNEL_SLOTS).
pub const SLOTS: usize = 4096;

/// intf.h `struct vs_channel_header`. The fields others change while a
/// mapping is held are atomics (same size and alignment as the C words),
/// so that a reference to the mapping never claims they stay put; the
/// first three are written once, before the map is pinned.
#[repr(C)]
#[derive(Debug)]
pub struct Header {
    pub magic: u32,
    pub version: u32,
    pub slots: u32,
    pub live: AtomicU32,
    pub marked: AtomicU32,
    pub reserved: [u32; 11],
}

/// intf.h `struct vs_channel_slot`: every field is shared with the
/// scheduler or another thread, hence atomic.
#[repr(C)]
#[derive(Debug)]
pub struct Slot {
    pub tid: AtomicU32,
    pub waiting: AtomicU32,
    /// Written by the scheduler: the CPU the thread runs on plus one.
    pub on_cpu: AtomicU32,
    /// Written by the scheduler: its vCPU's switch-offs while it ran.
    pub switch_offs: AtomicU32,
    /// Written by the scheduler: when its slice ends (ns, monotonic).
    pub slice_end_ns: AtomicU64,
    /// Written by the scheduler: its vCPU's predicted switch-off.
    pub switch_off_ns: AtomicU64,
    /// Written by the thread: it reads the four fields above.
    pub wants_run: AtomicU32,
    /// Written by the spin detector: it found the thread spinning; cleared
    /// by the scheduler when it next runs the thread.
    pub spinning: AtomicU32,
    pub reserved: [u32; 6],
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

/// bpf(2)'s BPF_OBJ_GET: the pinned map's file descriptor.
const BPF_OBJ_GET: libc::c_long = 7;

/// The part of `union bpf_attr` BPF_OBJ_GET reads (uapi linux/bpf.h).
#[repr(C)]
struct ObjGetAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
}

/// The initial pid namespace's inode (the kernel's PROC_PID_INIT_INO), as
/// /proc/self/ns/pid names it: the scheduler compares slots' tids with the
/// kernel's pids, which only threads of this namespace see as their tids.
const INITIAL_PID_NS: &[u8] = b"pid:[4026531836]";

/// Whether this process's thread ids are the kernel's (no pid namespace).
fn in_initial_pid_namespace() -> bool {
    let mut buf = [0u8; 32];
    // SAFETY: readlinkat into a local buffer of the length given.
    let n = unsafe {
        libc::syscall(
            libc::SYS_readlinkat,
            libc::AT_FDCWD,
            c"/proc/self/ns/pid".as_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    n > 0 && buf.get(..n as usize) == Some(INITIAL_PID_NS)
}

/// Maps the pinned channel read-write, checking its header; None if it is
/// absent, not a channel of this layout, its scheduler no longer runs (a
/// pin a killed loader left), or this process is in a pid namespace of
/// its own (its thread ids are not the ones the scheduler compares).
/// Raw system calls only, and nothing that is a cancellation point: the
/// preloaded runtime calls this from inside waits. May change errno (the
/// runtime saves it around the call). The mapping is the caller's to
/// unmap (`libc::munmap(p, SIZE)`).
pub fn map_pinned() -> Option<core::ptr::NonNull<Channel>> {
    if !in_initial_pid_namespace() {
        return None;
    }
    let attr = ObjGetAttr {
        pathname: PIN_C.as_ptr() as u64,
        bpf_fd: 0,
        file_flags: 0,
    };
    // SAFETY: attr is a valid BPF_OBJ_GET argument of the size passed; the
    // path it points to is a static C string.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET,
            &attr as *const ObjGetAttr,
            core::mem::size_of::<ObjGetAttr>(),
        )
    };
    if fd < 0 {
        return None;
    }
    let fd = fd as i32;
    // SAFETY: a shared mapping of the map's memory (BPF_F_MMAPABLE), no
    // address given; the result is checked before use.
    let p = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    // SAFETY: fd is this call's own descriptor; the mapping keeps the map.
    // The raw system call: glibc's close() is a cancellation point.
    unsafe { libc::syscall(libc::SYS_close, fd) };
    if p == libc::MAP_FAILED {
        return None;
    }
    let ch = p.cast::<Channel>();
    // SAFETY: the mapping is SIZE bytes long and page-aligned; magic,
    // version and slots are plain words because the scheduler writes them
    // once, before it pins the map.
    let h = unsafe { &(*ch).header };
    let live = h.live.load(Relaxed);
    if h.magic != MAGIC || h.version != VERSION || h.slots as usize != SLOTS || live == 0 {
        // SAFETY: this call's own mapping.
        unsafe { libc::munmap(p, SIZE) };
        return None;
    }
    core::ptr::NonNull::new(ch)
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
