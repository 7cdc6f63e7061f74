//! Replaying a demoted spinner's wait loop against the program's current
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

use crate::sample::NREGS;
use iced_x86::{ConditionCode, Decoder, DecoderOptions, Instruction, Mnemonic, OpKind, Register};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Hashes instruction addresses for the decode cache: one multiply (the
/// default SipHash showed up in the detector's profile; addresses need no
/// protection from crafted collisions).
#[derive(Default)]
pub struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Where code and data come from (the live process, or a test's bytes).
pub trait Memory {
    /// Fills `buf` from address `addr`; false if it is not readable.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool;
}

/// Another process's memory, read with process_vm_readv (a pread of
/// /proc/PID/mem allocates a bounce page per call: several times slower).
pub struct ProcessMemory {
    pid: i32,
}

impl ProcessMemory {
    /// None if the process's memory cannot be read (it is gone, or ptrace
    /// access is denied).
    pub fn open(pid: i32) -> Option<ProcessMemory> {
        let mem = ProcessMemory { pid };
        // Probe with the process's own entry point, always mapped.
        let auxv = std::fs::read(format!("/proc/{pid}/auxv")).ok()?;
        let entry = auxv
            .chunks_exact(16)
            .map(|c| {
                let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().expect("8 bytes"));
                (word(&c[..8]), word(&c[8..]))
            })
            .find(|&(key, _)| key == libc::AT_ENTRY)?
            .1;
        let mut probe = [0u8; 1];
        let mut mem = mem;
        mem.read(entry, &mut probe).then_some(mem)
    }
}

impl Memory for ProcessMemory {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: local describes buf, which is writable for its length; the
        // kernel checks the remote range itself.
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        n == buf.len() as isize
    }
}

/// A word of the program's memory a replay read, and what it held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Word {
    pub addr: u64,
    pub len: usize,
    pub value: [u8; 8],
}

/// Reads of at most 8 bytes, remembered: one check of all watched threads
/// reads each polled word once, and every replay sees the same value.
pub struct Snapshot<'a, M: Memory> {
    inner: &'a mut M,
    words: Vec<Word>,
    /// Words read since the last [`Snapshot::take_touched`].
    touched: Vec<Word>,
}

impl<'a, M: Memory> Snapshot<'a, M> {
    pub fn new(inner: &'a mut M) -> Self {
        Snapshot {
            inner,
            words: Vec::new(),
            touched: Vec::new(),
        }
    }

    /// Takes values read elsewhere (a batched read) as this snapshot's.
    pub fn prefill(&mut self, words: impl IntoIterator<Item = Word>) {
        self.words.extend(words);
    }

    /// The words read since the previous call: what the last replay depends on.
    pub fn take_touched(&mut self) -> Vec<Word> {
        std::mem::take(&mut self.touched)
    }
}

impl<M: Memory> Memory for Snapshot<'_, M> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        let len = buf.len();
        if len > 8 {
            return self.inner.read(addr, buf);
        }
        let word = match self.words.iter().find(|w| w.addr == addr && w.len == len) {
            Some(w) => *w,
            None => {
                if !self.inner.read(addr, buf) {
                    return false;
                }
                let mut value = [0u8; 8];
                value[..len].copy_from_slice(buf);
                let w = Word { addr, len, value };
                self.words.push(w);
                w
            }
        };
        buf.copy_from_slice(&word.value[..len]);
        if !self.touched.contains(&word) {
            self.touched.push(word);
        }
        true
    }
}

impl ProcessMemory {
    /// Reads many words, one system call per 1024 (IOV_MAX); None if any is
    /// unreadable.
    pub fn read_words(&mut self, wanted: &[(u64, usize)]) -> Option<Vec<Word>> {
        let mut all = Vec::with_capacity(wanted.len());
        for chunk in wanted.chunks(1024) {
            all.extend(self.read_chunk(chunk)?);
        }
        Some(all)
    }

