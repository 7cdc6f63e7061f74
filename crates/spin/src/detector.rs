//! Deciding, sample by sample, whether a thread is busy-waiting.
//!
//! Pure logic: it sees only the sample stream of one thread. Two kinds of
//! evidence, both cheap and both absent from code that makes progress:
//!
//! * **Repeated state.** A wait loop re-reads a flag without changing any
//!   register, so the same (IP, registers) state recurs sample after sample.
//!   Computation always moves an index, a pointer or an accumulator, so its
//!   states never repeat. `repeats` of the last `window` samples must equal an
//!   earlier one in the window.
//! * **PAUSE.** Spin loops that count iterations (libgomp, adaptive mutexes,
//!   back-off) change a register each time round but execute the x86 spin-wait
//!   hint, which takes most of each iteration's cycles, so samples land just
//!   after it. Computation never executes PAUSE.
//!
//! Once a state or a PAUSE site has been seen spinning, one matching sample is
//! enough the next time (the thread is back in a wait it was caught in). The
//! same wait loop re-entered later usually holds a different loaded value
//! (the ticket, the turn number) in one or two registers: for each loop
//! address the detector learns which registers stay the same from one episode
//! to the next and matches on those. An episode ends when a sample shows new
//! state away from the loop's code (see [`EPISODE_REACH_BYTES`]).

use crate::sample::{Sample, NREGS};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Samples in the decision window by default: two repeats plus the two
/// states they repeat, 2 ms of spinning at the default 500 µs period.
pub const WINDOW: usize = 4;
/// Samples of the window that must repeat an earlier state, by default: one
/// repeat can be chance (periodic code sampled at its own period), two in
/// four samples rarely are.
pub const REPEATS: usize = 2;
/// Samples of the window that must sit on a PAUSE, by default: compute code
/// never executes PAUSE, but a stray sample next to one in a library call
/// should not be enough.
pub const PAUSES: usize = 2;
/// Known spinning states and PAUSE sites remembered per thread, by default:
/// a program waits in a handful of loops; 64 covers a thread that waits in
/// many without letting the lists grow with every state it ever had.
pub const MEMORY: usize = 64;
/// How close (bytes) a sample must be to an instruction already seen
/// spinning in the current episode to still count as in that wait loop, by
/// default. A wait loop is a few instructions within a cache line or two,
/// and samples of it land near ones already seen; code further away is the
/// thread doing something else, and a wider reach would let an episode (and
/// a hold) outlive the wait. Not the replay's `REPLAY_REACH_BYTES`, which is
/// measured from one sampled address and must also span a loop's
/// out-of-line parts.
pub const EPISODE_REACH_BYTES: u64 = 64;
/// Spinning addresses kept per episode (the loop's instructions a sample
/// may be near): a wait loop has a handful; the cap bounds an episode that
/// wrongly goes on.
const EPISODE_IPS: usize = 16;
/// The decision window's upper bound: `observe` keeps a fixed array of this
/// many repeat flags so that no sample allocates.
pub const MAX_WINDOW: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DetectorParams {
    /// Samples in the decision window.
    pub window: usize,
    /// Samples in the window that must repeat an earlier state.
    pub repeats: usize,
    /// Samples in the window that must sit on a PAUSE.
    pub pauses: usize,
    /// Known spinning states and PAUSE sites remembered per thread.
    pub memory: usize,
    /// A sample this close (bytes) to an instruction seen spinning in the
    /// current episode is still in the episode's loop (see
    /// [`EPISODE_REACH_BYTES`]).
    pub episode_reach_bytes: u64,
}

impl Default for DetectorParams {
    fn default() -> Self {
        DetectorParams {
            window: WINDOW,
            repeats: REPEATS,
            pauses: PAUSES,
            memory: MEMORY,
            episode_reach_bytes: EPISODE_REACH_BYTES,
        }
    }
}

/// Detector parameters that cannot work together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    #[error("window must be 2..={MAX_WINDOW} samples, got {window}")]
    Window { window: usize },
    #[error("repeats must be 1..{window} (less than the window), got {repeats}")]
    Repeats { repeats: usize, window: usize },
    #[error("pauses must be 1..={window}, got {pauses}")]
    Pauses { pauses: usize, window: usize },
}

