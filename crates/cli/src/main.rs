//! `vsched`: makes multithreaded programs run well on cloud vCPUs.

mod args;
mod bench_cmd;
mod bench_real;
mod bench_sched;
mod bench_soak;
mod bench_sync;
mod consolidate_run;
mod daemon_cmd;
mod exec_cmd;
mod lab_args;
mod lab_cmd;
mod probe_cmd;
mod probe_plot;
mod progress;
mod render;
mod sched_cmd;
mod sched_interval;
mod sched_program;
mod signals;
mod spin_cmd;
mod status_cmd;
mod status_plot;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "vsched",
    version,
    about = "Makes multithreaded programs run well on cloud vCPUs: probes the vCPUs, runs programs with \
an oversubscription-friendly runtime or spin detection, loads a sched_ext scheduler, runs a daemon, \
a VM lab and benchmarks",
    long_about = "Makes multithreaded programs run well on cloud vCPUs: probes the vCPUs, runs programs \
with an oversubscription-friendly runtime or spin detection, loads a sched_ext scheduler, runs a \
daemon, a VM lab and benchmarks.\n\n\
vsched measures each vCPU's real capacity, activity and topology from inside an ordinary VM (no \
hypervisor help, no kernel module) and acts on them: `exec` preloads its pthread runtime, `run \
--spin-detect` deschedules busy-waiting threads, `sched` loads its sched_ext scheduler, which places \
tasks by the measured vCPU model, and `daemon` keeps probing, serves the model as metrics and, if \
asked, loads that scheduler or keeps cgroups off hidden vCPUs (user-space RWC)."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Probe every vCPU's capacity, activity (inactive episodes) and topology
    Probe(probe_cmd::ProbeArgs),
    /// QEMU guests whose vCPUs the host controls: ground truth for the probers
    #[command(subcommand)]
    Lab(lab_cmd::LabCommand),
    /// Benchmarks of vsched's mechanisms against their baselines, side by side
    #[command(subcommand)]
    Bench(bench_cmd::BenchCommand),
    /// Find threads of a running process that busy-wait, and deschedule them
    SpinDetect(spin_cmd::SpinDetectArgs),
    /// Run a program under vsched (--spin-detect: deschedule its spinning threads; --consolidate: on as few vCPUs as its work needs)
    Run(spin_cmd::RunArgs),
    /// Run a program with vsched's synchronisation runtime preloaded (oversubscription-friendly pthreads)
    Exec(exec_cmd::ExecArgs),
    /// Load vsched's sched_ext scheduler (places tasks by the measured vCPU model)
    Sched(sched_cmd::SchedArgs),
    /// Keep probing and serve the vCPU model as Prometheus metrics on loopback; optionally user-space RWC (--rwc-cgroup) or load the scheduler (--sched)
    Daemon(daemon_cmd::DaemonArgs),
    /// The running daemon's vCPU model (from its status socket)
    Status(status_cmd::StatusArgs),
    /// Restores demoted threads if vsched dies (started by vsched itself)
    #[command(hide = true)]
    SpinWatchdog,
    /// Gives consolidated threads their CPUs back if vsched dies (started by vsched itself)
    #[command(hide = true)]
    ConsolidateWatchdog,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Probe(args) => probe_cmd::run(args).map(|()| true),
        Command::Lab(cmd) => return program_exit(lab_cmd::run(cmd)),
        Command::Bench(cmd) => bench_cmd::run(cmd),
        Command::SpinDetect(args) => spin_cmd::spin_detect(args),
        Command::SpinWatchdog => spin_cmd::watchdog(),
        Command::ConsolidateWatchdog => consolidate_run::watchdog(),
        Command::Exec(args) => return program_exit(exec_cmd::run(args)),
        Command::Daemon(args) => daemon_cmd::run(args),
        Command::Status(args) => status_cmd::run(args),
        Command::Sched(args) => return program_exit(sched_cmd::run(args)),
        Command::Run(args) => {
            return match spin_cmd::run(args) {
                Ok(code) => ExitCode::from(code),
                Err(e) => {
                    eprintln!("vsched: error: {e:#}");
                    ExitCode::from(2)
                }
            }
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        // The command ran but its verdict is negative (a failed check, a failing guest command).
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("vsched: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The exit status of a command that runs a program: the program's own
/// status, or 2 for vsched's own errors.
fn program_exit(result: anyhow::Result<u8>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("vsched: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
