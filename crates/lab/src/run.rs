//! Boots a guest for a layout, applies the host-side placement (and its
//! phases), runs the commands and collects their output. Everything it
//! creates (the QEMU process, cgroups, the work directory) is removed on
//! every way out: success, error, timeout, interrupt (`stop` flag), and,
//! for a killed run, by the next run (`host::sweep_stale`) and QEMU's
//! parent-death signal.

use crate::error::{LabError, QmpError, Result};
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
    /// The layout's limit for all commands together (`run_timeout_s`), so
    /// that a caller sees how close the last end came to it.
    pub run_timeout_s: f64,
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
        let boot = Boot {
            layout,
            commands,
            qemu: &qemu.path,
            kernel: &kernel_path,
            initrd: &initrd,
            accel,
            flavor: flavor.clone(),
            trial,
        };
        match boot.run(stop) {
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
/// emergencies (they would interleave with the commands' output; the one
/// every run ends with, the power-down, is cut out of it: POWER_DOWN), a panic
/// ends QEMU at once (`-no-reboot`), every SysRq key works (a hung guest is
/// asked where it is: ask_hung_guest), and systemd keeps its status lines
/// off the console too.
fn kernel_command_line(root: GuestRoot) -> String {
    let mut line = String::from(
        "console=ttyS0 quiet loglevel=1 panic=-1 rdinit=/init tsc=reliable mitigations=off \
         sysrq_always_enabled",
    );
    if root == GuestRoot::Debian {
        line.push_str(" systemd.show_status=false");
    }
    line
}

/// One boot of a guest for `run`, with one accelerator.
struct Boot<'a> {
    layout: &'a Layout,
    commands: &'a [String],
    qemu: &'a Path,
    kernel: &'a Path,
    initrd: &'a [u8],
    accel: Accel,
    /// The cgroup flavour for vCPU caps, if the layout caps any.
    flavor: Option<host::Flavor>,
    /// A trial boot under KVM (a shorter boot timeout, then TCG).
    trial: bool,
}

