//! vtop: cache-line ping-pong between pairs of vCPUs (vSched §3.1).
//!
//! Two pinned high-priority threads take turns incrementing one counter on
//! its own cache line: each increment is one transfer of the line. The
//! lowest mean time per transfer over a batch is the pair's latency; the
//! number of transfers that follow each other quickly tells whether the two
//! vCPUs ever ran at the same time (stacked vCPUs cannot).

use crate::sys::{self, Policy};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use vsched_model::topology::{
    self, implied_by, PairProbe, Topology, TopologyParams, FAST_TRANSFER_NS,
};
use vsched_os::{affinity, clock};

/// Settings of pair probing.
#[derive(Debug, Clone, Copy)]
pub struct VtopConfig {
    /// First window per pair; doubled on each extension.
    pub window_ns: u64,
    /// Stop a pair early once this many transfers were timed.
    pub target_transfers: u64,
    /// Windows tried before a pair with few overlapping transfers is called stacked.
    pub max_attempts: u32,
    pub params: TopologyParams,
}

impl Default for VtopConfig {
    fn default() -> Self {
        VtopConfig {
            window_ns: 10_000_000,
            target_transfers: 20_000,
            max_attempts: 3,
            params: TopologyParams::default(),
        }
    }
}

/// Transfers per timed batch (latency = batch time / BATCH).
const BATCH: u64 = 32;

/// Spins between two readings of the clock while waiting for the partner:
/// a clock read costs a vDSO call, the spin a PAUSE, so the wait stays a
/// tight loop and still notices its deadline within microseconds.
const SPINS_PER_CLOCK_CHECK: u32 = 256;

/// How long a responder outlasts its initiator's window before it gives up.
///
/// The two threads of a pair can end up on one vCPU: a pin refused because
/// the vCPU just went offline, or the kernel moving a pinned thread off a
/// vCPU going offline. Both run SCHED_FIFO 1, and FIFO never time-slices
/// between equals, so a responder that waited only for its initiator's
/// word spun for ever ahead of an initiator that could not run. That hung
/// guests: the spinner also never passes through a voluntary switch, which
/// RCU-tasks grace periods wait for, so even unloading the scheduler
/// (bpf_struct_ops_map_free) waited behind it. Past its initiator's end a
/// responder serves nobody; 10 ms covers the initiator's last batch and a
/// host preemption of a few milliseconds, and bounds the spin that starves
/// a partner on its vCPU to the window plus 10 ms.
const RESPONDER_GRACE_NS: u64 = 10_000_000;

/// How long past its own window a responder waits for an initiator that
/// has not started. Until it starts, the responder yields at every clock
/// check, which lets an initiator queued behind it on the same vCPU run; an
/// initiator still not started was kept off its vCPU by the host (a time
/// slice there is a few to tens of milliseconds) or by other real-time
/// work, and its window will read as the two not active together, as it
/// should, and be retried as such.
const RESPONDER_WAITS_FOR_START_NS: u64 = 100_000_000;

#[repr(align(128))]
struct Line(AtomicU64);

#[repr(align(128))]
struct Flag(AtomicBool);

/// When the initiator's window ends (monotonic ns; 0 until it starts), for
/// the responder to stop waiting after it.
#[repr(align(128))]
struct End(AtomicU64);

/// Result of a full probe.
#[derive(Debug, Clone)]
pub struct FullProbe {
    pub topology: Topology,
    pub probes: Vec<PairProbe>,
    pub inferred: usize,
}

/// Probes every pair of `cpus`, skipping pairs implied by stacking, running
/// disjoint pairs in parallel. `progress` gets the fraction of pairs done.
pub fn probe_full(cpus: &[u32], cfg: &VtopConfig, progress: &dyn Fn(f64)) -> FullProbe {
    let mut known: BTreeMap<(u32, u32), PairProbe> = BTreeMap::new();
    let mut measured = Vec::new();
    let mut inferred = 0;
    let rounds = topology::round_robin(cpus);
    let total_pairs: usize = rounds.iter().map(Vec::len).sum();
    for round in rounds {
        let mut to_probe = Vec::new();
        for (a, b) in round {
            match implied_by(a, b, &known, &cfg.params) {
                Some(p) => {
                    known.insert((a, b), p);
                    inferred += 1;
                }
                None => to_probe.push((a, b)),
            }
        }
        for p in probe_pairs(&to_probe, cfg) {
            known.insert((p.a, p.b), p);
            measured.push(p);
        }
        progress(known.len() as f64 / total_pairs.max(1) as f64);
    }
    let all: Vec<PairProbe> = known.into_values().collect();
    FullProbe {
        topology: topology::classify(cpus, &all, &cfg.params),
        probes: measured,
        inferred,
    }
}

