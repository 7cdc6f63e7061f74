//! vcap/vact: one prober thread per vCPU, pinned, all sampling the same
//! window at the same time, so their results compare (vSched §3.1).
//!
//! Each prober runs a heavy window (high priority: core speed, and what
//! pre-empts even a high-priority task) and/or a light window (SCHED_IDLE:
//! only idle cycles; the hypervisor's share). Heavy runs first because an
//! unprivileged thread may lower its priority but not raise it again.

use crate::hurry::{self, LightWindow};
use crate::sys::{self, Policy, SchedStat};
use std::hint::black_box;
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::Duration;
use vsched_model::stats::upper_median;
use vsched_model::timeline::SPEED_CHUNK_NS;
use vsched_model::{Gap, Phase, Timeline};
use vsched_os::{affinity, clock};

/// Settings of one sampling round.
#[derive(Debug, Clone, Copy)]
pub struct SampleConfig {
    pub light_ns: u64,
    pub heavy_ns: u64,
    /// A jump between two clock reads longer than this is a gap.
    pub detect_ns: u64,
}

impl Default for SampleConfig {
    fn default() -> Self {
        SampleConfig {
            light_ns: 200_000_000,
            heavy_ns: 100_000_000,
            detect_ns: 5_000,
        }
    }
}

/// What one round produced.
#[derive(Debug, Clone, Default)]
pub struct SampleRound {
    pub light: Vec<Timeline>,
    pub heavy: Vec<Timeline>,
    pub light_policy: String,
    pub heavy_policy: String,
    /// CPU time the probers spent in each phase (for overhead accounting).
    pub light_cpu_ns: u64,
    pub heavy_cpu_ns: u64,
    pub warnings: Vec<String>,
}

struct ProberResult {
    light: Option<Timeline>,
    heavy: Option<Timeline>,
    light_policy: String,
    heavy_policy: String,
    light_cpu_ns: u64,
    heavy_cpu_ns: u64,
}

/// Samples every CPU in `cpus` at once. `progress`, if any, is called from
/// the calling thread with the elapsed fraction while the probers run.
/// Without it the calling thread sleeps until the light windows should be
/// over: a thread that wakes up now and then would itself pre-empt the
/// light-phase probers, and if the hypervisor switched the vCPU off
/// meanwhile, that time would read as guest work. Then it raises the
/// probers still in their windows (crate::hurry).
pub fn sample(cpus: &[u32], cfg: &SampleConfig, progress: Option<&dyn Fn(f64)>) -> SampleRound {
    let mut round = SampleRound::default();
    // Pin-check first so a refused CPU cannot leave the others waiting at a barrier.
    let usable: Vec<u32> = cpus
        .iter()
        .copied()
        .filter(|&c| match can_pin(c) {
            Ok(()) => true,
            Err(e) => {
                round.warnings.push(format!(
                    "vCPU {c} not measured: cannot run a prober on it ({e})"
                ));
                false
            }
        })
        .collect();
    let barrier = Arc::new(Barrier::new(usable.len()));
    let windows: Arc<[LightWindow]> = usable.iter().map(|_| LightWindow::default()).collect();
    let (light_began_tx, light_began) = mpsc::channel();
    let start = clock::monotonic_ns();
    let handles: Vec<_> = usable
        .iter()
        .enumerate()
        .map(|(i, &cpu)| {
            let barrier = Arc::clone(&barrier);
            let windows = Arc::clone(&windows);
            let light_began = light_began_tx.clone();
            let cfg = *cfg;
            thread::Builder::new()
                .name(format!("vcap-{cpu}"))
                .spawn(move || prober(cpu, &cfg, &barrier, &windows[i], &light_began))
                .expect("spawning a prober thread")
        })
        .collect();
    drop(light_began_tx);
    let total = (cfg.light_ns + cfg.heavy_ns).max(1);
    if let Some(progress) = progress {
        while !handles.iter().all(|h| h.is_finished()) {
            progress(((clock::monotonic_ns() - start) as f64 / total as f64).min(1.0));
            hurry::hurry_due(&windows, clock::monotonic_ns(), cfg.light_ns);
            thread::sleep(Duration::from_millis(100));
        }
    } else if cfg.light_ns > 0 {
        // Asleep until the light windows have begun and should be over,
        // then only to raise the probers still in theirs (crate::hurry).
        if let Ok(began) = light_began.recv() {
            let mut next = Some(began + cfg.light_ns + hurry::GRACE_NS);
            while let Some(t) = next {
                clock::sleep_until_monotonic_ns(t);
                next = hurry::hurry_due(&windows, clock::monotonic_ns(), cfg.light_ns);
            }
        }
    }
    for (h, &cpu) in handles.into_iter().zip(&usable) {
        let r = h.join().expect("prober thread panicked");
        if r.light.is_none() && r.heavy.is_none() {
            round.warnings.push(format!(
                "vCPU {cpu} not measured: its prober could not be pinned to it"
            ));
        }
        round.light.extend(r.light);
        round.heavy.extend(r.heavy);
        round.light_policy = r.light_policy;
        round.heavy_policy = r.heavy_policy;
        round.light_cpu_ns += r.light_cpu_ns;
        round.heavy_cpu_ns += r.heavy_cpu_ns;
    }
    if !usable.is_empty() && sys::SchedStat::open_current_thread().is_err() {
        round.warnings.push(
            "/proc/thread-self/schedstat is unreadable: guest pre-emption of the light phase \
             cannot be told from hypervisor time, so busy vCPUs may read as less available"
                .to_string(),
        );
    }
    if round.heavy_policy.starts_with("normal") {
        round.warnings.push(
            "heavy phase ran at normal priority (needs CAP_SYS_NICE or RLIMIT_RTPRIO): \
             busy guest tasks will read as lower availability"
                .to_string(),
        );
    }
    round
}

