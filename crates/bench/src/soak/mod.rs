//! `vsched bench soak`: does a sched_ext scheduler crash the guest kernel?
//!
//! Boots lab guests, each running a mixed workload the whole time (see
//! `script`), and loads, holds and unloads a scheduler in cycles. Every
//! variant gets the same guests, workload and time: the kernel's default
//! scheduler alone (the control: what the emulator and kernel do without
//! sched_ext), an independent sched_ext scheduler (scx_bpfland, published
//! on crates.io: what sched_ext itself does), vsched's FIFO reference mode
//! and vsched with each mechanism switched off in turn (which of vsched's
//! parts is to blame, if any). Guests of the variants alternate, so host
//! noise spreads over all of them. A guest that panics ends its variant's
//! guest there; the panic is counted with its reason and the cycle it
//! interrupted, and the soak goes on with the next guest.

mod script;

pub use script::{guest_script, parse, Counters, GuestLog, Loader, Usage, WorkCount};

use crate::cprogram::CProgram;
use crate::BenchError;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use vsched_lab::run::LabOptions;
use vsched_lab::{LabError, Layout};

/// The guests' layout: two vCPUs, free on the host (no caps, no pinning,
/// so single-threaded TCG can run it too), a sched_ext kernel.
const LAYOUT: &str = "\
description = \"soak: a scheduler loaded and unloaded around a mixed workload\"\n\
vcpus = 2\n\
kernel = \"sched_ext\"\n\
commands = []\n";

/// One thing to soak.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Variant {
    pub name: String,
    /// The command each cycle loads (None: the default scheduler alone).
    pub command: Option<String>,
}

/// The variants `vsched bench soak` knows, by name: the control, the
/// independent scheduler, vsched's reference mode, vsched, and vsched
/// with each mechanism off.
pub fn known_variants() -> Vec<Variant> {
    let v = |name: &str, command: Option<&str>| Variant {
        name: name.to_string(),
        command: command.map(str::to_string),
    };
    vec![
        v("default", None),
        v("scx_bpfland", Some("scx_bpfland")),
        v(
            "vsched-fifo",
            Some("vsched sched -q --reference-fifo --no-probe"),
        ),
        // A counter line a minute (seen by long holds); none in short ones.
        v(
            "vsched",
            Some(&format!(
                "vsched sched -q --interval 60s --interval-json {}",
                script::INTERVAL_JSON
            )),
        ),
        v("vsched-no-rwc", Some("vsched sched -q --no-rwc")),
        v("vsched-no-capacity", Some("vsched sched -q --no-capacity")),
        v("vsched-no-bvs", Some("vsched sched -q --no-bvs")),
        v("vsched-no-ivh", Some("vsched sched -q --no-ivh")),
        v("vsched-no-probe", Some("vsched sched -q --no-probe")),
    ]
}

/// What to soak and how long.
#[derive(Debug, Clone)]
pub struct SoakConfig {
    pub variants: Vec<Variant>,
    pub guests_per_variant: usize,
    pub cycles_per_guest: usize,
    /// Seconds each cycle keeps the scheduler loaded.
    pub hold_s: f64,
    /// The scx_bpfland binary, if that variant runs.
    pub scx_bpfland: Option<PathBuf>,
}

/// How one guest ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum GuestOutcome {
    /// Every cycle ran and the workload ended.
    Completed,
    /// The guest kernel panicked.
    Panicked {
        /// The kernel's reason and instruction.
        cause: String,
        /// The cycle under way, and whether its scheduler was loaded.
        in_cycle: Option<usize>,
        scheduler_loaded: bool,
        /// Where it struck, when it is the emulator's stale breakpoint
        /// (vsched_lab::guest_panic::stale_breakpoint).
        stale_breakpoint: Option<String>,
        console_tail: String,
    },
    /// The guest hung, timed out or QEMU failed (the error's text).
    Failed { error: String },
}

/// One guest's run.
#[derive(Debug, Clone, Serialize)]
pub struct GuestResult {
    pub variant: String,
    pub index: usize,
    #[serde(flatten)]
    pub outcome: GuestOutcome,
    /// The guest kernel's release (`uname -r`), once the script ran.
    pub kernel: Option<String>,
    pub cycles_done: usize,
    /// Cycles whose scheduler did not load, did not unload, or did not
    /// exit 0 (each also in `problems`).
    pub cycles_failed: usize,
    /// Time with sched_ext enabled (the control: its holds).
    pub loaded_s: f64,
    /// Median time from starting the loader to sched_ext enabled.
    pub median_load_s: Option<f64>,
    pub work: Vec<WorkCount>,
    /// The loader's memory and CPU time over each hold (long holds: every
    /// minute), to see whether anything grows.
    pub usage: Vec<Usage>,
    /// vsched's counts per statistics interval over each hold (long
    /// holds: every minute), to see whether its decisions' rates drift.
    pub counters: Vec<Counters>,
    /// What went wrong short of a panic: cycles that failed, workload runs
    /// that failed, kernel complaints in dmesg.
    pub problems: Vec<String>,
}