/// Re-probes the representative pairs of `previous`. Returns the fresh
/// probes and whether every one still falls in its old class.
///
/// A pair known stacked gets one window, not the extensions: they exist
/// so that two vCPUs that were merely not active together are not called
/// stacked, and for a pair already known stacked "still stacked" is what
/// one window of few overlapping transfers says. A pair the host placed
/// apart shows many in its first window. This keeps the frequent checks
/// made while vCPUs are stacked (`plan::STACKED_TOPOLOGY_EVERY`) at one
/// 10 ms window instead of up to 70 ms (10 + 20 + 40).
pub fn validate(previous: &Topology, cfg: &VtopConfig) -> (Vec<PairProbe>, bool) {
    validate_with(previous, cfg, &run_parallel)
}

/// What runs one round of pair probes in parallel: (pairs, window_ns,
/// target transfers) -> one probe per pair. [`run_parallel`], or a stand-in
/// in the unit tests.
type RunPairs<'a> = &'a dyn Fn(&[(u32, u32)], u64, u64) -> Vec<PairProbe>;

fn validate_with(previous: &Topology, cfg: &VtopConfig, run: RunPairs) -> (Vec<PairProbe>, bool) {
    let pairs = previous.validation_pairs();
    let mut probes = Vec::new();
    let windows_for = |(a, b): (u32, u32)| {
        if previous.relation(a, b) == Some(topology::Relation::Stacked) {
            1
        } else {
            cfg.max_attempts
        }
    };
    for round in disjoint_rounds(&pairs) {
        probes.extend(probe_pairs_limited(&round, cfg, &windows_for, run));
    }
    let valid = probes.iter().all(|p| still_holds(previous, p, &cfg.params));
    (probes, valid)
}

/// A fresh probe agrees with the old topology if stacking agrees and, for
/// other pairs, its latency is nearest to the old level of that pair.
fn still_holds(previous: &Topology, p: &PairProbe, params: &TopologyParams) -> bool {
    let Some(old) = previous.relation(p.a, p.b) else {
        return false;
    };
    let was_stacked = old == topology::Relation::Stacked;
    if p.is_stacked(params) || was_stacked {
        return p.is_stacked(params) == was_stacked;
    }
    let Some(lat) = p.latency_ns else {
        return false;
    };
    previous
        .levels
        .iter()
        .min_by(|x, y| {
            let dx = (lat.ln() - x.median_ns.ln()).abs();
            let dy = (lat.ln() - y.median_ns.ln()).abs();
            dx.total_cmp(&dy)
        })
        .is_some_and(|nearest| nearest.relation == old)
}

/// Greedily packs pairs into rounds in which no vCPU appears twice.
fn disjoint_rounds(pairs: &[(u32, u32)]) -> Vec<Vec<(u32, u32)>> {
    let mut rounds: Vec<Vec<(u32, u32)>> = Vec::new();
    for &(a, b) in pairs {
        match rounds
            .iter_mut()
            .find(|r| r.iter().all(|&(x, y)| x != a && x != b && y != a && y != b))
        {
            Some(r) => r.push((a, b)),
            None => rounds.push(vec![(a, b)]),
        }
    }
    rounds
}

/// Probes disjoint pairs in parallel; pairs with too few overlapping
/// transfers are retried with a doubled window, up to `max_attempts`.
pub fn probe_pairs(pairs: &[(u32, u32)], cfg: &VtopConfig) -> Vec<PairProbe> {
    probe_pairs_limited(pairs, cfg, &|_| cfg.max_attempts, &run_parallel)
}

