//! The environment that preloads the runtime with given settings: what
//! `vsched exec` sets before it replaces itself with the program, and what
//! `vsched exec --print-env` prints.

use super::{EnvVar, ADMISSION, CHANNEL, LD_PRELOAD, ON, SPIN_NS, STATS, STATS_JSON, YIELD_NS};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// The runtime's settings, as `vsched exec` decided them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeSettings {
    pub spin_ns: u64,
    pub yield_ns: u64,
    /// Statistics table on stderr at exit.
    pub stats: bool,
    /// Statistics JSON to this (absolute) path at exit.
    pub stats_json: Option<PathBuf>,
    pub admission: bool,
    /// Mark waiters in a running vsched scheduler's channel.
    pub channel: bool,
}

impl RuntimeSettings {
    /// The variables to set, in the order `--print-env` shows them:
    /// `LD_PRELOAD` with `library` first and `inherited_preload` (the
    /// caller's own LD_PRELOAD) after it, then the settings; flags that are
    /// off are left out, so the runtime's defaults apply.
    pub fn environment(
        &self,
        library: &Path,
        inherited_preload: Option<&OsStr>,
    ) -> Vec<(EnvVar, OsString)> {
        let mut env = vec![
            (LD_PRELOAD, preload_value(library, inherited_preload)),
            (SPIN_NS, self.spin_ns.to_string().into()),
            (YIELD_NS, self.yield_ns.to_string().into()),
        ];
        if self.stats {
            env.push((STATS, ON.into()));
        }
        if let Some(path) = &self.stats_json {
            env.push((STATS_JSON, path.clone().into_os_string()));
        }
        if self.admission {
            env.push((ADMISSION, ON.into()));
        }
        if self.channel {
            env.push((CHANNEL, ON.into()));
        }
        env
    }
}

/// LD_PRELOAD with the runtime first and whatever was preloaded already
/// (a non-empty `inherited`) after it.
pub fn preload_value(library: &Path, inherited: Option<&OsStr>) -> OsString {
    let mut value = library.as_os_str().to_os_string();
    if let Some(existing) = inherited.filter(|v| !v.is_empty()) {
        value.push(":");
        value.push(existing);
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> RuntimeSettings {
        RuntimeSettings {
            spin_ns: 1234,
            yield_ns: 2_000_000,
            stats: false,
            stats_json: None,
            admission: false,
            channel: false,
        }
    }

    fn names(env: &[(EnvVar, OsString)]) -> Vec<&'static str> {
        env.iter().map(|(k, _)| k.name()).collect()
    }

    #[test]
    fn defaults_set_only_the_preload_and_the_budgets() {
        let env = settings().environment(Path::new("/lib/libvsched_sync.so"), None);
        assert_eq!(
            names(&env),
            ["LD_PRELOAD", "VSCHED_SYNC_SPIN_NS", "VSCHED_SYNC_YIELD_NS"]
        );
        assert_eq!(env[0].1, "/lib/libvsched_sync.so");
        assert_eq!(env[1].1, "1234");
        assert_eq!(env[2].1, "2000000");
    }

    #[test]
    fn flags_that_are_on_are_set_to_one() {
        let s = RuntimeSettings {
            stats: true,
            stats_json: Some("/tmp/s-%p.json".into()),
            admission: true,
            channel: true,
            ..settings()
        };
        let env = s.environment(Path::new("/l.so"), None);
        assert_eq!(
            names(&env)[3..],
            [
                "VSCHED_SYNC_STATS",
                "VSCHED_SYNC_STATS_JSON",
                "VSCHED_SYNC_ADMISSION",
                "VSCHED_SYNC_CHANNEL"
            ]
        );
        assert_eq!(env[3].1, "1");
        assert_eq!(env[4].1, "/tmp/s-%p.json");
        assert_eq!(env[5].1, "1");
        assert_eq!(env[6].1, "1");
    }

    #[test]
    fn the_runtime_goes_before_what_was_preloaded() {
        let lib = Path::new("/l.so");
        assert_eq!(preload_value(lib, Some(OsStr::new("/a.so"))), "/l.so:/a.so");
        assert_eq!(preload_value(lib, Some(OsStr::new(""))), "/l.so");
        assert_eq!(preload_value(lib, None), "/l.so");
    }
}
