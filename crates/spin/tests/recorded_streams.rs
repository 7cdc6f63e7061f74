//! The detector on sample streams recorded from the zoos on a real VM
//! (`vsched run --spin-detect --observe --record`): every recorded wait must
//! be found, and no decision window of compute code may be called spinning.

use serde::Deserialize;
use vsched_spin::{DetectorParams, Sample, ThreadDetector};
use vsched_zoo::programs::Truth;

#[derive(Deserialize)]
struct Recording {
    truth: Truth,
    samples: Vec<Sample>,
}

fn load(name: &str) -> Recording {
    let path = format!("{}/testdata/{name}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// (time, spinning, window full) after each sample of `tid`.
fn decisions(rec: &Recording, tid: i32) -> Vec<(u64, bool, bool)> {
    let p = DetectorParams::default();
    let mut d = ThreadDetector::new();
    rec.samples
        .iter()
        .filter(|s| s.tid == tid)
        .map(|s| {
            d.observe(s, &p);
            (s.time_ns, d.spinning(), d.window_full(&p))
        })
        .collect()
}

#[test]
fn every_recorded_wait_is_detected() {
    for name in ["ticket", "counted-pause", "flag-call"] {
        let rec = load(name);
        assert!(!rec.truth.episodes.is_empty(), "{name}");
        let mut checked = 0;
        for e in &rec.truth.episodes {
            let d = decisions(&rec, e.tid);
            let in_episode: Vec<_> = d
                .iter()
                .filter(|(t, _, _)| *t >= e.start_ns && *t <= e.end_ns)
                .collect();
            if in_episode.len() < 4 {
                continue; // too few samples in this wait to decide anything
            }
            checked += 1;
            assert!(
                in_episode.iter().any(|(_, spinning, _)| *spinning),
                "{name}: a wait of {} us with {} samples was not detected",
                (e.end_ns - e.start_ns) / 1000,
                in_episode.len()
            );
        }
        assert!(
            checked >= 3,
            "{name}: only {checked} waits long enough to check"
        );
    }
}

#[test]
fn counting_pause_loops_are_caught_by_pause_sites() {
    let rec = load("counted-pause");
    assert!(rec.samples.iter().filter(|s| s.after_pause).count() > 10);
}

#[test]
fn compute_code_is_never_called_spinning() {
    for name in ["hash", "pointer-chase"] {
        let rec = load(name);
        let mut windows = 0;
        for &tid in &rec.truth.compute_tids {
            for (_, spinning, full) in decisions(&rec, tid) {
                windows += full as usize;
                assert!(!spinning, "{name}: compute thread {tid} called spinning");
            }
        }
        assert!(
            windows > 500,
            "{name}: only {windows} decision windows recorded"
        );
    }
}
