//! The interpreter: a register file and the instructions wait loops are
//! made of (moves, loads, compares, arithmetic, shifts, unsigned division,
//! conditional jumps, moves and sets, PAUSE and fences). Anything else, and
//! any store, atomic or FS/GS-relative access, is not modelled: the step
//! returns None and the replay is opaque.

use super::bits::mask;
use super::flags::{is_cmov, is_jcc, is_setcc, Flags};
use super::memory::Memory;
use crate::sample::{FLAGS_SLOT, NREGS};
use iced_x86::{Instruction, Mnemonic, OpKind, Register};

/// `v`, a `bits`-bit two's-complement number, widened to 64 bits.
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

/// Where RAX and RDX sit in perf's register order (see [`slot`]): the
/// implicit operands of DIV.
const RAX_SLOT: usize = 0;
const RDX_SLOT: usize = 3;

/// The interpreter's register file.
pub(super) struct Cpu {
    pub(super) regs: [u64; NREGS],
    flags: Flags,
    /// Memory reads so far (a wait must read what it waits for).
    pub(super) loads: usize,
}

/// A source or destination operand, resolved.
enum Place {
    Reg { slot: usize, shift: u32, bits: u32 },
    Mem { addr: u64, bits: u32 },
    Imm { value: u64, bits: u32 },
}

impl Cpu {
    pub(super) fn new(regs: &[u64; NREGS]) -> Cpu {
        Cpu {
            regs: *regs,
            flags: Flags::from_rflags(regs[FLAGS_SLOT]),
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
    pub(super) fn step(&mut self, insn: &Instruction, mem: &mut impl Memory) -> Option<u64> {
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
                // The CPU masks shift counts to 6 bits for 64-bit operands,
                // to 5 bits otherwise.
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
                let (lo, hi) = (
                    self.regs[RAX_SLOT] & mask(bits),
                    self.regs[RDX_SLOT] & mask(bits),
                );
                let n = ((hi as u128) << bits) | lo as u128;
                let q = n / d as u128;
                if q > mask(bits) as u128 {
                    return None; // #DE in the real program
                }
                let r = (n % d as u128) as u64;
                let ax = Place::Reg {
                    slot: RAX_SLOT,
                    shift: 0,
                    bits,
                };
                let dx = Place::Reg {
                    slot: RDX_SLOT,
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

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions};

    /// No memory at all: instructions that touch it fail.
    struct NoMemory;

    impl Memory for NoMemory {
        fn read(&mut self, _: u64, _: &mut [u8]) -> bool {
            false
        }
    }

    fn run(bytes: &[u8], regs: &mut [u64; NREGS]) -> Option<u64> {
        let insn = Decoder::with_ip(64, bytes, 0x1000, DecoderOptions::NONE).decode();
        let mut cpu = Cpu::new(regs);
        let next = cpu.step(&insn, &mut NoMemory);
        *regs = cpu.regs;
        next
    }

    #[test]
    fn thirty_two_bit_writes_clear_the_upper_half() {
        let mut regs = [0u64; NREGS];
        regs[RAX_SLOT] = u64::MAX;
        // mov eax, 5
        assert_eq!(run(&[0xb8, 5, 0, 0, 0], &mut regs), Some(0x1005));
        assert_eq!(regs[RAX_SLOT], 5);
        // mov ah, 1 (a high byte: the rest stays)
        assert_eq!(run(&[0xb4, 1], &mut regs), Some(0x1002));
        assert_eq!(regs[RAX_SLOT], 0x105);
    }

    #[test]
    fn division_takes_rdx_rax_and_refuses_what_would_fault() {
        let mut regs = [0u64; NREGS];
        let rcx = slot(Register::RCX).unwrap();
        (regs[RAX_SLOT], regs[RDX_SLOT], regs[rcx]) = (17, 0, 8);
        // div rcx: 17 / 8
        assert!(run(&[0x48, 0xf7, 0xf1], &mut regs).is_some());
        assert_eq!((regs[RAX_SLOT], regs[RDX_SLOT]), (2, 1));
        // A quotient too wide for RAX is #DE in the program: not modelled.
        (regs[RAX_SLOT], regs[RDX_SLOT], regs[rcx]) = (0, 8, 8);
        assert!(run(&[0x48, 0xf7, 0xf1], &mut regs).is_none());
        // So is a division by zero.
        regs[rcx] = 0;
        assert!(run(&[0x48, 0xf7, 0xf1], &mut regs).is_none());
    }

    #[test]
    fn stores_locks_and_unreadable_loads_are_not_modelled() {
        let mut regs = [0u64; NREGS];
        // mov [rdi], eax
        assert!(run(&[0x89, 0x07], &mut regs).is_none());
        // lock xadd [rdi], eax
        assert!(run(&[0xf0, 0x0f, 0xc1, 0x07], &mut regs).is_none());
        // mov eax, [rdi] with nothing readable there
        assert!(run(&[0x8b, 0x07], &mut regs).is_none());
        // mov eax, fs:[0] (thread-local: the base is not in the sample)
        assert!(run(&[0x64, 0x8b, 0x04, 0x25, 0, 0, 0, 0], &mut regs).is_none());
    }

    #[test]
    fn sign_extension_and_masks() {
        assert_eq!(sign_extend(0x80, 8), u64::MAX - 0x7f);
        assert_eq!(sign_extend(0x7f, 8), 0x7f);
        assert_eq!(mask(64), u64::MAX);
        assert_eq!(mask(16), 0xffff);
    }
}