impl DetectorParams {
    /// Checks that the window can hold the evidence asked for: a repeat needs
    /// an earlier sample to repeat, so the window has at least two.
    pub fn validate(&self) -> Result<(), ParamsError> {
        let window = self.window;
        if !(2..=MAX_WINDOW).contains(&window) {
            return Err(ParamsError::Window { window });
        }
        if self.repeats == 0 || self.repeats >= window {
            let repeats = self.repeats;
            return Err(ParamsError::Repeats { repeats, window });
        }
        if self.pauses == 0 || self.pauses > window {
            let pauses = self.pauses;
            return Err(ParamsError::Pauses { pauses, window });
        }
        Ok(())
    }
}

/// What a new sample changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    None,
    /// The thread started spinning (an episode begins).
    Started,
    /// The thread left its wait loop.
    Ended,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    signature: u64,
    ip: u64,
    regs: [u64; NREGS],
    after_pause: bool,
}

/// A wait loop seen in earlier episodes: its address and the registers that
/// held the same values every time.
#[derive(Debug, Clone, Copy)]
struct KnownLoop {
    ip: u64,
    stable: u32,
    regs: [u64; NREGS],
}

impl KnownLoop {
    /// At least this many registers must stay put for the loop to be matched
    /// on them (the stack pointer, the lock's address, the thread's own id...).
    const MIN_STABLE: u32 = NREGS as u32 / 2;

    fn matches(&self, ip: u64, regs: &[u64; NREGS]) -> bool {
        self.ip == ip
            && self.stable.count_ones() >= Self::MIN_STABLE
            && (0..NREGS).all(|i| self.stable & (1 << i) == 0 || self.regs[i] == regs[i])
    }

    /// A new episode in this loop: registers that differ are data, not identity.
    fn learn(&mut self, regs: &[u64; NREGS]) {
        for (i, r) in regs.iter().enumerate() {
            if self.regs[i] != *r {
                self.stable &= !(1 << i);
            }
        }
    }
}

/// One thread's detector state.
#[derive(Debug, Clone, Default)]
pub struct ThreadDetector {
    window: VecDeque<Seen>,
    known_states: VecDeque<u64>,
    known_pause_ips: VecDeque<u64>,
    known_loops: VecDeque<KnownLoop>,
    episode_ips: Vec<u64>,
    /// Addresses shown to be in loops that compute (see [`Self::refute`]):
    /// samples there are never evidence of spinning.
    refuted_ips: VecDeque<u64>,
    spinning: bool,
    /// Whether the latest full window, on its own, said "spinning" (for
    /// per-window accuracy accounting).
    last_window_spinning: bool,
}

impl ThreadDetector {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn spinning(&self) -> bool {
        self.spinning
    }

    /// The verdict of the most recent decision (after the latest sample).
    pub fn last_decision_spinning(&self) -> bool {
        self.last_window_spinning
    }

    /// Whether enough samples have been seen for a full-window decision.
    pub fn window_full(&self, p: &DetectorParams) -> bool {
        self.window.len() >= p.window
    }

    /// The latest verdict was wrong: the loop at `ip` makes progress (a
    /// replay of it moved its registers). Periodic code sampled at a period
    /// that matches its own repeats its state exactly and looks like a wait;
    /// it must not be taken for one again.
    pub fn refute(&mut self, ip: u64, p: &DetectorParams) -> Transition {
        remember(&mut self.refuted_ips, ip, p.memory);
        self.known_loops.retain(|l| l.ip != ip);
        self.known_pause_ips.retain(|&i| i != ip);
        let window: Vec<u64> = self.window.iter().map(|e| e.signature).collect();
        self.known_states.retain(|sig| !window.contains(sig));
        self.window.clear();
        self.last_window_spinning = false;
        if std::mem::take(&mut self.spinning) {
            self.episode_ips.clear();
            Transition::Ended
        } else {
            Transition::None
        }
    }

