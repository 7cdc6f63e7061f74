//! `vsched exec`: runs an unmodified, dynamically linked program with
//! vsched's synchronisation runtime (libvsched_sync.so) preloaded, after
//! measuring what the runtime's spin budget should be on this machine.
//! vsched replaces itself with the program (exec), so it leaves nothing
//! behind and the program's exit status and signals are its own.

use anyhow::{Context, Result};
use clap::Args;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use vsched_os::exec_env::environment::RuntimeSettings;
use vsched_os::exec_env::library::find_library;
use vsched_os::exec_env::program::{find_program, is_dynamically_linked};
use vsched_os::exec_env::{self, spin_cache};
use vsched_probe::wake::idle_wake_ns;

#[derive(Args, Debug)]
#[command(after_long_help = "\
WHAT IT DOES
  Preloads vsched's synchronisation runtime into PROGRAM (LD_PRELOAD). The
  runtime replaces glibc's pthread mutexes, condition variables, barriers,
  spinlocks, read-write locks and unnamed semaphores. A thread that has to
  wait spins only as long as waking an idle vCPU would cost (measured here
  before the program starts, about 30 ms; a measurement younger than 10
  minutes is reused, --measure forces a new one), yields its vCPU instead of sleeping while
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

    /// Measure the wake-up cost now, even if a measurement younger than 10 minutes is cached
    #[arg(long, conflicts_with = "spin_ns")]
    measure: bool,

    /// How long a waiter keeps yielding on an oversubscribed machine before it sleeps
    #[arg(long, value_name = "NS", default_value_t = exec_env::DEFAULT_YIELD_NS)]
    yield_ns: u64,

    /// Spinlock admission: take a spinlock only if the time left covers the wait and the hold (I-Spinlock). With `vsched sched` running, the time left is the scheduler's: the slice's end and the vCPU's predicted switch-off; without it, a prediction from the thread's context switches. Off by default: it has not paid off in the lab (docs/sync.md)
    #[arg(long)]
    admission: bool,

    /// Mark waiting threads in the channel of a running `vsched sched`, which then runs other threads first until their wakers clear the mark (virtual blocking by the scheduler; off by default: it helps signal-style hand-offs and costs broadcasts and barriers, see docs/sync.md)
    #[arg(long)]
    channel: bool,

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
        None => spin_budget(args.measure)?,
    };
    let stats_json = match &args.stats_json {
        Some(path) => Some(absolute(path)?),
        None => None,
    };
    let settings = RuntimeSettings {
        spin_ns,
        yield_ns: args.yield_ns,
        stats: args.stats,
        stats_json,
        admission: args.admission,
        channel: args.channel,
    };
    let inherited = std::env::var_os(exec_env::LD_PRELOAD.name());
    let env = settings.environment(&library, inherited.as_deref());
    if args.print_env {
        for (var, value) in &env {
            println!("{}={}", var.name(), shell_quote(&value.to_string_lossy()));
        }
        return Ok(0);
    }

    let program = &args.program[0];
    if let Some(path) = find_program(program, std::env::var_os("PATH").as_deref()) {
        if !is_dynamically_linked(&path) {
            eprintln!(
                "vsched exec: warning: {} is statically linked; the runtime cannot be preloaded into it, running it unchanged",
                path.display()
            );
        }
    }
    let err = Command::new(program)
        .args(&args.program[1..])
        .envs(env.iter().map(|(var, value)| (var.name(), value)))
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

/// The spin budget: the cached measurement if it is fresh (spin_cache::FRESH_FOR)
/// and `measure` is not asked for, else a new one.
fn spin_budget(measure: bool) -> Result<u64> {
    let cached = spin_cache::spin_cache_file()
        .and_then(|file| spin_cache::read_fresh_spin_ns(&file, spin_cache::FRESH_FOR));
    match cached {
        Some(ns) if !measure => Ok(ns),
        _ => measured_spin_ns(),
    }
}

/// Measures the idle-vCPU wake-up cost and leaves it where the runtime
/// looks when it is preloaded by hand. Best effort: a read-only home just
/// means the runtime's default there.
fn measured_spin_ns() -> Result<u64> {
    let ns = idle_wake_ns().context("measuring the wake-up cost of an idle vCPU")?;
    // One vCPU measures 0 (nothing to spin for): not a figure for
    // programs that run elsewhere.
    if ns > 0 {
        if let Some(file) = spin_cache::spin_cache_file() {
            let _ = spin_cache::write_spin_ns(&file, ns);
        }
    }
    Ok(ns)
}

fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).with_context(|| format!("resolving {}", path.display()))
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_for_the_shell() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }
}