/// [`probe_pairs`] with each pair's own limit of windows (it can only
/// lower `cfg.max_attempts`, which bounds the rounds).
fn probe_pairs_limited(
    pairs: &[(u32, u32)],
    cfg: &VtopConfig,
    max_attempts: &dyn Fn((u32, u32)) -> u32,
    run: RunPairs,
) -> Vec<PairProbe> {
    let mut done = Vec::new();
    let mut pending: Vec<(u32, u32)> = pairs.to_vec();
    let mut window = cfg.window_ns;
    let mut accumulated: BTreeMap<(u32, u32), PairProbe> = BTreeMap::new();
    for attempt in 1..=cfg.max_attempts {
        if pending.is_empty() {
            break;
        }
        let results = run(&pending, window, cfg.target_transfers);
        pending.clear();
        for r in results {
            let key = (r.a, r.b);
            let merged = match accumulated.remove(&key) {
                Some(prev) => PairProbe {
                    transfers: prev.transfers + r.transfers,
                    fast_transfers: prev.fast_transfers + r.fast_transfers,
                    window_ns: prev.window_ns + r.window_ns,
                    latency_ns: match (prev.latency_ns, r.latency_ns) {
                        (Some(x), Some(y)) => Some(x.min(y)),
                        (x, y) => x.or(y),
                    },
                    attempts: attempt,
                    ..r
                },
                None => PairProbe {
                    attempts: attempt,
                    ..r
                },
            };
            if merged.is_stacked(&cfg.params) && attempt < max_attempts(key) {
                // Perhaps the two were just not active together yet: try longer.
                accumulated.insert(key, merged);
                pending.push(key);
            } else {
                done.push(merged);
            }
        }
        window *= 2;
    }
    done.sort_by_key(|p| (p.a, p.b));
    done
}

fn run_parallel(pairs: &[(u32, u32)], window_ns: u64, target: u64) -> Vec<PairProbe> {
    let barrier = Arc::new(Barrier::new(pairs.len() * 2));
    let handles: Vec<_> = pairs
        .iter()
        .map(|&(a, b)| {
            let pair = Arc::new(Pair::new());
            let responder = {
                let (pair, barrier) = (Arc::clone(&pair), Arc::clone(&barrier));
                thread::spawn(move || respond(b, &pair, &barrier, window_ns))
            };
            let barrier = Arc::clone(&barrier);
            let initiator = thread::spawn(move || {
                let r = initiate(a, b, &pair, &barrier, window_ns, target);
                pair.stop.0.store(true, Ordering::Release);
                r
            });
            (initiator, responder)
        })
        .collect();
    handles
        .into_iter()
        .filter_map(|(i, r)| {
            r.join().expect("vtop responder panicked");
            // None: a pair whose threads could not be pinned measured nothing.
            i.join().expect("vtop initiator panicked")
        })
        .collect()
}

/// What the two threads of a pair share.
struct Pair {
    line: Line,
    stop: Flag,
    end: End,
    /// Set by a thread whose pin was refused, before the barrier.
    failed: AtomicBool,
}

impl Pair {
    fn new() -> Pair {
        Pair {
            line: Line(AtomicU64::new(0)),
            stop: Flag(AtomicBool::new(false)),
            end: End(AtomicU64::new(0)),
            failed: AtomicBool::new(false),
        }
    }
}

/// Pins and raises the calling thread, then waits for every thread of the
/// round. Returns whether both threads of the pair were pinned; a refused
/// pin marks the pair void (never panics: the partner and the other pairs
/// wait at the barrier). A void pair must not spin: its threads may share
/// a vCPU at SCHED_FIFO (see [`RESPONDER_GRACE_NS`]).
fn prepare(cpu: u32, pair: &Pair, barrier: &Barrier) -> bool {
    if affinity::pin_current_thread(cpu).is_err() {
        pair.failed.store(true, Ordering::Release);
    }
    sys::apply_policy(Policy::High);
    // Both threads' stores of `failed` come before either load: each
    // stores before the barrier and loads after it.
    barrier.wait();
    !pair.failed.load(Ordering::Acquire)
}

/// Odd values are the responder's to write. Returns when the initiator
/// says so, [`RESPONDER_GRACE_NS`] after the initiator's window, or
/// [`RESPONDER_WAITS_FOR_START_NS`] after its own if the initiator never
/// started.
fn respond(cpu: u32, pair: &Pair, barrier: &Barrier, window_ns: u64) {
    if !prepare(cpu, pair, barrier) {
        return;
    }
    let own_end = clock::monotonic_ns() + window_ns;
    let mut expect = 1u64;
    let mut spins = 0u32;
    while !pair.stop.0.load(Ordering::Relaxed) {
        if pair.line.0.load(Ordering::Acquire) == expect {
            pair.line.0.store(expect + 1, Ordering::Release);
            expect += 2;
            continue;
        }
        std::hint::spin_loop();
        spins = spins.wrapping_add(1);
        if spins % SPINS_PER_CLOCK_CHECK == 0 {
            let now = clock::monotonic_ns();
            match pair.end.0.load(Ordering::Relaxed) {
                0 if now > own_end + RESPONDER_WAITS_FOR_START_NS => return,
                // Not started: perhaps queued behind this thread.
                0 => thread::yield_now(),
                end if now > end + RESPONDER_GRACE_NS => return,
                _ => {}
            }
        }
    }
}

