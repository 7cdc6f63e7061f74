//! `vsched lab`: boot guests whose vCPUs the host controls; score the probe.

use crate::lab_args::GuestArgs;
use crate::signals;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use vsched_lab::check::{self, CheckResult, Verdict};
use vsched_lab::{LabOptions, Layout};

#[derive(Subcommand, Debug)]
pub enum LabCommand {
    /// Boot a guest for LAYOUT and run the layout's commands (or --cmd ones) in it
    Run(RunArgs),
    /// Run `vsched probe` in a guest for LAYOUT and score it against the layout's ground truth
    Check(CommonArgs),
    /// List the sched_ext kernels vsched is tested on (`--kernel-version`)
    Kernels(KernelsArgs),
}

#[derive(Args, Debug)]
#[command(after_long_help = "\
Each kernel is a Debian cloud kernel with sched_ext, pinned by its image's
SHA-256: the lab fetches it once through a private apt configuration (the
host's sources stay as they are), checks it, and caches it. The default is
the one sched_ext layouts boot without --kernel-version (docs/lab.md,
\"Kernels\").

EXAMPLES
  vsched lab kernels
  for v in $(vsched lab kernels --versions); do vsched lab run --kernel-version $v ...; done")]
#[group(id = "format", multiple = false)]
pub struct KernelsArgs {
    /// Print JSON instead of a table
    #[arg(long, group = "format")]
    json: bool,
    /// Print only the versions, oldest first, one per line (for scripts)
    #[arg(long, group = "format")]
    versions: bool,
    /// Print only the default version
    #[arg(long, group = "format")]
    default: bool,
}

#[derive(Args, Debug)]
#[command(after_long_help = "\
Layouts are TOML files (see docs/lab.md and lab/layouts/): vCPU count, memory,
per-vCPU host CPU (two vCPUs on one host CPU are stacked), per-vCPU bandwidth
(quota_us/period_us, or frozen), phases that change these at given times, and
commands. The guest is busybox and vsched, or with root = \"debian\" a Debian
13 system with systemd as init (lab/package/). Needs root (pinning QEMU's
threads, cgroups), QEMU 10 or newer, busybox-static and, for Debian guests,
mmdebstrap (scripts/install-lab.sh installs them); the guest kernel is
Debian's linux-image-cloud-amd64 (sched_ext layouts: Debian's newest, or one
of the tested matrix with --kernel-version), fetched once and cached.

Exit status: 0 commands succeeded / check passed; 1 a guest command failed /
check failed; 2 the lab could not run; 3 (check) DISTURBED: host steal or
another task on the vCPUs' host CPUs beyond the limits in docs/lab.md, so the
run says nothing about the probe.")]
pub struct CommonArgs {
    /// Layout file (TOML)
    layout: PathBuf,
    /// Guest kernel (bzImage) instead of the cached Debian cloud kernel
    #[arg(long, value_name = "PATH")]
    kernel: Option<PathBuf>,
    #[command(flatten)]
    guest: GuestArgs,
    /// Print JSON instead of text
    #[arg(long)]
    json: bool,
    /// Also print the guest's whole console
    #[arg(long)]
    console: bool,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Command to run in the guest instead of the layout's (repeatable)
    #[arg(long = "cmd", value_name = "SHELL COMMAND")]
    commands: Vec<String>,
}

fn prepare(common: &CommonArgs) -> Result<(Layout, LabOptions)> {
    let host_cpus = vsched_probe::sys::online_cpus().context("reading the host's online CPUs")?;
    let layout = Layout::load(&common.layout, &host_cpus)?;
    let opts = common.guest.lab_options(common.kernel.clone())?;
    signals::catch();
    Ok((layout, opts))
}

/// Runs a lab command; returns the exit status: 0 the commands succeeded or
/// the check passed, 1 a command or the check failed, [`EXIT_DISTURBED`]
/// the check was disturbed (errors become 2 in `main`).
pub fn run(cmd: LabCommand) -> Result<u8> {
    match cmd {
        LabCommand::Run(args) => {
            let (layout, opts) = prepare(&args.common)?;
            let commands = if args.commands.is_empty() {
                layout.commands.clone()
            } else {
                args.commands.clone()
            };
            let r = vsched_lab::run(&layout, &commands, &opts, &signals::STOP)
                .with_context(|| format!("running layout {}", layout.name()))?;
            if args.common.json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                if args.common.console {
                    println!("{}\n", r.console);
                }
                for c in &r.commands {
                    println!(
                        "$ {}\n{}\n[exit {}]",
                        c.command,
                        c.output,
                        c.exit_code.map_or("?".into(), |c| c.to_string())
                    );
                }
                println!(
                    "guest {} booted in {:.0} ms ({})",
                    r.layout, r.boot_ms, r.accel
                );
            }
            Ok(u8::from(!r.commands.iter().all(|c| c.exit_code == Some(0))))
        }
        LabCommand::Kernels(args) => {
            print!("{}", kernels(&args)?);
            Ok(0)
        }
        LabCommand::Check(common) => {
            let (layout, opts) = prepare(&common)?;
            let (result, ran) = check::check(&layout, &opts, &signals::STOP)
                .with_context(|| format!("checking layout {}", layout.name()))?;
            if common.json {
                println!("{}", serde_json::to_string_pretty(&result)?);
            } else {
                if common.console {
                    println!("{}\n", ran.console);
                }
                print!("{}", render(&result));
            }
            Ok(match result.verdict {
                Verdict::Pass => 0,
                Verdict::Fail => 1,
                Verdict::Disturbed => EXIT_DISTURBED,
            })
        }
    }
}