/// A rate with its 95% interval (Wilson score), per cycle.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rate {
    pub events: usize,
    pub trials: usize,
    pub low: f64,
    pub high: f64,
}

impl Rate {
    pub fn wilson(events: usize, trials: usize) -> Rate {
        if trials == 0 {
            return Rate {
                events,
                trials,
                low: 0.0,
                high: 1.0,
            };
        }
        // z for a two-sided 95% interval.
        let z = 1.959_964_f64;
        let n = trials as f64;
        let p = events as f64 / n;
        let denom = 1.0 + z * z / n;
        let centre = (p + z * z / (2.0 * n)) / denom;
        let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / denom;
        // The bounds are exact at the ends (rounding leaves 1e-19 there).
        Rate {
            events,
            trials,
            low: if events == 0 {
                0.0
            } else {
                (centre - half).max(0.0)
            },
            high: if events == trials {
                1.0
            } else {
                (centre + half).min(1.0)
            },
        }
    }
}

/// One variant's totals.
#[derive(Debug, Clone, Serialize)]
pub struct VariantSummary {
    pub variant: String,
    pub command: Option<String>,
    pub guests: usize,
    pub panics: usize,
    /// Panics in a cycle per cycle begun (a panicking guest's last cycle
    /// counts).
    pub panic_rate_per_cycle: Rate,
    /// Panics while booting, starting the workload or between cycles.
    pub panics_outside_cycles: usize,
    /// Panics, of all the above, that are the emulator's stale breakpoint
    /// (docs/lab.md, "The emulator"); they count in every rate too.
    pub panics_at_stale_breakpoints: usize,
    /// Panics per guest.
    pub panic_rate_per_guest: Rate,
    pub cycles_done: usize,
    pub cycles_failed: usize,
    pub loaded_s: f64,
    /// Guests that failed other than by a panic.
    pub failed_guests: usize,
    /// Each panic's reason.
    pub panic_causes: Vec<String>,
    /// Problems short of a panic, with their guest.
    pub problems: Vec<String>,
}

/// The whole soak.
#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    pub schema: &'static str,
    pub qemu: String,
    pub accel: String,
    pub kernel: String,
    pub cycles_per_guest: usize,
    pub hold_s: f64,
    pub summaries: Vec<VariantSummary>,
    pub guests: Vec<GuestResult>,
}

/// Runs the soak; `progress` is told each guest's result as it comes.
pub fn run(
    config: &SoakConfig,
    opts: &LabOptions,
    stop: &AtomicBool,
    mut progress: impl FnMut(&GuestResult),
) -> Result<SoakReport, BenchError> {
    let program = CProgram::compile(&crate::sched::SCHEDBENCH, "soak")?;
    let mut layout =
        Layout::parse(LAYOUT, &[]).map_err(|e| BenchError::Lab(vsched_lab::LabError::from(e)))?;
    layout.extra_binaries.push(program.path().to_path_buf());
    if config.variants.iter().any(|v| v.name == "scx_bpfland") {
        let path = config.scx_bpfland.clone().ok_or_else(|| {
            BenchError::Scenario("the scx_bpfland variant needs its binary (--scx-bpfland)".into())
        })?;
        layout.extra_binaries.push(path);
    }
    // Boot, the workload's start and end, and each cycle's load, hold,
    // unload and pause, with room for a slow host: loading has taken
    // 10 s and more under TCG on a busy day.
    layout.run_timeout_s = 60.0 + config.cycles_per_guest as f64 * (config.hold_s + 30.0);
    let qemu = vsched_lab::qemu::find(opts.qemu.as_deref(), opts.allow_old_qemu)
        .map_err(BenchError::Lab)?;
    let mut guests = Vec::new();
    let mut accel = String::new();
    let mut kernel = String::new();
    let n = config.variants.len();
    for g in 0..config.guests_per_variant {
        for k in 0..n {
            if stop.load(Ordering::SeqCst) {
                return Err(BenchError::Interrupted);
            }
            // Rotated each round, so no variant always follows the same one.
            let variant = &config.variants[(k + g) % n];
            let loader = match &variant.command {
                Some(c) => Loader::Command(c.clone()),
                None => Loader::None,
            };
            let script = guest_script(&loader, config.cycles_per_guest, config.hold_s);
            let ran = vsched_lab::run::run(&layout, &[script], opts, stop);
            if let Ok(r) = &ran {
                accel.clone_from(&r.accel);
            }
            if matches!(ran, Err(LabError::Interrupted)) {
                return Err(BenchError::Interrupted);
            }
            let result = guest_result(variant, g, ran);
            if let Some(k) = &result.kernel {
                kernel.clone_from(k);
            }
            progress(&result);
            guests.push(result);
        }
    }
    let summaries = config
        .variants
        .iter()
        .map(|v| summarize(v, &guests))
        .collect();
    Ok(SoakReport {
        schema: "vsched.bench-soak/v1",
        qemu: format!("{} ({})", qemu.version_string(), qemu.path.display()),
        accel,
        kernel,
        cycles_per_guest: config.cycles_per_guest,
        hold_s: config.hold_s,
        summaries,
        guests,
    })
}

