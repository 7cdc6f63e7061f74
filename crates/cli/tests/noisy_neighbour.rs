//! The probe against a neighbour the test creates: a SCHED_FIFO thread that
//! takes one vCPU for X of every Y ms. The probe must see that vCPU's
//! available share and typical (median) inactive-episode length within 20%
//! of the truth and leave the other vCPUs unaffected. A measurement the
//! host disturbed is taken again (at most 10 times); the control shows
//! that the same procedure fails a probe that sees the neighbour on the
//! wrong vCPU.

mod common;

use common::{online_cpus, vsched, NoisyNeighbour};
use serde_json::Value;
use std::time::Duration;

fn probe_with_neighbour(cpu: u32, on_ms: u64, period_ms: u64) -> Value {
    let neighbour = NoisyNeighbour::start(
        cpu,
        Duration::from_millis(on_ms),
        Duration::from_millis(period_ms),
        Duration::from_secs(20),
    );
    // Let the neighbour settle into its rhythm.
    std::thread::sleep(Duration::from_millis(50));
    let out = vsched(&["probe", "--json", "--only", "capacity,activity"]);
    neighbour
        .stop()
        .expect("the neighbour could not run as asked");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn within(measured: f64, truth: f64, rel: f64) -> bool {
    (measured - truth).abs() <= rel * truth
}

/// Steal time (ticks the hypervisor ran something else) per vCPU, from
/// /proc/stat's eighth column.
fn steal_ticks() -> Vec<u64> {
    std::fs::read_to_string("/proc/stat")
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .map(|l| l.split_whitespace().nth(8).unwrap().parse().unwrap())
        .collect()
}

/// What the host did to the vCPUs during a probe, besides the neighbour.
enum HostNoise {
    /// Nothing beyond the limits: the measurement stands.
    Quiet,
    /// The measurement is void; why.
    Disturbed(String),
}

/// The truth this test creates holds only if the host itself takes nothing
/// from the vCPUs meanwhile, which a shared host does not promise. Three signs
/// that it did: steal time the kernel counted on any vCPU (more than
/// [`HOST_STEAL_MAX_TICKS`] and 2% of the window), unreported host time on
/// any vCPU (more than 5%), or the vCPU the neighbour leaves alone losing
/// more than 20% in short episodes only. Short, because many episodes as long as half the neighbour's
/// on-time on that vCPU would be the probe seeing the neighbour in the
/// wrong place: a failure, never noise (`check` asserts it).
/// Measured on this kind of machine: with a neighbour spinning on one vCPU
/// the host sometimes takes 0.3-0.4 ms slices of the other (reported as
/// hidden steal, not as steal).
fn host_noise(r: &Value, stolen_ticks: u64, window_ticks: f64, busy: u32, on_ms: u64) -> HostNoise {
    if stolen_ticks > HOST_STEAL_MAX_TICKS.max((0.02 * window_ticks) as u64) {
        return HostNoise::Disturbed(format!(
            "the host stole {stolen_ticks} of {window_ticks:.0} ticks from a vCPU"
        ));
    }
    for v in r["vcpus"].as_array().unwrap() {
        let cpu = v["cpu"].as_u64().unwrap() as u32;
        let hidden = v["hidden_steal_pct"].as_f64().unwrap_or(0.0);
        if hidden > HOST_HIDDEN_STEAL_MAX_PCT {
            return HostNoise::Disturbed(format!(
                "the host took {hidden:.1}% of vCPU {cpu} without reporting it"
            ));
        }
        let avail = v["available_pct"].as_f64().unwrap();
        let typical_us = v["episodes"]["p50_us"].as_f64().unwrap();
        if cpu != busy && avail < FREE_VCPU_MIN_AVAIL_PCT && typical_us < on_ms as f64 * 500.0 {
            return HostNoise::Disturbed(format!(
                "the host took {:.1}% of vCPU {cpu} in short episodes (median {typical_us:.0} us)",
                100.0 - avail
            ));
        }
    }
    HostNoise::Quiet
}

/// Unreported host time on any vCPU above this voids a measurement: the
/// neighbour is a guest task, which the probe counts as pre-emption, never
/// as hidden steal, so hidden steal is the host's. A quiet host here shows
/// 1-2.6%; a run that failed on its episode mean (1.1 ms against 2 ms) had
/// 7.1% on the neighbour's vCPU, in extra short episodes. A probe that
/// misread the neighbour as hidden steal would read so in every attempt,
/// and the test fails after [`QUIET_HOST_ATTEMPTS`].
const HOST_HIDDEN_STEAL_MAX_PCT: f64 = 5.0;

/// Reported steal up to this many ticks is let pass whatever the window:
/// a probe's window is 30-40 ticks, so 2% of it is less than one tick and a
/// single tick (10 ms at USER_HZ, counted whenever the host ran something
/// else at the tick) would void it. Two ticks are up to 20 ms, 5% of the
/// window: the busy vCPU's truth is checked to ±20%, the free vCPU's
/// episodes by their length.
const HOST_STEAL_MAX_TICKS: u64 = 2;

/// Attempts before the test gives up on a quiet host. CI hosts are busier
/// than this one: one run saw 11% hidden steal, then 1 and 2 stolen ticks in
/// three attempts 0.5 s apart. Host noise comes in bursts of seconds, so
/// the attempts are spread by [`HOST_NOISE_BACKOFF`] over about 40 s.
const QUIET_HOST_ATTEMPTS: u32 = 10;

/// Pause between attempts, to let a burst of host noise pass.
const HOST_NOISE_BACKOFF: Duration = Duration::from_secs(4);

/// An episode at least this share of the neighbour's on-time long is
/// typical of the neighbour: the probe merges and clips episodes by tens of
/// microseconds, never by a quarter of a millisecond-long on-period.
const NEIGHBOUR_LIKE_SHARE: f64 = 0.75;

/// The vCPU the neighbour leaves alone must read at least this available:
/// the probe's own threads and the test's take a few percent.
const FREE_VCPU_MIN_AVAIL_PCT: f64 = 80.0;

/// A probe under a quiet host, measured again
/// while [`host_noise`] says the host disturbed it (at most
/// [`QUIET_HOST_ATTEMPTS`] times in all).
/// The neighbour runs on `neighbour_cpu`; `busy` is where the procedure
/// expects it (the same but in the control).
fn probe_on_quiet_host(neighbour_cpu: u32, busy: u32, on_ms: u64, period_ms: u64) -> Value {
    let ticks_per_s = 100.0; // USER_HZ
    for attempt in 1..=QUIET_HOST_ATTEMPTS {
        let before = steal_ticks();
        let start = std::time::Instant::now();
        let r = probe_with_neighbour(neighbour_cpu, on_ms, period_ms);
        let window_ticks = start.elapsed().as_secs_f64() * ticks_per_s;
        let stolen = steal_ticks()
            .iter()
            .zip(&before)
            .map(|(a, b)| a - b)
            .max()
            .unwrap_or(0);
        match host_noise(&r, stolen, window_ticks, busy, on_ms) {
            HostNoise::Quiet => return r,
            HostNoise::Disturbed(why) => {
                common::note(
                    "noisy_neighbour",
                    &format!("attempt {attempt}: {why}; measuring again"),
                );
                std::thread::sleep(HOST_NOISE_BACKOFF);
            }
        }
    }
    panic!("the host disturbed the vCPUs during every attempt: no clean measurement possible now");
}

fn check(on_ms: u64, period_ms: u64) {
    let cpus = online_cpus();
    assert!(cpus.len() >= 2, "needs two vCPUs");
    let busy = *cpus.last().unwrap();
    let r = probe_on_quiet_host(busy, busy, on_ms, period_ms);
    if let Err(why) = verdict(&r, busy, on_ms, period_ms) {
        panic!("{why}");
    }
}

/// Err(`why()`) unless `cond`.
fn require(cond: bool, why: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(why())
    }
}

