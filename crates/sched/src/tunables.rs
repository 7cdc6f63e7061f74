//! The knobs fixed when the scheduler loads (the BPF side's read-only
//! data). Each is a flag of `vsched sched` (this struct is flattened into
//! its arguments: the help is the explanation), a variable written into
//! the BPF object before the load (`write_to`), and a field of the
//! summary's JSON: declared once, here.

use std::time::Duration;

/// The knobs fixed at load time.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, clap::Args)]
pub struct Tunables {
    /// Time slice of a task while others wait (ended at the guest's next tick)
    #[arg(
        long = "slice",
        value_name = "DURATION",
        default_value = "3ms",
        value_parser = parse_slice
    )]
    pub slice_ns: u64,

    /// Keep using stragglers and stacked vCPUs for normal tasks (RWC off)
    #[arg(long = "no-rwc", action = clap::ArgAction::SetFalse)]
    pub rwc: bool,

    /// Ignore measured capacity when choosing among idle vCPUs
    #[arg(long = "no-capacity", action = clap::ArgAction::SetFalse)]
    pub capacity: bool,

    /// Benchmark reference: a minimal FIFO sched_ext scheduler instead of vsched's policy
    /// (see `reference_fifo` in main.bpf.c)
    #[arg(long = "reference-fifo", hide = true)]
    pub reference_fifo: bool,

    /// Do not place latency-sensitive tasks by vCPU latency and state (BVS off)
    #[arg(long = "no-bvs", action = clap::ArgAction::SetFalse)]
    pub bvs: bool,

    /// Ablation: BVS pre-empts SCHED_IDLE work on any low-latency vCPU,
    /// active or not (the paper's "no state check")
    #[arg(long = "bvs-no-state-check", action = clap::ArgAction::SetFalse, hide = true)]
    pub bvs_state_check: bool,

    /// Do not move CPU-bound tasks off vCPUs about to be switched off (IVH off)
    #[arg(long = "no-ivh", action = clap::ArgAction::SetFalse)]
    pub ivh: bool,

    /// Ablation: IVH moves a task at once, without pre-waking its target
    /// (the paper's activity-unaware migration; also the tick rule off,
    /// whose rested check is activity-aware: see `resolved`)
    #[arg(long = "ivh-unaware", action = clap::ArgAction::SetFalse, hide = true)]
    pub ivh_activity_aware: bool,

    /// Ablation: IVH moves a task only when the heartbeat predicts its
    /// vCPU's switch-off, never at the tick to a rested idle vCPU (IVH as
    /// it was before the tick rule; docs/sched.md)
    #[arg(long = "ivh-beats-only", action = clap::ArgAction::SetFalse, hide = true)]
    pub ivh_at_tick: bool,

    /// One queue of waiting tasks for all vCPUs instead of one per vCPU
    /// (a waiting task then runs on whichever vCPU asks first, and threads
    /// that block often change vCPUs at almost every wake-up)
    #[arg(long = "shared-queue", action = clap::ArgAction::SetFalse)]
    pub per_vcpu_queues: bool,

    /// Run normal tasks on as few vCPUs as their work needs (Gleaner's
    /// consolidation, off by default): fewer IPIs and halts for programs
    /// whose threads block and wake often, but trials judged by the
    /// wake-up rate can cost a pipeline that needs every vCPU 8% or more
    /// (docs/sched.md, "Consolidation")
    #[arg(long = "consolidate")]
    pub consolidate: bool,

    /// Ablation: consolidation parks and gives back vCPUs by capacity
    /// alone, not keeping, of two near equals, the one whose inactive
    /// episodes are the VM's shortest
    #[arg(long = "consolidate-capacity-only", action = clap::ArgAction::SetFalse, hide = true)]
    pub consolidate_by_episodes: bool,

    /// Wake a task on an idle vCPU even when its waker is about to wait,
    /// instead of on the waker's vCPU (Gleaner's local wake-up off)
    #[arg(long = "no-local-wake", action = clap::ArgAction::SetFalse)]
    pub local_wake: bool,

    /// End the slice at every sched_yield(), even with nothing else to
    /// run on the vCPU: the task is then queued and run again, which the
    /// kernel's default scheduler does not do (docs/sched.md, "Yields")
    #[arg(long = "no-yield-in-place", action = clap::ArgAction::SetFalse)]
    pub yield_in_place: bool,

    /// Pin no channel at /sys/fs/bpf/vsched/channel, where vsched's
    /// runtime (`vsched exec --channel`) marks its waiting threads for the
    /// scheduler to run others first: they then run whenever their turn
    /// comes, only to yield again (virtual blocking off; docs/sched.md,
    /// "The channel")
    #[arg(long = "no-channel", action = clap::ArgAction::SetFalse)]
    pub channel: bool,

    /// Heartbeat period on busy vCPUs that the probe saw lose more than 5%
    /// of their time: two missed beats are an inactive episode (IVH's
    /// rhythm, BVS's state check). Shorter sees shorter episodes and costs
    /// more timer interrupts.
    #[arg(
        long = "heartbeat",
        value_name = "DURATION",
        default_value = "1ms",
        value_parser = parse_beat
    )]
    #[serde(rename = "heartbeat_ns")]
    pub beat_ns: u64,

    /// Tests: make the BPF side fail with a runtime error this long after
    /// loading (the kernel ejects it; shows that nothing is lost)
    #[arg(
        long = "inject-error-after",
        value_name = "DURATION",
        default_value = "0s",
        value_parser = parse_inject,
        hide = true
    )]
    #[serde(skip)]
    pub inject_error_after_ns: u64,
}