/// What one guest's run amounts to.
fn guest_result(
    variant: &Variant,
    index: usize,
    ran: Result<vsched_lab::RunResult, LabError>,
) -> GuestResult {
    let (outcome, output) = match ran {
        Ok(r) => {
            let out = r
                .commands
                .first()
                .map(|c| c.output.clone())
                .unwrap_or_default();
            let log = parse(&out);
            let outcome = if log.ended {
                GuestOutcome::Completed
            } else {
                GuestOutcome::Failed {
                    error: "the soak script did not reach its end".into(),
                }
            };
            (outcome, out)
        }
        Err(e) => match &e {
            LabError::GuestPanic {
                console_tail,
                partial_output,
                stale_breakpoint,
                ..
            } => {
                let log = parse(partial_output);
                (
                    GuestOutcome::Panicked {
                        cause: e.guest_panic_cause().unwrap_or_default(),
                        in_cycle: log.open_cycle.map(|(i, _)| i),
                        scheduler_loaded: log.open_cycle.is_some_and(|(_, l)| l),
                        stale_breakpoint: stale_breakpoint.clone(),
                        console_tail: console_tail.clone(),
                    },
                    partial_output.clone(),
                )
            }
            _ => (
                GuestOutcome::Failed {
                    error: e.to_string(),
                },
                String::new(),
            ),
        },
    };
    let log = parse(&output);
    let mut problems = Vec::new();
    let bad_cycles: Vec<&script::Cycle> = log
        .cycles
        .iter()
        .filter(|c| c.exit != 0 || !(c.state == "enabled" || c.state == "none"))
        .collect();
    for c in &bad_cycles {
        problems.push(format!(
            "cycle {}: state {}, loader exit {}",
            c.index, c.state, c.exit
        ));
    }
    problems.extend(log.loader_said.iter().map(|l| format!("loader: {l}")));
    for w in log.work.iter().filter(|w| w.failed > 0 || w.done == 0) {
        problems.push(format!(
            "workload {}: {} runs failed, {} completed",
            w.loop_name, w.failed, w.done
        ));
    }
    problems.extend(
        log.dmesg
            .iter()
            .filter(|l| script::is_complaint(l))
            .map(|l| format!("dmesg: {l}")),
    );
    // The control's "loaded" time is its cycles' same hold, unloaded.
    let loaded_ms: u64 = log.cycles.iter().map(|c| c.loaded_ms).sum();
    let mut loads: Vec<f64> = log
        .cycles
        .iter()
        .filter(|c| c.load_ms > 0)
        .map(|c| c.load_ms as f64 / 1e3)
        .collect();
    GuestResult {
        variant: variant.name.clone(),
        index,
        outcome,
        kernel: log.kernel.clone(),
        median_load_s: (!loads.is_empty()).then(|| vsched_model::stats::median(&mut loads)),
        cycles_done: log.cycles.len(),
        cycles_failed: bad_cycles.len(),
        loaded_s: loaded_ms as f64 / 1e3,
        work: log.work,
        usage: log.usage,
        counters: log.counters,
        problems,
    }
}

