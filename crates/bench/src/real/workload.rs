//! The programs of `vsched bench real`: what each runs, how it is timed and
//! how its output is compared. All are Debian's unmodified binaries except
//! the OpenMP kernel and the mutex program, which are compiled here against
//! the machine's own libgomp and glibc.

use serde::Serialize;

/// One program of the benchmark.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// `xz -T N -3` over the generated text.
    Xz,
    /// `zstd -T N -12`.
    Zstd,
    /// `pigz -p N -6`.
    Pigz,
    /// `pbzip2 -p N -9`.
    Pbzip2,
    /// c/openmp_wait.c with OMP_NUM_THREADS=N and libgomp's default waiting.
    Openmp,
    /// sqlite3 building an index with `PRAGMA threads = N` (its sorter's
    /// helper threads) and querying it.
    Sqlite,
    /// memcached -t N under memcaslap (libmemcached-tools), requests per second.
    Memcached,
    /// syncbench's mutex case: a counter under one mutex, ~0.15 us of work
    /// outside (the issue's "mutex-heavy program with short critical sections").
    Mutex,
    /// The same, while host loads take each vCPU 2 ms of every 8 by turns:
    /// the lock holder is switched off in mid-critical-section, as on a
    /// busy cloud host (needs root for the SCHED_FIFO loads).
    MutexBusy,
}

impl Workload {
    /// Every workload, in the order they run and are reported.
    pub const ALL: [Workload; 9] = [
        Workload::Xz,
        Workload::Zstd,
        Workload::Pigz,
        Workload::Pbzip2,
        Workload::Openmp,
        Workload::Sqlite,
        Workload::Memcached,
        Workload::Mutex,
        Workload::MutexBusy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Xz => "xz",
            Workload::Zstd => "zstd",
            Workload::Pigz => "pigz",
            Workload::Pbzip2 => "pbzip2",
            Workload::Openmp => "openmp",
            Workload::Sqlite => "sqlite",
            Workload::Memcached => "memcached",
            Workload::Mutex => "mutex",
            Workload::MutexBusy => "mutex-busy",
        }
    }

    /// The Debian programs it needs, each with its package.
    pub fn needs(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Workload::Xz => &[("xz", "xz-utils")],
            Workload::Zstd => &[("zstd", "zstd")],
            Workload::Pigz => &[("pigz", "pigz")],
            Workload::Pbzip2 => &[("pbzip2", "pbzip2")],
            Workload::Openmp | Workload::Mutex | Workload::MutexBusy => &[("cc", "gcc")],
            Workload::Sqlite => &[("sqlite3", "sqlite3")],
            Workload::Memcached => &[
                ("memcached", "memcached"),
                ("memcaslap", "libmemcached-tools"),
            ],
        }
    }

    /// Higher values are better (a rate) rather than lower (seconds).
    pub fn is_rate(self) -> bool {
        self == Workload::Memcached
    }

    /// The least vsched/glibc speed ratio (median of pairs) the issue asks
    /// for: real programs 0.98x at 1x and no slower at 4x; the mutex case
    /// 0.95x at both, on a calm and on a busy host.
    pub fn goal(self, oversubscription: usize) -> f64 {
        match (self, oversubscription) {
            (Workload::Mutex | Workload::MutexBusy, _) => 0.95,
            (_, 1) => 0.98,
            _ => 1.0,
        }
    }

    /// The workloads `only` names, in the order of ALL; all if it names none.
    pub fn selected(only: &[Workload]) -> Vec<Workload> {
        Workload::ALL
            .into_iter()
            .filter(|w| only.is_empty() || only.contains(w))
            .collect()
    }
}

/// Where a program is on PATH, if it is (vsched-os's lookup, as `vsched
/// exec` does it).
pub fn on_path(program: &str) -> Option<std::path::PathBuf> {
    vsched_os::exec_env::program::find_program(
        std::ffi::OsStr::new(program),
        std::env::var_os("PATH").as_deref(),
    )
}

/// Why `w` cannot run here (a program missing, with the package to
/// install), if it cannot.
pub fn missing(w: Workload) -> Option<String> {
    let absent: Vec<_> = w
        .needs()
        .iter()
        .filter(|(program, _)| on_path(program).is_none())
        .collect();
    if absent.is_empty() {
        return None;
    }
    let programs: Vec<&str> = absent.iter().map(|(p, _)| *p).collect();
    let packages: Vec<&str> = absent.iter().map(|(_, p)| *p).collect();
    Some(format!(
        "{} not installed (apt-get install {})",
        programs.join(", "),
        packages.join(" ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_the_json() {
        for w in Workload::ALL {
            assert_eq!(
                serde_json::to_string(&w).unwrap(),
                format!("\"{}\"", w.name())
            );
        }
    }

    #[test]
    fn goals_follow_the_issue() {
        assert_eq!(Workload::Xz.goal(1), 0.98);
        assert_eq!(Workload::Xz.goal(4), 1.0);
        assert_eq!(Workload::MutexBusy.goal(4), 0.95);
    }

    #[test]
    fn a_missing_program_names_its_package() {
        // `sh` is everywhere; a made-up name is nowhere.
        assert!(on_path("sh").is_some());
        assert!(on_path("vsched-no-such-program").is_none());
        let why = missing(Workload::Memcached);
        if on_path("memcaslap").is_none() {
            assert!(why.unwrap().contains("libmemcached-tools"));
        }
    }
}