impl Tunables {
    /// Sets the BPF side's read-only variables (main.bpf.c's parts' `const
    /// volatile` tunables) before the load.
    pub(crate) fn write_to(&self, rodata: &mut crate::bpf_skel::types::rodata) {
        rodata.slice_ns = self.slice_ns;
        rodata.rwc_enabled = self.rwc;
        rodata.capacity_enabled = self.capacity;
        rodata.reference_fifo = self.reference_fifo;
        rodata.bvs_enabled = self.bvs;
        rodata.bvs_state_check = self.bvs_state_check;
        rodata.ivh_enabled = self.ivh;
        rodata.ivh_activity_aware = self.ivh_activity_aware;
        rodata.ivh_at_tick = self.ivh_at_tick;
        rodata.per_vcpu_queues = self.per_vcpu_queues;
        rodata.consolidate_enabled = self.consolidate;
        rodata.consolidate_by_episodes = self.consolidate_by_episodes;
        rodata.local_wake_enabled = self.local_wake;
        rodata.yield_in_place = self.yield_in_place;
        rodata.channel_enabled = self.channel;
        rodata.beat_ns = self.beat_ns;
        rodata.inject_error_after_ns = self.inject_error_after_ns;
    }

    /// The tunables as loaded: the activity-unaware ablation is the
    /// heartbeat's moves without the pre-wake, so it switches the tick rule
    /// off too (its rested check is activity-aware).
    pub fn resolved(self) -> Tunables {
        Tunables {
            ivh_at_tick: self.ivh_at_tick && self.ivh_activity_aware,
            ..self
        }
    }
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            slice_ns: DEFAULT_SLICE_NS,
            rwc: true,
            capacity: true,
            reference_fifo: false,
            bvs: true,
            bvs_state_check: true,
            ivh: true,
            ivh_activity_aware: true,
            ivh_at_tick: true,
            per_vcpu_queues: true,
            consolidate: false,
            consolidate_by_episodes: true,
            local_wake: true,
            yield_in_place: true,
            channel: true,
            beat_ns: DEFAULT_BEAT_NS,
            inject_error_after_ns: 0,
        }
    }
}

