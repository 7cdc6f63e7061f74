//! The shell script a scenario runs in its guest, and the parsing of what
//! it prints: one line per run, "@@run VARIANT ROUND KEY VALUE...", the
//! workload's own output (schedbench: "elapsed_s 1.25", or the request
//! server's percentiles) after the variant and round, and (but in
//! timelines) "ipis N": the IPIs the guest's vCPUs received over the run,
//! Gleaner's measure of wake-ups of halted vCPUs.

use super::scenario::{Oracle, Scenario, VariantKind};

/// A vsched run starts its workload this long after the scheduler said it
/// is ready (`--ready-file`: loaded, the first model written), so that
/// the first report's EMA has a second report to settle with.
pub const SETTLE_S: u32 = 1;
/// Where the guest's `vsched sched` says it is ready (`--ready-file`).
pub(crate) const READY_FILE: &str = "/tmp/sched-ready.json";
/// Longest wait for the first model, in tenths of a second: the first
/// probe step (light and heavy windows, a full topology probe of up to 4
/// vCPUs) takes 1-3 s under TCG.
const MODEL_WAIT_TENTHS: u32 = 200;
/// Longest wait for sched_ext to become enabled or disabled, in tenths of
/// a second: usually a few seconds (the verifier), but in the RWC layout
/// the guest's own scheduler may start the loader on the vCPU capped at
/// 10%, where the verifier's work takes ten times as long: measured
/// 2026-12-01 on 7.2.13, `taskset -c 3` 33.4 and 34.2 s against 2.9 s on
/// vCPU 0 (`vsched sched -v` "loading took"); a clean-clone suite missed
/// 30 s there once.
const STATE_WAIT_TENTHS: u32 = 600;

/// Shell that prints every IPI the guest's vCPUs received so far:
/// rescheduling (RES: a wake-up sent to another vCPU) and function-call
/// (CAL) interrupts, every vCPU's column. The prelude's `counted` adds a
/// run's count to its line (a run that printed nothing stays without
/// one, and so without a result); the lab tests count the same way
/// (crates/cli/tests/common/lab.rs, `run_counting_ipis`).
pub const IPIS: &str = "awk '/RES:|CAL:/ {for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+$/) t += $i} \
                        END {print t + 0}' /proc/interrupts";

/// Result line marker.
const RUN: &str = "@@run";
/// Marker of the last vsched run's summary JSON (one line).
const SUMMARY: &str = "@@summary";

/// One run's result.
#[derive(Debug, Clone, PartialEq)]
pub struct RunLine {
    pub variant: String,
    pub round: usize,
    /// What the workload printed, in its order: (name, value).
    pub values: Vec<(String, f64)>,
}

impl RunLine {
    /// The value named `metric`, if the workload printed it.
    pub fn get(&self, metric: &str) -> Option<f64> {
        self.values
            .iter()
            .find(|(k, _)| k == metric)
            .map(|&(_, v)| v)
    }
}

/// The cgroup the daemon scenarios' workloads run in (cgroup v2, mounted
/// by the script: the lab's init mounts no cgroup filesystem).
const WORK_CGROUP: &str = "/sys/fs/cgroup/work";
/// Longest wait for user-space RWC's first cpuset, in tenths of a second:
/// two reports in a row must agree, and the first topology probe takes
/// 1-3 s under TCG.
const RWC_WAIT_TENTHS: u32 = 300;

/// Shell functions every script uses: waiting for sched_ext's state, for
/// the first model, and (timelines) for a time since the script began;
/// for scenarios that run `vsched daemon` (its RWC, or its consolidation
/// column), the workload's cgroup, a way to run a command in it, waiting
/// for RWC's first cpuset and for the daemon's Nth model (`wait_models
/// N`, from `vsched status --json`).
fn prelude(s: &Scenario) -> String {
    let mut out = common_prelude();
    if s.daemon || s.daemon_consolidate {
        out.push_str(&format!(
            "mount -t cgroup2 none /sys/fs/cgroup && mkdir -p {WORK_CGROUP}\n\
             in_work() {{ sh -c 'echo $$ > {WORK_CGROUP}/cgroup.procs && exec \"$@\"' sh \"$@\"; }}\n\
             wait_rwc() {{ for i in $(seq {RWC_WAIT_TENTHS}); do [ -n \"$(cat {WORK_CGROUP}/cpuset.cpus 2>/dev/null)\" ] && return 0; sleep 0.1; done; echo 'RWC hid no vCPU'; return 1; }}\n\
             wait_models() {{ for i in $(seq {model_polls}); do n=$(vsched status --json 2>/dev/null | sed -n 's/.*\"model_updates\":\\([0-9]*\\).*/\\1/p'); [ \"${{n:-0}}\" -ge $1 ] && return 0; sleep 0.5; done; echo \"the daemon had no $1 models\"; return 1; }}\n",
            model_polls = MODEL_WAIT_TENTHS / 5
        ));
    }
    out
}