/// One kernel of the matrix as `vsched lab kernels --json` shows it.
#[derive(serde::Serialize)]
struct KernelJson {
    version: &'static str,
    suite: &'static str,
    package: &'static str,
    vmlinuz_sha256: &'static str,
    /// The cached image, if fetched.
    cached: Option<PathBuf>,
}

fn kernels(args: &KernelsArgs) -> Result<String> {
    use vsched_lab::kernel::{cached_pinned, DEFAULT_SCHED_EXT_VERSION, SCHED_EXT_KERNELS};
    if args.default {
        return Ok(format!("{DEFAULT_SCHED_EXT_VERSION}\n"));
    }
    // Whether each is cached is read only where it is shown.
    if args.versions {
        return Ok(SCHED_EXT_KERNELS
            .iter()
            .map(|k| format!("{}\n", k.version))
            .collect());
    }
    let list: Vec<KernelJson> = SCHED_EXT_KERNELS
        .iter()
        .map(|k| KernelJson {
            version: k.version,
            suite: k.suite,
            package: k.package,
            vmlinuz_sha256: k.vmlinuz_sha256,
            cached: cached_pinned(k),
        })
        .collect();
    if args.json {
        let doc = serde_json::json!({
            "schema": "vsched.lab-kernels/v1",
            "default": DEFAULT_SCHED_EXT_VERSION,
            "kernels": list,
        });
        return Ok(format!("{}\n", serde_json::to_string_pretty(&doc)?));
    }
    let mut out = format!(
        "{:<9} {:<17} {:<8} {:<7} {}\n",
        "version", "suite", "default", "cached", "package"
    );
    for k in &list {
        out.push_str(&format!(
            "{:<9} {:<17} {:<8} {:<7} {}\n",
            k.version,
            k.suite,
            if k.version == DEFAULT_SCHED_EXT_VERSION {
                "yes"
            } else {
                "-"
            },
            if k.cached.is_some() { "yes" } else { "no" },
            k.package
        ));
    }
    Ok(out)
}

fn render(r: &CheckResult) -> String {
    let mut out = format!(
        "layout {}: guest booted in {:.0} ms ({}), {} probe report(s)\n",
        r.layout, r.boot_ms, r.accel, r.reports
    );
    for s in &r.scored {
        out.push_str(&format!(
            "\n{} placement (report {}):\n",
            s.when, s.report_sequence
        ));
        let w = s.items.iter().map(|i| i.what.len()).max().unwrap_or(0);
        let we = s.items.iter().map(|i| i.expected.len()).max().unwrap_or(0);
        for i in &s.items {
            out.push_str(&format!(
                "  {:<w$}  expected {:<we$}  measured {:<12} {}\n",
                i.what,
                i.expected,
                i.measured,
                match (i.scored, i.pass) {
                    (false, _) => "(info)",
                    (true, true) => "pass",
                    (true, false) => "FAIL",
                }
            ));
        }
    }
    for d in &r.disturbances {
        out.push_str(&format!("\ndisturbed: {}", d.description));
    }
    if !r.disturbances.is_empty() {
        out.push('\n');
    }
    out.push_str(match r.verdict {
        Verdict::Pass => "\nPASS\n",
        Verdict::Fail => "\nFAIL\n",
        Verdict::Disturbed => {
            "\nDISTURBED: something outside the lab took host CPU time the layout's vCPUs \
             needed; the items above are not a verdict on the probe (run the check again \
             on a quieter host)\n"
        }
    });
    out
}

/// Exit status of a disturbed check (0 pass, 1 fail, 2 could not run).
const EXIT_DISTURBED: u8 = 3;