fn can_pin(cpu: u32) -> std::io::Result<()> {
    thread::scope(|s| {
        s.spawn(|| affinity::pin_current_thread(cpu))
            .join()
            .unwrap()
    })
}

/// One vCPU's prober: its heavy window, then its light one (`light`
/// tells the coordinator how that goes; the first prober past the light
/// barrier sends on `light_began` when the light windows begin).
fn prober(
    cpu: u32,
    cfg: &SampleConfig,
    barrier: &Barrier,
    light: &LightWindow,
    light_began: &mpsc::Sender<u64>,
) -> ProberResult {
    light.started();
    // Every prober must reach every barrier, even one that cannot measure
    // (its CPU left our cpuset since the check), or the others wait forever.
    let pinned = affinity::pin_current_thread(cpu).is_ok();
    let mut r = ProberResult {
        light: None,
        heavy: None,
        light_policy: String::new(),
        heavy_policy: String::new(),
        light_cpu_ns: 0,
        heavy_cpu_ns: 0,
    };
    if cfg.heavy_ns > 0 {
        r.heavy_policy = sys::apply_policy(Policy::High);
        barrier.wait();
        if pinned {
            let c0 = clock::thread_cpu_ns();
            let kit = WindowKit::new(cpu, cfg.heavy_ns, cfg.detect_ns);
            r.heavy = Some(window(kit, Phase::Heavy, None, || {}));
            r.heavy_cpu_ns = clock::thread_cpu_ns() - c0;
        }
    }
    if cfg.light_ns > 0 {
        // Meet the others first: at SCHED_IDLE on a busy vCPU this thread
        // might reach the barrier late and hold everyone back.
        if barrier.wait().is_leader() {
            // Cannot fail: the coordinator keeps the receiver until every
            // prober is joined (and with progress to show, never reads it).
            let _ = light_began.send(clock::monotonic_ns());
        }
        if pinned {
            let c0 = clock::thread_cpu_ns();
            let kit = WindowKit::new(cpu, cfg.light_ns, cfg.detect_ns);
            r.light = Some(window(kit, Phase::Light, Some(light), || {
                r.light_policy = sys::apply_policy(Policy::Idle);
                light.entered();
            }));
            r.light_cpu_ns = clock::thread_cpu_ns() - c0;
        } else {
            // Nothing to measure: finished before the drop, so that the
            // coordinator does not wait for it.
            light.finished();
            r.light_policy = sys::apply_policy(Policy::Idle);
        }
    }
    light.finished();
    r
}

