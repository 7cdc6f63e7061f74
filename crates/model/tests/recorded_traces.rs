//! The model on timelines recorded on the development machine (2 vCPUs,
//! Firecracker/KVM) with `vsched probe --trace-out`: idle, and with a
//! SCHED_FIFO neighbour taking vCPU 1 for 5 of every 10 ms and 2 of every 10 ms.

use serde::Deserialize;
use vsched_model::capacity::VcpuSample;
use vsched_model::{EpisodeFilter, EpisodeStats, Timeline};

#[derive(Deserialize)]
struct Trace {
    light: Vec<Timeline>,
    heavy: Vec<Timeline>,
}

fn load(name: &str) -> Trace {
    let path = format!("{}/testdata/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn sample(t: &Trace, cpu: u32) -> VcpuSample {
    let light = t.light.iter().find(|x| x.cpu == cpu);
    let heavy = t.heavy.iter().find(|x| x.cpu == cpu);
    VcpuSample::from_timelines(cpu, light, heavy, &EpisodeFilter::default())
}

#[test]
fn idle_machine_has_no_episodes_and_full_availability() {
    let t = load("idle-2vcpu.json");
    for cpu in 0..2 {
        let s = sample(&t, cpu);
        assert!(s.available_frac > 0.95, "cpu {cpu}: {}", s.available_frac);
        assert!(s.episodes_ns.is_empty(), "cpu {cpu}: {:?}", s.episodes_ns);
    }
    // Interrupt-sized gaps exist; the longer gaps of the light window were
    // guest tasks (a 0.75 ms one in this recording), which are not episodes.
    let gaps: Vec<u64> = t
        .light
        .iter()
        .chain(&t.heavy)
        .flat_map(|x| &x.gaps)
        .map(|g| g.len_ns)
        .collect();
    assert!(gaps.len() > 100, "{}", gaps.len());
    let heavy_max = t
        .heavy
        .iter()
        .flat_map(|x| &x.gaps)
        .map(|g| g.len_ns)
        .max()
        .unwrap();
    assert!(
        heavy_max < EpisodeFilter::default().min_episode_ns,
        "{heavy_max}"
    );
}

fn check_neighbour(file: &str, on_ms: f64, period_ms: f64) {
    let t = load(file);
    let busy = sample(&t, 1);
    let truth = 1.0 - on_ms / period_ms;
    assert!(
        (busy.available_frac - truth).abs() < 0.05,
        "{}",
        busy.available_frac
    );
    let stats = EpisodeStats::from_lengths_ns(&busy.episodes_ns);
    assert!(
        (stats.mean_us - on_ms * 1000.0).abs() < 0.05 * on_ms * 1000.0,
        "{stats:?}"
    );
    // The light window saw the neighbour as guest pre-emption, not as the hypervisor.
    let light = t.light.iter().find(|x| x.cpu == 1).unwrap();
    assert!(
        light.guest_frac() > 0.8 * on_ms / period_ms,
        "{}",
        light.guest_frac()
    );
    assert!(light.hypervisor_frac() < 0.05);
    // The other vCPU is unaffected. (The 2-of-10 recording caught one real
    // 1.6 ms hypervisor pre-emption on it, reported as steal: such episodes
    // are rare but genuine on a shared host.)
    let quiet = sample(&t, 0);
    assert!(quiet.available_frac > 0.95, "{}", quiet.available_frac);
    assert!(quiet.episodes_ns.len() <= 1, "{:?}", quiet.episodes_ns);
}

#[test]
fn half_time_neighbour_trace() {
    check_neighbour("fifo-neighbour-5of10ms-vcpu1.json", 5.0, 10.0);
}

#[test]
fn fifth_time_neighbour_trace() {
    check_neighbour("fifo-neighbour-2of10ms-vcpu1.json", 2.0, 10.0);
}
