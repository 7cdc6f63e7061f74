//! The soak guest's script and the parsing of what it prints.
//!
//! The guest starts a mixed workload that runs the whole time (threads
//! messaging over Unix sockets, a barrier program with more threads than
//! vCPUs, a fork/exec storm, a CPU-bound task hopping between vCPUs with
//! taskset), then loads a scheduler, holds it, and unloads it, cycle after
//! cycle: the moments sched_ext moves every task between classes are the
//! ones that crashed guests. Every step prints a marker line, so a guest
//! that panics still tells how far it came.

/// Marker of the script's lines.
pub const MARK: &str = "@@soak";

/// Longest wait for sched_ext to become enabled or disabled, in tenths of
/// a second: loading takes under a second in these guests, but the
/// kernel's enable waits for every vCPU several times, and a busy host
/// has stretched it past 10 s (the scheduler benchmark's same wait).
const STATE_WAIT_TENTHS: u32 = 300;

/// Where a vsched loader writes its counters, a JSON line per interval
/// (`vsched sched --interval-json`), read while it holds.
pub const INTERVAL_JSON: &str = "/tmp/soak/interval.jsonl";

/// What one cycle loads: a command started in the background and stopped
/// with SIGINT, or nothing (the default scheduler, for the control).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Loader {
    None,
    Command(String),
}

/// The guest script: the workload, then `cycles` cycles of loading with
/// `loader`, holding it `hold_s` and unloading, then the workload's end
/// and the kernel's own complaints.
pub fn guest_script(loader: &Loader, cycles: usize, hold_s: f64) -> String {
    let mut s = format!(
        "wait_state() {{ for i in $(seq {STATE_WAIT_TENTHS}); do grep -qx $1 /sys/kernel/sched_ext/state 2>/dev/null && return 0; sleep 0.1; done; return 1; }}\n\
         ms() {{ awk '{{printf \"%d\", $1 * 1000}}' /proc/uptime; }}\n\
         N=$(nproc)\n\
         mkdir -p /tmp/soak && cd /tmp/soak\n\
         echo \"{MARK} kernel $(uname -r)\"\n\
         {WORKLOAD}\
         echo \"{MARK} started $(ms)\"\n"
    );
    for i in 0..cycles {
        match loader {
            Loader::None => s.push_str(&format!(
                "echo \"{MARK} load {i} $(ms)\"\n\
                 sleep {hold_s}\n\
                 echo \"{MARK} cycle {i} state=none exit=0 $(ms)\"\n"
            )),
            Loader::Command(cmd) => s.push_str(&format!(
                "echo \"{MARK} load {i} $(ms)\"\n\
                 rm -f {INTERVAL_JSON}\n\
                 {cmd} >/tmp/soak/loader.log 2>&1 & S=$!\n\
                 if wait_state enabled; then st=enabled; else st=not-enabled; fi\n\
                 echo \"{MARK} loaded {i} $st $(ms)\"\n\
                 {hold}\
                 kill -INT $S 2>/dev/null; wait $S; rc=$?\n\
                 wait_state disabled || st=still-$(cat /sys/kernel/sched_ext/state)\n\
                 echo \"{MARK} cycle {i} state=$st exit=$rc $(ms)\"\n\
                 [ $rc -eq 0 ] || sed 's/^/{MARK} loader-said /' /tmp/soak/loader.log | tail -5\n",
                hold = hold_reporting_usage(hold_s),
            )),
        }
        // A moment under the default scheduler between cycles, so that
        // each load starts from the kernel's own scheduling.
        s.push_str("sleep 0.5\n");
    }
    s.push_str(&format!(
        "touch stop; wait\n\
         for w in messaging barrier forks hops; do echo \"{MARK} work $w $(cat $w.done 2>/dev/null | wc -c) $(cat $w.failed 2>/dev/null | wc -c)\"; done\n\
         dmesg | grep -E 'BUG:|WARNING:|Oops|Call Trace|sched_ext|stall|lockup|hung task' | sed 's/^/{MARK} dmesg /'\n\
         echo \"{MARK} end $(ms)\"\n"
    ));
    s
}

/// How often a long hold reports the loader's memory and CPU time: enough
/// points to see growth over an hour, few enough to read.
const USAGE_EVERY_S: f64 = 60.0;