impl Boot<'_> {
    /// QEMU's `-accel` value.
    fn accel_arg(&self) -> String {
        match self.accel {
            Accel::Kvm => "kvm".to_string(),
            Accel::TcgSingle => "tcg,thread=single".to_string(),
            Accel::Auto | Accel::Tcg => "tcg,thread=multi".to_string(),
        }
    }

    fn boot_timeout(&self) -> Duration {
        Duration::from_secs_f64(if self.trial {
            self.layout
                .boot_timeout_s()
                .min(kvm_trial_boot_s(self.layout.root))
        } else {
            self.layout.boot_timeout_s()
        })
    }

    /// The QEMU command line: the layout's vCPUs and memory, the kernel
    /// and initramfs, the console on stdio, QMP on `qmp_path`.
    fn qemu_command(&self, initrd_path: &Path, qmp_path: &Path) -> Command {
        let mut cmd = Command::new(self.qemu);
        cmd.arg("-accel")
            .arg(self.accel_arg())
            .args([
                "-cpu",
                "max",
                "-smp",
                &self.layout.vcpus.to_string(),
                "-m",
                &self.layout.memory_mib.to_string(),
            ])
            .arg("-kernel")
            .arg(self.kernel)
            .arg("-initrd")
            .arg(initrd_path)
            .arg("-append")
            .arg(kernel_command_line(self.layout.root))
            // Thread names ("CPU 1/TCG") make the vCPU threads easy to find
            // in host-side tools (top -H, ftrace) when a run needs a closer
            // look.
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
        cmd
    }

    /// Starts QEMU in a fresh work directory; also the moment it started
    /// (boot time counts from there).
    fn start(&self) -> Result<(Guest, PathBuf, Instant)> {
        let dir = workdir()?;
        let initrd_path = dir.join("initrd.cpio");
        std::fs::write(&initrd_path, self.initrd).map_err(LabError::io("writing", &initrd_path))?;
        let qmp_path = dir.join("qmp.sock");
        let started = Instant::now();
        let child = self
            .qemu_command(&initrd_path, &qmp_path)
            .spawn()
            .map_err(|source| LabError::StartQemu {
                qemu: self.qemu.to_path_buf(),
                source,
            })?;
        let guest = Guest {
            child,
            bandwidth: None,
            frozen: (0..self.layout.vcpus).map(|_| None).collect(),
            workdir: dir,
        };
        Ok((guest, qmp_path, started))
    }

    /// Boots, shapes the vCPUs as the layout says (phase by phase, from the
    /// first command), runs the commands and collects what they printed
    /// and what the host saw.
    fn run(self, stop: &AtomicBool) -> Result<RunResult> {
        let (mut guest, qmp_path, started) = self.start()?;
        let (lines, stderr_text) = read_console(&mut guest.child);
        let mut qmp = Qmp::connect(&qmp_path, Duration::from_secs(10))?;
        let threads = qmp.vcpu_threads()?;
        if threads.len() != self.layout.vcpus as usize {
            return Err(LabError::VcpuCount {
                reported: threads.len(),
                wanted: self.layout.vcpus,
            });
        }
        if let Some(f) = self.flavor.clone() {
            guest.bandwidth = Some(Bandwidth::create(f, guest.child.id() as i32)?);
        }
        let shaper = Shaper::new(threads.clone())?;
        let mut host = HostWatch::new(guest.child.id(), threads);
        let mut transcript = Transcript::default();
        let boot_timeout = self.boot_timeout();
        let run_timeout = Duration::from_secs_f64(self.layout.run_timeout_s);
        let mut phases_applied_s = Vec::new();
        while !transcript.done {
            if stop.load(Ordering::SeqCst) {
                return Err(LabError::Interrupted);
            }
            // Phases are timed from the first command's start.
            if let Some(t0) = transcript.first_command {
                host.sample_every(&guest, t0, Duration::from_millis(100));
                let next = phases_applied_s.len();
                if next < self.layout.phases.len()
                    && t0.elapsed().as_secs_f64() >= self.layout.phases[next].at_s
                {
                    shaper.apply(&mut guest, &self.layout.state_at(next + 1))?;
                    phases_applied_s.push(t0.elapsed().as_secs_f64());
                }
            }
            if transcript.boot_ms.is_none() && started.elapsed() > boot_timeout {
                return Err(LabError::BootTimeout {
                    timeout_s: boot_timeout.as_secs_f64(),
                    accel: self.accel_arg(),
                    console_tail: transcript.tail(),
                });
            }
            if transcript
                .first_command
                .is_some_and(|t| t.elapsed() > run_timeout)
            {
                // Lines already waiting belong to the console before the
                // keys, not to the kernel's answer.
                while let Ok((_, line)) = lines.try_recv() {
                    transcript.console.push(line);
                }
                let console_tail = transcript.tail();
                let frozen: Vec<usize> = guest
                    .frozen
                    .iter()
                    .enumerate()
                    .filter_map(|(v, f)| f.as_ref().map(|_| v))
                    .collect();
                // A frozen vCPU would neither answer SysRq nor (under KVM)
                // let QEMU read its registers.
                guest.thaw_all();
                let mut hang_report = ask_hung_guest(&mut qmp, &lines, stop);
                if !frozen.is_empty() {
                    hang_report.insert_str(
                        0,
                        &format!("(vCPUs {frozen:?}, frozen by the layout, thawed to be asked)\n"),
                    );
                }
                return Err(LabError::RunTimeout {
                    timeout_s: run_timeout.as_secs_f64(),
                    console_tail,
                    hang_report,
                });
            }
            let (arrived, line) = match lines.recv_timeout(Duration::from_millis(20)) {
                Ok(l) => l,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // The power-down message may have split the runner's
                    // last line, with no line after it to complete it.
                    // (Taken as an empty line's continuation: the console
                    // already holds the raw line.)
                    match transcript.split_line.as_deref() {
                        Some(start) if !start.is_empty() => (Instant::now(), String::new()),
                        _ => return Err(transcript.qemu_exited(&mut guest, stderr_text)),
                    }
                }
            };
            match transcript.take(arrived, line, started, self.commands) {
                Some(Marker::Booted) => {
                    // The layout shapes the guest from here: boot itself
                    // runs unconstrained so that boot time says nothing
                    // about the layout.
                    shaper.apply(&mut guest, &self.layout.state_at(0))?;
                }
                Some(Marker::FirstCommand(t0)) => host.start(&guest, t0),
                Some(Marker::CommandEnded(t0)) => host.command_ended(&guest, t0),
                None => {}
            }
        }
        guest.thaw_all();
        let _ = guest.child.wait();
        let (host_samples, command_ends_s, timeline) = host.finish();
        Ok(RunResult {
            layout: self.layout.name().to_string(),
            accel: self.accel_arg(),
            boot_ms: transcript.boot_ms.unwrap_or(0.0),
            commands: transcript.results,
            phases_applied_s,
            host_samples,
            timeline,
            command_ends_s,
            run_timeout_s: self.layout.run_timeout_s,
            console: transcript.console.join("\n"),
        })
    }
}