    fn read_chunk(&mut self, wanted: &[(u64, usize)]) -> Option<Vec<Word>> {
        let mut values = vec![[0u8; 8]; wanted.len()];
        let local: Vec<libc::iovec> = values
            .iter_mut()
            .zip(wanted)
            .map(|(v, &(_, len))| libc::iovec {
                iov_base: v.as_mut_ptr().cast(),
                iov_len: len,
            })
            .collect();
        let remote: Vec<libc::iovec> = wanted
            .iter()
            .map(|&(addr, len)| libc::iovec {
                iov_base: addr as *mut libc::c_void,
                iov_len: len,
            })
            .collect();
        let total: usize = wanted.iter().map(|w| w.1).sum();
        // SAFETY: each local iovec points into `values`, sized to its length.
        let n = unsafe {
            libc::process_vm_readv(
                self.pid,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        (n == total as isize).then(|| {
            wanted
                .iter()
                .zip(values)
                .map(|(&(addr, len), value)| Word { addr, len, value })
                .collect()
        })
    }
}

/// The outcome of one replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replay {
    /// Two passes through the start address without leaving `path` (sorted
    /// instruction addresses): the thread would still be waiting.
    Waiting {
        path: Vec<u64>,
        /// Where to catch the thread entering this wait (see [`trap_site`]).
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

/// Longest replay, in instructions (two loop iterations).
const MAX_STEPS: usize = 256;
/// A wait loop's instructions lie within this many bytes of any of them.
const LOOP_SPAN: u64 = 256;
/// Decoded instructions kept before the cache is cleared (JIT code may change).
const CACHE_LIMIT: usize = 1 << 14;

/// Decodes and caches the program's instructions.
#[derive(Default)]
pub struct Replayer {
    code: HashMap<u64, Option<Instruction>, BuildHasherDefault<AddressHasher>>,
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
        Some((0..NREGS).all(|i| i == 9 || after[0][i] == after[1][i]))
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
        let mut path: Vec<u64> = Vec::with_capacity(32);
        // Conditional branches of the first pass, with the way not taken.
        let mut branches: Vec<(u64, u64)> = Vec::new();
        for _ in 0..MAX_STEPS {
            if let Some(known) = known_path {
                if known.binary_search(&at).is_err() {
                    return (Replay::Leaves, None);
                }
            } else if at.abs_diff(ip) > LOOP_SPAN {
                return (Replay::Leaves, None);
            } else if !path.contains(&at) {
                path.push(at);
            }
            let Some(insn) = self.decode(mem, at) else {
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
                        .filter(|&i| i != 8 && i != 9 && cpu.regs[i] != first_pass[i])
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

    fn decode(&mut self, mem: &mut impl Memory, ip: u64) -> Option<Instruction> {
        if let Some(hit) = self.code.get(&ip) {
            return *hit;
        }
        // The longest x86 instruction is 15 bytes; near the end of a mapping
        // fewer may be readable.
        let mut bytes = [0u8; 15];
        let len = (1..=15)
            .rev()
            .find(|&n| mem.read(ip, &mut bytes[..n]))
            .unwrap_or(0);
        let insn = (len > 0)
            .then(|| Decoder::with_ip(64, &bytes[..len], ip, DecoderOptions::NONE).decode())
            .filter(|i| !i.is_invalid());
        if self.code.len() >= CACHE_LIMIT {
            self.code.clear();
        }
        self.code.insert(ip, insn);
        insn
    }
}

/// Arithmetic flags the loop's branches can test.
#[derive(Debug, Clone, Copy, Default)]
struct Flags {
    cf: bool,
    pf: bool,
    zf: bool,
    sf: bool,
    of: bool,
}

impl Flags {
    fn from_rflags(f: u64) -> Flags {
        Flags {
            cf: f & 1 != 0,
            pf: f & (1 << 2) != 0,
            zf: f & (1 << 6) != 0,
            sf: f & (1 << 7) != 0,
            of: f & (1 << 11) != 0,
        }
    }

    fn holds(&self, cc: ConditionCode) -> Option<bool> {
        use ConditionCode as C;
        Some(match cc {
            C::o => self.of,
            C::no => !self.of,
            C::b => self.cf,
            C::ae => !self.cf,
            C::e => self.zf,
            C::ne => !self.zf,
            C::be => self.cf || self.zf,
            C::a => !self.cf && !self.zf,
            C::s => self.sf,
            C::ns => !self.sf,
            C::p => self.pf,
            C::np => !self.pf,
            C::l => self.sf != self.of,
            C::ge => self.sf == self.of,
            C::le => self.zf || self.sf != self.of,
            C::g => !self.zf && self.sf == self.of,
            _ => return None,
        })
    }

    /// ZF, SF and PF of a result of `bits` bits.
    fn set_result(&mut self, r: u64, bits: u32) {
        self.zf = r & mask(bits) == 0;
        self.sf = r >> (bits - 1) & 1 != 0;
        self.pf = (r as u8).count_ones() % 2 == 0;
    }
}

/// Where a breakpoint catches a thread entering a wait loop but not one
/// leaving it: the instruction a waiting iteration runs right after the
/// loop's exit branch. A thread entering the wait passes it in its first
/// iteration; a thread resumed inside the loop reaches the exit branch, and
/// leaves, before it (unless it stopped exactly there). `order` is one
/// iteration's addresses in the order run; `branches` its conditional
/// branches with the way not taken. The exit branch is one whose other way
/// leaves the loop, preferably past its end, then before its start (a branch
/// to another part of the loop, e.g. a wider division, also leaves the
/// iteration's addresses but not the loop).
fn trap_site(order: &[u64], branches: &[(u64, u64)]) -> u64 {
    if order.is_empty() {
        return 0; // a replay along a known path: its trap site is known too
    }
    let (lo, hi) = (
        order.iter().copied().min().unwrap_or(0),
        order.iter().copied().max().unwrap_or(0),
    );
    // Loops are usually left forwards (falling through the closing branch,
    // or jumping past the loop's end); an inner branch to an out-of-line
    // part of the loop tends to go back.
    let exits = branches.iter().filter(|(_, other)| !order.contains(other));
    let exit = exits
        .clone()
        .find(|&&(_, other)| other > hi)
        .or_else(|| exits.clone().find(|&&(_, other)| other < lo))
        .or_else(|| exits.clone().next());
    let Some(&(branch, _)) = exit else {
        return order.first().copied().unwrap_or(0);
    };
    let i = order.iter().position(|&a| a == branch).unwrap_or(0);
    order[(i + 1) % order.len()]
}

fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

fn sign_extend(v: u64, bits: u32) -> u64 {
    if bits >= 64 {
        v
    } else {
        let shift = 64 - bits;
        (((v << shift) as i64) >> shift) as u64
    }
}

/// Index into perf's register order (AX BX CX DX SI DI BP SP IP FLAGS R8..R15)
/// of a 64-bit general-purpose register.
fn slot(full: Register) -> Option<usize> {
    use Register as R;
    Some(match full {
        R::RAX => 0,
        R::RBX => 1,
        R::RCX => 2,
        R::RDX => 3,
        R::RSI => 4,
        R::RDI => 5,
        R::RBP => 6,
        R::RSP => 7,
        R::R8 => 10,
        R::R9 => 11,
        R::R10 => 12,
        R::R11 => 13,
        R::R12 => 14,
        R::R13 => 15,
        R::R14 => 16,
        R::R15 => 17,
        _ => return None,
    })
}

/// The interpreter's register file.
struct Cpu {
    regs: [u64; NREGS],
    flags: Flags,
    /// Memory reads so far (a wait must read what it waits for).
    loads: usize,
}

/// A source or destination operand, resolved.
enum Place {
    Reg { slot: usize, shift: u32, bits: u32 },
    Mem { addr: u64, bits: u32 },
    Imm { value: u64, bits: u32 },
}

impl Cpu {
    fn new(regs: &[u64; NREGS]) -> Cpu {
        Cpu {
            regs: *regs,
            flags: Flags::from_rflags(regs[9]),
            loads: 0,
        }
    }

    /// The effective address of a memory operand (None: FS/GS-relative).
    fn address(&self, insn: &Instruction) -> Option<u64> {
        if matches!(insn.segment_prefix(), Register::FS | Register::GS) {
            return None; // thread-local storage: base not in the sample
        }
        if insn.memory_base() == Register::RIP {
            return Some(insn.memory_displacement64());
        }
        let reg = |r: Register| -> Option<u64> {
            if r == Register::None {
                Some(0)
            } else {
                Some(self.regs[slot(r.full_register())?] & mask((r.size() * 8) as u32))
            }
        };
        Some(
            reg(insn.memory_base())?
                .wrapping_add(
                    reg(insn.memory_index())?.wrapping_mul(insn.memory_index_scale() as u64),
                )
                .wrapping_add(insn.memory_displacement64()),
        )
    }

    fn place(&self, insn: &Instruction, op: u32) -> Option<Place> {
        Some(match insn.op_kind(op) {
            OpKind::Register => {
                let r = insn.op_register(op);
                let high_byte =
                    matches!(r, Register::AH | Register::BH | Register::CH | Register::DH);
                Place::Reg {
                    slot: slot(r.full_register())?,
                    shift: if high_byte { 8 } else { 0 },
                    bits: (r.size() * 8) as u32,
                }
            }
            OpKind::Memory => {
                let bits = (insn.memory_size().size() * 8) as u32;
                if !(8..=64).contains(&bits) {
                    return None;
                }
                Place::Mem {
                    addr: self.address(insn)?,
                    bits,
                }
            }
            OpKind::Immediate8
            | OpKind::Immediate16
            | OpKind::Immediate32
            | OpKind::Immediate64
            | OpKind::Immediate8to16
            | OpKind::Immediate8to32
            | OpKind::Immediate8to64
            | OpKind::Immediate32to64 => Place::Imm {
                value: insn.immediate(op),
                bits: 64,
            },
            _ => return None,
        })
    }

    fn bits(p: &Place) -> u32 {
        match p {
            Place::Reg { bits, .. } | Place::Mem { bits, .. } | Place::Imm { bits, .. } => *bits,
        }
    }

    fn read(&mut self, p: &Place, mem: &mut impl Memory) -> Option<u64> {
        Some(match *p {
            Place::Reg { slot, shift, bits } => (self.regs[slot] >> shift) & mask(bits),
            Place::Imm { value, .. } => value,
            Place::Mem { addr, bits } => {
                self.loads += 1;
                let mut b = [0u8; 8];
                let n = (bits / 8) as usize;
                if !mem.read(addr, &mut b[..n]) {
                    return None;
                }
                u64::from_le_bytes(b)
            }
        })
    }

    /// Register writes only: a loop that stores is not a plain wait.
    fn write(&mut self, p: &Place, v: u64) -> Option<()> {
        let Place::Reg { slot, shift, bits } = *p else {
            return None;
        };
        let r = &mut self.regs[slot];
        *r = match bits {
            64 => v,
            32 => v & mask(32), // 32-bit writes clear the upper half
            _ => (*r & !(mask(bits) << shift)) | ((v & mask(bits)) << shift),
        };
        Some(())
    }

    /// Executes one instruction; returns the next IP, or None if it is not modelled.
    fn step(&mut self, insn: &Instruction, mem: &mut impl Memory) -> Option<u64> {
        use Mnemonic as M;
        let next = insn.next_ip();
        if insn.has_lock_prefix() {
            return None;
        }
        match insn.mnemonic() {
            M::Nop | M::Pause | M::Lfence | M::Mfence | M::Sfence | M::Prefetcht0 => {}
            M::Jmp => {
                return matches!(insn.op0_kind(), OpKind::NearBranch64)
                    .then(|| insn.near_branch_target())
            }
            m if is_jcc(m) => {
                let taken = self.flags.holds(insn.condition_code())?;
                return Some(if taken {
                    insn.near_branch_target()
                } else {
                    next
                });
            }
            M::Mov | M::Movzx | M::Movsx | M::Movsxd => {
                let (dst, src) = (self.place(insn, 0)?, self.place(insn, 1)?);
                let mut v = self.read(&src, mem)?;
                if matches!(insn.mnemonic(), M::Movsx | M::Movsxd) {
                    v = sign_extend(v, Self::bits(&src));
                }
                self.write(&dst, v)?;
            }
            M::Lea => {
                // No memory access: the operand has no size, only an address.
                let dst = self.place(insn, 0)?;
                let addr = self.address(insn)?;
                self.write(&dst, addr)?;
            }
            M::Imul if insn.op_count() >= 2 => {
                // Two- and three-operand forms (the one-operand form writes RDX:RAX).
                let dst = self.place(insn, 0)?;
                let bits = Self::bits(&dst);
                let a = sign_extend(self.read(&self.place(insn, 1)?, mem)?, bits) as i64;
                let b = if insn.op_count() == 3 {
                    insn.immediate(2) as i64
                } else {
                    sign_extend(self.read(&dst, mem)?, bits) as i64
                };
                let wide = a as i128 * b as i128;
                let r = wide as u64 & mask(bits);
                let overflow = sign_extend(r, bits) as i64 as i128 != wide;
                self.flags.cf = overflow;
                self.flags.of = overflow;
                self.write(&dst, r)?;
            }
            M::Cmp | M::Test => {
                let (a, b) = (self.place(insn, 0)?, self.place(insn, 1)?);
                let bits = Self::bits(&a);
                let (x, y) = (self.read(&a, mem)?, self.read(&b, mem)? & mask(bits));
                if insn.mnemonic() == M::Cmp {
                    self.sub_flags(x, y, bits);
                } else {
                    self.logic_flags(x & y, bits);
                }
            }
            M::Add | M::Sub | M::And | M::Or | M::Xor => {
                let (a, b) = (self.place(insn, 0)?, self.place(insn, 1)?);
                let bits = Self::bits(&a);
                let (x, y) = (self.read(&a, mem)?, self.read(&b, mem)? & mask(bits));
                let r = match insn.mnemonic() {
                    M::Add => {
                        let r = x.wrapping_add(y) & mask(bits);
                        self.flags.cf = r < x;
                        self.flags.of = ((!(x ^ y) & (x ^ r)) >> (bits - 1)) & 1 != 0;
                        self.flags.set_result(r, bits);
                        r
                    }
                    M::Sub => self.sub_flags(x, y, bits),
                    M::And => self.logic_flags(x & y, bits),
                    M::Or => self.logic_flags(x | y, bits),
                    _ => self.logic_flags(x ^ y, bits),
                };
                self.write(&a, r)?;
            }
            M::Inc | M::Dec => {
                let a = self.place(insn, 0)?;
                let bits = Self::bits(&a);
                let x = self.read(&a, mem)?;
                let cf = self.flags.cf; // INC/DEC leave CF alone
                let r = if insn.mnemonic() == M::Inc {
                    let r = x.wrapping_add(1) & mask(bits);
                    self.flags.of = r == 1 << (bits - 1);
                    self.flags.set_result(r, bits);
                    r
                } else {
                    self.sub_flags(x, 1, bits)
                };
                self.flags.cf = cf;
                self.write(&a, r)?;
            }
            M::Not => {
                let a = self.place(insn, 0)?;
                let v = !self.read(&a, mem)?;
                self.write(&a, v)?;
            }
            M::Neg => {
                let a = self.place(insn, 0)?;
                let bits = Self::bits(&a);
                let x = self.read(&a, mem)?;
                let r = self.sub_flags(0, x, bits);
                self.write(&a, r)?;
            }
            M::Shl | M::Shr | M::Sar => {
                let (a, b) = (self.place(insn, 0)?, self.place(insn, 1)?);
                let bits = Self::bits(&a);
                let count = (self.read(&b, mem)? & if bits == 64 { 63 } else { 31 }) as u32;
                let x = self.read(&a, mem)?;
                if count > 0 {
                    let r = match insn.mnemonic() {
                        M::Shl => {
                            self.flags.cf = count <= bits && (x >> (bits - count)) & 1 != 0;
                            x.checked_shl(count).unwrap_or(0)
                        }
                        M::Shr => {
                            self.flags.cf = (x >> (count - 1)) & 1 != 0;
                            x >> count
                        }
                        _ => {
                            let s = sign_extend(x, bits) as i64;
                            self.flags.cf = (s >> (count - 1).min(63)) & 1 != 0;
                            (s >> count.min(63)) as u64
                        }
                    } & mask(bits);
                    self.flags.of = false;
                    self.flags.set_result(r, bits);
                    self.write(&a, r)?;
                }
            }
            M::Div => {
                // Unsigned RDX:RAX (or EDX:EAX) / operand; used by `t % n` loops.
                let src = self.place(insn, 0)?;
                let bits = Self::bits(&src);
                let d = self.read(&src, mem)?;
                if d == 0 || !(bits == 32 || bits == 64) {
                    return None;
                }
                let (lo, hi) = (self.regs[0] & mask(bits), self.regs[3] & mask(bits));
                let n = ((hi as u128) << bits) | lo as u128;
                let q = n / d as u128;
                if q > mask(bits) as u128 {
                    return None; // #DE in the real program
                }
                let r = (n % d as u128) as u64;
                let ax = Place::Reg {
                    slot: 0,
                    shift: 0,
                    bits,
                };
                let dx = Place::Reg {
                    slot: 3,
                    shift: 0,
                    bits,
                };
                self.write(&ax, q as u64)?;
                self.write(&dx, r)?;
            }
            m if is_cmov(m) => {
                let (dst, src) = (self.place(insn, 0)?, self.place(insn, 1)?);
                let v = self.read(&src, mem)?;
                if self.flags.holds(insn.condition_code())? {
                    self.write(&dst, v)?;
                } else if Self::bits(&dst) == 32 {
                    // A 32-bit CMOV clears the upper half even when not taken.
                    let cur = self.read(&dst, mem)?;
                    self.write(&dst, cur)?;
                }
            }
            m if is_setcc(m) => {
                let dst = self.place(insn, 0)?;
                let v = self.flags.holds(insn.condition_code())? as u64;
                self.write(&dst, v)?;
            }
            _ => return None,
        }
        Some(next)
    }

    /// Flags of x - y; returns the result.
    fn sub_flags(&mut self, x: u64, y: u64, bits: u32) -> u64 {
        let (x, y) = (x & mask(bits), y & mask(bits));
        let r = x.wrapping_sub(y) & mask(bits);
        self.flags.cf = x < y;
        self.flags.of = (((x ^ y) & (x ^ r)) >> (bits - 1)) & 1 != 0;
        self.flags.set_result(r, bits);
        r
    }

    fn logic_flags(&mut self, r: u64, bits: u32) -> u64 {
        self.flags.cf = false;
        self.flags.of = false;
        self.flags.set_result(r, bits);
        r & mask(bits)
    }
}

fn is_jcc(m: Mnemonic) -> bool {
    use Mnemonic as M;
    matches!(
        m,
        M::Jo
            | M::Jno
            | M::Jb
            | M::Jae
            | M::Je
            | M::Jne
            | M::Jbe
            | M::Ja
            | M::Js
            | M::Jns
            | M::Jp
            | M::Jnp
            | M::Jl
            | M::Jge
            | M::Jle
            | M::Jg
    )
}

fn is_cmov(m: Mnemonic) -> bool {
    use Mnemonic as M;
    matches!(
        m,
        M::Cmovo
            | M::Cmovno
            | M::Cmovb
            | M::Cmovae
            | M::Cmove
            | M::Cmovne
            | M::Cmovbe
            | M::Cmova
            | M::Cmovs
            | M::Cmovns
            | M::Cmovp
            | M::Cmovnp
            | M::Cmovl
            | M::Cmovge
            | M::Cmovle
            | M::Cmovg
    )
}

fn is_setcc(m: Mnemonic) -> bool {
    use Mnemonic as M;
    matches!(
        m,
        M::Seto
            | M::Setno
            | M::Setb
            | M::Setae
            | M::Sete
            | M::Setne
            | M::Setbe
            | M::Seta
            | M::Sets
            | M::Setns
            | M::Setp
            | M::Setnp
            | M::Setl
            | M::Setge
            | M::Setle
            | M::Setg
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Wait loops assembled with GNU as (`as l.s; objdump -d`), placed at CODE.
    const CODE: u64 = 0x1000;
    const LOOPS: [u8; 60] = [
        0x8b, 0x07, 0x85, 0xc0, 0x75,
        0xfa, // 0x00 ttas: mov eax,[rdi]; test eax,eax; jne ttas
        0xf3, 0x90, 0x83, 0x3f, 0x00, 0x75, 0xf9, // 0x06 pause; cmp dword [rdi],0; jne
        0x48, 0x8b, 0x07, 0x31, 0xd2, 0x48, 0xf7, 0xf1, 0x48, 0x39, 0xf2, 0x75,
        0xf3, // 0x0d ring: mov rax,[rdi]; xor edx,edx; div rcx; cmp rdx,rsi; jne ring
        0xe8, 0xe1, 0xff, 0xff, 0xff, 0x80, 0x3f, 0x00, 0x74,
        0xf6, // 0x1a call ttas; cmp byte [rdi],0; je
        0x48, 0xc7, 0x06, 0x01, 0x00, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x74,
        0xf4, // 0x24 mov qword [rsi],1; cmp byte [rdi],0; je
        0x0f, 0xb7, 0x05, 0x00, 0x01, 0x00, 0x00, 0x66, 0x39, 0xd0, 0x75,
        0xf4, // 0x30 ticket: movzx eax,word [rip+0x100]; cmp ax,dx; jne
    ];
    const FLAG: u64 = 0x8000;

    /// Code at CODE and 8-byte words at chosen addresses (a read of fewer
    /// bytes gets the word's low bytes).
    struct Words {
        code: &'static [u8],
        words: std::collections::HashMap<u64, u64>,
    }

    impl Memory for Words {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
            if let Some(off) = addr.checked_sub(CODE).map(|o| o as usize) {
                if off < self.code.len() {
                    let n = buf.len().min(self.code.len() - off);
                    buf[..n].copy_from_slice(&self.code[off..off + n]);
                    return n == buf.len();
                }
            }
            match self.words.get(&addr) {
                Some(w) if buf.len() <= 8 => {
                    let n = buf.len();
                    buf.copy_from_slice(&w.to_le_bytes()[..n]);
                    true
                }
                _ => false,
            }
        }
    }

    /// The LOOPS code with the word they poll: at FLAG, and at 0x1137 where
    /// the ticket loop's [rip+0x100] points.
    fn loops(flag: u64) -> Words {
        let mut m = Words {
            code: &LOOPS,
            words: Default::default(),
        };
        set_flag(&mut m, flag);
        m
    }

    fn set_flag(m: &mut Words, flag: u64) {
        m.words.insert(FLAG, flag);
        m.words.insert(CODE + 0x137, flag);
    }

    fn regs(rdi: u64, rsi: u64, rcx: u64, rdx: u64) -> [u64; NREGS] {
        let mut r = [0u64; NREGS];
        r[5] = rdi;
        r[4] = rsi;
        r[2] = rcx;
        r[3] = rdx;
        r
    }

    fn waiting_path(
        r: &mut Replayer,
        m: &mut impl Memory,
        ip: u64,
        regs: &[u64; NREGS],
    ) -> Vec<u64> {
        match r.replay(m, ip, regs, None) {
            Replay::Waiting { path, .. } => path,
            other => panic!("expected the loop at {ip:#x} to be waiting, got {other:?}"),
        }
    }

    #[test]
    fn flag_loop_waits_until_the_flag_clears() {
        let (mut r, mut m) = (Replayer::new(), loops(1));
        let regs = regs(FLAG, 0, 0, 0);
        // Sampled on the branch, with stale flags: the replay re-reads memory.
        let path = waiting_path(&mut r, &mut m, CODE + 4, &regs);
        assert_eq!(path, vec![CODE, CODE + 2, CODE + 4]);
        assert!(matches!(
            r.replay(&mut m, CODE + 4, &regs, Some(&path)),
            Replay::Waiting { .. }
        ));
        set_flag(&mut m, 0);
        assert_eq!(
            r.replay(&mut m, CODE + 4, &regs, Some(&path)),
            Replay::Leaves
        );
        // Without a known path: falling through the closing branch leaves.
        assert_eq!(r.replay(&mut m, CODE + 4, &regs, None), Replay::Leaves);
    }

    #[test]
    fn ring_loop_with_an_inner_backward_branch() {
        let (mut m, regs, turn) = ring_fixture();
        let mut r = Replayer::new();
        // Sampled on the compare; the inner backward branch (not taken while
        // the numbers are small) must not read as leaving the loop.
        let path = waiting_path(&mut r, &mut m, CODE + 0x29, &regs);
        m.words.insert(turn, 24);
        assert!(matches!(
            r.replay(&mut m, CODE + 0x29, &regs, Some(&path)),
            Replay::Waiting { .. }
        ));
        m.words.insert(turn, 27); // 27 % 8 == 3: thread 3's turn
        assert_eq!(
            r.replay(&mut m, CODE + 0x29, &regs, Some(&path)),
            Replay::Leaves
        );
        assert_eq!(r.replay(&mut m, CODE + 0x29, &regs, None), Replay::Leaves);
        // A turn past 2^32 takes the 64-bit path, which the waiting path
        // learnt with small numbers does not contain: resumed, to be safe.
        m.words.insert(turn, (1 << 33) + 4);
        assert_eq!(
            r.replay(&mut m, CODE + 0x29, &regs, Some(&path)),
            Replay::Leaves
        );
    }

    /// rustc's ring loop waiting as thread 3 of 8, the turn counter at 17;
    /// returns the memory, the registers and the turn counter's address.
    fn ring_fixture() -> (Words, [u64; NREGS], u64) {
        // The shape rustc gives `while turn.load() % n != me`: a 32-bit
        // division normally, a backward branch to a 64-bit one when the
        // operands need it (assembled with GNU as):
        //   00 l64: mov rax,r15; xor edx,edx; div r12; cmp rdx,[r14+0x18]; je out
        //   0e top: mov rax,[r14]; mov r15,[rax+0x10]; mov rax,r15; or rax,r12
        //           shr rax,0x20; jne l64
        //   21      mov eax,r15d; xor edx,edx; div r12d; cmp rdx,[r14+0x18]; jne top
        //   2f out: nop
        const RING: [u8; 48] = [
            0x4c, 0x89, 0xf8, 0x31, 0xd2, 0x49, 0xf7, 0xf4, 0x49, 0x3b, 0x56, 0x18, 0x74, 0x21,
            0x49, 0x8b, 0x06, 0x4c, 0x8b, 0x78, 0x10, 0x4c, 0x89, 0xf8, 0x4c, 0x09, 0xe0, 0x48,
            0xc1, 0xe8, 0x20, 0x75, 0xdf, 0x44, 0x89, 0xf8, 0x31, 0xd2, 0x41, 0xf7, 0xf4, 0x49,
            0x3b, 0x56, 0x18, 0x75, 0xdf, 0x90,
        ];
        let (state, holder) = (0x9000u64, 0xa000u64);
        let m = Words {
            code: &RING,
            words: [(state, holder), (state + 0x18, 3), (holder + 0x10, 17)].into(),
        };
        let mut regs = [0u64; NREGS];
        regs[16] = state; // r14
        regs[14] = 8; // r12: n
        (m, regs, holder + 0x10)
    }

    #[test]
    fn entry_trap_site_follows_the_exit_branch() {
        let (mut m, sampled, turn) = ring_fixture();
        let mut r = Replayer::new();
        // Learnt from a sample on the compare: the trap goes on `top`, the
        // first instruction after `jne top` (the exit branch), not after the
        // inner branch to the 64-bit division.
        let Replay::Waiting { path, trap_at } = r.replay(&mut m, CODE + 0x29, &sampled, None)
        else {
            panic!("the ring loop waits");
        };
        assert_eq!(trap_at, CODE + 0x0e);
        // A thread caught there (turn register stale) replays along the
        // learnt path: waiting while it is not its turn, leaving once it is.
        let mut at_trap = sampled;
        at_trap[17] = 11; // r15: an old turn
        assert!(matches!(
            r.replay(&mut m, trap_at, &at_trap, Some(&path)),
            Replay::Waiting { .. }
        ));
        m.words.insert(turn, 19);
        assert_eq!(
            r.replay(&mut m, trap_at, &at_trap, Some(&path)),
            Replay::Leaves
        );
        // The plain flag loop: the trap goes back on its load.
        let (mut r, mut m) = (Replayer::new(), loops(1));
        let Replay::Waiting { trap_at, .. } =
            r.replay(&mut m, CODE + 4, &regs(FLAG, 0, 0, 0), None)
        else {
            panic!("the flag loop waits");
        };
        assert_eq!(trap_at, CODE);
    }

    #[test]
    fn same_wait_tells_a_moving_counter_from_a_chased_pointer() {
        // Two samples of thread 3 on the ring's compare, taken at turns 17
        // and 20: r15 (the turn) and rdx (turn % 8) differ, yet both are
        // the same wait, since the loop reloads them before using them.
        let (mut m, sampled, turn) = ring_fixture();
        let mut r = Replayer::new();
        let (mut a, mut b) = (sampled, sampled);
        (a[17], a[3]) = (17, 1);
        (b[17], b[3]) = (20, 4);
        m.words.insert(turn, 18);
        assert_eq!(r.same_wait(&mut m, CODE + 0x29, &a, &b), Some(true));
        // Its turn came: undecided (the wait is over), not "no wait".
        m.words.insert(turn, 19);
        assert_eq!(r.same_wait(&mut m, CODE + 0x29, &a, &b), None);

        // top: mov rdi,[rdi]; test rdi,rdi; jne top -- a pointer chase
        // round a cycle of three nodes. One register moves and it loads,
        // like a wait; but from two samples the iterations end apart.
        const CHASE: [u8; 8] = [0x48, 0x8b, 0x3f, 0x48, 0x85, 0xff, 0x75, 0xf8];
        let mut chase = Words {
            code: &CHASE,
            words: [(0x8000, 0x8100), (0x8100, 0x8200), (0x8200, 0x8000)].into(),
        };
        let (a, b) = (regs(0x8000, 0, 0, 0), regs(0x8100, 0, 0, 0));
        assert_eq!(r.same_wait(&mut chase, CODE, &a, &b), Some(false));
    }

    #[test]
    fn compare_with_memory_and_pause() {
        let (mut r, mut m) = (Replayer::new(), loops(5));
        let regs = regs(FLAG, 0, 0, 0);
        let path = waiting_path(&mut r, &mut m, CODE + 8, &regs);
        set_flag(&mut m, 0);
        assert_eq!(
            r.replay(&mut m, CODE + 8, &regs, Some(&path)),
            Replay::Leaves
        );
    }

    #[test]
    fn token_ring_modulo_is_evaluated() {
        // Thread 3 of 8 waits for turn % 8 == 3.
        let (mut r, mut m) = (Replayer::new(), loops(16));
        let regs = regs(FLAG, 3, 8, 0);
        let path = waiting_path(&mut r, &mut m, CODE + 0x15, &regs);
        for turn in [17, 18, 24, 33] {
            set_flag(&mut m, turn);
            assert!(
                matches!(
                    r.replay(&mut m, CODE + 0x15, &regs, Some(&path)),
                    Replay::Waiting { .. }
                ),
                "turn {turn} is not thread 3's"
            );
        }
        set_flag(&mut m, 19);
        assert_eq!(
            r.replay(&mut m, CODE + 0x15, &regs, Some(&path)),
            Replay::Leaves
        );
    }

    #[test]
    fn sixteen_bit_ticket_compare() {
        let (mut r, mut m) = (Replayer::new(), loops(0x0001_0004));
        // Waiting for ticket 7; the upper half of the word is another field.
        let regs = regs(0, 0, 0, 7);
        let path = waiting_path(&mut r, &mut m, CODE + 0x30, &regs);
        set_flag(&mut m, 0x0002_0007);
        assert_eq!(
            r.replay(&mut m, CODE + 0x30, &regs, Some(&path)),
            Replay::Leaves
        );
    }

    #[test]
    fn calls_and_stores_are_opaque() {
        let (mut r, mut m) = (Replayer::new(), loops(0));
        let regs = regs(FLAG, FLAG, 0, 0);
        assert_eq!(r.replay(&mut m, CODE + 0x1a, &regs, None), Replay::Opaque);
        assert_eq!(r.replay(&mut m, CODE + 0x24, &regs, None), Replay::Opaque);
    }

    #[test]
    fn a_counting_compute_loop_is_not_a_wait() {
        // add r8,r11; mov rdx,r10; imul rdx,rsi; add rcx,8; lea r10,[r9+rdx];
        // add r9,rbx; cmp rdi,rcx; jne (a work loop rustc emitted; it once
        // aliased with the sampling period and looked like a repeated state).
        const WORK: [u8; 26] = [
            0x4d, 0x01, 0xd8, 0x4c, 0x89, 0xd2, 0x48, 0x0f, 0xaf, 0xd6, 0x48, 0x83, 0xc1, 0x08,
            0x4d, 0x8d, 0x14, 0x11, 0x49, 0x01, 0xd9, 0x48, 0x39, 0xcf, 0x75, 0xe6,
        ];
        let mut code = Words {
            code: &WORK,
            words: Default::default(),
        };
        let mut r = regs(1 << 20, 3, 0, 0);
        r[1] = 5;
        assert_eq!(
            Replayer::new().replay(&mut code, CODE, &r, None),
            Replay::Progressing
        );
    }

    #[test]
    fn unreadable_data_is_opaque() {
        let (mut r, mut m) = (Replayer::new(), loops(1));
        assert_eq!(
            r.replay(&mut m, CODE, &regs(0xdead_0000, 0, 0, 0), None),
            Replay::Opaque
        );
    }

    #[test]
    fn replays_a_real_loop_in_this_process() {
        use std::sync::atomic::{AtomicU32, Ordering};
        static GATE: AtomicU32 = AtomicU32::new(1);
        #[inline(never)]
        fn wait_gate(gate: &AtomicU32) {
            while gate.load(Ordering::Acquire) != 0 {}
        }
        // Find the loop's load by replaying from each byte offset of the
        // function with rdi = &GATE: the loop is where a replay waits.
        let f = wait_gate as fn(&AtomicU32) as usize as u64;
        let mut mem = ProcessMemory::open(std::process::id() as i32).expect("own memory");
        let mut r = Replayer::new();
        let regs = regs(&GATE as *const AtomicU32 as u64, 0, 0, 0);
        let found = (0..24).find_map(|off| match r.replay(&mut mem, f + off, &regs, None) {
            Replay::Waiting { path, .. } => Some((f + off, path)),
            _ => None,
        });
        let (ip, path) = found.expect("the wait loop replays as waiting while the gate is closed");
        GATE.store(0, Ordering::Release);
        assert_eq!(r.replay(&mut mem, ip, &regs, Some(&path)), Replay::Leaves);
        wait_gate(&GATE);
    }
}
