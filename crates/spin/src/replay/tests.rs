//! The replay of whole loops: waiting, leaving, progressing, opaque, the
//! same-wait test and the entry trap site, on loops assembled by hand and on
//! a real loop of this process.

use super::*;
use crate::sample::NREGS;

/// Wait loops assembled with GNU as (`as l.s; objdump -d`), placed at CODE.
const CODE: u64 = 0x1000;
const LOOPS: [u8; 60] = [
    0x8b, 0x07, 0x85, 0xc0, 0x75, 0xfa, // 0x00 ttas: mov eax,[rdi]; test eax,eax; jne ttas
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

fn waiting_path(r: &mut Replayer, m: &mut impl Memory, ip: u64, regs: &[u64; NREGS]) -> Vec<u64> {
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
        0x4c, 0x89, 0xf8, 0x31, 0xd2, 0x49, 0xf7, 0xf4, 0x49, 0x3b, 0x56, 0x18, 0x74, 0x21, 0x49,
        0x8b, 0x06, 0x4c, 0x8b, 0x78, 0x10, 0x4c, 0x89, 0xf8, 0x4c, 0x09, 0xe0, 0x48, 0xc1, 0xe8,
        0x20, 0x75, 0xdf, 0x44, 0x89, 0xf8, 0x31, 0xd2, 0x41, 0xf7, 0xf4, 0x49, 0x3b, 0x56, 0x18,
        0x75, 0xdf, 0x90,
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
    let Replay::Waiting { path, trap_at } = r.replay(&mut m, CODE + 0x29, &sampled, None) else {
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
    let Replay::Waiting { trap_at, .. } = r.replay(&mut m, CODE + 4, &regs(FLAG, 0, 0, 0), None)
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
        0x4d, 0x01, 0xd8, 0x4c, 0x89, 0xd2, 0x48, 0x0f, 0xaf, 0xd6, 0x48, 0x83, 0xc1, 0x08, 0x4d,
        0x8d, 0x14, 0x11, 0x49, 0x01, 0xd9, 0x48, 0x39, 0xcf, 0x75, 0xe6,
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