/// A fixed slice of integer work (tens of ns): the unit of "work units".
#[inline(always)]
fn work_unit(state: u64) -> u64 {
    let mut x = state;
    for _ in 0..16 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    black_box(x)
}

/// Shortest time between two clock reads that the prober aims for: often
/// enough to place a 5 µs gap to within half a microsecond.
const MIN_BATCH_NS: u64 = 500;

/// Work done per clock read, as a multiple of what one read costs: reads
/// take at most 1/50 of the prober's time.
const WORK_PER_READ: u64 = 50;

/// Work units per clock read. Reads are spaced by 50x their own cost, but at
/// least `MIN_BATCH_NS` and at most half the gap threshold so that every gap
/// still shows. A read that costs much is spaced out because it may do more
/// than cost: under QEMU's TCG every TSC read takes a spin lock shared by all
/// vCPUs (`cpu_get_ticks`), and a vCPU switched off while holding it stalls
/// every sibling that reads the clock until it runs again. In the lab, with
/// vCPU 1 capped to 30%, reads every 31 ns cost the free vCPU 0 30-41% of its
/// time, every 500 ns 2-26%, every 2 µs 3-8% (docs/lab.md).
fn units_per_batch(cpu: u32, detect_ns: u64) -> u64 {
    const PROBE: u64 = 256;
    let mut state = cpu as u64 + 1;
    let mut per_unit = u64::MAX;
    let mut per_read = u64::MAX;
    for _ in 0..5 {
        let t = clock::monotonic_ns();
        for _ in 0..PROBE {
            state = work_unit(state);
        }
        let t1 = clock::monotonic_ns();
        for _ in 0..PROBE {
            black_box(clock::monotonic_ns());
        }
        per_unit = per_unit.min((t1 - t) / PROBE);
        per_read = per_read.min((clock::monotonic_ns() - t1) / PROBE);
    }
    batch_units(per_unit, per_read, detect_ns)
}

/// The batching rule of `units_per_batch`, given measured costs.
fn batch_units(per_unit_ns: u64, per_read_ns: u64, detect_ns: u64) -> u64 {
    let most = (detect_ns / 2).max(MIN_BATCH_NS);
    let batch_ns = (per_read_ns * WORK_PER_READ).clamp(MIN_BATCH_NS, most);
    (batch_ns / per_unit_ns.max(1)).clamp(1, 4096)
}

/// Reads of the gap split that may be repeated because they were
/// themselves interrupted (each repeat joins the interruption to the gap).
const MAX_SPLIT_TRIES: u32 = 4;

/// What the reads that split a gap (run delay, thread CPU time) cost when
/// nothing interrupts them: the least of a few tries.
fn split_cost_ns(sched: &mut Option<SchedStat>) -> u64 {
    (0..5)
        .map(|_| {
            let t = clock::monotonic_ns();
            black_box(sched.as_mut().map_or(0, |s| s.run_delay_ns()));
            black_box(clock::thread_cpu_ns());
            clock::monotonic_ns() - t
        })
        .min()
        .unwrap_or(0)
}