/// The SysRq keys pressed in a guest whose commands hung, in order: the
/// console's log level up to 7 (the lab boots with 1, which would hide the
/// answers), the tasks blocked in the kernel ('w') and each CPU's
/// backtrace ('l'), last because the kernel waits up to 10 s for a vCPU
/// that does not answer its NMI, inside the keyboard's interrupt, and a
/// key after it would wait as long. sched_ext's own dump ('D') is left
/// out: it goes to a trace event, not the console; a scheduler that
/// stalls tasks is dumped by sched_ext's watchdog through the loader
/// anyway.
const HANG_SYSRQ_KEYS: [char; 3] = ['7', 'w', 'l'];

/// The console is read after each of HANG_SYSRQ_KEYS until it has been
/// quiet this long: a backtrace of four vCPUs reaches the 115200-baud
/// console in well under a second under TCG.
const HANG_SYSRQ_QUIET: Duration = Duration::from_millis(1500);

/// The longest the console is read after one key: the kernel's 10 s wait
/// for a vCPU that does not answer the backtrace's NMI, and the rest of
/// the backtraces after it.
const HANG_SYSRQ_MAX: Duration = Duration::from_secs(12);

/// How long each QMP command of the report may take: QEMU answers at once
/// unless it is stuck itself, and the report must not add the 10 s of
/// the connection's usual timeout per command to a run that already
/// timed out.
const HANG_QMP_TIMEOUT: Duration = Duration::from_secs(2);

/// Lines of the guest's answer quoted in the error: four CPUs' backtraces
/// and the blocked tasks of a small guest, without a huge task list.
const HANG_REPORT_LINES: usize = 250;

/// What a guest whose commands hung says of itself, for the run's error:
/// QEMU's view of each vCPU and the guest kernel's answer to SysRq
/// (HANG_SYSRQ_KEYS). A kernel that answers nothing has no vCPU taking
/// interrupts (or cannot print): a hard hang of the kernel or the
/// emulator, which tells it apart from a scheduler that leaves tasks
/// waiting. QEMU failing a command ends the questions (its connection may
/// then hold a late answer); `stop` (Ctrl-C) too.
fn ask_hung_guest(
    qmp: &mut Qmp,
    lines: &mpsc::Receiver<(Instant, String)>,
    stop: &AtomicBool,
) -> String {
    if let Err(e) = qmp.set_timeout(HANG_QMP_TIMEOUT) {
        return format!("the guest was not asked: QMP: {e}");
    }
    let mut report = match where_vcpus_are(qmp) {
        Ok(vcpus) => format!("QEMU's vCPUs:\n{vcpus}\n"),
        Err(e) => return format!("the guest was not asked: QEMU did not answer ({e})"),
    };
    let mut answer = Vec::new();
    let mut keys_sent = String::new();
    for key in HANG_SYSRQ_KEYS {
        if stop.load(Ordering::SeqCst) {
            report.push_str("(interrupted before every SysRq key was pressed)\n");
            break;
        }
        if let Err(e) = qmp.send_sysrq(key) {
            report.push_str(&format!("QEMU did not press SysRq {key}: {e}\n"));
            break;
        }
        keys_sent.push(key);
        let until = Instant::now() + HANG_SYSRQ_MAX;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match lines.recv_timeout(left.min(HANG_SYSRQ_QUIET)) {
                Ok((_, line)) => answer.push(line),
                Err(_) => break,
            }
        }
    }
    if keys_sent.len() < HANG_SYSRQ_KEYS.len() {
        report.push_str(&format!("SysRq keys pressed: {keys_sent:?}\n"));
    }
    if answer.is_empty() && keys_sent.len() == HANG_SYSRQ_KEYS.len() {
        report.push_str(
            "the guest kernel printed nothing for SysRq: no vCPU takes interrupts, \
             or the kernel cannot print (a hard hang of the kernel or the emulator)",
        );
    } else if !answer.is_empty() {
        let shown = answer.len().min(HANG_REPORT_LINES);
        report.push_str(&format!(
            "the guest kernel's answer to SysRq {keys_sent} ({} lines{}):\n{}",
            answer.len(),
            if shown < answer.len() {
                format!(", the first {shown}")
            } else {
                String::new()
            },
            answer[..shown].join("\n")
        ));
    }
    report
}

