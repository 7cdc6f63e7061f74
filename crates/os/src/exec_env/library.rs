//! Where the runtime library is, and whether LD_PRELOAD can carry its path.

use super::LIBRARY_NAME;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Why the runtime library cannot be preloaded from where it was looked for.
#[derive(Debug)]
pub enum LibraryError {
    /// No file at the path.
    Missing(PathBuf),
    /// The path could not be made absolute.
    Resolve { path: PathBuf, source: io::Error },
    /// The path holds a character at which ld.so splits LD_PRELOAD.
    Unpreloadable(PathBuf),
    /// The running binary (beside which the library is looked for) could
    /// not be located.
    NoExe(io::Error),
}

impl fmt::Display for LibraryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LibraryError::Missing(path) => write!(
                f,
                "the synchronisation runtime {} does not exist; build it with `cargo build --release` \
                 (it is target/release/{LIBRARY_NAME}) or name it with --library",
                path.display()
            ),
            LibraryError::Resolve { path, .. } => write!(f, "resolving {}", path.display()),
            LibraryError::NoExe(_) => write!(f, "locating the vsched binary"),
            LibraryError::Unpreloadable(path) => write!(
                f,
                "the runtime's path {} contains a space or a colon, which LD_PRELOAD cannot carry; \
                 copy or link the library elsewhere and name it with --library",
                path.display()
            ),
        }
    }
}

impl std::error::Error for LibraryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LibraryError::Resolve { source, .. } | LibraryError::NoExe(source) => Some(source),
            _ => None,
        }
    }
}

/// The library that belongs to a vsched binary in `exe_dir`: beside it (a
/// build tree: target/release/), or in `../lib/vsched/` (an installation)
/// when only that one exists.
pub fn default_library(exe_dir: &Path) -> PathBuf {
    let beside = exe_dir.join(LIBRARY_NAME);
    let installed = exe_dir.join("../lib/vsched").join(LIBRARY_NAME);
    if !beside.exists() && installed.exists() {
        installed
    } else {
        beside
    }
}

/// The runtime library to preload: `explicit` (a --library flag), else
/// $VSCHED_SYNC_LIB, else the one belonging to the running binary
/// (`default_library`); checked with `preloadable_library`.
pub fn find_library(explicit: Option<&Path>) -> Result<PathBuf, LibraryError> {
    let candidate = match explicit {
        Some(p) => p.to_path_buf(),
        None => match std::env::var_os(super::LIBRARY.name()) {
            Some(p) => PathBuf::from(p),
            None => {
                let exe = std::env::current_exe().map_err(LibraryError::NoExe)?;
                // A file's path always has a parent directory.
                default_library(exe.parent().unwrap_or(Path::new("/")))
            }
        },
    };
    preloadable_library(&candidate)
}

/// `candidate` as an absolute path LD_PRELOAD can carry, if it is a file.
pub fn preloadable_library(candidate: &Path) -> Result<PathBuf, LibraryError> {
    if !candidate.is_file() {
        return Err(LibraryError::Missing(candidate.to_path_buf()));
    }
    let path = std::path::absolute(candidate).map_err(|source| LibraryError::Resolve {
        path: candidate.to_path_buf(),
        source,
    })?;
    // ld.so splits LD_PRELOAD at spaces and colons: such a path would
    // silently run the program without the runtime.
    if path.to_string_lossy().contains([' ', ':', '\t']) {
        return Err(LibraryError::Unpreloadable(path));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A temporary directory removed when the test ends.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> TempDir {
            let dir = std::env::temp_dir()
                .join(format!("vsched-os-library-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn prefers_the_library_beside_the_binary() {
        let root = TempDir::new("lookup");
        let bin = root.0.join("bin");
        let installed = root.0.join("lib/vsched");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&installed).unwrap();
        // Neither exists: the error names the build tree's place.
        assert_eq!(default_library(&bin), bin.join(LIBRARY_NAME));
        std::fs::write(installed.join(LIBRARY_NAME), "").unwrap();
        assert_eq!(
            default_library(&bin),
            bin.join("../lib/vsched").join(LIBRARY_NAME)
        );
        std::fs::write(bin.join(LIBRARY_NAME), "").unwrap();
        assert_eq!(default_library(&bin), bin.join(LIBRARY_NAME));
    }

    #[test]
    fn refuses_missing_files_and_paths_ld_so_would_split() {
        let root = TempDir::new("check");
        let missing = root.0.join("none.so");
        assert!(
            matches!(preloadable_library(&missing), Err(LibraryError::Missing(p)) if p == missing)
        );
        let spaced = root.0.join("a b.so");
        std::fs::write(&spaced, "").unwrap();
        assert!(matches!(
            preloadable_library(&spaced),
            Err(LibraryError::Unpreloadable(_))
        ));
        let good = root.0.join("good.so");
        std::fs::write(&good, "").unwrap();
        assert_eq!(preloadable_library(&good).unwrap(), good);
    }
}
