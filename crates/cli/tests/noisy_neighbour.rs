//! The probe against a neighbour the test creates: a SCHED_FIFO thread that
//! takes one vCPU for X of every Y ms. The probe must see that vCPU's
//! available share and inactive-episode length within 20% of the truth and
//! leave the other vCPUs unaffected.

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

/// The truth this test creates holds only if the host itself takes nothing
/// from the vCPUs meanwhile, which a shared host does not promise. A probe
/// during which the kernel counted steal time on any vCPU (more than 2% of
/// the window) is void and repeated, at most three times.
fn probe_without_host_steal(busy: u32, on_ms: u64, period_ms: u64) -> Value {
    let ticks_per_s = 100.0; // USER_HZ
    for attempt in 1..=3 {
        let before = steal_ticks();
        let start = std::time::Instant::now();
        let r = probe_with_neighbour(busy, on_ms, period_ms);
        let window_ticks = start.elapsed().as_secs_f64() * ticks_per_s;
        let stolen = steal_ticks()
            .iter()
            .zip(&before)
            .map(|(a, b)| a - b)
            .max()
            .unwrap_or(0);
        if (stolen as f64) <= 0.02 * window_ticks {
            return r;
        }
        eprintln!(
            "attempt {attempt}: the host stole {stolen} of {window_ticks:.0} ticks from a vCPU; measuring again"
        );
    }
    panic!("the host stole time from the vCPUs during every attempt: no clean measurement possible now");
}

fn check(on_ms: u64, period_ms: u64) {
    let cpus = online_cpus();
    assert!(cpus.len() >= 2, "needs two vCPUs");
    let busy = *cpus.last().unwrap();
    let r = probe_without_host_steal(busy, on_ms, period_ms);
    let truth_avail = 100.0 * (1.0 - on_ms as f64 / period_ms as f64);
    let truth_episode_us = on_ms as f64 * 1000.0;
    for v in r["vcpus"].as_array().unwrap() {
        let cpu = v["cpu"].as_u64().unwrap() as u32;
        let avail = v["available_pct"].as_f64().unwrap();
        let ep = &v["episodes"];
        if cpu == busy {
            assert!(
                within(avail, truth_avail, 0.2),
                "vCPU {cpu}: available {avail}% vs truth {truth_avail}%: {r:#}"
            );
            let mean = ep["mean_us"].as_f64().unwrap();
            assert!(
                within(mean, truth_episode_us, 0.2),
                "vCPU {cpu}: episode mean {mean} us vs truth {truth_episode_us} us: {r:#}"
            );
        } else {
            assert!(
                avail >= 80.0,
                "vCPU {cpu} should be unaffected, available {avail}%: {r:#}"
            );
            assert!(
                ep["count"].as_u64().unwrap() <= 2,
                "vCPU {cpu} should have no episodes: {r:#}"
            );
        }
    }
}

#[test]
fn neighbours_taking_half_and_a_fifth_are_measured() {
    let _guard = common::serial();
    check(5, 10);
    check(2, 10);
}