/// Sleeping `hold_s` with the loader's ($S) resident memory and CPU time
/// reported at its start and every [`USAGE_EVERY_S`]: "@@soak usage
/// UPTIME_MS RSS_KB CPU_TICKS" (utime + stime, at USER_HZ = 100).
fn hold_reporting_usage(hold_s: f64) -> String {
    // With the usage, the loader's last interval line (`vsched sched
    // --interval-json`), if it wrote one: its counts over that interval.
    let usage = format!(
        "echo \"{MARK} usage $(ms) $(awk '/^VmRSS/ {{print $2}}' /proc/$S/status 2>/dev/null || echo 0) $(awk '{{print $14 + $15}}' /proc/$S/stat 2>/dev/null || echo 0)\"\n\
         echo \"{MARK} counters $(ms) $(tail -1 {INTERVAL_JSON} 2>/dev/null)\"\n"
    );
    let mut s = usage.clone();
    let mut left = hold_s;
    while left > 0.0 {
        let step = left.min(USAGE_EVERY_S);
        s.push_str(&format!("sleep {step}\n"));
        s.push_str(&usage);
        left -= step;
    }
    s
}

/// The workload, four loops in the background until `stop` exists; each
/// loop writes a byte to NAME.done per completed run and to NAME.failed
/// per failed one.
const WORKLOAD: &str = "\
loop() { name=$1; shift; while [ ! -e stop ]; do if \"$@\" >/dev/null 2>&1; then printf . >> $name.done; else printf x >> $name.failed; fi; done; }\n\
forks() { for i in $(seq 50); do /bin/true || return 1; done; }\n\
hop() { n=$(cat hop.n 2>/dev/null || echo 0); echo $((n + 1)) > hop.n; taskset -c $((n % N)) schedbench cpu 1 2000000; }\n\
loop messaging schedbench messaging 2 4 100 &\n\
loop barrier schedbench barrier 4 200 2000 &\n\
loop forks forks &\n\
loop hops hop &\n";

/// What one guest's output says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GuestLog {
    /// The guest kernel's release.
    pub kernel: Option<String>,
    /// Whether the workload had started.
    pub started: bool,
    /// Cycles that ended, each with the state reached and the loader's
    /// exit status.
    pub cycles: Vec<Cycle>,
    /// The cycle begun and not ended, if any: (index, loaded yet).
    pub open_cycle: Option<(usize, bool)>,
    /// Completed and failed runs of each workload loop, once it ended.
    pub work: Vec<WorkCount>,
    /// The kernel's own complaints (dmesg lines with BUG, WARNING, ...).
    pub dmesg: Vec<String>,
    /// The loader's last lines when it did not exit 0.
    pub loader_said: Vec<String>,
    /// The loader's resident memory and CPU time while it was loaded.
    pub usage: Vec<Usage>,
    /// The loader's counter lines while it was loaded.
    pub counters: Vec<Counters>,
    /// Whether the script reached its end.
    pub ended: bool,
}

/// The loader's counts over its last statistics interval, as it printed
/// them (`vsched sched` without -q), at one moment (guest clock).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Counters {
    /// The cycle whose loader this is.
    pub cycle: usize,
    pub at_ms: u64,
    /// Seconds since the loader started, at the end of the interval.
    pub loader_s: f64,
    pub values: std::collections::BTreeMap<String, u64>,
}

