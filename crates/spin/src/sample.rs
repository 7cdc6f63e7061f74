//! One cpu-clock sample of a thread: where it was and what its registers held.

use serde::{Deserialize, Serialize};

/// General-purpose registers per sample (see `perf::REGS_MASK` for which).
pub const NREGS: usize = 18;
/// Where the instruction pointer sits in [`Sample::regs`] (perf's order).
pub const IP_SLOT: usize = 8;
/// Where RFLAGS sits in [`Sample::regs`] (perf's order).
pub const FLAGS_SLOT: usize = 9;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    /// CLOCK_MONOTONIC, ns (`vsched_os::clock::monotonic_ns`'s clock).
    pub time_ns: u64,
    pub tid: i32,
    /// User-mode instruction pointer.
    pub ip: u64,
    /// Registers in perf order: AX BX CX DX SI DI BP SP IP FLAGS R8..R15.
    pub regs: [u64; NREGS],
    /// The thread was executing a PAUSE (spin-wait hint) at this point;
    /// filled in from the program's code, not by perf.
    #[serde(default)]
    pub after_pause: bool,
}

impl Sample {
    /// The thread's whole user-visible register state, hashed. Two equal
    /// signatures at different times mean no general-purpose register moved:
    /// code that makes progress (indices, pointers, accumulators) never
    /// repeats a state; a wait loop repeats one on every iteration.
    pub fn signature(&self) -> u64 {
        // FNV-1a over the words: cheap, and collisions only cost one sample.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for w in std::iter::once(self.ip).chain(self.regs.iter().copied()) {
            h ^= w;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h
    }
}