/// Time between the two readings of each vCPU's instruction pointer in
/// where_vcpus_are: a vCPU that runs anything at all moves in far less
/// (TCG executes millions of instructions a second).
const VCPU_SAMPLE_GAP: Duration = Duration::from_millis(300);

/// Each vCPU's instruction pointer, read twice VCPU_SAMPLE_GAP apart, and
/// whether it is halted: a hint, not a verdict. A halted vCPU waits for
/// an interrupt; a pointer that moves still runs (perhaps spinning on a
/// lock); one that stays put on a vCPU that is not halted suggests a
/// vCPU stuck on one instruction or an emulator thread that does not run,
/// though TCG updates the pointer only between translated blocks. QEMU's
/// text itself where it holds no vCPU this parser knows.
fn where_vcpus_are(qmp: &mut Qmp) -> Result<String, QmpError> {
    let text = qmp.human("info registers -a")?;
    let first = vcpu_registers(&text);
    if first.is_empty() {
        return Ok(text.trim_end().to_string());
    }
    std::thread::sleep(VCPU_SAMPLE_GAP);
    let second = vcpu_registers(&qmp.human("info registers -a")?);
    Ok(first
        .iter()
        .map(|a| {
            let b = second.iter().find(|b| b.cpu == a.cpu);
            format!(
                "  vCPU {}: RIP {} then {}{}",
                a.cpu,
                a.rip,
                b.map_or("?", |b| b.rip.as_str()),
                if b.is_some_and(|b| b.halted) {
                    " (halted)"
                } else {
                    ""
                }
            )
        })
        .collect::<Vec<_>>()
        .join("\n"))
}

/// One vCPU in QEMU's `info registers -a` (x86).
#[derive(Debug, PartialEq)]
struct VcpuRegisters {
    cpu: usize,
    rip: String,
    halted: bool,
}

/// The vCPUs of `info registers -a`: blocks that start with "CPU#N" and
/// hold "RIP=..." and "HLT=0|1" among their fields.
fn vcpu_registers(text: &str) -> Vec<VcpuRegisters> {
    let mut vcpus: Vec<VcpuRegisters> = Vec::new();
    for line in text.lines() {
        if let Some(n) = line.trim().strip_prefix("CPU#") {
            if let Ok(cpu) = n.trim().parse() {
                vcpus.push(VcpuRegisters {
                    cpu,
                    rip: "?".into(),
                    halted: false,
                });
            }
            continue;
        }
        let Some(v) = vcpus.last_mut() else { continue };
        for field in line.split_whitespace() {
            if let Some(rip) = field.strip_prefix("RIP=") {
                v.rip = rip.to_string();
            } else if let Some(hlt) = field.strip_prefix("HLT=") {
                v.halted = hlt == "1";
            }
        }
    }
    vcpus
}

/// The guest's console lines, each with the moment it arrived, and (once
/// QEMU exits) what it wrote to stderr.
fn read_console(
    child: &mut Child,
) -> (
    mpsc::Receiver<(Instant, String)>,
    std::thread::JoinHandle<String>,
) {
    let (tx, rx) = mpsc::channel::<(Instant, String)>();
    let stdout = child.stdout.take().expect("QEMU's stdout is piped");
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
    let stderr = child.stderr.take().expect("QEMU's stderr is piped");
    let stderr_text = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stderr), &mut s);
        s
    });
    (rx, stderr_text)
}

