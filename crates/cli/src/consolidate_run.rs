//! `vsched run --consolidate`: Gleaner's consolidation of the program's
//! threads by affinity (vsched-consolidate), on a thread of its own beside
//! whatever else `vsched run` does, with its watchdog.

use anyhow::{Context, Result};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use vsched_consolidate::{
    preferred, watchdog::Journal, Consolidator, Options, ProcessTree, Report,
};

/// A consolidation under way.
pub struct Running {
    program_ended: Arc<AtomicBool>,
    thread: JoinHandle<Report>,
}

/// Starts consolidating process `pid` (vsched's child, just started) and
/// its descendants over the CPUs vsched itself may use.
pub fn start(pid: i32) -> Result<Running> {
    let cpus =
        vsched_os::affinity::thread_affinity(0).context("reading vsched's own CPU affinity")?;
    let exe = std::env::current_exe().context("finding vsched's own binary")?;
    let mut command = Command::new(exe);
    command.arg("consolidate-watchdog");
    let journal = Journal::spawn(command).context("starting the consolidation's watchdog")?;
    let program_ended = Arc::new(AtomicBool::new(false));
    let ended = program_ended.clone();
    let options = Options {
        preferred_file: Some(preferred::KERNEL_FILE.into()),
    };
    let consolidator = Consolidator::new(ProcessTree::new(pid, cpus, Some(journal)), options);
    let thread = std::thread::Builder::new()
        .name("consolidate".into())
        .spawn(move || {
            crate::signals::leave_to_other_threads();
            // Ctrl-C or SIGTERM to vsched: the threads are given back at
            // once, while vsched waits for the program to end.
            consolidator.run(|| ended.load(Ordering::SeqCst) || crate::signals::stopped())
        })
        .context("starting the consolidation thread")?;
    Ok(Running {
        program_ended,
        thread,
    })
}

impl Running {
    /// The program ended: stops, prints the summary on stderr and writes
    /// the report to `json` if given.
    pub fn finish(self, json: Option<&Path>) -> Result<()> {
        self.program_ended.store(true, Ordering::SeqCst);
        let report = self
            .thread
            .join()
            .map_err(|_| anyhow::anyhow!("the consolidation thread panicked"))?;
        eprintln!("{}", summary(&report));
        if let Some(path) = json {
            let text = serde_json::to_string_pretty(&report)?;
            std::fs::write(path, text + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }
}

/// One line for a person.
pub fn summary(r: &Report) -> String {
    let c = &r.counts;
    format!(
        "vsched: consolidation: {}; {} threads placed, {} left to the program; own CPU {:.3} s (vsched's {:.3} s)",
        r.trials_summary(),
        r.placement.threads_placed,
        r.placement.threads_left_to_the_program,
        r.own_cpu_s,
        r.vsched_cpu_s
    ) + &match &r.preferred_cpus {
        Some(p) => format!(
            "; the kernel prefers vCPUs {} (they join the set first; changes of its preference: {})",
            vsched_model::cpulist::format_cpu_list(p),
            c.preference_changes
        ),
        None => String::new(),
    }
}

/// `vsched consolidate-watchdog` (started by `start`): gives the threads
/// back if vsched dies before it has.
pub fn watchdog() -> Result<bool> {
    let n = vsched_consolidate::watchdog::serve(std::io::stdin().lock());
    if n > 0 {
        eprintln!(
            "vsched consolidate-watchdog: vsched ended without giving {n} thread(s) their CPUs back; gave them back"
        );
    }
    Ok(true)
}