pub(crate) fn common_prelude() -> String {
    format!(
        "wait_state() {{ for i in $(seq {STATE_WAIT_TENTHS}); do grep -qx $1 /sys/kernel/sched_ext/state && return 0; sleep 0.1; done; echo \"sched_ext did not become $1 within {} s (state: $(cat /sys/kernel/sched_ext/state))\"; return 1; }}\n\
         wait_ready() {{ for i in $(seq {MODEL_WAIT_TENTHS}); do [ -s {READY_FILE} ] && return 0; sleep 0.1; done; echo 'vsched sched did not say it was ready (no model reached the scheduler)'; return 1; }}\n\
         counted() {{ a=$({IPIS}); o=$(\"$@\"); b=$({IPIS}); [ -n \"$o\" ] && echo \"$o ipis $((b - a))\"; }}\n\
         T0=$(cut -d' ' -f1 /proc/uptime)\n\
         wait_until() {{ while awk -v t0=$T0 -v d=$1 '{{exit !($1 < t0 + d)}}' /proc/uptime; do sleep 0.02; done; }}\n",
        STATE_WAIT_TENTHS / 10
    )
}

/// The guest script for rounds `rounds` (a range of round numbers): every
/// variant once per round, the order rotated by one each round.
pub fn guest_script(s: &Scenario, rounds: std::ops::Range<usize>) -> String {
    let mut out = prelude(s);
    let variants = s.variants();
    for round in rounds {
        for k in 0..variants.len() {
            let (label, kind) = &variants[(k + round) % variants.len()];
            push_run(&mut out, s, label, *kind, round, None);
        }
    }
    out
}

/// The guest script of one timeline run: variant `k` in round `round`,
/// its workload started `lead_s` after the script (and so the layout's
/// phase clock) began, whatever the scheduler's loading took.
pub fn timeline_script(s: &Scenario, lead_s: f64, round: usize, k: usize) -> String {
    let mut out = prelude(s);
    let (label, kind) = &s.variants()[k];
    push_run(&mut out, s, label, *kind, round, Some(lead_s));
    out
}

/// Appends one run of variant `label` to `out`; with `start_at_s`, its
/// workload waits until that long after the script began.
fn push_run(
    out: &mut String,
    s: &Scenario,
    label: &str,
    kind: VariantKind,
    round: usize,
    start_at_s: Option<f64>,
) {
    let in_work = if s.daemon { "in_work " } else { "" };
    let workload = format!("{in_work}schedbench {}", s.workload.join(" "));
    let wait = start_at_s.map_or(String::new(), |t| format!("wait_until {t}; "));
    // A timeline's output is its series, read by position: no count there.
    let counted = if s.timeline.is_none() { "counted " } else { "" };
    let report = |cmd: &str| format!("{wait}echo \"{RUN} {label} {round} $({counted}{cmd})\"\n");
    match kind {
        VariantKind::Default => out.push_str(&report(&workload)),
        VariantKind::Oracle(Oracle::Pinned(cpus)) => out.push_str(&report(&format!(
            "{in_work}taskset -c {cpus} schedbench {}",
            s.workload.join(" ")
        ))),
        VariantKind::Oracle(Oracle::Rotating { every_us, cpus }) => {
            // The cpu workload's THREADS ITERS, moved on along `cpus`.
            let args = s.workload.get(1..).unwrap_or_default().join(" ");
            out.push_str(&report(&format!(
                "{in_work}schedbench rotate {args} {every_us} {cpus}"
            )))
        }
        VariantKind::Oracle(Oracle::None) => {}
        VariantKind::RunConsolidate => {
            out.push_str(&report(&format!("vsched run --consolidate -- {workload}")))
        }
        VariantKind::DaemonConsolidate => {
            // Timed from its second model on, the first RWC may act on
            // (two reports must agree); polled every 0.5 s, since each
            // `vsched status` is a process in a guest the probers are
            // measuring. The empty cgroup has narrowed by then (nothing
            // runs there to undo the trial), so the workload must widen
            // it where it needs more, where `vsched run --consolidate`
            // starts wide.
            out.push_str(&format!(
                "vsched daemon --rwc-cgroup {WORK_CGROUP} --consolidate-cgroups 2>/tmp/daemon.log & S=$!\n\
                 if wait_models 2; then sleep {SETTLE_S}\n"
            ));
            out.push_str(&report(&format!(
                "in_work schedbench {}",
                s.workload.join(" ")
            )));
            out.push_str(&format!(
                "else echo \"{label} {round}: not measured; vsched daemon said:\"; tail -5 /tmp/daemon.log; fi\n\
                 kill $S; wait $S\n"
            ));
        }
        VariantKind::Daemon => {
            out.push_str(&format!(
                "vsched daemon --rwc-cgroup {WORK_CGROUP} 2>/tmp/daemon.log & S=$!\n\
                 wait_rwc && sleep {SETTLE_S}\n"
            ));
            out.push_str(&report(&workload));
            out.push_str("kill $S; wait $S\n");
        }
        VariantKind::Vsched(flags) => {
            // The reference is its own scheduler: no vsched flags.
            let fixed = if flags.contains("--reference-fifo") {
                ""
            } else {
                s.vsched_flags
            };
            // A run whose scheduler never got ready (sched_ext not
            // enabled, or no model) would time the kernel's default
            // scheduler under vsched's name: it is not measured, and says
            // why with the loader's last lines.
            out.push_str(&format!(
                "rm -f {READY_FILE}; vsched sched -q {fixed} {flags} --stats-json /tmp/sched.json --ready-file {READY_FILE} 2>/tmp/sched.log & S=$!\n\
                 if wait_state enabled && wait_ready; then sleep {SETTLE_S}\n"
            ));
            out.push_str(&report(&workload));
            out.push_str(&format!(
                "else echo \"{label} {round}: not measured, the scheduler was not ready; vsched sched said:\"; tail -5 /tmp/sched.log; fi\n\
                 kill $S; wait $S; wait_state disabled\n\
                 echo \"{SUMMARY} $(tr -d '\\n' < /tmp/sched.json)\"\n"
            ));
        }
    }
}