    pub fn observe(&mut self, s: &Sample, p: &DetectorParams) -> Transition {
        if self.refuted_ips.contains(&s.ip) {
            self.last_window_spinning = false;
            return Transition::None;
        }
        let seen = Seen {
            signature: s.signature(),
            ip: s.ip,
            regs: s.regs,
            after_pause: s.after_pause,
        };
        let known = self.known_states.contains(&seen.signature)
            || (seen.after_pause && self.known_pause_ips.contains(&seen.ip))
            || self
                .known_loops
                .iter()
                .any(|l| l.matches(seen.ip, &seen.regs));
        if self.window.len() == p.window {
            self.window.pop_front();
        }
        self.window.push_back(seen);

        // The window holds at most MAX_WINDOW samples (validated): no
        // allocation per sample.
        let mut repeated = [false; MAX_WINDOW];
        for (i, seen_before) in repeated.iter_mut().enumerate().take(self.window.len()) {
            let sig = self.window[i].signature;
            *seen_before = self.window.iter().take(i).any(|e| e.signature == sig);
        }
        let repeats = repeated.iter().filter(|&&r| r).count();
        let pauses = self.window.iter().filter(|e| e.after_pause).count();
        // The newest sample must itself be part of the evidence: old spin
        // samples in the window say nothing about a thread that has moved on.
        let newest = self.window.len() - 1;
        let evidence = (self.window.len() == p.window && repeats >= p.repeats && repeated[newest])
            || (pauses >= p.pauses && seen.after_pause);
        let spin_now = known || evidence;
        self.last_window_spinning = spin_now;

        if spin_now {
            // Learn this loop: its repeating states and PAUSE sites.
            for (i, e) in self.window.iter().enumerate() {
                if repeated[i] {
                    remember(&mut self.known_states, e.signature, p.memory);
                }
                if e.after_pause {
                    remember(&mut self.known_pause_ips, e.ip, p.memory);
                }
                if (repeated[i] || e.after_pause)
                    && !self.episode_ips.contains(&e.ip)
                    && self.episode_ips.len() < EPISODE_IPS
                {
                    self.episode_ips.push(e.ip);
                }
            }
            if known && !self.episode_ips.contains(&seen.ip) && self.episode_ips.len() < EPISODE_IPS
            {
                self.episode_ips.push(seen.ip);
            }
            if !self.spinning {
                self.spinning = true;
                if repeated[newest] {
                    self.learn_loop(&seen, p.memory);
                }
                return Transition::Started;
            }
            return Transition::None;
        }
        if self.spinning {
            let in_loop = self
                .episode_ips
                .iter()
                .any(|&ip| ip.abs_diff(seen.ip) <= p.episode_reach_bytes);
            if !in_loop {
                self.spinning = false;
                self.episode_ips.clear();
                // Old spin samples must not re-trigger on the next sample.
                self.window.clear();
                self.window.push_back(seen);
                return Transition::Ended;
            }
        }
        Transition::None
    }
}

impl ThreadDetector {
    fn learn_loop(&mut self, seen: &Seen, cap: usize) {
        if let Some(l) = self.known_loops.iter_mut().find(|l| l.ip == seen.ip) {
            l.learn(&seen.regs);
            return;
        }
        if self.known_loops.len() >= cap {
            self.known_loops.pop_front();
        }
        self.known_loops.push_back(KnownLoop {
            ip: seen.ip,
            stable: (1u32 << NREGS) - 1,
            regs: seen.regs,
        });
    }
}

