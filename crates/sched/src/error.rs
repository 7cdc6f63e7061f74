//! Why the scheduler could not be loaded, or stopped.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SchedError {
    #[error(
        "this kernel has no sched_ext ({path} is missing): it was built without \
         CONFIG_SCHED_CLASS_EXT (Linux 6.12 or later has it; Debian's newest cloud \
         kernel enables it). `vsched probe`, `vsched exec` and `vsched run` work \
         without it",
        path = .0.display()
    )]
    NoSchedExt(PathBuf),
    #[error("loading a sched_ext scheduler needs root (CAP_SYS_ADMIN and CAP_BPF)")]
    NotRoot,
    #[error("this kernel is Linux {release}; vsched's scheduler needs Linux {min} or later (sched_ext as merged upstream, which its BPF side is written against)")]
    KernelTooOld { release: String, min: &'static str },
    #[error(
        "another sched_ext scheduler ({0}) is loaded; stop it first (only one can run at a time)"
    )]
    AnotherScheduler(String),
    #[error(
        "this VM has {count} vCPUs; the scheduler handles at most {max} (its placement \
         scans every vCPU on each wake-up)"
    )]
    TooManyCpus { count: usize, max: usize },
    #[error("{count} names given to --latency-sensitive; at most {max}")]
    TooManyLatencyComms { count: usize, max: usize },
    #[error("reading {path}: {source}", path = .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what} failed: {source}{}", verifier_tail(.log))]
    Bpf {
        what: &'static str,
        source: libbpf_rs::Error,
        /// The last lines libbpf printed (the verifier's verdict among them).
        log: Vec<String>,
    },
}

fn verifier_tail(log: &[String]) -> String {
    if log.is_empty() {
        String::new()
    } else {
        format!(
            "\nlast lines from libbpf and the verifier:\n  {}",
            log.join("\n  ")
        )
    }
}