/// The host's hold on the vCPU threads: where each runs, its cap, whether
/// it is frozen.
struct Shaper {
    threads: Vec<i32>,
    /// Where a vCPU the layout does not place may run: every host CPU.
    all_cpus: Vec<u32>,
}

impl Shaper {
    fn new(threads: Vec<i32>) -> Result<Shaper> {
        let all_cpus = vsched_model::cpulist::parse_cpu_list(
            &std::fs::read_to_string("/sys/devices/system/cpu/online")
                .unwrap_or_else(|_| "0".into()),
        )
        .map_err(LabError::HostCpus)?;
        Ok(Shaper { threads, all_cpus })
    }

    /// Puts each vCPU thread in the state the layout gives it.
    fn apply(&self, guest: &mut Guest, states: &[VcpuState]) -> Result<()> {
        for (v, s) in states.iter().enumerate() {
            let tid = self.threads[v];
            match s.host_cpu {
                Some(h) => host::set_thread_affinity(tid, &[h])?,
                None => host::set_thread_affinity(tid, &self.all_cpus)?,
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
    }
}

/// What the host's accounting saw of the vCPU threads while commands ran:
/// samples about every 100 ms and at each command's end, and the
/// millisecond timeline on its own thread.
struct HostWatch {
    pid: u32,
    threads: Vec<i32>,
    samples: Vec<HostSample>,
    last_sample: Instant,
    command_ends_s: Vec<f64>,
    timeline: Option<std::thread::JoinHandle<Vec<TimelineSample>>>,
    /// Stops the timeline's sampler, also on every way out (Drop).
    timeline_stop: std::sync::Arc<AtomicBool>,
}

impl HostWatch {
    fn new(pid: u32, threads: Vec<i32>) -> HostWatch {
        HostWatch {
            pid,
            threads,
            samples: Vec::new(),
            last_sample: Instant::now(),
            command_ends_s: Vec::new(),
            timeline: None,
            timeline_stop: std::sync::Arc::new(AtomicBool::new(false)),
        }
    }

    fn sample(&self, guest: &Guest, at_s: f64) -> HostSample {
        let (cpu_ns, wait_ns) = self
            .threads
            .iter()
            .map(|&tid| thread_schedstat(self.pid, tid))
            .unzip();
        HostSample {
            at_s,
            cpu_ns,
            wait_ns,
            throttled: (0..self.threads.len() as u32)
                .map(|v| guest.bandwidth.as_ref().and_then(|b| b.throttle_stats(v)))
                .collect(),
            host_steal_ns: host_steal_ns(),
            lab_threads_ns: process_cpu_ns(self.pid, &self.threads)
                + process_cpu_ns(std::process::id(), &[]),
        }
    }

    /// The first command began at `t0`: the timeline starts.
    fn start(&mut self, guest: &Guest, t0: Instant) {
        self.timeline = Some(sample_timeline(
            self.pid,
            self.threads.clone(),
            t0,
            self.timeline_stop.clone(),
        ));
        self.last_sample = Instant::now();
        self.samples
            .push(self.sample(guest, t0.elapsed().as_secs_f64()));
    }

    fn sample_every(&mut self, guest: &Guest, t0: Instant, every: Duration) {
        if self.last_sample.elapsed() >= every {
            self.last_sample = Instant::now();
            self.samples
                .push(self.sample(guest, t0.elapsed().as_secs_f64()));
        }
    }

    fn command_ended(&mut self, guest: &Guest, t0: Instant) {
        let now = t0.elapsed().as_secs_f64();
        self.samples.push(self.sample(guest, now));
        self.command_ends_s.push(now);
    }

    /// The samples, the commands' end times and the timeline.
    fn finish(mut self) -> (Vec<HostSample>, Vec<f64>, Vec<TimelineSample>) {
        self.timeline_stop.store(true, Ordering::Relaxed);
        let timeline = self
            .timeline
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        (
            std::mem::take(&mut self.samples),
            std::mem::take(&mut self.command_ends_s),
            timeline,
        )
    }
}

impl Drop for HostWatch {
    fn drop(&mut self) {
        self.timeline_stop.store(true, Ordering::Relaxed);
    }
}

/// A marker line of the guest's runner that the host acts on.
enum Marker {
    Booted,
    /// The first command began (the host's timeline starts there).
    FirstCommand(Instant),
    /// A command ended; the first began at the instant given.
    CommandEnded(Instant),
}

/// What the console said so far.
#[derive(Default)]
struct Transcript {
    console: Vec<String>,
    boot_ms: Option<f64>,
    first_command: Option<Instant>,
    results: Vec<CommandResult>,
    /// The command under way: its index, output lines and their arrival
    /// times.
    current: Option<(usize, Vec<String>, Vec<f64>)>,
    done: bool,
    /// What came before the kernel's power-down message on its line: the
    /// start of the line the message split (see [`power_down_split`]).
    split_line: Option<String>,
}

/// The guest kernel's last console message (an emergency, so printed at
/// the lab's `loglevel=1`), written by `poweroff -f` at once, while the
/// serial port may still be sending the commands' last output from the
/// tty's buffer: it lands inside that output, at any byte. Seen in a
/// scheduler lab test's statistics JSON, which then failed to parse:
/// `      ][   27.054285] reboot: Power down`, an empty line, `    }`.
const POWER_DOWN: &str = "] reboot: Power down";

/// Where a console line holds the kernel's power-down message
/// (`[   27.054285] reboot: Power down`, the stamp as printk writes it:
/// seconds, a dot, six digits of microseconds; a kernel built with
/// CONFIG_PRINTK_CALLER adds a `[T1]` field, which none of the lab's
/// does): the text before it. The message ends in its own newline, so
/// what the tty sends next (the rest of the split line) arrives as the
/// next line.
fn power_down_split(line: &str) -> Option<&str> {
    let end = line.find(POWER_DOWN)?;
    let open = line[..end].rfind('[')?;
    let (seconds, micros) = line[open + 1..end].trim_start().split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(seconds) && micros.len() == 6 && digits(micros)).then(|| &line[..open])
}

impl Transcript {
    fn tail(&self) -> String {
        tail(&self.console, CONSOLE_TAIL_LINES)
    }