/// Reads what splits a gap that ended at `t` (`read`: run delay and thread
/// CPU time) and returns them with the gap's true end. The reads take time
/// of their own, which the timeline leaves out; but reads that took longer
/// than `limit` were themselves interrupted, and that interruption joins the
/// gap (the reads are then repeated, up to `MAX_SPLIT_TRIES` in all).
/// Bandwidth control throttles a vCPU at a scheduling event, often right
/// after a short pre-emption the prober has just seen: without this, the
/// whole throttling would vanish from the timeline.
fn split_gap(
    t: u64,
    limit: u64,
    mut read: impl FnMut() -> (u64, u64),
    mut now: impl FnMut() -> u64,
) -> (u64, u64, u64) {
    let mut end = t;
    for tries in 1.. {
        let (rd, c) = read();
        let after = now();
        if after - end <= limit || tries == MAX_SPLIT_TRIES {
            return (end, rd, c);
        }
        end = after;
    }
    unreachable!("the loop returns by its last try")
}

/// What a window needs before it begins: made at the prober's own
/// priority, before a light window's drop to SCHED_IDLE. At SCHED_IDLE
/// on a busy vCPU these milliseconds of set-up (clock reads are slow
/// under TCG) would be charged 340 times over (crate::hurry) before the
/// window began.
struct WindowKit {
    cpu: u32,
    window_ns: u64,
    detect_ns: u64,
    sched: Option<SchedStat>,
    gaps: Vec<Gap>,
    chunk_rates: Vec<f64>,
    batch: u64,
    split_limit: u64,
}

impl WindowKit {
    fn new(cpu: u32, window_ns: u64, detect_ns: u64) -> WindowKit {
        // Without schedstat, guest pre-emption cannot be told from the
        // hypervisor's; `sample` warns when that happens.
        let mut sched = SchedStat::open_current_thread().ok();
        let split_limit = split_cost_ns(&mut sched).saturating_mul(4).max(detect_ns);
        WindowKit {
            cpu,
            window_ns,
            detect_ns,
            sched,
            // Allocated before the window so that nothing inside it allocates.
            gaps: Vec::with_capacity((window_ns / 20_000).clamp(1024, 1 << 20) as usize),
            chunk_rates: Vec::with_capacity((window_ns / SPEED_CHUNK_NS + 1) as usize),
            batch: units_per_batch(cpu, detect_ns),
            split_limit,
        }
    }
}