/// The loader's footprint at one moment (guest clock).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Usage {
    /// The cycle whose loader this is.
    pub cycle: usize,
    pub at_ms: u64,
    pub rss_kb: u64,
    /// utime + stime, in clock ticks (USER_HZ, 100 a second).
    pub cpu_ticks: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Cycle {
    pub index: usize,
    /// "enabled" (the scheduler ran and sched_ext went back to
    /// "disabled"), "none" (the control), or what went wrong.
    pub state: String,
    pub exit: i32,
    /// From starting the loader to sched_ext enabled, guest clock (0 for
    /// the control).
    pub load_ms: u64,
    /// From sched_ext enabled to the cycle's end (the scheduler unloaded),
    /// guest clock; for the control, its hold.
    pub loaded_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorkCount {
    pub loop_name: String,
    pub done: u64,
    pub failed: u64,
}

/// Parses the marker lines of a guest's output (whole or cut short).
pub fn parse(output: &str) -> GuestLog {
    let mut log = GuestLog::default();
    let mut load_at_ms: Option<u64> = None;
    let mut enabled_at_ms: Option<u64> = None;
    for line in output.lines() {
        let Some(rest) = line.trim().strip_prefix(MARK) else {
            continue;
        };
        let rest = rest.trim_start();
        let mut w = rest.split_whitespace();
        match w.next() {
            Some("kernel") => log.kernel = w.next().map(str::to_string),
            Some("started") => log.started = true,
            Some("load") => {
                let i = w.next().and_then(|x| x.parse().ok()).unwrap_or(0);
                load_at_ms = w.next().and_then(|x| x.parse().ok());
                enabled_at_ms = None;
                log.open_cycle = Some((i, false));
            }
            Some("loaded") => {
                let f: Vec<&str> = w.collect();
                if let (Some((_, loaded)), [_, state, at]) = (log.open_cycle.as_mut(), &f[..]) {
                    *loaded = *state == "enabled";
                    enabled_at_ms = at.parse().ok();
                }
            }
            Some("cycle") => {
                let index = w.next().and_then(|x| x.parse().ok()).unwrap_or(0);
                let mut state = String::new();
                let mut exit = -1;
                let mut end_ms = None;
                for f in w {
                    if let Some(v) = f.strip_prefix("state=") {
                        state = v.to_string();
                    } else if let Some(v) = f.strip_prefix("exit=") {
                        exit = v.parse().unwrap_or(-1);
                    } else {
                        end_ms = f.parse::<u64>().ok();
                    }
                }
                // The control has no "loaded" line: its hold starts at "load".
                let from = enabled_at_ms.or(load_at_ms);
                let loaded_ms = match (from, end_ms) {
                    (Some(a), Some(b)) => b.saturating_sub(a),
                    _ => 0,
                };
                let load_ms = match (load_at_ms, enabled_at_ms) {
                    (Some(a), Some(b)) => b.saturating_sub(a),
                    _ => 0,
                };
                log.cycles.push(Cycle {
                    index,
                    state,
                    exit,
                    load_ms,
                    loaded_ms,
                });
                log.open_cycle = None;
            }
            Some("work") => {
                let f: Vec<&str> = w.collect();
                if let [name, done, failed] = f[..] {
                    log.work.push(WorkCount {
                        loop_name: name.to_string(),
                        done: done.parse().unwrap_or(0),
                        failed: failed.parse().unwrap_or(0),
                    });
                }
            }
            Some("dmesg") => log.dmesg.push(rest["dmesg".len()..].trim().to_string()),
            Some("loader-said") => log
                .loader_said
                .push(rest["loader-said".len()..].trim().to_string()),
            Some("usage") => {
                let f: Vec<u64> = w.filter_map(|x| x.parse().ok()).collect();
                if let ([at_ms, rss_kb, cpu_ticks], Some((cycle, _))) = (&f[..], log.open_cycle) {
                    let (at_ms, rss_kb, cpu_ticks) = (*at_ms, *rss_kb, *cpu_ticks);
                    log.usage.push(Usage {
                        cycle,
                        at_ms,
                        rss_kb,
                        cpu_ticks,
                    });
                }
            }
            Some("counters") => {
                // "counters AT_MS JSON": the JSON is the rest of the line.
                let mut fields = rest["counters".len()..].trim_start().splitn(2, ' ');
                let at_ms = fields.next().and_then(|x| x.parse().ok());
                let line = fields.next().map(str::trim);
                if let (Some(at_ms), Some(line), Some((cycle, _))) = (at_ms, line, log.open_cycle) {
                    if let Some((loader_s, values)) = interval_counts(line) {
                        log.counters.push(Counters {
                            cycle,
                            at_ms,
                            loader_s,
                            values,
                        });
                    }
                }
            }
            Some("end") => log.ended = true,
            _ => {}
        }
    }
    log
}

/// A `vsched.sched-interval/v1` line: when it was written (seconds since
/// the loader started) and its counts, `model_updates` among them; None
/// for anything else (no line written yet, another schema).
fn interval_counts(line: &str) -> Option<(f64, std::collections::BTreeMap<String, u64>)> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v["schema"] != "vsched.sched-interval/v1" {
        return None;
    }
    let mut values: std::collections::BTreeMap<String, u64> = v["counters"]
        .as_object()?
        .iter()
        .filter_map(|(k, n)| Some((k.clone(), n.as_u64()?)))
        .collect();
    values.insert("model_updates".into(), v["model_updates"].as_u64()?);
    Some((v["elapsed_s"].as_f64()?, values))
}

