//! The benchmarks' C programs: their sources live in `c/` beside this
//! crate, are built into the library, and are compiled with the machine's
//! `cc` at run time (so that a benchmark measures this machine's glibc and
//! libgomp, and needs no build step of its own).

use crate::BenchError;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A C program the benchmarks run.
#[derive(Debug, Clone, Copy)]
pub struct CSource {
    /// File name of the source and the binary (without `.c`).
    pub name: &'static str,
    /// What it is, for messages ("the benchmark program").
    pub what: &'static str,
    pub text: &'static str,
    /// cc flags besides `-O2` (e.g. `-pthread`, `-fopenmp`).
    pub flags: &'static [&'static str],
}

/// A compiled program in its own temporary directory, removed on drop.
#[derive(Debug)]
pub struct CProgram {
    dir: PathBuf,
    bin: PathBuf,
}

impl CProgram {
    /// Compiles `source` with `cc -O2` into `$TMPDIR/vsched-bench-TAG-PID/`.
    pub fn compile(source: &CSource, tag: &str) -> Result<CProgram, BenchError> {
        let dir = std::env::temp_dir().join(format!("vsched-bench-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|source| BenchError::Write {
            what: "a temporary directory",
            source,
        })?;
        // From here on, drop removes the directory whatever fails.
        let program = CProgram {
            bin: dir.join(source.name),
            dir,
        };
        let src = program.dir.join(format!("{}.c", source.name));
        std::fs::write(&src, source.text).map_err(|e| BenchError::Write {
            what: "the C source",
            source: e,
        })?;
        let out = Command::new("cc")
            .arg("-O2")
            .args(source.flags)
            .arg("-o")
            .arg(&program.bin)
            .arg(&src)
            .output();
        match out {
            Err(e) if e.kind() == ErrorKind::NotFound => Err(BenchError::NoCompiler),
            Err(e) => Err(BenchError::Compiler(e)),
            Ok(o) if !o.status.success() => Err(BenchError::Compile {
                what: source.what,
                stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            }),
            Ok(_) => Ok(program),
        }
    }

    /// The executable.
    pub fn path(&self) -> &Path {
        &self.bin
    }
}

impl Drop for CProgram {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_that_does_not_compile_says_why_and_leaves_nothing() {
        let broken = CSource {
            name: "broken",
            what: "the broken program",
            text: "int main(void) { return undeclared; }\n",
            flags: &[],
        };
        let dir = std::env::temp_dir().join(format!("vsched-bench-broken-{}", std::process::id()));
        match CProgram::compile(&broken, "broken") {
            Err(BenchError::NoCompiler) => crate::skip(
                "a_program_that_does_not_compile_says_why_and_leaves_nothing",
                "no C compiler",
            ),
            Err(BenchError::Compile { what, stderr }) => {
                assert_eq!(what, "the broken program");
                assert!(stderr.contains("undeclared"), "{stderr}");
            }
            other => panic!("expected a compile error, got {other:?}"),
        }
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}