/// Spins for the kit's `window_ns`, recording every gap in the calling
/// thread's timeline; tells `watched`, if any, when the window ends. `enter` runs
/// once the window has begun (a light window's drop to SCHED_IDLE): if
/// the thread then waits before it first runs, that wait is the window's
/// first gap, read like any other (by run delay: guest work), instead of
/// a late start that only moves the window.
fn window(
    kit: WindowKit,
    phase: Phase,
    watched: Option<&LightWindow>,
    enter: impl FnOnce(),
) -> Timeline {
    let WindowKit {
        cpu,
        window_ns,
        detect_ns,
        mut sched,
        mut gaps,
        mut chunk_rates,
        batch,
        split_limit,
    } = kit;
    let run_delay = |s: &mut Option<SchedStat>| s.as_mut().map_or(0, |s| s.run_delay_ns());
    let steal0 = sys::steal_ns(cpu);
    let mut units = 0u64;
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ cpu as u64;

    let mut last_rd = run_delay(&mut sched);
    let mut last_cpu = clock::thread_cpu_ns();
    let t0 = clock::monotonic_ns();
    let end = t0 + window_ns;
    if let Some(w) = watched {
        w.begins(end);
    }
    let mut last = t0;
    let mut resumed = t0;
    enter();
    // What `enter` cost is left out like the gap reads' cost below (its
    // CPU time would read as hidden steal); only a wait behind guest work
    // after it (run delay) makes the window's first gap.
    if run_delay(&mut sched) == last_rd {
        last_cpu = clock::thread_cpu_ns();
        last = clock::monotonic_ns();
        resumed = last;
    }
    // Uninterrupted stretches: (start time, units at start); rates per stretch.
    let mut chunk = (last, 0u64);
    loop {
        for _ in 0..batch {
            state = work_unit(state);
        }
        units += batch;
        let t = clock::monotonic_ns();
        if t - chunk.0 >= SPEED_CHUNK_NS && t - last <= detect_ns {
            chunk_rates.push((units - chunk.1) as f64 / ((t - chunk.0) as f64 / 1_000.0));
            chunk = (t, units);
        }
        if t - last > detect_ns {
            let (end, rd, c) = split_gap(
                t,
                split_limit,
                || (run_delay(&mut sched), clock::thread_cpu_ns()),
                clock::monotonic_ns,
            );
            gaps.push(Gap::from_deltas(
                last - t0,
                end - last,
                rd.saturating_sub(last_rd),
                c.saturating_sub(last_cpu),
                last - resumed,
            ));
            last_rd = rd;
            last_cpu = c;
            // What the final reads took is left out: restart the clock after them.
            last = clock::monotonic_ns();
            resumed = last;
            chunk = (last, units);
        } else {
            last = t;
        }
        if last >= end {
            break;
        }
    }
    let window_ns = last - t0;
    // /proc/stat counts in USER_HZ ticks: a difference of one tick may be
    // pure quantisation, so only the ticks beyond it count.
    let reported_steal_ns = match (steal0, sys::steal_ns(cpu)) {
        (Some(a), Some(b)) => b
            .saturating_sub(a)
            .saturating_sub(sys::steal_tick_ns())
            .min(window_ns),
        _ => 0,
    };
    chunk_rates.sort_by(f64::total_cmp);
    Timeline {
        cpu,
        phase,
        window_ns,
        work_units: units,
        reported_steal_ns,
        gaps,
        median_chunk_speed: upper_median(&chunk_rates),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cheap_clock_reads_come_every_half_microsecond() {
        // 8 ns reads: 50 x 8 ns is under the floor.
        assert_eq!(batch_units(31, 8, 5_000), 500 / 31);
    }

    #[test]
    fn costly_clock_reads_are_spaced_by_fifty_times_their_cost() {
        assert_eq!(batch_units(10, 40, 5_000), 2_000 / 10);
    }

    /// A fake clock that returns `times` in turn.
    fn clock(times: &[u64]) -> impl FnMut() -> u64 + '_ {
        let mut i = 0;
        move || {
            i += 1;
            times[i - 1]
        }
    }

    #[test]
    fn quick_split_reads_leave_the_gap_as_seen() {
        let (end, rd, c) = split_gap(100_000, 5_000, || (7, 9), clock(&[101_000]));
        assert_eq!((end, rd, c), (100_000, 7, 9));
    }

    #[test]
    fn an_interruption_of_the_split_reads_joins_the_gap() {
        // Throttled for 7 ms during the first reads; the second reads are quick
        // and their values (taken after the throttling) are the ones kept.
        let mut n = 0;
        let reads = || {
            n += 1;
            (n, 10 * n)
        };
        let (end, rd, c) = split_gap(100_000, 5_000, reads, clock(&[7_101_000, 7_102_000]));
        assert_eq!((end, rd, c), (7_101_000, 2, 20));
    }

    #[test]
    fn split_reads_are_repeated_a_bounded_number_of_times() {
        let mut tries = 0;
        let times = [1_000_000, 2_000_000, 3_000_000, 4_000_000, 5_000_000];
        let (end, _, _) = split_gap(
            0,
            5_000,
            || {
                tries += 1;
                (0, 0)
            },
            clock(&times),
        );
        assert_eq!(tries, MAX_SPLIT_TRIES);
        assert_eq!(end, 3_000_000);
    }

    #[test]
    fn spacing_never_hides_a_gap() {
        // Emulated reads of 300 ns would ask for 15 µs; half the 5 µs threshold caps it.
        assert_eq!(batch_units(31, 300, 5_000), 2_500 / 31);
        assert_eq!(batch_units(1, 1_000_000, 5_000), 2_500);
    }
}