    /// Takes one console line: output of the command under way, or a
    /// marker of the guest's runner (initramfs::MARK).
    fn take(
        &mut self,
        arrived: Instant,
        line: String,
        started: Instant,
        commands: &[String],
    ) -> Option<Marker> {
        self.console.push(line.clone());
        let line = match self.split_line.take() {
            // The message may have come between the tty's \r and \n.
            Some(start) => (start + &line).trim_end_matches('\r').to_string(),
            None => line,
        };
        if let Some(start) = power_down_split(&line) {
            self.split_line = Some(start.to_string());
            return None;
        }
        let arrived_s = self.first_command.map_or(0.0, |t0| {
            arrived.saturating_duration_since(t0).as_secs_f64()
        });
        let Some(at) = line.find(MARK) else {
            self.output(line, arrived_s);
            return None;
        };
        // Output that did not end in a newline shares its last line with
        // the marker.
        if at > 0 {
            self.output(line[..at].to_string(), arrived_s);
        }
        let rest = line[at + MARK.len()..].trim().to_string();
        let mut words = rest.split_whitespace();
        match words.next() {
            Some("BOOTED") => {
                self.boot_ms = Some(started.elapsed().as_secs_f64() * 1e3);
                Some(Marker::Booted)
            }
            Some("BEGIN") => {
                let i: usize = words
                    .next()
                    .and_then(|w| w.parse().ok())
                    .unwrap_or(self.results.len());
                self.current = Some((i, Vec::new(), Vec::new()));
                if self.first_command.is_none() {
                    self.first_command = Some(arrived);
                    return Some(Marker::FirstCommand(arrived));
                }
                None
            }
            Some("END") => {
                let code = words.nth(1).and_then(|w| w.parse().ok());
                if let Some((i, out, line_at_s)) = self.current.take() {
                    self.results.push(CommandResult {
                        command: commands.get(i).cloned().unwrap_or_default(),
                        exit_code: code,
                        output: out.join("\n"),
                        line_at_s,
                    });
                }
                self.first_command.map(Marker::CommandEnded)
            }
            Some("DONE") => {
                self.done = true;
                None
            }
            _ => None,
        }
    }

