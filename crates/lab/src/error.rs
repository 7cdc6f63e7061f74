//! What can go wrong in the lab, as types. Each variant says what failed and
//! carries what a user needs to act on it: the file and key of a layout
//! error, the install command of a missing tool, the console tail of a guest
//! that did not boot, the path of a cgroup or file operation. Callers that
//! print the whole source chain (`anyhow`'s `{:#}`) get today's messages.

use std::path::PathBuf;

pub type Result<T, E = LabError> = std::result::Result<T, E>;

/// How a guest panic's message names the emulator's stale breakpoint, so
/// that callers running `vsched lab` can tell it from other panics.
pub const STALE_BREAKPOINT: &str =
    "at a breakpoint its memory no longer holds: the emulator's defect, not the guest's (docs/lab.md, \"The emulator\")";

/// Errors of the lab library.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("host load: {0}")]
    HostLoad(String),
    #[error("reading layout {}", path.display())]
    ReadLayout {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("layout {}", path.display())]
    Layout {
        path: PathBuf,
        #[source]
        source: LayoutError,
    },
    /// A layout given as text (no file).
    #[error(transparent)]
    LayoutText(#[from] LayoutError),

    /// A host tool the lab needs is not installed.
    #[error("{tool} is missing: {install}")]
    MissingTool {
        tool: &'static str,
        install: &'static str,
    },
    #[error("--qemu {}: no such file", path.display())]
    NoQemuFile { path: PathBuf },
    #[error("{} printed no version it could be told by (`--version` said {said:?})", qemu.display())]
    QemuVersion { qemu: PathBuf, said: String },
    /// The QEMU found is older than the lab accepts (its guests panic).
    #[error("{} is QEMU {version}; the lab needs QEMU {min_major} or newer, because older QEMU crashes guests with sched_ext schedulers loaded (docs/lab.md, \"The emulator\"). {hint}", qemu.display())]
    OldQemu {
        qemu: PathBuf,
        version: String,
        min_major: u32,
        hint: &'static str,
    },
    #[error("layout {layout} boots a Debian guest (root = \"debian\"), which `lab check` cannot score (it times the probe in a busybox guest that runs nothing else): use `lab run`")]
    CheckNeedsBusybox { layout: String },
    #[error("layout {layout} pins, caps or freezes vCPUs, which single-threaded TCG (one host thread for every vCPU) cannot do: use --accel tcg")]
    SingleThreadedLayout { layout: String },
    /// An extra binary named like a busybox applet that no shell function
    /// can shadow (the name has characters a function name cannot).
    #[error("extra binary {name} has the name of a busybox applet, which the guest's shell would run instead, and a name no shell function can take to win over it: rename the binary")]
    ShadowedBinary { name: String },
    #[error("--kernel-version {version}: not a kernel of the tested matrix; there are: {known}")]
    UnknownKernelVersion { version: String, known: String },
    #[error("--kernel-version {version} picks among sched_ext kernels, for layouts with kernel = \"sched_ext\"; this layout boots the host release's kernel (use --kernel PATH for another)")]
    KernelVersionNeedsSchedExt { version: String },
    #[error("--kernel {}: no such file", path.display())]
    NoKernelFile { path: PathBuf },
    /// The guest kernel could not be fetched; `hint` says how to provide one.
    #[error("{hint}")]
    GuestKernel {
        hint: &'static str,
        #[source]
        source: Box<LabError>,
    },
    /// A helper program (apt-get, dpkg-deb, ldd) could not be started.
    #[error("{what}: could not start {program}")]
    StartTool {
        what: &'static str,
        program: String,
        #[source]
        source: std::io::Error,
    },
    /// A helper program ran and failed.
    #[error("{what} failed: {stderr}")]
    ToolFailed { what: &'static str, stderr: String },
    /// The kernel package did not hold what was expected.
    #[error("{0}")]
    KernelPackage(String),
    /// A file the guest's archive cannot hold.
    #[error("{}: {why}", path.display())]
    Archive { path: PathBuf, why: String },
    #[error("{}: library missing on the host: {line}", binary.display())]
    MissingLibrary { binary: PathBuf, line: String },

    /// A file or directory operation outside the cgroup file systems.
    #[error("{what} {}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A cgroup operation (creating, writing, removing) failed.
    #[error("{what} {}", path.display())]
    Cgroup {
        /// E.g. `writing "3000 10000" to`, `creating cgroup`, `removing cgroup`.
        what: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the layout caps vCPU bandwidth, but no cgroup cpu controller is available \
         (neither a cgroup v1 hierarchy with the cpu controller nor a cgroup2 mount \
         with \"cpu\" in its cgroup.controllers)"
    )]
    NoCpuController,
    /// A system call on the host failed; `what` says what it was for.
    #[error("{what}")]
    Os {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("reading the host's online CPUs")]
    HostCpus(#[source] vsched_model::cpulist::CpuListError),

    #[error(transparent)]
    Qmp(#[from] QmpError),
    #[error("starting {}", qemu.display())]
    StartQemu {
        qemu: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("QEMU reports {reported} vCPUs, the layout wants {wanted}")]
    VcpuCount { reported: usize, wanted: u32 },
    #[error("the guest did not boot within {timeout_s:.0} s ({accel}); last console lines:\n{console_tail}")]
    BootTimeout {
        timeout_s: f64,
        accel: String,
        console_tail: String,
    },
    #[error("the guest's commands did not finish within {timeout_s:.0} s; last console lines:\n{console_tail}\n{hang_report}")]
    RunTimeout {
        timeout_s: f64,
        console_tail: String,
        /// What the hung guest said of itself (run::ask_hung_guest).
        hang_report: String,
    },
    /// The guest kernel panicked: while booting (before any command ran,
    /// so nothing of the layout's commands can be to blame), or during them.
    #[error(
        "the guest kernel panicked {}{}; its report:\n{console_tail}",
        if *during_commands { "while the commands ran" } else { "while booting, before any command ran" },
        match stale_breakpoint {
            Some(at) => format!(", {STALE_BREAKPOINT} ({at})"),
            None => String::new(),
        }
    )]
    GuestPanic {
        during_commands: bool,
        /// The console from the kernel's report on (guest_panic::report).
        console_tail: String,
        /// Set when the panic is the emulator's stale breakpoint
        /// (guest_panic::stale_breakpoint): where it struck.
        stale_breakpoint: Option<String>,
        /// What the command under way had printed when the kernel
        /// panicked (a soak's cycles so far).
        partial_output: String,
    },
    #[error("QEMU exited ({status}) before the guest finished; QEMU said: {stderr}\nlast console lines:\n{console_tail}")]
    QemuExited {
        status: String,
        stderr: String,
        console_tail: String,
    },
    #[error("interrupted")]
    Interrupted,

    #[error(transparent)]
    Check(#[from] CheckError),
}

/// A layout file that cannot be used, by key. `section` names where the
/// key is: `[[vcpu]]` or `[[phase]] 2 [[phase.vcpu]]`.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("not valid")]
    Syntax(#[source] toml::de::Error),
    #[error("vcpus = {vcpus}: must be between 1 and 64")]
    VcpuCount { vcpus: u32 },
    #[error("memory_mib = {memory_mib}: the guest needs at least 128")]
    Memory { memory_mib: u32 },
    #[error("{key} = {value}: must be a positive number of seconds")]
    Timeout { key: &'static str, value: f64 },
    #[error("[[phase]] {phase}: at_s = {at_s} must be after the previous phase ({previous})")]
    PhaseOrder {
        phase: usize,
        at_s: f64,
        previous: f64,
    },
    #[error("packages = [...] installs Debian packages, which only a root = \"debian\" guest has")]
    PackagesNeedDebian,
    #[error("memory_mib = {memory_mib}: a root = \"debian\" guest needs at least {min} (its root file system is unpacked into RAM)")]
    DebianMemory { memory_mib: u32, min: u32 },
    #[error("packages: {name:?} is not a Debian package name")]
    PackageName { name: String },
    #[error("extra binary {}: another extra binary has the same name, and the guest keeps them side by side by name", path.display())]
    ExtraBinaryName { path: PathBuf },
    #[error("extra binary {} does not exist", path.display())]
    ExtraBinary { path: PathBuf },
    #[error("{0}")]
    HostLoad(String),
    #[error("{section}: vCPU id {id} does not exist (vcpus = {vcpus})")]
    NoSuchVcpu {
        section: String,
        id: u32,
        vcpus: u32,
    },
    #[error("{section}: vCPU {id} is listed twice")]
    VcpuTwice { section: String, id: u32 },
    #[error("{section}: vCPU {id} wants host CPU {host_cpu}, but this host offers only {offered}")]
    NoSuchHostCpu {
        section: String,
        id: u32,
        host_cpu: u32,
        offered: String,
    },
    #[error("{section}: vCPU {id}: period_us = {period_us} must be between {min} and {max}")]
    Period {
        section: String,
        id: u32,
        period_us: u64,
        min: u64,
        max: u64,
    },
    #[error("{section}: vCPU {id}: quota_us = {quota_us} must be at least {min}")]
    QuotaTooSmall {
        section: String,
        id: u32,
        quota_us: u64,
        min: u64,
    },
    #[error("{section}: vCPU {id}: quota_us = {quota_us} exceeds period_us = {period_us} (a vCPU is one thread: at most 100%)")]
    QuotaAbovePeriod {
        section: String,
        id: u32,
        quota_us: u64,
        period_us: u64,
    },
    #[error("{section}: vCPU {id}: give both quota_us and period_us, or neither")]
    HalfBandwidth { section: String, id: u32 },
}

/// Talking to QEMU's machine protocol.
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    #[error("connecting to QMP at {}", socket.display())]
    Connect {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("QMP connection")]
    Io(#[from] std::io::Error),
    #[error("QMP connection closed")]
    Closed,
    #[error("QMP sent something that is not JSON")]
    Json(#[from] serde_json::Error),
    #[error("unexpected QMP greeting: {0}")]
    Greeting(String),
    #[error("QMP {command}: {error}")]
    Command { command: String, error: String },
    #[error("query-cpus-fast: {0}")]
    Reply(&'static str),
}

/// The check command ran but its output cannot be scored.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("the check command did not run")]
    NotRun,
    #[error("`{command}` failed in the guest (exit {exit_code:?}):\n{output}")]
    CommandFailed {
        command: String,
        exit_code: Option<i32>,
        output: String,
    },
    #[error("the probe printed no JSON")]
    NoJson,
    #[error("the probe's output is not a sequence of probe reports")]
    BadJson(#[source] serde_json::Error),
    #[error("the probe printed no report")]
    NoReport,
    #[error("the layout has phases but the check command printed one report: use `vsched probe --watch`")]
    PhasesNeedWatch,
}

impl LabError {
    /// For a guest kernel panic, what it says about itself: the kernel's
    /// reason and the instruction it was at, from the console's last lines.
    pub fn guest_panic_cause(&self) -> Option<String> {
        let LabError::GuestPanic { console_tail, .. } = self else {
            return None;
        };
        Some(crate::guest_panic::cause(console_tail))
    }

    /// A guest kernel panic that is the emulator's stale breakpoint
    /// (guest_panic::stale_breakpoint), or one while booting, before any
    /// command ran: either way nothing the guest was given to run is to
    /// blame, and booting the guest again is a fair retry.
    pub fn is_emulators_panic(&self) -> bool {
        matches!(
            self,
            LabError::GuestPanic {
                during_commands: false,
                ..
            } | LabError::GuestPanic {
                stale_breakpoint: Some(_),
                ..
            }
        )
    }

    /// An I/O error on `path` while doing `what` ("creating", "reading", ...).
    pub fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> LabError {
        let path = path.into();
        move |source| LabError::Io { what, path, source }
    }
}