/// dmesg lines that say something went wrong: sched_ext's own lines when
/// a scheduler is enabled or unregistered by its loader are normal.
pub fn is_complaint(line: &str) -> bool {
    let normal = ["enabled", "unregistered from user space"];
    !(line.contains("sched_ext:") && normal.iter().any(|n| line.contains(n)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_guest_log_is_read_back() {
        let out = "@@soak kernel 7.2.13+deb14-cloud-amd64\n\
                   @@soak started 1000\n\
                   @@soak load 0 1000\n\
                   @@soak loaded 0 enabled 1400\n\
                   @@soak usage 1450 5120 3\n\
                   @@soak usage 5350 5124 41\n\
                   @@soak counters 5350 {\"schema\":\"vsched.sched-interval/v1\",\"elapsed_s\":60.0,\"interval_s\":60.0,\"model_updates\":60,\"counters\":{\"wake_prev\":12,\"kicks\":3}}\n\
                   @@soak counters 5360 \n\
                   @@soak counters 5370 {\"schema\":\"other/v9\"}\n\
                   @@soak cycle 0 state=enabled exit=0 5400\n\
                   @@soak load 1 5900\n\
                   @@soak loaded 1 enabled 6100\n\
                   @@soak cycle 1 state=enabled exit=1 10100\n\
                   @@soak loader-said vsched sched: the kernel ejected the scheduler\n\
                   @@soak work messaging 40 0\n\
                   @@soak work forks 12 1\n\
                   @@soak dmesg [ 3.1] sched_ext: BPF scheduler \"vsched\" enabled\n\
                   @@soak end 11000\n";
        let log = parse(out);
        assert!(log.started && log.ended);
        assert_eq!(log.cycles.len(), 2);
        assert_eq!(log.kernel.as_deref(), Some("7.2.13+deb14-cloud-amd64"));
        assert_eq!(
            (log.cycles[0].load_ms, log.cycles[0].loaded_ms),
            (400, 4000)
        );
        assert_eq!(log.cycles[1].exit, 1);
        assert_eq!(log.open_cycle, None);
        assert_eq!(log.work[1].failed, 1);
        assert_eq!(log.loader_said.len(), 1);
        assert_eq!(log.usage[1].cpu_ticks, 41);
        // An interval line is read; an empty one (no line written yet)
        // and one of another schema are not.
        assert_eq!(log.counters.len(), 1);
        assert_eq!(log.counters[0].loader_s, 60.0);
        assert_eq!(log.counters[0].values["kicks"], 3);
        assert_eq!(log.counters[0].values["model_updates"], 60);
        assert!(!is_complaint(&log.dmesg[0]));
        assert!(is_complaint(
            "[ 9.0] sched_ext: BPF scheduler \"vsched\" disabled (runtime error)"
        ));
    }

    #[test]
    fn a_guest_cut_short_says_which_cycle_it_was_in() {
        let log =
            parse("@@soak started 1000\n@@soak load 0 1000\n@@soak loaded 0 enabled 1300\nnoise\n");
        assert_eq!(log.open_cycle, Some((0, true)));
        assert!(log.cycles.is_empty() && !log.ended);
        let log = parse("@@soak started 1000\n@@soak load 3 1000\n");
        assert_eq!(log.open_cycle, Some((3, false)));
    }

    #[test]
    fn the_script_loads_and_unloads_every_cycle_and_reports_the_work() {
        let s = guest_script(&Loader::Command("vsched sched -q".into()), 3, 2.0);
        assert_eq!(
            s.matches("vsched sched -q >/tmp/soak/loader.log").count(),
            3
        );
        assert_eq!(s.matches("kill -INT $S").count(), 3);
        assert!(s.contains("touch stop; wait"));
        // A long hold reports the loader's footprint every minute.
        let long = guest_script(&Loader::Command("x".into()), 1, 150.0);
        assert_eq!(long.matches("@@soak usage").count(), 4);
        assert_eq!(long.matches("@@soak counters").count(), 4);
        assert!(long.contains("sleep 60\n") && long.contains("sleep 30\n"));
        let control = guest_script(&Loader::None, 2, 2.0);
        assert!(!control.contains("kill -INT"));
        assert_eq!(control.matches("sleep 2\n").count(), 2);
    }
}