fn summarize(variant: &Variant, guests: &[GuestResult]) -> VariantSummary {
    let mine: Vec<&GuestResult> = guests
        .iter()
        .filter(|g| g.variant == variant.name)
        .collect();
    let panics: Vec<&GuestResult> = mine
        .iter()
        .copied()
        .filter(|g| matches!(g.outcome, GuestOutcome::Panicked { .. }))
        .collect();
    // A panic in a cycle ends a cycle begun, which counts as a trial; a
    // panic before the first cycle (while booting or starting the
    // workload) or between cycles is counted per guest only.
    let in_cycle = |g: &&&GuestResult| {
        matches!(
            g.outcome,
            GuestOutcome::Panicked {
                in_cycle: Some(_),
                ..
            }
        )
    };
    let cycle_panics = panics.iter().filter(in_cycle).count();
    let cycles_begun: usize = mine.iter().map(|g| g.cycles_done).sum::<usize>() + cycle_panics;
    VariantSummary {
        variant: variant.name.clone(),
        command: variant.command.clone(),
        guests: mine.len(),
        panics: panics.len(),
        panic_rate_per_cycle: Rate::wilson(cycle_panics, cycles_begun),
        panics_outside_cycles: panics.len() - cycle_panics,
        panics_at_stale_breakpoints: panics
            .iter()
            .filter(|g| {
                matches!(
                    g.outcome,
                    GuestOutcome::Panicked {
                        stale_breakpoint: Some(_),
                        ..
                    }
                )
            })
            .count(),
        panic_rate_per_guest: Rate::wilson(panics.len(), mine.len()),
        cycles_done: mine.iter().map(|g| g.cycles_done).sum(),
        cycles_failed: mine.iter().map(|g| g.cycles_failed).sum(),
        loaded_s: mine.iter().map(|g| g.loaded_s).sum(),
        failed_guests: mine
            .iter()
            .filter(|g| matches!(g.outcome, GuestOutcome::Failed { .. }))
            .count(),
        panic_causes: panics
            .iter()
            .filter_map(|g| match &g.outcome {
                GuestOutcome::Panicked {
                    cause,
                    in_cycle,
                    scheduler_loaded,
                    stale_breakpoint,
                    ..
                } => Some(format!(
                    "guest {}: {cause} (cycle {}, scheduler {}{})",
                    g.index,
                    in_cycle.map_or("-".into(), |c| c.to_string()),
                    if *scheduler_loaded {
                        "loaded"
                    } else {
                        "not loaded"
                    },
                    if stale_breakpoint.is_some() {
                        "; the emulator's stale breakpoint"
                    } else {
                        ""
                    }
                )),
                _ => None,
            })
            .collect(),
        problems: mine
            .iter()
            .flat_map(|g| {
                g.problems
                    .iter()
                    .map(move |p| format!("guest {}: {p}", g.index))
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_intervals_of_none_some_and_all() {
        // No event in 300 trials: at most about 1.3% (the rule of three
        // gives 1%; Wilson is a little wider).
        let r = Rate::wilson(0, 300);
        assert_eq!(r.low, 0.0);
        assert!((r.high - 0.0126).abs() < 0.0005, "{r:?}");
        let r = Rate::wilson(2, 12);
        assert!(
            r.low > 0.046 && r.low < 0.048 && r.high > 0.447 && r.high < 0.449,
            "{r:?}"
        );
        let r = Rate::wilson(6, 6);
        assert_eq!(r.high, 1.0);
        assert_eq!(Rate::wilson(0, 0).high, 1.0);
    }

    #[test]
    fn a_panicking_guest_counts_its_cycle_and_cause() {
        let v = Variant {
            name: "x".into(),
            command: Some("x".into()),
        };
        let panic = LabError::GuestPanic {
            during_commands: true,
            console_tail: "RIP: 0010:scx_tick+0x1/0x2\nKernel panic - not syncing: Fatal exception"
                .into(),
            stale_breakpoint: None,
            partial_output: "@@soak started 0\n@@soak load 0 0\n@@soak loaded 0 enabled 300\n\
                             @@soak cycle 0 state=enabled exit=0 1300\n@@soak load 1 1800\n\
                             @@soak loaded 1 enabled 2000\n"
                .into(),
        };
        let g = guest_result(&v, 0, Err(panic));
        assert_eq!(g.cycles_done, 1);
        match &g.outcome {
            GuestOutcome::Panicked {
                cause,
                in_cycle,
                scheduler_loaded,
                ..
            } => {
                assert!(cause.contains("scx_tick"), "{cause}");
                assert_eq!(*in_cycle, Some(1));
                assert!(*scheduler_loaded);
            }
            o => panic!("{o:?}"),
        }
        let s = summarize(&v, &[g]);
        assert_eq!((s.panics, s.panic_rate_per_cycle.trials), (1, 2));
        assert_eq!(s.panics_at_stale_breakpoints, 0);
    }

    #[test]
    fn every_variant_has_a_unique_name_and_the_control_loads_nothing() {
        let all = known_variants();
        for (i, v) in all.iter().enumerate() {
            assert!(all[i + 1..].iter().all(|w| w.name != v.name), "{}", v.name);
        }
        assert_eq!(all[0].command, None);
    }
}