/// Even values are the initiator's; it also keeps time. None: the pair's
/// threads could not be pinned.
fn initiate(
    a: u32,
    b: u32,
    pair: &Pair,
    barrier: &Barrier,
    window_ns: u64,
    target: u64,
) -> Option<PairProbe> {
    if !prepare(a, pair, barrier) {
        return None;
    }
    let line = &pair.line;
    let start = clock::monotonic_ns();
    let end = start + window_ns;
    pair.end.0.store(end, Ordering::Relaxed);
    let mut expect = 0u64;
    let mut batch_start = start;
    let mut batch_first = 0u64;
    let mut fast = 0u64;
    let mut best: Option<f64> = None;
    let mut now;
    let mut spins = 0u32;
    loop {
        if line.0.load(Ordering::Acquire) == expect {
            line.0.store(expect + 1, Ordering::Release);
            expect += 2;
            // Every return of our turn is two more transfers; time them in batches.
            if expect - batch_first >= BATCH {
                now = clock::monotonic_ns();
                let per = (now - batch_start) as f64 / (expect - batch_first) as f64;
                // A batch this quick means both vCPUs ran throughout it.
                if per < FAST_TRANSFER_NS as f64 {
                    fast += expect - batch_first;
                }
                best = Some(best.map_or(per, |b: f64| b.min(per)));
                batch_start = now;
                batch_first = expect;
                if expect >= target || now >= end {
                    break;
                }
            }
        } else {
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            // Check the clock now and then so that a stacked pair still ends.
            if spins % SPINS_PER_CLOCK_CHECK == 0 {
                now = clock::monotonic_ns();
                if now >= end {
                    break;
                }
            }
        }
    }
    Some(PairProbe {
        a: a.min(b),
        b: a.max(b),
        transfers: line.0.load(Ordering::Acquire),
        fast_transfers: fast,
        window_ns: now.saturating_sub(start).max(1),
        latency_ns: best,
        attempts: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn probe(a: u32, b: u32, fast_transfers: u64, latency_ns: Option<f64>) -> PairProbe {
        PairProbe {
            a,
            b,
            transfers: fast_transfers.max(4),
            fast_transfers,
            window_ns: 0,
            latency_ns,
            attempts: 0,
        }
    }

    /// Runs `f` on a thread of its own; whether it returned within 20 s
    /// (a thread that spins for ever is left behind; the test fails).
    fn returns_soon(f: impl FnOnce() + Send + 'static) -> bool {
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            f();
            let _ = done_tx.send(());
        });
        done_rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .is_ok()
    }

    fn first_allowed_cpu() -> u32 {
        affinity::thread_affinity(0).expect("own affinity")[0]
    }

    /// Runs a responder for a 1 ms window whose initiator never says stop:
    /// one that never started, or one whose window ended as the responder
    /// began; how long the responder waited, or None if it spun on.
    fn responder_alone(initiator_started: bool) -> Option<u64> {
        let cpu = first_allowed_cpu();
        let (waited_tx, waited_rx) = std::sync::mpsc::channel();
        let returned = returns_soon(move || {
            let pair = Pair::new();
            let t0 = clock::monotonic_ns();
            if initiator_started {
                pair.end.0.store(t0, Ordering::Relaxed);
            }
            respond(cpu, &pair, &Barrier::new(1), 1_000_000);
            let _ = waited_tx.send(clock::monotonic_ns() - t0);
        });
        returned.then(|| waited_rx.recv().unwrap())
    }

    /// The guest hang behind bpf_struct_ops_map_free waiting on RCU tasks:
    /// a responder whose initiator never ran (both on one vCPU at
    /// SCHED_FIFO 1) spun for ever. It must give up, and not before the
    /// initiator had its chance.
    #[test]
    fn a_responder_whose_initiator_never_runs_gives_up() {
        let waited = responder_alone(false).expect("the responder spun on");
        assert!(
            waited >= 1_000_000 + RESPONDER_WAITS_FOR_START_NS,
            "gave up after {waited} ns, before its own window and the wait for a start"
        );
        // An initiator whose window ended: the grace, no more.
        let waited = responder_alone(true).expect("the responder spun on");
        assert!(
            (RESPONDER_GRACE_NS..RESPONDER_WAITS_FOR_START_NS).contains(&waited),
            "waited {waited} ns past an initiator's end"
        );
    }

    /// The mechanism still measures: a pair of two vCPUs this test may
    /// use times transfers between them.
    #[test]
    fn a_pair_of_two_vcpus_measures_transfers() {
        let cpus = affinity::thread_affinity(0).expect("own affinity");
        let [a, b, ..] = cpus[..] else {
            eprintln!("skipped: one CPU allowed");
            return;
        };
        let probes = run_parallel(&[(a, b)], 10_000_000, 2_000);
        assert_eq!(probes.len(), 1, "{probes:?}");
        assert!(probes[0].transfers > 0, "{probes:?}");
    }

    /// A pair whose pin was refused may share one vCPU, so neither thread
    /// spins, whatever the window.
    #[test]
    fn a_pair_whose_pin_is_refused_does_not_spin() {
        let cpu = first_allowed_cpu();
        let hour = 3_600_000_000_000;
        // No such CPU: the pin is refused.
        let absent = libc::CPU_SETSIZE as u32 + 1;
        let pair = Arc::new(Pair::new());
        let barrier = Arc::new(Barrier::new(2));
        let (p, b) = (Arc::clone(&pair), Arc::clone(&barrier));
        let responder = thread::spawn(move || respond(cpu, &p, &b, hour));
        let (result_tx, result_rx) = std::sync::mpsc::channel();
        let returned = returns_soon(move || {
            let _ = result_tx.send(initiate(absent, cpu, &pair, &barrier, hour, u64::MAX));
        });
        assert!(returned, "the initiator of a void pair spun");
        assert!(
            result_rx.recv().unwrap().is_none(),
            "a void pair measured something"
        );
        assert!(
            returns_soon(move || responder.join().unwrap()),
            "the responder of a void pair spun"
        );
    }

    /// vCPUs 0 and 1 stacked, vCPU 2 apart from both.
    fn known() -> Topology {
        let p = TopologyParams::default();
        topology::classify(
            &[0, 1, 2],
            &[
                probe(0, 1, 0, None),
                probe(0, 2, 5_000, Some(80.0)),
                probe(1, 2, 5_000, Some(80.0)),
            ],
            &p,
        )
    }

    /// Every window a stand-in ran: (pair, window_ns).
    type Windows = Vec<((u32, u32), u64)>;

    /// Validates `known()` against a stand-in for the pair probes that
    /// answers `answer(pair)` in every window; returns the probes, the
    /// verdict and the windows run.
    fn validate_answering(
        answer: impl Fn((u32, u32)) -> PairProbe,
    ) -> (Vec<PairProbe>, bool, Windows) {
        let windows = RefCell::new(Vec::new());
        let run = |pairs: &[(u32, u32)], window_ns: u64, _target: u64| {
            pairs
                .iter()
                .map(|&pair| {
                    windows.borrow_mut().push((pair, window_ns));
                    PairProbe {
                        window_ns,
                        ..answer(pair)
                    }
                })
                .collect()
        };
        let (probes, valid) = validate_with(&known(), &VtopConfig::default(), &run);
        (probes, valid, windows.into_inner())
    }

    #[test]
    fn a_known_stacked_pair_is_validated_with_one_window() {
        let ms = 1_000_000;
        // Still as known: the stacked pair one window, the other as before.
        let (probes, valid, windows) = validate_answering(|(a, b)| match (a, b) {
            (0, 1) => probe(0, 1, 0, None),
            _ => probe(a, b, 5_000, Some(80.0)),
        });
        assert!(valid, "{probes:?}");
        assert_eq!(windows, [((0, 1), 10 * ms), ((0, 2), 10 * ms)]);
        // Every pair reads stacked: the known-stacked pair still gets one
        // window, the pair known apart all three (10, 20, 40 ms), so that
        // two vCPUs merely not active together are not called stacked.
        let (probes, valid, windows) = validate_answering(|(a, b)| probe(a, b, 0, None));
        assert!(!valid, "(0, 2) now reads stacked: {probes:?}");
        assert_eq!(
            windows,
            [
                ((0, 1), 10 * ms),
                ((0, 2), 10 * ms),
                ((0, 2), 20 * ms),
                ((0, 2), 40 * ms)
            ]
        );
        let attempts = |pair: (u32, u32)| {
            probes
                .iter()
                .find(|p| (p.a, p.b) == pair)
                .map(|p| (p.attempts, p.window_ns))
        };
        assert_eq!(attempts((0, 1)), Some((1, 10 * ms)));
        assert_eq!(attempts((0, 2)), Some((3, 70 * ms)));
        // Placed apart: the first window shows it.
        let (_, valid, windows) = validate_answering(|(a, b)| probe(a, b, 5_000, Some(80.0)));
        assert!(!valid);
        assert_eq!(windows.len(), 2);
    }
}
