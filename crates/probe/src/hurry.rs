//! Ending the light windows of busy vCPUs on time.
//!
//! A light window's prober runs at SCHED_IDLE, so on a vCPU that a
//! CPU-bound task keeps busy it gets a turn only now and then: the fair
//! class weighs it 3 against the task's 1024, so after one tick's turn it
//! waits about 340 ticks' worth of the task's time (1.4 s at 250 Hz).
//! It notices that its window is over only when it next runs, and the
//! round waits for it: with a CPU-bound loop pinned to vCPU 0 of a lab
//! guest, `--watch` steps of 100 ms windows took 0.88-3.64 s (median
//! 1.35 s). A daemon asked for a report every second got one every 1-3 s,
//! and once gave a stacked vCPU back 7.3 s after the host had placed it
//! apart.
//!
//! So once a prober's window is over, and a grace has passed, the prober
//! still in it is raised to SCHED_FIFO 1: it runs at once, finds its
//! window over and returns. What it measured does not change: its wait
//! behind the task was guest time either way, only shorter now.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use vsched_os::sched::{self, SchedAttr};

/// How long past its window's end a prober is left to finish by itself.
/// One whose vCPU is free ends within microseconds of the end; one whose
/// vCPU the hypervisor has switched off ends when it is back, within a
/// few ms under a cap (5 ms off in every 10 ms at 50%). Only a prober
/// queued behind guest work waits longer: 10 ms leaves the others alone.
pub const GRACE_NS: u64 = 10_000_000;

/// What the round's coordinator knows of one prober's light window.
#[derive(Debug, Default)]
pub struct LightWindow {
    /// The prober's thread id (0 until it has started).
    tid: AtomicI32,
    /// When its window ends (CLOCK_MONOTONIC ns; 0 until it has begun).
    end_ns: AtomicU64,
    /// It has returned from its window, or will run none.
    done: AtomicBool,
    /// The coordinator has raised it (once is enough).
    hurried: AtomicBool,
}

impl LightWindow {
    /// Called by the prober on its own thread before anything else.
    pub fn started(&self) {
        self.tid.store(sched::gettid(), Ordering::Release);
    }

    /// Called by the prober as its window begins.
    pub fn begins(&self, end_ns: u64) {
        self.end_ns.store(end_ns, Ordering::Release);
    }

    /// Called by the prober right after its drop to SCHED_IDLE, which
    /// undid any raise that came before it (a prober held up between its
    /// window's start and the drop): it then raises itself again.
    pub fn entered(&self) {
        if self.hurried.load(Ordering::SeqCst) {
            raise(sched::gettid());
        }
    }

    /// Called by the prober when its window is over, or when it will run
    /// none.
    pub fn finished(&self) {
        self.done.store(true, Ordering::Release);
    }

    /// When this prober should be raised if it is still in its window, or
    /// `None` if it never needs to be (finished, or raised already);
    /// `not_begun` stands in for a window that has not begun yet.
    fn due_ns(&self, not_begun: u64) -> Option<u64> {
        if self.done.load(Ordering::Acquire) || self.hurried.load(Ordering::Relaxed) {
            return None;
        }
        match self.end_ns.load(Ordering::Acquire) {
            0 => Some(not_begun),
            end => Some(end + GRACE_NS),
        }
    }

    /// Raises the prober if its window ended more than `GRACE_NS` before
    /// `now`, it is still in it and it was not raised before.
    fn hurry_if_due(&self, now: u64) {
        let end = self.end_ns.load(Ordering::Acquire);
        if end == 0 || now < end + GRACE_NS {
            return;
        }
        // SeqCst, paired with `entered`: either the prober sees the flag
        // after its drop, or this raise comes after the drop.
        if self.done.load(Ordering::Acquire) || self.hurried.swap(true, Ordering::SeqCst) {
            return;
        }
        raise(self.tid.load(Ordering::Acquire));
    }
}