/// 1 ms, the paper's tick-based granularity (HZ=1000): the heartbeat must
/// split a vCPU's active stretches from its inactive episodes, and an
/// episode is a gap of two periods (2 ms), about the shortest worth
/// steering around (the lab's high-latency vCPUs: 3 ms; the paper's
/// 2x-latency VMs). Each beat is a timer interrupt, armed only on vCPUs
/// the probe saw lose more than 5%. Measured against 0.5 ms, 5 rounds
/// side by side (2026-11-26, recorded in e67d5c1): IVH at 1 thread 1.45x vs 1.37x the
/// default, at 4 threads 0.94x vs 0.83x; BVS p95 no worse (1.46x vs
/// 1.41x; beside best-effort work 2.40x vs 1.46x); 2 ms lost at 1 thread
/// (1.23x): its four-beat margin is most of a 5 ms stretch.
pub const DEFAULT_BEAT_NS: u64 = 1_000_000;

/// 3 ms: below the 4 ms tick of a HZ=250 guest kernel, where sched_ext
/// ends slices, so a waiting task is served at the next tick; the kernel's
/// default scheduler gives a few ms too (base slice 0.75-3 ms by CPU count).
pub const DEFAULT_SLICE_NS: u64 = 3_000_000;

/// A duration in humantime's syntax (3ms, 500us), as nanoseconds.
fn parse_ns(s: &str) -> Result<u64, String> {
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration ({e}); use e.g. 3ms, 500us"))?;
    Ok(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The slice: positive.
fn parse_slice(s: &str) -> Result<u64, String> {
    match parse_ns(s)? {
        0 => Err(format!("{s}: the slice must be greater than zero")),
        ns => Ok(ns),
    }
}

/// The heartbeat period: 100 µs (a timer interrupt costs a few µs, under
/// emulation tens) to 10 ms (beyond, only episodes longer than 20 ms show).
fn parse_beat(s: &str) -> Result<u64, String> {
    let ns = parse_ns(s)?;
    let bounds = Duration::from_micros(100).as_nanos()..=Duration::from_millis(10).as_nanos();
    if !bounds.contains(&u128::from(ns)) {
        return Err(format!("{s}: the heartbeat must be between 100us and 10ms"));
    }
    Ok(ns)
}

/// The injected error's delay; 0 (the default) is never, so a given
/// delay is at least 1 ns.
fn parse_inject(s: &str) -> Result<u64, String> {
    if s == "0s" {
        return Ok(0);
    }
    Ok(parse_ns(s)?.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        tunables: Tunables,
    }

    fn parse(args: &[&str]) -> Result<Tunables, clap::Error> {
        Cli::try_parse_from(std::iter::once("vsched").chain(args.iter().copied()))
            .map(|c| c.tunables.resolved())
    }

    #[test]
    fn the_flags_default_to_the_defaults() {
        assert_eq!(parse(&[]).unwrap(), Tunables::default());
    }

    #[test]
    fn each_off_flag_switches_its_mechanism_off() {
        let t = parse(&["--no-rwc", "--no-bvs", "--heartbeat", "500us"]).unwrap();
        assert!(!t.rwc && !t.bvs && t.ivh && t.capacity);
        assert_eq!(t.beat_ns, 500_000);
        let unaware = parse(&["--ivh-unaware"]).unwrap();
        assert!(!unaware.ivh_activity_aware && !unaware.ivh_at_tick);
        let beats_only = parse(&["--ivh-beats-only"]).unwrap();
        assert!(beats_only.ivh_activity_aware && !beats_only.ivh_at_tick);
    }

    #[test]
    fn the_heartbeat_and_the_slice_are_bounded() {
        assert!(parse(&["--heartbeat", "50us"]).is_err());
        assert!(parse(&["--heartbeat", "20ms"]).is_err());
        assert!(parse(&["--slice", "0s"]).is_err());
        assert_eq!(
            parse(&["--inject-error-after", "2s"])
                .unwrap()
                .inject_error_after_ns,
            2_000_000_000
        );
    }
}
