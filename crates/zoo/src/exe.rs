//! Finding the `vsched-zoo` executable. Cargo puts every binary of the
//! workspace in one target directory, so whoever runs zoo programs (the
//! spin tests, `vsched bench spin`) looks next to its own executable (or
//! `vsched`'s), and says how to build the zoo if it is not there:
//! `cargo test -p ...` builds only the package under test.

use std::path::{Path, PathBuf};

/// The executable's file name.
pub const EXECUTABLE: &str = "vsched-zoo";

/// The zoo's executable is not where it should be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the spin zoo's test programs are not built ({} does not exist): build them with \
     `{}` (scripts/test.sh builds the whole workspace first)",
    .path.display(),
    .build_command
)]
pub struct NotBuilt {
    pub path: PathBuf,
    /// The cargo command that builds it into that directory.
    pub build_command: String,
}

/// The `vsched-zoo` executable in the same directory as `exe` (say
/// `target/release/vsched`).
pub fn beside(exe: &Path) -> Result<PathBuf, NotBuilt> {
    let path = exe.with_file_name(EXECUTABLE);
    if path.is_file() {
        return Ok(path);
    }
    // target/release holds --release builds; target/debug the others.
    let release = exe
        .parent()
        .and_then(Path::file_name)
        .is_some_and(|dir| dir == "release");
    let profile = if release { " --release" } else { "" };
    Err(NotBuilt {
        path,
        build_command: format!("cargo build{profile} -p vsched-zoo"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_zoo_names_the_command_that_builds_it() {
        let err = beside(Path::new("/nonexistent/target/release/vsched")).unwrap_err();
        assert_eq!(
            err.path,
            Path::new("/nonexistent/target/release/vsched-zoo")
        );
        assert_eq!(err.build_command, "cargo build --release -p vsched-zoo");
        let text = err.to_string();
        assert!(
            text.contains("/nonexistent/target/release/vsched-zoo"),
            "{text}"
        );
        assert!(
            text.contains("`cargo build --release -p vsched-zoo`"),
            "{text}"
        );
        let debug = beside(Path::new("/nonexistent/target/debug/vsched")).unwrap_err();
        assert_eq!(debug.build_command, "cargo build -p vsched-zoo");
    }

    #[test]
    fn the_zoo_is_found_next_to_the_given_executable() {
        let dir = std::env::temp_dir().join(format!("vsched-zoo-exe-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(EXECUTABLE), b"").unwrap();
        let found = beside(&dir.join("vsched"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found, Ok(dir.join(EXECUTABLE)));
    }
}
