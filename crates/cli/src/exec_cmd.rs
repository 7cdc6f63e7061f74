//! `vsched exec`: runs an unmodified, dynamically linked program with
//! vsched's synchronisation runtime (libvsched_sync.so) preloaded, after
//! measuring what the runtime's spin budget should be on this machine.
//! vsched replaces itself with the program (exec), so it leaves nothing
//! behind and the program's exit status and signals are its own.

use anyhow::{bail, Context, Result};
use clap::Args;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const LIBRARY_NAME: &str = "libvsched_sync.so";

#[derive(Args, Debug)]
#[command(after_long_help = "\
WHAT IT DOES
  Preloads vsched's synchronisation runtime into PROGRAM (LD_PRELOAD). The
  runtime replaces glibc's pthread mutexes, condition variables, barriers,
  spinlocks, read-write locks and unnamed semaphores. A thread that has to
  wait spins only as long as waking an idle vCPU would cost (measured here
  before the program starts), yields its vCPU instead of sleeping while
  there are more runnable threads than vCPUs, and sleeps otherwise.
  Robust, priority-inheritance and process-shared mutexes stay glibc's.
  Statically linked programs cannot be preloaded into; vsched says so and
  runs them unchanged.

WITHOUT vsched exec
  eval \"$(vsched exec --print-env)\"; export LD_PRELOAD VSCHED_SYNC_SPIN_NS
  then run programs as usual. See docs/sync.md.

EXAMPLES
  vsched exec -- memcached -t 8 -u nobody
  vsched exec --stats -- ./my-app --threads 32
  vsched exec --stats-json /tmp/sync-%p.json -- make -j16")]
pub struct ExecArgs {
    /// Print the runtime's statistics (waits, yields, sleeps, ...) to stderr at exit
    #[arg(long)]
    stats: bool,

    /// Write the statistics as JSON to FILE at exit ("%p" becomes the pid)
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,

    /// Spin budget in nanoseconds instead of measuring the idle-vCPU wake-up cost
    #[arg(long, value_name = "NS")]
    spin_ns: Option<u64>,

    /// How long a waiter keeps yielding on an oversubscribed machine before it sleeps
    #[arg(long, value_name = "NS", default_value_t = 2_000_000)]
    yield_ns: u64,

    /// Spinlock admission: take a spinlock only if the time slice left covers the wait and the hold (I-Spinlock; off by default, see docs/sync.md)
    #[arg(long)]
    admission: bool,

    /// The runtime library (default: libvsched_sync.so next to the vsched binary, or $VSCHED_SYNC_LIB)
    #[arg(long, value_name = "PATH")]
    library: Option<PathBuf>,

    /// Print the environment (shell syntax) that preloads the runtime, and exit
    #[arg(long, conflicts_with = "program")]
    print_env: bool,

    /// The program and its arguments
    #[arg(
        last = true,
        value_name = "PROGRAM",
        required_unless_present = "print_env"
    )]
    program: Vec<OsString>,
}

/// Returns only if the program could not be started.
pub fn run(args: ExecArgs) -> Result<u8> {
    let library = find_library(args.library.as_deref())?;
    let spin_ns = match args.spin_ns {
        Some(ns) => ns,
        None => {
            let ns = crate::wake_cost::idle_wake_ns()
                .context("measuring the wake-up cost of an idle vCPU")?;
            // One vCPU measures 0 (nothing to spin for): not a figure for
            // programs that run elsewhere.
            if ns > 0 {
                remember_spin_ns(ns);
            }
            ns
        }
    };
    let mut env: Vec<(&str, OsString)> = vec![
        ("LD_PRELOAD", preload_value(&library)),
        ("VSCHED_SYNC_SPIN_NS", spin_ns.to_string().into()),
        ("VSCHED_SYNC_YIELD_NS", args.yield_ns.to_string().into()),
    ];
    if args.stats {
        env.push(("VSCHED_SYNC_STATS", "1".into()));
    }
    if let Some(path) = &args.stats_json {
        env.push(("VSCHED_SYNC_STATS_JSON", absolute(path)?.into_os_string()));
    }
    if args.admission {
        env.push(("VSCHED_SYNC_ADMISSION", "1".into()));
    }
    if args.print_env {
        for (key, value) in &env {
            println!("{key}={}", shell_quote(&value.to_string_lossy()));
        }
        return Ok(0);
    }

    let program = &args.program[0];
    if let Some(path) = resolve(program) {
        if !is_dynamically_linked(&path)? {
            eprintln!(
                "vsched exec: warning: {} is statically linked; the runtime cannot be preloaded into it, running it unchanged",
                path.display()
            );
        }
    }
    let err = Command::new(program)
        .args(&args.program[1..])
        .envs(env)
        .exec();
    if err.kind() == std::io::ErrorKind::NotFound {
        eprintln!(
            "vsched exec: error: {}: command not found",
            program.to_string_lossy()
        );
        return Ok(127);
    }
    eprintln!(
        "vsched exec: error: cannot run {}: {err}",
        program.to_string_lossy()
    );
    Ok(126)
}

