//! The file in which `vsched exec` leaves the spin budget it measured, so
//! that a program preloaded by hand (without `VSCHED_SYNC_SPIN_NS`) gets
//! this machine's figure: `$XDG_CACHE_HOME/vsched/sync-spin-ns`, else
//! `~/.cache/vsched/sync-spin-ns`, holding the decimal ns and a newline.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

/// The cache file for this user, from `XDG_CACHE_HOME` and `HOME`; None if
/// neither is set. Allocates: the runtime calls it once, at start-up.
pub fn spin_cache_file() -> Option<PathBuf> {
    spin_cache_file_from(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME"))
}

/// The cache file given the values of `XDG_CACHE_HOME` and `HOME`.
pub fn spin_cache_file_from(
    xdg_cache_home: Option<OsString>,
    home: Option<OsString>,
) -> Option<PathBuf> {
    let base = xdg_cache_home
        .map(PathBuf::from)
        .or_else(|| home.map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("vsched").join("sync-spin-ns"))
}

/// Writes `ns` to `file`, creating its directory.
pub fn write_spin_ns(file: &Path, ns: u64) -> io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(file, format!("{ns}\n"))
}

/// The budget in `file`; None if it is missing or holds anything else.
pub fn read_spin_ns(file: &Path) -> Option<u64> {
    let text = std::fs::read(file).ok()?;
    super::parse_ns(text.trim_ascii())
}

/// A measurement younger than this is reused by `vsched exec` instead of
/// measured again (30-40 ms before every program start: 4% of a one-second
/// program). The wake-up cost follows the host's load, which changes over
/// minutes, so ten minutes keep it about current.
pub const FRESH_FOR: std::time::Duration = std::time::Duration::from_secs(600);

/// The budget in `file` if it was written less than `fresh_for` ago.
pub fn read_fresh_spin_ns(file: &Path, fresh_for: std::time::Duration) -> Option<u64> {
    let age = std::fs::metadata(file)
        .ok()?
        .modified()
        .ok()?
        .elapsed()
        .ok()?;
    if age >= fresh_for {
        return None;
    }
    read_spin_ns(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xdg_cache_home_wins_over_home() {
        let file = |xdg: Option<&str>, home: Option<&str>| {
            spin_cache_file_from(xdg.map(OsString::from), home.map(OsString::from))
        };
        assert_eq!(
            file(Some("/x"), Some("/h")),
            Some(PathBuf::from("/x/vsched/sync-spin-ns"))
        );
        assert_eq!(
            file(None, Some("/h")),
            Some(PathBuf::from("/h/.cache/vsched/sync-spin-ns"))
        );
        assert_eq!(file(None, None), None);
    }

    #[test]
    fn what_is_written_reads_back() {
        let dir = std::env::temp_dir().join(format!("vsched-os-spin-cache-{}", std::process::id()));
        let file = dir.join("vsched").join("sync-spin-ns");
        write_spin_ns(&file, 41_000).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "41000\n");
        assert_eq!(read_spin_ns(&file), Some(41_000));
        assert_eq!(read_fresh_spin_ns(&file, FRESH_FOR), Some(41_000));
        assert_eq!(read_fresh_spin_ns(&file, std::time::Duration::ZERO), None);
        std::fs::write(&file, "soon\n").unwrap();
        assert_eq!(read_spin_ns(&file), None);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(read_spin_ns(&file), None);
    }
}
