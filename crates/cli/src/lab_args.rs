//! The guest options every command that boots lab guests takes (`vsched
//! lab`, `vsched bench sched`, `vsched bench soak`): emulator and kernel
//! version; and the lab options they make.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use vsched_lab::{Accel, LabOptions};

#[derive(Copy, Clone, Debug, ValueEnum)]
pub enum AccelArg {
    /// KVM if it boots the guest kernel here (remembered), else TCG
    Auto,
    /// QEMU's multi-threaded TCG: one host thread per vCPU, works anywhere
    Tcg,
    /// Single-threaded TCG: one host thread runs every vCPU (no vCPU
    /// placement or caps; for comparing the emulator's modes)
    TcgSingle,
    /// KVM only
    Kvm,
}

#[derive(Args, Debug, Clone)]
pub struct GuestArgs {
    /// Accelerator
    #[arg(long, value_enum, default_value = "auto")]
    pub accel: AccelArg,

    /// QEMU binary to boot guests with (default: qemu-system-x86_64 on PATH)
    #[arg(long, value_name = "PATH")]
    pub qemu: Option<PathBuf>,

    /// Boot with a QEMU older than 10 anyway, with a warning (it panics
    /// sched_ext guests; for measuring exactly that, docs/lab.md)
    #[arg(long)]
    pub allow_old_qemu: bool,

    /// Boot this Debian cloud kernel of the tested sched_ext matrix
    /// instead of the layout's (6.16.12, 6.18.15, 7.2.13, 7.3.4; fetched
    /// once, checked against its pinned checksum)
    #[arg(long, value_name = "VERSION")]
    pub kernel_version: Option<String>,
}

impl GuestArgs {
    /// Lab options with these emulator settings and `kernel`, carrying
    /// this vsched binary into the guests.
    pub fn lab_options(&self, kernel: Option<PathBuf>) -> Result<LabOptions> {
        let mut opts = LabOptions::new(
            std::env::current_exe().context("locating the vsched binary to put in the guest")?,
        );
        opts.kernel = kernel;
        opts.accel = match self.accel {
            AccelArg::Auto => Accel::Auto,
            AccelArg::Tcg => Accel::Tcg,
            AccelArg::TcgSingle => Accel::TcgSingle,
            AccelArg::Kvm => Accel::Kvm,
        };
        opts.qemu = self.qemu.clone();
        opts.allow_old_qemu = self.allow_old_qemu;
        if let Some(v) = &self.kernel_version {
            // Refused here, before any guest boots, with the versions there are.
            vsched_lab::kernel::pinned(v)?;
            opts.kernel_version = Some(v.clone());
        }
        Ok(opts)
    }
}