/// Result lines, and the last vsched summary, from the guest's output.
pub fn parse_results(output: &str) -> (Vec<RunLine>, Option<serde_json::Value>) {
    let mut runs = Vec::new();
    let mut summary = None;
    for line in output.lines() {
        if let Some(rest) = line.strip_prefix(SUMMARY) {
            if let Ok(v) = serde_json::from_str(rest.trim()) {
                summary = Some(v);
            }
            continue;
        }
        let Some(rest) = line.strip_prefix(RUN) else {
            continue;
        };
        // "vsched --no-rwc 3 elapsed_s 1.25": the label may have spaces;
        // the round is the first number followed by KEY VALUE pairs.
        let f: Vec<&str> = rest.split_whitespace().collect();
        let Some(at) = (1..f.len()).find(|&i| {
            f[i].parse::<usize>().is_ok() && (f.len() - i - 1) % 2 == 0 && f.len() - i > 2
        }) else {
            continue;
        };
        let values: Option<Vec<(String, f64)>> = f[at + 1..]
            .chunks(2)
            .map(|kv| kv[1].parse().ok().map(|v| (kv[0].to_string(), v)))
            .collect();
        let (Ok(round), Some(values)) = (f[at].parse(), values) else {
            continue;
        };
        runs.push(RunLine {
            variant: f[..at].join(" "),
            round,
            values,
        });
    }
    (runs, summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::SCENARIOS;

    #[test]
    fn every_variant_runs_once_per_round_in_rotating_order() {
        let s = &SCENARIOS[0];
        let rounds = 3;
        let script = guest_script(s, 0..rounds);
        let labels: Vec<String> = s.variants().into_iter().map(|(l, _)| l).collect();
        // The variants in the order they run, round by round.
        let order: Vec<(usize, String)> = script
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("echo \"{RUN} ")))
            .map(|rest| {
                let head = rest.split(" $(").next().unwrap();
                let (label, round) = head.rsplit_once(' ').unwrap();
                (round.parse().unwrap(), label.to_string())
            })
            .collect();
        assert_eq!(order.len(), rounds * labels.len(), "{script}");
        for r in 0..rounds {
            let this: Vec<&String> = order
                .iter()
                .filter(|(x, _)| *x == r)
                .map(|(_, l)| l)
                .collect();
            let expected: Vec<&String> = (0..labels.len())
                .map(|k| &labels[(k + r) % labels.len()])
                .collect();
            assert_eq!(this, expected, "round {r}: {script}");
        }
    }

    /// A loader that never got ready would have its run timed on the
    /// kernel's default scheduler (seen once in CI-like runs: a summary
    /// with no model after 12 s): the workload runs only inside the guard.
    #[test]
    fn a_vsched_run_is_timed_only_once_its_scheduler_is_ready() {
        let rwc = SCENARIOS.iter().find(|s| s.name == "rwc").unwrap();
        let script = guest_script(rwc, 0..1);
        let lines: Vec<&str> = script.lines().collect();
        let run = lines
            .iter()
            .position(|l| l.starts_with("echo \"@@run vsched 0 "))
            .unwrap_or_else(|| panic!("{script}"));
        assert!(
            lines[run - 1].starts_with("if wait_state enabled && wait_ready; then"),
            "{script}"
        );
        assert!(
            lines[run + 1].starts_with("else echo \"vsched 0: not measured"),
            "{script}"
        );
    }

    /// The daemon's consolidation column runs the workload in the cgroup
    /// it manages, only once its first model is in, and never where the
    /// workload binds threads to vCPUs a narrowed cpuset would forbid.
    #[test]
    fn the_cgroup_consolidation_column_times_the_workload_in_its_cgroup() {
        let barrier = SCENARIOS
            .iter()
            .find(|s| s.name == "gleaner-barrier")
            .unwrap();
        let script = guest_script(barrier, 0..1);
        let lines: Vec<&str> = script.lines().collect();
        let label = "vsched daemon --consolidate-cgroups";
        let run = lines
            .iter()
            .position(|l| l.starts_with(&format!("echo \"@@run {label} 0 ")))
            .unwrap_or_else(|| panic!("{script}"));
        assert!(
            lines[run].contains("$(counted in_work schedbench barrier "),
            "{script}"
        );
        assert_eq!(
            lines[run - 1],
            format!("if wait_models 2; then sleep {SETTLE_S}"),
            "{script}"
        );
        assert!(
            lines[run - 2].starts_with(&format!(
                "vsched daemon --rwc-cgroup {WORK_CGROUP} --consolidate-cgroups "
            )),
            "{script}"
        );
        for s in SCENARIOS.iter() {
            if s.workload[0] == "wakeup" {
                assert!(!s.daemon_consolidate, "{}", s.name);
            }
        }
    }

    #[test]
    fn a_rotating_oracle_runs_the_cpu_workload_moved_along_its_vcpus() {
        let ivh = SCENARIOS.iter().find(|s| s.name == "ivh-1").unwrap();
        let script = guest_script(ivh, 0..1);
        assert!(
            script.contains("@@run oracle 0 $(counted schedbench rotate 1 400000000 4000 0,1,2,3)"),
            "{script}"
        );
        // Only the cpu workload knows how to rotate.
        for s in SCENARIOS.iter() {
            if let Oracle::Rotating { .. } = s.oracle {
                assert_eq!(s.workload[0], "cpu", "{}", s.name);
            }
        }
    }

    /// Every run but a timeline's counts the IPIs its vCPUs received, as
    /// a value of its own beside the workload's.
    #[test]
    fn runs_count_their_ipis_except_in_timelines() {
        for s in SCENARIOS.iter() {
            let script = match s.timeline {
                Some(t) => timeline_script(s, t.lead_s, 0, 0),
                None => guest_script(s, 0..1),
            };
            let runs: Vec<&str> = script.lines().filter(|l| l.contains(RUN)).collect();
            assert!(!runs.is_empty(), "{}: {script}", s.name);
            let counting = runs.iter().filter(|l| l.contains("$(counted ")).count();
            let expected = if s.timeline.is_some() { 0 } else { runs.len() };
            assert_eq!(counting, expected, "{}: {script}", s.name);
        }
        let (runs, _) = parse_results("@@run default 0 elapsed_s 2.5 ipis 4100\n");
        assert_eq!(runs[0].get("ipis"), Some(4100.0));
    }

    #[test]
    fn results_and_summary_are_read_back() {
        let out = "noise\n@@run default 0 elapsed_s 2.5\n@@run vsched --no-rwc 1 elapsed_s 1.25\n\
                   @@run oracle 0 elapsed_s \n@@run vsched 2 p95_us 900 queue_p95_us 700\n\
                   @@summary {\"model_updates\": 3}\n";
        let (runs, summary) = parse_results(out);
        assert_eq!(
            runs,
            vec![
                RunLine {
                    variant: "default".into(),
                    round: 0,
                    values: vec![("elapsed_s".into(), 2.5)]
                },
                RunLine {
                    variant: "vsched --no-rwc".into(),
                    round: 1,
                    values: vec![("elapsed_s".into(), 1.25)]
                },
                RunLine {
                    variant: "vsched".into(),
                    round: 2,
                    values: vec![("p95_us".into(), 900.0), ("queue_p95_us".into(), 700.0)]
                },
            ]
        );
        assert_eq!(summary.unwrap()["model_updates"], 3);
    }
}