/// Raises every prober of `windows` whose window ended more than `GRACE_NS`
/// before `now`; returns when to look again (`None`: no prober left to
/// watch). A window not begun yet ends `light_ns` from now at the
/// earliest.
pub fn hurry_due(windows: &[LightWindow], now: u64, light_ns: u64) -> Option<u64> {
    for w in windows {
        w.hurry_if_due(now);
    }
    windows
        .iter()
        .filter_map(|w| w.due_ns(now + light_ns))
        .min()
}

/// SCHED_FIFO 1, the heavy window's class, else a normal thread's; a
/// prober without the privilege for either (an unprivileged `vsched
/// probe`) keeps its wait. The prober had not finished a moment before,
/// so the tid is its own: naming another thread would take the kernel
/// handing out pid_max new ids in those microseconds.
fn raise(tid: i32) {
    if tid == 0 {
        return;
    }
    let fifo = SchedAttr {
        policy: libc::SCHED_FIFO as u32,
        nice: 0,
        priority: 1,
        flags: 0,
        runtime: 0,
        deadline: 0,
        period: 0,
    };
    if sched::set(tid, &fifo).is_err() {
        let _ = sched::set(
            tid,
            &SchedAttr {
                policy: sched::SCHED_OTHER,
                priority: 0,
                ..fifo
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_window_not_begun_is_looked_at_again_a_window_later() {
        let w = [LightWindow::default()];
        assert_eq!(hurry_due(&w, 1_000, 100), Some(1_100));
    }

    #[test]
    fn a_window_is_looked_at_again_a_grace_after_its_end() {
        let w = [LightWindow::default()];
        w[0].begins(5_000);
        assert_eq!(hurry_due(&w, 1_000, 100), Some(5_000 + GRACE_NS));
    }

    #[test]
    fn finished_probers_are_not_watched() {
        let w = [LightWindow::default(), LightWindow::default()];
        w[0].finished();
        w[1].begins(7);
        w[1].finished();
        assert_eq!(hurry_due(&w, u64::MAX / 2, 100), None);
    }

    /// The policy the calling thread has once it is SCHED_FIFO, or after
    /// 5 s (the raise comes from another thread).
    fn policy_once_fifo() -> u32 {
        let fifo = libc::SCHED_FIFO as u32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let policy = sched::get(0).unwrap().policy;
            if policy == fifo || std::time::Instant::now() > deadline {
                return policy;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    fn root() -> bool {
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() == 0 }
    }

    /// A prober at SCHED_IDLE past its window's end is raised to
    /// SCHED_FIFO (as root; elsewhere only the attempt can be checked).
    #[test]
    fn a_prober_past_its_window_is_raised() {
        let w = Arc::new([LightWindow::default()]);
        let w2 = Arc::clone(&w);
        let t = std::thread::spawn(move || {
            w2[0].started();
            w2[0].begins(1);
            sched::set_scheduler(libc::SCHED_IDLE, 0).unwrap();
            w2[0].entered();
            let policy = policy_once_fifo();
            w2[0].finished();
            policy
        });
        while w[0].end_ns.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        assert_eq!(hurry_due(&w[..], 1 + GRACE_NS, 100), None);
        assert!(w[0].hurried.load(Ordering::SeqCst));
        let policy = t.join().unwrap();
        if root() {
            assert_eq!(policy, libc::SCHED_FIFO as u32);
        }
    }

    /// Regression (review): a raise that came before the prober's drop to
    /// SCHED_IDLE was undone by the drop, and the prober was never
    /// raised again; `entered` redoes it.
    #[test]
    fn a_raise_before_the_drop_to_sched_idle_is_redone() {
        let w = Arc::new([LightWindow::default()]);
        let w2 = Arc::clone(&w);
        let (raised_tx, raised) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            w2[0].started();
            w2[0].begins(1);
            raised.recv().unwrap();
            sched::set_scheduler(libc::SCHED_IDLE, 0).unwrap();
            w2[0].entered();
            let policy = sched::get(0).unwrap().policy;
            w2[0].finished();
            policy
        });
        while w[0].end_ns.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        assert_eq!(hurry_due(&w[..], 1 + GRACE_NS, 100), None);
        raised_tx.send(()).unwrap();
        let policy = t.join().unwrap();
        if root() {
            assert_eq!(policy, libc::SCHED_FIFO as u32);
        }
    }
}
