//! Boots a guest for a layout, applies the host-side placement (and its
//! phases), runs the commands and collects their output. Everything it
//! creates (the QEMU process, cgroups, the work directory) is removed on
//! every way out: success, error, timeout, interrupt (`stop` flag), and,
//! for a killed run, by the next run (`host::sweep_stale`) and QEMU's
//! parent-death signal.

use crate::error::{LabError, Result};
use crate::host::{self, Bandwidth};
use crate::initramfs::{self, MARK};
use crate::kernel;
use crate::layout::{GuestRoot, Layout, VcpuState};
use crate::qmp::Qmp;
use serde::Serialize;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accel {
    /// KVM when it is known to boot this kernel, else TCG.
    Auto,
    Tcg,
    /// TCG with one host thread for all vCPUs (`thread=single`): no
    /// cross-vCPU races inside the emulator, no per-vCPU host control
    /// (layouts that pin or cap vCPUs are refused). For the soak's
    /// evidence about multi-threaded emulation, not for measurements.
    TcgSingle,
    Kvm,
}

#[derive(Debug, Clone)]
pub struct LabOptions {
    pub kernel: Option<PathBuf>,
    /// A kernel of the sched_ext matrix (`kernel::SCHED_EXT_KERNELS`)
    /// instead of the layout's kind.
    pub kernel_version: Option<String>,
    pub accel: Accel,
    /// The vsched binary to put in the guest.
    pub vsched: PathBuf,
    /// QEMU to boot with instead of qemu-system-x86_64 on PATH.
    pub qemu: Option<PathBuf>,
    /// Boot with a QEMU older than `qemu::MIN_MAJOR` (with a warning)
    /// instead of refusing it.
    pub allow_old_qemu: bool,
}

impl LabOptions {
    /// Options for `vsched`, the rest as the lab chooses.
    pub fn new(vsched: PathBuf) -> LabOptions {
        LabOptions {
            kernel: None,
            kernel_version: None,
            accel: Accel::Auto,
            vsched,
            qemu: None,
            allow_old_qemu: false,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct CommandResult {
    pub command: String,
    pub exit_code: Option<i32>,
    pub output: String,
    /// When each line of `output` reached the host, in seconds since the
    /// first command began: places what the guest reports on the host's
    /// timeline (a probe prints its report as soon as it has it).
    #[serde(skip)]
    pub line_at_s: Vec<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub layout: String,
    pub accel: String,
    /// From starting QEMU to the guest's first command.
    pub boot_ms: f64,
    pub commands: Vec<CommandResult>,
    /// Host seconds (since the first command began) at which each phase was applied.
    pub phases_applied_s: Vec<f64>,
    /// Host-side accounting of the vCPU threads, sampled about every 100 ms.
    pub host_samples: Vec<HostSample>,
    /// The vCPU threads' run time about every millisecond while commands
    /// ran: when each vCPU was really off its host CPU (see `truth`).
    #[serde(skip)]
    pub timeline: Vec<TimelineSample>,
    /// Seconds (since the first command began) at which each command ended.
    pub command_ends_s: Vec<f64>,
    /// Everything the guest printed on its console.
    pub console: String,
}

/// What the host's own accounting says about the vCPU threads at one moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostSample {
    /// Seconds since the first command began.
    pub at_s: f64,
    /// Cumulative CPU time of each vCPU thread.
    pub cpu_ns: Vec<u64>,
    /// Cumulative time each vCPU thread was runnable but waited for a host
    /// CPU (its run delay; throttled time included).
    #[serde(default)]
    pub wait_ns: Vec<u64>,
    /// Per vCPU with a bandwidth cgroup: (times throttled, ns throttled).
    pub throttled: Vec<Option<(u64, u64)>>,
    /// Cumulative steal time of each host CPU (/proc/stat), indexed by CPU
    /// number: time this machine's own hypervisor took from it.
    #[serde(default)]
    pub host_steal_ns: Vec<u64>,
    /// Cumulative CPU time of the lab's own threads: QEMU's other than the
    /// vCPU threads (main loop, I/O) and this process's (sampler, console).
    #[serde(default)]
    pub lab_threads_ns: u64,
}

/// The vCPU threads' cumulative run time at one moment of the timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct TimelineSample {
    /// Seconds since the first command began.
    pub at_s: f64,
    /// Cumulative run time of each vCPU thread (ns).
    pub cpu_ns: Vec<u64>,
}

/// How often the timeline samples the vCPU threads: fine enough to time
/// episodes of a few milliseconds to within a fraction of one.
const TIMELINE_EVERY: Duration = Duration::from_millis(1);

/// The timeline's length limit (10 minutes at 1 ms, about 40 MB for 2 vCPUs):
/// checks score the first minute or so, and a long `lab run` must not grow
/// without bound.
const TIMELINE_MAX_SAMPLES: usize = 600_000;

/// Samples the vCPU threads' run time every [`TIMELINE_EVERY`] until
/// `stop` (or [`TIMELINE_MAX_SAMPLES`]), from `t0` on.
fn sample_timeline(
    pid: u32,
    tids: Vec<i32>,
    t0: Instant,
    stop: std::sync::Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<TimelineSample>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        while !stop.load(Ordering::Relaxed) && out.len() < TIMELINE_MAX_SAMPLES {
            out.push(TimelineSample {
                at_s: t0.elapsed().as_secs_f64(),
                cpu_ns: tids
                    .iter()
                    .map(|&tid| thread_schedstat(pid, tid).0)
                    .collect(),
            });
            std::thread::sleep(TIMELINE_EVERY);
        }
        out
    })
}

