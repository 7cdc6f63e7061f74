//! The command line of the zoo's test programs: `vsched-zoo PROGRAM ...`
//! (src/main.rs). Each runs as a separate process that tests and benchmarks
//! watch like any other program, and prints what it knows about itself (its
//! `Truth`) as JSON on stdout.

use crate::{compute, locks, programs, programs::Truth};
use anyhow::{anyhow, bail, Result};
use clap::{Parser, Subcommand};
use std::io::BufRead;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Parser, Debug)]
#[command(
    name = "vsched-zoo",
    about = "Test programs for vsched's spin detector (tests and benchmarks run them)"
)]
pub struct ZooArgs {
    /// Wait for a line on stdin before starting (lets a detector attach first)
    #[arg(long, global = true)]
    wait_go: bool,

    #[command(subcommand)]
    program: ZooProgram,
}

#[derive(Subcommand, Debug)]
enum ZooProgram {
    /// Spin token ring: each thread waits in a plain flag loop for its turn
    Ring {
        #[arg(long, default_value_t = 8)]
        threads: usize,
        #[arg(long, default_value_t = 20_000)]
        handoffs: u64,
        #[arg(long, default_value_t = 20.0)]
        work_us: f64,
    },
    /// Pipeline of threads joined by spinning queues
    Pipeline {
        #[arg(long, default_value_t = 8)]
        stages: usize,
        #[arg(long, default_value_t = 5_000)]
        items: u64,
        #[arg(long, default_value_t = 20.0)]
        work_us: f64,
        /// Run stage k only on CPU k modulo the CPUs
        #[arg(long)]
        pin_stages: bool,
    },
    /// Timed spin episodes of one waiting implementation
    Spin {
        #[arg(long)]
        lock: String,
        #[arg(long, default_value_t = 100)]
        episodes: usize,
    },
    /// A compute kernel on several threads
    Compute {
        #[arg(long)]
        kernel: String,
        #[arg(long, default_value_t = 2)]
        threads: usize,
        #[arg(long, default_value_t = 200)]
        passes: u64,
    },
}

static SIGURG_RECEIVED: AtomicU64 = AtomicU64::new(0);

extern "C" fn count_sigurg(_: libc::c_int) {
    SIGURG_RECEIVED.fetch_add(1, Ordering::Relaxed);
}

/// Runs the program `args` name and prints its truth.
pub fn run(args: ZooArgs) -> Result<()> {
    // Counted for the tests: spin detection must deliver SIGURGs others send
    // and never one of its own.
    // SAFETY: the handler only bumps an atomic counter (async-signal-safe).
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = count_sigurg as *const () as usize;
        act.sa_flags = libc::SA_RESTART;
        libc::sigaction(libc::SIGURG, &act, std::ptr::null_mut());
    }
    if args.wait_go {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line)?;
    }
    let truth = match args.program {
        ZooProgram::Ring {
            threads,
            handoffs,
            work_us,
        } => {
            if threads < 2 {
                bail!("a ring needs at least 2 threads");
            }
            programs::ring(threads, handoffs, work_us)
        }
        ZooProgram::Pipeline {
            stages,
            items,
            work_us,
            pin_stages,
        } => {
            if stages < 2 {
                bail!("a pipeline needs at least 2 stages");
            }
            programs::pipeline(stages, items, work_us, pin_stages)
        }
        ZooProgram::Spin { lock, episodes } => programs::spin_episodes(&lock, episodes)
            .ok_or_else(|| anyhow!("unknown lock {lock:?}; known: {}", locks::NAMES.join(", ")))?,
        ZooProgram::Compute {
            kernel,
            threads,
            passes,
        } => programs::compute(&kernel, threads, passes).ok_or_else(|| {
            anyhow!(
                "unknown kernel {kernel:?}; known: {}",
                compute::NAMES.join(", ")
            )
        })?,
    };
    let truth = Truth {
        sigurg: SIGURG_RECEIVED.load(Ordering::Relaxed),
        ..truth
    };
    println!("{}", serde_json::to_string(&truth)?);
    Ok(())
}