fn remember(list: &mut VecDeque<u64>, value: u64, cap: usize) {
    if list.contains(&value) {
        return;
    }
    if list.len() >= cap {
        list.pop_front();
    }
    list.push_back(value);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::NREGS;

    fn sample(ip: u64, reg0: u64, pause: bool) -> Sample {
        let mut regs = [7u64; NREGS];
        regs[0] = reg0;
        Sample {
            time_ns: 0,
            tid: 1,
            ip,
            regs,
            after_pause: pause,
        }
    }

    #[test]
    fn constant_flag_loop_is_detected_after_repeats() {
        let p = DetectorParams::default();
        let mut d = ThreadDetector::new();
        let mut transitions = vec![];
        for _ in 0..4 {
            transitions.push(d.observe(&sample(0x1000, 1, false), &p));
        }
        assert_eq!(
            transitions,
            [
                Transition::None,
                Transition::None,
                Transition::None,
                Transition::Started
            ]
        );
        assert!(d.spinning());
    }

    #[test]
    fn progressing_loop_never_spins() {
        let p = DetectorParams::default();
        let mut d = ThreadDetector::new();
        for i in 0..1000 {
            assert_eq!(
                d.observe(&sample(0x2000 + (i % 3) * 4, i, false), &p),
                Transition::None
            );
        }
        assert!(!d.spinning());
    }

    #[test]
    fn counting_pause_loop_is_detected_by_pause_sites() {
        let p = DetectorParams::default();
        let mut d = ThreadDetector::new();
        assert_eq!(d.observe(&sample(0x3000, 1, true), &p), Transition::None);
        assert_eq!(d.observe(&sample(0x3000, 2, true), &p), Transition::Started);
        // A sample on the loop's compare (not after PAUSE, new counter) stays in the episode.
        assert_eq!(d.observe(&sample(0x3008, 3, false), &p), Transition::None);
        assert!(d.spinning());
    }

    #[test]
    fn episode_ends_when_code_moves_away_and_known_state_retriggers_at_once() {
        let p = DetectorParams::default();
        let mut d = ThreadDetector::new();
        for _ in 0..4 {
            d.observe(&sample(0x1000, 1, false), &p);
        }
        assert!(d.spinning());
        assert_eq!(d.observe(&sample(0x9000, 50, false), &p), Transition::Ended);
        assert_eq!(d.observe(&sample(0x9010, 51, false), &p), Transition::None);
        // Back in the same wait: one sample is enough.
        assert_eq!(
            d.observe(&sample(0x1000, 1, false), &p),
            Transition::Started
        );
    }

    #[test]
    fn a_loop_reentered_with_a_new_loaded_value_is_recognised_at_once() {
        let p = DetectorParams::default();
        let mut d = ThreadDetector::new();
        let episode = |d: &mut ThreadDetector, turn: u64| {
            let mut t = vec![];
            for _ in 0..4 {
                t.push(d.observe(&sample(0x1000, turn, false), &p));
            }
            d.observe(&sample(0x9000 + turn * 64, 1000 + turn, false), &p);
            t
        };
        // First two episodes: found by repeats; the second teaches that reg 0 is data.
        assert!(episode(&mut d, 1)[1..].contains(&Transition::Started));
        assert!(episode(&mut d, 2)[1..].contains(&Transition::Started));
        // Third wait, new turn value: the first sample already counts.
        assert_eq!(episode(&mut d, 3)[0], Transition::Started);
    }

    #[test]
    fn params_are_validated() {
        assert_eq!(DetectorParams::default().validate(), Ok(()));
        let with = |window, repeats, pauses| DetectorParams {
            window,
            repeats,
            pauses,
            ..Default::default()
        };
        assert_eq!(
            with(4, 4, 2).validate(),
            Err(ParamsError::Repeats {
                repeats: 4,
                window: 4
            })
        );
        assert_eq!(
            with(1, 1, 1).validate(),
            Err(ParamsError::Window { window: 1 })
        );
        assert_eq!(
            with(MAX_WINDOW + 1, 2, 2).validate(),
            Err(ParamsError::Window {
                window: MAX_WINDOW + 1
            })
        );
        assert_eq!(
            with(MAX_WINDOW, MAX_WINDOW - 1, MAX_WINDOW).validate(),
            Ok(())
        );
        assert_eq!(
            with(4, 2, 0).validate(),
            Err(ParamsError::Pauses {
                pauses: 0,
                window: 4
            })
        );
        assert_eq!(
            with(4, 2, 5).validate(),
            Err(ParamsError::Pauses {
                pauses: 5,
                window: 4
            })
        );
        // The message names the setting, as the command line's flags do.
        assert!(with(1, 1, 1)
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("window"));
    }

    #[test]
    fn a_sample_within_the_episode_reach_stays_in_the_episode() {
        let p = DetectorParams::default();
        let mut d = ThreadDetector::new();
        for _ in 0..WINDOW {
            d.observe(&sample(0x1000, 1, false), &p);
        }
        assert!(d.spinning());
        // New state at the edge of the reach: still the same wait.
        let edge = 0x1000 + EPISODE_REACH_BYTES;
        assert_eq!(d.observe(&sample(edge, 2, false), &p), Transition::None);
        assert!(d.spinning());
        // One byte further from every address seen spinning: the episode ends.
        assert_eq!(
            d.observe(&sample(edge + 1, 3, false), &p),
            Transition::Ended
        );
    }
}