/// Cumulative run time and run delay (time runnable but waiting) of a host
/// thread: the first two fields of its schedstat; zeros once it is gone.
fn thread_schedstat(pid: u32, tid: i32) -> (u64, u64) {
    let text =
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).unwrap_or_default();
    let mut fields = text.split_whitespace().map(|v| v.parse().unwrap_or(0));
    (fields.next().unwrap_or(0), fields.next().unwrap_or(0))
}

/// Cumulative run time of the threads of process `pid`, leaving out `except`.
fn process_cpu_ns(pid: u32, except: &[i32]) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| t.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|tid| !except.contains(tid))
        .map(|tid| thread_schedstat(pid, tid).0)
        .sum()
}

/// Cumulative steal time of each host CPU, indexed by CPU number (CPUs not
/// listed read 0), from /proc/stat text.
pub fn parse_steal_ns(proc_stat: &str, ns_per_tick: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for line in proc_stat.lines() {
        let mut f = line.split_whitespace();
        let Some(cpu) = f
            .next()
            .and_then(|n| n.strip_prefix("cpu"))
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        // cpuN user nice system idle iowait irq softirq steal ...
        let steal: u64 = f.nth(7).and_then(|v| v.parse().ok()).unwrap_or(0);
        if out.len() <= cpu {
            out.resize(cpu + 1, 0);
        }
        out[cpu] = steal * ns_per_tick;
    }
    out
}

/// /proc/stat counts in USER_HZ ticks: nanoseconds per tick.
pub fn ns_per_user_tick() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    // USER_HZ is 100 on every Linux architecture that matters here.
    1_000_000_000 / if hz > 0 { hz as u64 } else { 100 }
}

fn host_steal_ns() -> Vec<u64> {
    parse_steal_ns(
        &std::fs::read_to_string("/proc/stat").unwrap_or_default(),
        ns_per_user_tick(),
    )
}

/// A started QEMU and what was created for it.
struct Guest {
    child: Child,
    bandwidth: Option<Bandwidth>,
    /// vCPU threads a phase stopped, by vCPU.
    frozen: Vec<Option<crate::freeze::Frozen>>,
    workdir: PathBuf,
}

impl Guest {
    /// Lets every frozen vCPU thread run again. Needed before waiting for
    /// QEMU: a thread we trace cannot finish exiting until we let it go,
    /// and QEMU's shutdown waits for every vCPU.
    fn thaw_all(&mut self) {
        for f in self.frozen.iter_mut().filter_map(Option::take) {
            let _ = f.thaw();
        }
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        self.thaw_all();
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(bw) = &mut self.bandwidth {
            let _ = bw.remove();
        }
        let _ = std::fs::remove_dir_all(&self.workdir);
    }
}

fn workdir() -> Result<PathBuf> {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "vsched-lab-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).map_err(LabError::io("creating", &dir))?;
    Ok(dir)
}

