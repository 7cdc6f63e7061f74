//! Replaying a held spinner's wait loop against the program's current
//! memory: would the thread leave its loop if it ran now?
//!
//! A sample gives the thread's exact user state (IP and general-purpose
//! registers) at a moment it was spinning. Wait loops are a handful of plain
//! instructions (load, compare, branch, PAUSE), so a tiny interpreter can run
//! them from that state, reading the words they poll from the program's
//! memory. Replayed at demotion time, the loop's *waiting path* (the
//! instruction addresses one iteration visits while the condition does not
//! hold) is learnt; replayed later, a path that leaves that set means the
//! condition now holds and the thread should get its vCPU back at once,
//! instead of waiting for a lease to run out.
//!
//! Anything the interpreter does not model (calls, stores, atomics, FS/GS
//! addressing, loops longer than a few hundred instructions) makes the replay
//! *opaque*: the engine then falls back to leases and kicks for that thread.

//!
//! Parts: [`memory`] (where code and data are read), `decode` (the
//! instruction cache), `flags` (condition codes), `interp` (the
//! instructions), `trap_site` (where an entry trap goes).

mod bits;
mod decode;
mod flags;
mod interp;
pub mod memory;
mod trap_site;

use crate::sample::{FLAGS_SLOT, IP_SLOT, NREGS};
use decode::CodeCache;
use flags::is_jcc;
use interp::Cpu;
pub use memory::{Memory, ProcessMemory, Snapshot, Word};
use trap_site::trap_site;

/// The outcome of one replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replay {
    /// Two passes through the start address without leaving `path` (sorted
    /// instruction addresses): the thread would still be waiting.
    Waiting {
        path: Vec<u64>,
        /// Where to catch the thread entering this wait (see `trap_site`).
        trap_at: u64,
    },
    /// The replay reached an address outside the known waiting path (or,
    /// without one, went further from the start than any wait loop spans):
    /// the thread's wait is over.
    Leaves,
    /// A loop, but not a wait: it reads no memory, or its iterations move
    /// more than one register (a wait may count its iterations; computation
    /// moves indices, pointers and accumulators).
    Progressing,
    /// Something the interpreter does not model.
    Opaque,
}

/// Longest replay, in instructions: two iterations of a loop of up to 128,
/// far more than any wait loop (a handful); longer is not a wait.
const MAX_STEPS: usize = 256;

/// How far (bytes) from the sampled instruction a replay that is learning
/// a loop (no known waiting path) may go before it counts as having left
/// the loop. Measured from that one address, and covering the loop's
/// out-of-line parts (a slow path the compiler placed apart, like the 64-bit
/// division of the ring's `turn % n`), so wider than the detector's
/// `detector::EPISODE_REACH_BYTES`, which is measured from every address
/// seen spinning and only has to cover where samples land. Too narrow and a
/// real wait replays as over (its thread is never stopped); too wide costs
/// only steps, which `MAX_STEPS` bounds.
const REPLAY_REACH_BYTES: u64 = 256;

/// Instructions of one iteration the path is sized for: a wait loop has a
/// handful; longer ones grow the vector.
const PATH_CAPACITY: usize = 32;

/// Replays wait loops, decoding and caching the program's instructions.
#[derive(Default)]
pub struct Replayer {
    code: CodeCache,
}

impl Replayer {
    pub fn new() -> Replayer {
        Replayer::default()
    }

    /// Runs the loop from a sampled state. With `known_path`, stops with
    /// [`Replay::Leaves`] as soon as it reaches an address outside it.
    pub fn replay(
        &mut self,
        mem: &mut impl Memory,
        ip: u64,
        regs: &[u64; NREGS],
        known_path: Option<&[u64]>,
    ) -> Replay {
        self.run(mem, ip, regs, known_path).0
    }

    /// Whether two samples taken at the same address `ip` are in the same
    /// wait: both replay as waits, and one iteration from each ends in the
    /// same registers. They may differ in registers the loop overwrites from
    /// memory before reading them (a polled turn counter that moved on
    /// between the samples), never in ones it carries from one iteration to
    /// the next (a pointer being chased, an index, an accumulator).
    /// None: undecided, because the wait is over by now.
    pub fn same_wait(
        &mut self,
        mem: &mut impl Memory,
        ip: u64,
        a: &[u64; NREGS],
        b: &[u64; NREGS],
    ) -> Option<bool> {
        let mut after = [[0u64; NREGS]; 2];
        for (regs, out) in [a, b].into_iter().zip(after.iter_mut()) {
            match self.run(mem, ip, regs, None) {
                (Replay::Waiting { .. }, Some(r)) => *out = r,
                (Replay::Leaves, _) => return None,
                _ => return Some(false),
            }
        }
        // FLAGS aside: a compare's flags follow from the registers.
        Some((0..NREGS).all(|i| i == FLAGS_SLOT || after[0][i] == after[1][i]))
    }

    /// The replay, and the registers after its first iteration (if it
    /// completed one).
    fn run(
        &mut self,
        mem: &mut impl Memory,
        ip: u64,
        regs: &[u64; NREGS],
        known_path: Option<&[u64]>,
    ) -> (Replay, Option<[u64; NREGS]>) {
        let mut cpu = Cpu::new(regs);
        let mut at = ip;
        let mut passes = 0;
        let mut first_pass = [0u64; NREGS];
        let mut path: Vec<u64> = Vec::with_capacity(PATH_CAPACITY);
        // Conditional branches of the first pass, with the way not taken.
        let mut branches: Vec<(u64, u64)> = Vec::new();
        for _ in 0..MAX_STEPS {
            if let Some(known) = known_path {
                if known.binary_search(&at).is_err() {
                    return (Replay::Leaves, None);
                }
            } else if at.abs_diff(ip) > REPLAY_REACH_BYTES {
                return (Replay::Leaves, None);
            } else if !path.contains(&at) {
                path.push(at);
            }
            let Some(insn) = self.code.decode(mem, at) else {
                return (Replay::Opaque, None);
            };
            // A loop's closing branch jumps back; falling through it to an
            // address past everything the loop visited leaves the loop.
            // (Backward branches inside a loop fall through into it.)
            let closing = known_path.is_none()
                && is_jcc(insn.mnemonic())
                && insn.near_branch_target() <= at
                && insn.next_ip() > ip
                && path.iter().all(|&p| p < insn.next_ip());
            let from = at;
            match cpu.step(&insn, mem) {
                Some(next) if closing && next == insn.next_ip() => return (Replay::Leaves, None),
                Some(next) => at = next,
                None => return (Replay::Opaque, None),
            }
            if passes == 0 && is_jcc(insn.mnemonic()) {
                let other = if at == insn.next_ip() {
                    insn.near_branch_target()
                } else {
                    insn.next_ip()
                };
                branches.push((from, other));
            }
            if at == ip {
                passes += 1;
                if passes == 1 {
                    first_pass = cpu.regs;
                    cpu.loads = 0;
                } else {
                    // Registers moved by one whole iteration (IP and FLAGS aside).
                    let moved = (0..NREGS)
                        .filter(|&i| {
                            i != IP_SLOT && i != FLAGS_SLOT && cpu.regs[i] != first_pass[i]
                        })
                        .count();
                    if cpu.loads == 0 || moved > 1 {
                        return (Replay::Progressing, None);
                    }
                    let trap_at = trap_site(&path, &branches);
                    path.sort_unstable();
                    return (Replay::Waiting { path, trap_at }, Some(first_pass));
                }
            }
        }
        (Replay::Opaque, None)
    }
}

#[cfg(test)]
mod tests;