/// Whether report `r` measured a neighbour on vCPU `busy` as it runs.
fn verdict(r: &Value, busy: u32, on_ms: u64, period_ms: u64) -> Result<(), String> {
    let truth_avail = 100.0 * (1.0 - on_ms as f64 / period_ms as f64);
    let truth_episode_us = on_ms as f64 * 1000.0;
    for v in r["vcpus"].as_array().unwrap() {
        let cpu = v["cpu"].as_u64().unwrap() as u32;
        let avail = v["available_pct"].as_f64().unwrap();
        let ep = &v["episodes"];
        if cpu == busy {
            require(within(avail, truth_avail, 0.2), || {
                format!("vCPU {cpu}: available {avail}% vs truth {truth_avail}%: {r:#}")
            })?;
            // The median, not the mean: besides the neighbour's 10-30
            // episodes the host adds short ones of its own (a trace of a
            // failed run: ten of 5.1 ms and four of 0.2-0.3 ms, mean 3.5 ms),
            // and now and then two on-periods run together when the
            // neighbour wakes late.
            let typical = ep["p50_us"].as_f64().unwrap();
            require(within(typical, truth_episode_us, 0.2), || {
                format!(
                    "vCPU {cpu}: median episode {typical} us vs truth {truth_episode_us} us: {r:#}"
                )
            })?;
        } else {
            require(avail >= FREE_VCPU_MIN_AVAIL_PCT, || {
                format!("vCPU {cpu} should be unaffected, available {avail}%: {r:#}")
            })?;
            // The neighbour's on-periods must not show up here. Seen here
            // they would be one episode per period, each as long as an
            // on-period: at least half as many episodes as the window
            // holds periods, typically three quarters of an on-time long
            // or more. The host adds episodes of its own, a few to a
            // handful per window and shorter (seen: six with a median of
            // 1.2 ms beside a 2 ms neighbour, 20 periods in the window).
            let typical_us = ep["p50_us"].as_f64().unwrap();
            let count = ep["count"].as_u64().unwrap();
            let window_ms = r["settings"]["light_ms"].as_f64().unwrap();
            let periods = window_ms / period_ms as f64;
            let like_the_neighbour = count as f64 >= periods / 2.0
                && typical_us >= NEIGHBOUR_LIKE_SHARE * on_ms as f64 * 1000.0;
            require(!like_the_neighbour, || {
                format!("vCPU {cpu} should not see the neighbour ({count} episodes, median {typical_us} us): {r:#}")
            })?;
        }
    }
    Ok(())
}

#[test]
fn neighbours_taking_half_and_a_fifth_are_measured() {
    let _guard = common::serial();
    check(5, 10);
    check(2, 10);
}

/// The control of the retries above: the procedure, retries included,
/// must fail a probe that sees the neighbour on the wrong vCPU. The
/// neighbour runs on the first vCPU while the procedure expects it on the
/// last, which is what such a probe's report would say; the retry rule
/// must not void that report as host noise (its episodes are the
/// neighbour's length, not short), and the verdict must fail it.
#[test]
fn the_procedure_fails_a_probe_that_sees_the_neighbour_on_the_wrong_vcpu() {
    let _guard = common::serial();
    let cpus = online_cpus();
    assert!(cpus.len() >= 2, "needs two vCPUs");
    let (elsewhere, expected) = (cpus[0], *cpus.last().unwrap());
    let r = probe_on_quiet_host(elsewhere, expected, 5, 10);
    assert!(
        verdict(&r, expected, 5, 10).is_err(),
        "a neighbour measured on the wrong vCPU passed: {r:#}"
    );
}