/// Leaves the measurement where the runtime looks when it is preloaded by
/// hand without VSCHED_SYNC_SPIN_NS (crates/sync/src/config.rs reads the
/// same path). Best effort: a read-only home just means the default there.
fn remember_spin_ns(ns: u64) {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")));
    if let Some(dir) = base.map(|b| b.join("vsched")) {
        let _ = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(dir.join("sync-spin-ns"), format!("{ns}\n")));
    }
}

/// The runtime library: --library, $VSCHED_SYNC_LIB, or beside the vsched binary.
pub fn find_library(explicit: Option<&Path>) -> Result<PathBuf> {
    let candidate = match explicit {
        Some(p) => p.to_path_buf(),
        None => match std::env::var_os("VSCHED_SYNC_LIB") {
            Some(p) => PathBuf::from(p),
            None => {
                let exe = std::env::current_exe().context("locating the vsched binary")?;
                let dir = exe.parent().context("the vsched binary has no directory")?;
                // Integration tests run vsched from target/<profile>/; the library sits there too.
                let beside = dir.join(LIBRARY_NAME);
                let lib_dir = dir.join("../lib/vsched").join(LIBRARY_NAME);
                if !beside.exists() && lib_dir.exists() {
                    lib_dir
                } else {
                    beside
                }
            }
        },
    };
    if !candidate.is_file() {
        bail!(
            "the synchronisation runtime {} does not exist; build it with `cargo build --release` \
             (it is target/release/{LIBRARY_NAME}) or name it with --library",
            candidate.display()
        );
    }
    let candidate = absolute(&candidate)?;
    // ld.so splits LD_PRELOAD at spaces and colons: such a path would
    // silently run the program without the runtime.
    if candidate.to_string_lossy().contains([' ', ':', '\t']) {
        bail!(
            "the runtime's path {} contains a space or a colon, which LD_PRELOAD cannot carry; \
             copy or link the library elsewhere and name it with --library",
            candidate.display()
        );
    }
    Ok(candidate)
}

fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))
}

/// LD_PRELOAD with the runtime first and whatever was preloaded already after it.
fn preload_value(library: &Path) -> OsString {
    let mut value = library.as_os_str().to_os_string();
    if let Some(existing) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        value.push(":");
        value.push(existing);
    }
    value
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The program's file, looked up in PATH like execvp does.
fn resolve(program: &OsString) -> Option<PathBuf> {
    let p = Path::new(program);
    if p.components().count() > 1 {
        return Some(p.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(p))
        .find(|c| is_executable(c))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// True if the ELF file names a program interpreter (the dynamic loader,
/// which is what honours LD_PRELOAD); scripts count as dynamic (their
/// interpreter usually is).
fn is_dynamically_linked(path: &Path) -> Result<bool> {
    // The program headers sit near the start of the file.
    let mut bytes = Vec::new();
    let read = std::fs::File::open(path).and_then(|f| {
        std::io::Read::read_to_end(&mut std::io::Read::take(f, 64 * 1024), &mut bytes)
    });
    if read.is_err() {
        // Unreadable but maybe executable: let exec decide.
        return Ok(true);
    }
    Ok(elf_has_interpreter(&bytes).unwrap_or(true))
}

/// None if `elf` is not a 64-bit little-endian ELF file.
fn elf_has_interpreter(elf: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    if elf.get(0..4)? != b"\x7fELF" || *elf.get(4)? != 2 || *elf.get(5)? != 1 {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(elf.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(elf.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(elf.get(o..o + 8)?.try_into().ok()?));
    let phoff = u64_at(0x20)? as usize;
    let phentsize = u16_at(0x36)? as usize;
    let phnum = u16_at(0x38)? as usize;
    Some((0..phnum).any(|i| u32_at(phoff + i * phentsize) == Some(PT_INTERP)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_interpreter_of_a_dynamic_program() {
        let sh = std::fs::read("/bin/sh").unwrap();
        assert_eq!(elf_has_interpreter(&sh), Some(true));
        assert_eq!(elf_has_interpreter(b"#!/bin/sh\n"), None);
    }

    #[test]
    fn quotes_for_the_shell() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }
}