    fn output(&mut self, line: String, arrived_s: f64) {
        if let Some((_, out, at_s)) = self.current.as_mut() {
            out.push(line);
            at_s.push(arrived_s);
        }
    }

    /// QEMU ended before the runner said DONE: a guest kernel panic (the
    /// guest's fault, told apart from ours) or QEMU's own exit.
    fn qemu_exited(
        &mut self,
        guest: &mut Guest,
        stderr_text: std::thread::JoinHandle<String>,
    ) -> LabError {
        guest.thaw_all();
        let status = guest
            .child
            .wait()
            .map_or_else(|e| format!("status unknown: {e}"), |s| s.to_string());
        let err = stderr_text.join().unwrap_or_default();
        // panic=-1 reboots, and -no-reboot then ends QEMU.
        if self.console.iter().any(|l| l.contains("Kernel panic")) {
            let report = crate::guest_panic::report(&self.console);
            return LabError::GuestPanic {
                during_commands: self.first_command.is_some(),
                stale_breakpoint: crate::guest_panic::stale_breakpoint(&report),
                console_tail: report,
                partial_output: self
                    .current
                    .take()
                    .map(|(_, out, _)| out.join("\n"))
                    .unwrap_or_default(),
            };
        }
        LabError::QemuExited {
            status,
            stderr: err.trim().to_string(),
            console_tail: self.tail(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vcpu_registers_reads_each_cpus_rip_and_halt_state() {
        let text = "CPU#0\nRAX=0000000000000000 RBX=0000000000000001\n\
                    RIP=ffffffffb6a1b2cf RFL=00000246 [---Z-P-] CPL=0 II=0 A20=1 SMM=0 HLT=1\n\
                    ES =0000 0000000000000000 00000000 00000000\n\
                    CPU#1\nRIP=ffffffffb6000010 RFL=00000002 [-------] CPL=0 II=0 A20=1 SMM=0 HLT=0\n";
        assert_eq!(
            vcpu_registers(text),
            [
                VcpuRegisters {
                    cpu: 0,
                    rip: "ffffffffb6a1b2cf".into(),
                    halted: true
                },
                VcpuRegisters {
                    cpu: 1,
                    rip: "ffffffffb6000010".into(),
                    halted: false
                },
            ]
        );
        assert!(vcpu_registers("no registers").is_empty());
    }

    /// Feeds `lines` to a transcript as the console's, one command.
    fn output_of(lines: &[&str]) -> String {
        let mut t = Transcript::default();
        let now = Instant::now();
        let commands = ["cmd".to_string()];
        let mut feed = |l: String| {
            t.take(now, l, now, &commands);
        };
        feed(format!("{MARK} BEGIN 0"));
        for l in lines {
            feed(l.to_string());
        }
        feed(format!("{MARK} END 0 0"));
        t.results[0].output.clone()
    }

    /// Regression: the kernel's power-down message, printed while the tty
    /// still sent a command's last output, split a line of its JSON, and
    /// the test reading it failed to parse.
    #[test]
    fn the_power_down_message_is_cut_out_of_a_commands_output() {
        assert_eq!(
            output_of(&[
                "  \"stack_mates\": [",
                "      ][   27.054285] reboot: Power down",
                "",
                "    }"
            ]),
            "  \"stack_mates\": [\n      ]\n    }"
        );
        // Mid-word, and at a line's start with more after it.
        assert_eq!(
            output_of(&["12[    3.100000] reboot: Power down", "34"]),
            "1234"
        );
        assert_eq!(
            output_of(&["[    3.100000] reboot: Power down", "next"]),
            "next"
        );
        // Between the tty's \r and \n: no \r is left.
        assert_eq!(
            output_of(&["ab\r[    3.100000] reboot: Power down", ""]),
            "ab"
        );
        // Text that only looks like it stays.
        for look_alike in [
            "[x] reboot: Power down",
            "[1] reboot: Power down",
            "[.] reboot: Power down",
        ] {
            assert_eq!(output_of(&[look_alike]), look_alike);
        }
        assert_eq!(
            power_down_split("[ 1234.567890] reboot: Power down"),
            Some("")
        );
        assert_eq!(power_down_split("reboot: Power down"), None);
    }

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