fn kvm_usable() -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
}

/// Where the verdict "does KVM boot this kernel" is remembered.
fn kvm_verdict_path(kernel: &Path) -> PathBuf {
    let len = std::fs::metadata(kernel).map(|m| m.len()).unwrap_or(0);
    kernel::cache_dir().join(format!("kvm-boots-{len}"))
}

/// Whether any phase of `layout` places, caps or freezes a vCPU: host
/// control that needs one host thread per vCPU.
fn pins_or_caps(layout: &Layout) -> bool {
    (0..=layout.phases.len()).any(|p| {
        layout
            .state_at(p)
            .iter()
            .any(|s| s.host_cpu.is_some() || s.bandwidth.is_some() || s.frozen)
    })
}

/// Runs `commands` in a guest shaped by `layout`.
pub fn run(
    layout: &Layout,
    commands: &[String],
    opts: &LabOptions,
    stop: &AtomicBool,
) -> Result<RunResult> {
    host::sweep_stale();
    let qemu = crate::qemu::find(opts.qemu.as_deref(), opts.allow_old_qemu)?;
    if opts.accel == Accel::TcgSingle && pins_or_caps(layout) {
        return Err(LabError::SingleThreadedLayout {
            layout: layout.name().to_string(),
        });
    }
    let guest_kernel = kernel::guest_kernel(
        opts.kernel.as_deref(),
        opts.kernel_version.as_deref(),
        layout.kernel,
    )?;
    let kernel_path = guest_kernel.image.clone();
    let needs_bandwidth =
        (0..=layout.phases.len()).any(|p| layout.state_at(p).iter().any(|s| s.bandwidth.is_some()));
    let flavor = if needs_bandwidth {
        Some(host::require_bandwidth()?)
    } else {
        None
    };
    let files = initramfs::GuestFiles {
        vsched: &opts.vsched,
        extra: &layout.extra_binaries,
        kernel_config: guest_kernel.config.as_ref(),
        commands,
    };
    let initrd = match layout.root {
        GuestRoot::Busybox => initramfs::build_busybox(&kernel::busybox()?, &files)?,
        GuestRoot::Debian => {
            initramfs::build_debian(&crate::debian_root::ensure(&layout.packages)?, &files)?
        }
    };

    let verdict = kvm_verdict_path(&kernel_path);
    let order: Vec<Accel> = match opts.accel {
        Accel::Tcg => vec![Accel::Tcg],
        Accel::TcgSingle => vec![Accel::TcgSingle],
        Accel::Kvm => vec![Accel::Kvm],
        Accel::Auto
            if kvm_usable()
                && std::fs::read_to_string(&verdict).map_or(true, |v| v.trim() == "yes") =>
        {
            vec![Accel::Kvm, Accel::Tcg]
        }
        Accel::Auto => vec![Accel::Tcg],
    };
    // Running for the whole boot and run; stopped when this returns.
    let _host_loads = crate::host_load::HostLoads::start(&layout.host_loads)?;
    let mut last_err = None;
    for (i, &accel) in order.iter().enumerate() {
        let trial = accel == Accel::Kvm && order.len() > 1;
        match boot_and_run(
            layout,
            commands,
            &qemu.path,
            &kernel_path,
            &initrd,
            accel,
            flavor.clone(),
            trial,
            stop,
        ) {
            Ok(r) => {
                if trial {
                    let _ = std::fs::create_dir_all(kernel::cache_dir());
                    let _ = std::fs::write(&verdict, "yes");
                }
                return Ok(r);
            }
            Err(e) if trial && i + 1 < order.len() && !stop.load(Ordering::SeqCst) => {
                // KVM is there but does not run this kernel: remember, fall
                // back. Only a busybox guest's failure is remembered: a
                // Debian guest may just be slow (systemd), and the verdict
                // is shared by every layout of the kernel.
                if layout.root == GuestRoot::Busybox {
                    let _ = std::fs::create_dir_all(kernel::cache_dir());
                    let _ = std::fs::write(&verdict, "no");
                }
                last_err = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    // `order` is never empty: every accelerator choice lists one at least.
    Err(last_err.expect("an accelerator was tried"))
}

/// How long a trial boot under KVM may take before the lab falls back to
/// TCG: a kernel KVM runs boots a busybox guest in about a second, a
/// Debian guest (systemd's units first) in a few; one KVM cannot run
/// never boots at all.
fn kvm_trial_boot_s(root: GuestRoot) -> f64 {
    match root {
        GuestRoot::Busybox => 8.0,
        GuestRoot::Debian => 60.0,
    }
}

/// Console lines quoted in boot and run errors: enough for a kernel panic's
/// message and its cause, short enough to read in a terminal.
const CONSOLE_TAIL_LINES: usize = 20;

fn tail(lines: &[String], n: usize) -> String {
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The guest kernel's command line: the serial console, no messages but
/// emergencies (they would interleave with the commands' output), a panic
/// ends QEMU at once (`-no-reboot`), and systemd keeps its status lines
/// off the console too.
fn kernel_command_line(root: GuestRoot) -> String {
    let mut line = String::from(
        "console=ttyS0 quiet loglevel=1 panic=-1 rdinit=/init tsc=reliable mitigations=off",
    );
    if root == GuestRoot::Debian {
        line.push_str(" systemd.show_status=false");
    }
    line
}

#[allow(clippy::too_many_arguments)]
fn boot_and_run(
    layout: &Layout,
    commands: &[String],
    qemu: &Path,
    kernel_path: &Path,
    initrd: &[u8],
    accel: Accel,
    flavor: Option<host::Flavor>,
    trial: bool,
    stop: &AtomicBool,
) -> Result<RunResult> {
    let dir = workdir()?;
    let initrd_path = dir.join("initrd.cpio");
    std::fs::write(&initrd_path, initrd).map_err(LabError::io("writing", &initrd_path))?;
    let qmp_path = dir.join("qmp.sock");
    let accel_arg = match accel {
        Accel::Kvm => "kvm".to_string(),
        Accel::TcgSingle => "tcg,thread=single".to_string(),
        Accel::Auto | Accel::Tcg => "tcg,thread=multi".to_string(),
    };
    let mut cmd = Command::new(qemu);
    cmd.arg("-accel")
        .arg(&accel_arg)
        .args([
            "-cpu",
            "max",
            "-smp",
            &layout.vcpus.to_string(),
            "-m",
            &layout.memory_mib.to_string(),
        ])
        .arg("-kernel")
        .arg(kernel_path)
        .arg("-initrd")
        .arg(&initrd_path)
        .arg("-append")
        .arg(kernel_command_line(layout.root))
        // Thread names ("CPU 1/TCG") make the vCPU threads easy to find in
        // host-side tools (top -H, ftrace) when a run needs a closer look.
        .args(["-name", "vsched-lab,debug-threads=on"])
        .args([
            "-nodefaults",
            "-no-reboot",
            "-display",
            "none",
            "-serial",
            "stdio",
            "-monitor",
            "none",
        ])
        .arg("-qmp")
        .arg(format!("unix:{},server=on,wait=off", qmp_path.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // QEMU dies with us even on SIGKILL.
    vsched_os::child::die_with_parent(&mut cmd, libc::SIGKILL);
    let started = Instant::now();
    let child = cmd.spawn().map_err(|source| LabError::StartQemu {
        qemu: qemu.to_path_buf(),
        source,
    })?;
    let mut guest = Guest {
        child,
        bandwidth: None,
        frozen: (0..layout.vcpus).map(|_| None).collect(),
        workdir: dir,
    };

    // Each console line with the moment it arrived.
    let (tx, rx) = mpsc::channel::<(Instant, String)>();
    let stdout = guest.child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx
                .send((Instant::now(), line.trim_end_matches('\r').to_string()))
                .is_err()
            {
                break;
            }
        }
    });
    let stderr = guest.child.stderr.take().unwrap();
    let stderr_text = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut s);
        s
    });

    let mut qmp = Qmp::connect(&qmp_path, Duration::from_secs(10))?;
    let threads = qmp.vcpu_threads()?;
    if threads.len() != layout.vcpus as usize {
        return Err(LabError::VcpuCount {
            reported: threads.len(),
            wanted: layout.vcpus,
        });
    }
    if let Some(f) = flavor {
        guest.bandwidth = Some(Bandwidth::create(f, guest.child.id() as i32)?);
    }
    let all_cpus: Vec<u32> = vsched_model::cpulist::parse_cpu_list(
        &std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_else(|_| "0".into()),
    )
    .map_err(LabError::HostCpus)?;
    let apply = |guest: &mut Guest, states: &[VcpuState]| -> Result<()> {
        for (v, s) in states.iter().enumerate() {
            let tid = threads[v];
            match s.host_cpu {
                Some(h) => host::set_thread_affinity(tid, &[h])?,
                None => host::set_thread_affinity(tid, &all_cpus)?,
            }
            if let Some(bw) = guest.bandwidth.as_mut() {
                bw.set(v as u32, tid, s.bandwidth)?;
            }
            match (s.frozen, guest.frozen[v].take()) {
                (true, None) => guest.frozen[v] = Some(crate::freeze::freeze(tid)?),
                (true, kept) => guest.frozen[v] = kept,
                (false, Some(f)) => f.thaw()?,
                (false, None) => {}
            }
        }
        Ok(())
    };

    let boot_timeout = Duration::from_secs_f64(if trial {
        layout.boot_timeout_s().min(kvm_trial_boot_s(layout.root))
    } else {
        layout.boot_timeout_s()
    });
    let run_timeout = Duration::from_secs_f64(layout.run_timeout_s);
    let mut console: Vec<String> = Vec::new();
    let mut boot_ms = None;
    let mut first_command: Option<Instant> = None;
    let mut phases_applied_s = Vec::new();
    let pid = guest.child.id();
    let mut host_samples: Vec<HostSample> = Vec::new();
    let timeline_stop = std::sync::Arc::new(AtomicBool::new(false));
    let mut timeline = None;
    // Stops the sampler on every way out of the loop below.
    struct StopOnDrop(std::sync::Arc<AtomicBool>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    let _stop_timeline = StopOnDrop(timeline_stop.clone());
    let sample = |guest: &Guest, at_s: f64| {
        let (cpu_ns, wait_ns) = threads
            .iter()
            .map(|&tid| thread_schedstat(pid, tid))
            .unzip();
        HostSample {
            at_s,
            cpu_ns,
            wait_ns,
            throttled: (0..threads.len() as u32)
                .map(|v| guest.bandwidth.as_ref().and_then(|b| b.throttle_stats(v)))
                .collect(),
            host_steal_ns: host_steal_ns(),
            lab_threads_ns: process_cpu_ns(pid, &threads) + process_cpu_ns(std::process::id(), &[]),
        }
    };
    let mut command_ends_s = Vec::new();
    let mut last_sample = Instant::now();
    let mut results: Vec<CommandResult> = Vec::new();
    // The command under way: its index, output lines and their arrival times.
    let mut current: Option<(usize, Vec<String>, Vec<f64>)> = None;
    let mut done = false;
    while !done {
        if stop.load(Ordering::SeqCst) {
            return Err(LabError::Interrupted);
        }
        // Phases are timed from the first command's start.
        if let Some(t0) = first_command {
            if last_sample.elapsed() >= Duration::from_millis(100) {
                last_sample = Instant::now();
                host_samples.push(sample(&guest, t0.elapsed().as_secs_f64()));
            }
            let next = phases_applied_s.len();
            if next < layout.phases.len() && t0.elapsed().as_secs_f64() >= layout.phases[next].at_s
            {
                apply(&mut guest, &layout.state_at(next + 1))?;
                phases_applied_s.push(t0.elapsed().as_secs_f64());
            }
        }
        let elapsed = started.elapsed();
        if boot_ms.is_none() && elapsed > boot_timeout {
            return Err(LabError::BootTimeout {
                timeout_s: boot_timeout.as_secs_f64(),
                accel: accel_arg,
                console_tail: tail(&console, CONSOLE_TAIL_LINES),
            });
        }
        if first_command.is_some_and(|t| t.elapsed() > run_timeout) {
            return Err(LabError::RunTimeout {
                timeout_s: run_timeout.as_secs_f64(),
                console_tail: tail(&console, CONSOLE_TAIL_LINES),
            });
        }
        let (arrived, line) = match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(l) => l,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                guest.thaw_all();
                let status = guest
                    .child
                    .wait()
                    .map_or_else(|e| format!("status unknown: {e}"), |s| s.to_string());
                let err = stderr_text.join().unwrap_or_default();
                // The guest kernel panicked (panic=-1 reboots, -no-reboot
                // then ends QEMU): the guest's fault, told apart from ours.
                if console.iter().any(|l| l.contains("Kernel panic")) {
                    return Err(LabError::GuestPanic {
                        during_commands: first_command.is_some(),
                        console_tail: tail(&console, CONSOLE_TAIL_LINES),
                        partial_output: current
                            .map(|(_, out, _)| out.join("\n"))
                            .unwrap_or_default(),
                    });
                }
                return Err(LabError::QemuExited {
                    status,
                    stderr: err.trim().to_string(),
                    console_tail: tail(&console, CONSOLE_TAIL_LINES),
                });
            }
        };
        console.push(line.clone());
        let arrived_s = first_command.map_or(0.0, |t0| {
            arrived.saturating_duration_since(t0).as_secs_f64()
        });
        let Some(at) = line.find(MARK) else {
            if let Some((_, out, at_s)) = current.as_mut() {
                out.push(line);
                at_s.push(arrived_s);
            }
            continue;
        };
        // Output that did not end in a newline shares its last line with the marker.
        if at > 0 {
            if let Some((_, out, at_s)) = current.as_mut() {
                out.push(line[..at].to_string());
                at_s.push(arrived_s);
            }
        }
        let rest = line[at + MARK.len()..].trim().to_string();
        let mut words = rest.split_whitespace();
        match words.next() {
            Some("BOOTED") => {
                boot_ms = Some(started.elapsed().as_secs_f64() * 1e3);
                // The layout shapes the guest from here: boot itself runs
                // unconstrained so that boot time says nothing about the layout.
                apply(&mut guest, &layout.state_at(0))?;
            }
            Some("BEGIN") => {
                let i: usize = words
                    .next()
                    .and_then(|w| w.parse().ok())
                    .unwrap_or(results.len());
                if first_command.is_none() {
                    first_command = Some(arrived);
                    timeline = Some(sample_timeline(
                        pid,
                        threads.clone(),
                        arrived,
                        timeline_stop.clone(),
                    ));
                    last_sample = Instant::now();
                    host_samples.push(sample(&guest, arrived.elapsed().as_secs_f64()));
                }
                current = Some((i, Vec::new(), Vec::new()));
            }
            Some("END") => {
                let code = words.nth(1).and_then(|w| w.parse().ok());
                if let Some(t0) = first_command {
                    let now = t0.elapsed().as_secs_f64();
                    host_samples.push(sample(&guest, now));
                    command_ends_s.push(now);
                }
                if let Some((i, out, line_at_s)) = current.take() {
                    results.push(CommandResult {
                        command: commands.get(i).cloned().unwrap_or_default(),
                        exit_code: code,
                        output: out.join("\n"),
                        line_at_s,
                    });
                }
            }
            Some("DONE") => done = true,
            _ => {}
        }
    }
    guest.thaw_all();
    let _ = guest.child.wait();
    timeline_stop.store(true, Ordering::Relaxed);
    let timeline = timeline
        .map(|h| h.join().unwrap_or_default())
        .unwrap_or_default();
    Ok(RunResult {
        layout: layout.name().to_string(),
        accel: accel_arg,
        boot_ms: boot_ms.unwrap_or(0.0),
        commands: results,
        phases_applied_s,
        host_samples,
        timeline,
        command_ends_s,
        console: console.join("\n"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_per_host_cpu_from_proc_stat() {
        let stat = "cpu  45959 0 6591 24739 502 0 71 108 0 0\n\
                    cpu0 22472 0 2986 13406 74 0 7 47 0 0\n\
                    cpu1 23486 0 3605 11332 427 0 63 61 0 0\n\
                    intr 1 2 3\n";
        assert_eq!(
            parse_steal_ns(stat, 10_000_000),
            vec![470_000_000, 610_000_000]
        );
        // A CPU missing from the list (offline) reads 0.
        let gap = "cpu0 1 0 1 1 0 0 0 5 0 0\ncpu2 1 0 1 1 0 0 0 7 0 0\n";
        assert_eq!(parse_steal_ns(gap, 1), vec![5, 0, 7]);
    }
}
