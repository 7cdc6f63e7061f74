//! A tiny BPF program that turns an entry trap into a stop.
//!
//! An entry trap (a hardware execute breakpoint on a wait loop, see
//! `engine::EntryTrap`) only records a sample: the detector wakes, replays
//! the loop and stops the thread with `PTRACE_INTERRUPT`, while the thread
//! spins on for the 10-20 µs that takes. Attached to the trap's perf event,
//! this program sends the thread a signal from the breakpoint itself. A
//! signal to a ptrace-seized thread is a stop (signal-delivery-stop) before
//! it returns to user mode: the thread never spins, and the detector decides
//! afterwards whether to keep it stopped or let it go (suppressing the
//! signal either way).
//!
//! The signal is SIGURG, whose default action is to ignore it: if vsched is
//! SIGKILLed while a thread sits in such a stop, the kernel detaches the
//! thread and delivers the signal, which a program without a SIGURG handler
//! never sees (Go's runtime, which uses SIGURG, tolerates spurious ones).
//!
//! The program is four instructions, assembled here rather than compiled:
//! a BPF toolchain (clang, libbpf) would be a heavy dependency for it.
//! Loading it needs CAP_BPF and CAP_PERFMON (root); without them entry traps
//! fall back to waking the detector.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The signal an entry trap sends.
pub const TRAP_SIGNAL: i32 = libc::SIGURG;

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TYPE_PERF_EVENT: u32 = 7;
/// `bpf_send_signal_thread(sig)`: signals the current thread only.
const HELPER_SEND_SIGNAL_THREAD: i32 = 117;
/// `PERF_EVENT_IOC_SET_BPF`.
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;

/// One BPF instruction (`struct bpf_insn`).
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    (code as u64)
        | ((dst as u64 & 0xf) << 8)
        | ((src as u64 & 0xf) << 12)
        | ((off as u16 as u64) << 16)
        | ((imm as u32 as u64) << 32)
}

/// `r1 = sig; call bpf_send_signal_thread; r0 = 1; exit`. Returning 1 keeps
/// the breakpoint's sample (the registers the replay starts from).
fn program(sig: i32) -> [u64; 4] {
    const MOV64_IMM: u8 = 0x07 | 0xb0; // BPF_ALU64 | BPF_MOV | BPF_K
    const CALL: u8 = 0x05 | 0x80; // BPF_JMP | BPF_CALL
    const EXIT: u8 = 0x05 | 0x90; // BPF_JMP | BPF_EXIT
    [
        insn(MOV64_IMM, 1, 0, 0, sig),
        insn(CALL, 0, 0, 0, HELPER_SEND_SIGNAL_THREAD),
        insn(MOV64_IMM, 0, 0, 0, 1),
        insn(EXIT, 0, 0, 0, 0),
    ]
}

/// The loaded program; attach it to any number of entry traps.
pub struct StopProgram {
    fd: OwnedFd,
}

impl StopProgram {
    /// Loads the program (fails without CAP_BPF and CAP_PERFMON).
    pub fn load() -> io::Result<StopProgram> {
        let insns = program(TRAP_SIGNAL);
        let license = c"Apache-2.0";
        // union bpf_attr, BPF_PROG_LOAD part: prog_type, insn_cnt, insns,
        // license; the rest (log, flags, name) zero.
        let mut attr = [0u8; 128];
        attr[0..4].copy_from_slice(&BPF_PROG_TYPE_PERF_EVENT.to_ne_bytes());
        attr[4..8].copy_from_slice(&(insns.len() as u32).to_ne_bytes());
        attr[8..16].copy_from_slice(&(insns.as_ptr() as u64).to_ne_bytes());
        attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
        // SAFETY: bpf(2) reads `attr` (its size given) and the instruction and
        // license buffers it points to, all alive for the call.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_LOAD,
                attr.as_ptr(),
                attr.len() as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned this descriptor to us.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
        Ok(StopProgram { fd })
    }

    /// Runs the program at every overflow of perf event `perf_fd` (for as
    /// long as that event is open).
    pub fn attach(&self, perf_fd: RawFd) -> io::Result<()> {
        // SAFETY: the ioctl takes the program's descriptor by value.
        let rc = unsafe { libc::ioctl(perf_fd, PERF_EVENT_IOC_SET_BPF, self.fd.as_raw_fd()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_encode_like_the_kernel_struct() {
        let p = program(23);
        // r1 = 23: code 0xb7, dst 1, imm 23.
        assert_eq!(p[0], 0xb7 | (1 << 8) | (23 << 32));
        // call 117.
        assert_eq!(p[1], 0x85 | (117 << 32));
        assert_eq!(p[3], 0x95);
    }
}
