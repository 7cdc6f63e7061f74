//! `vsched-zoo`: the spin detector's test programs (see `vsched_zoo::cli`).

use clap::Parser;
use std::process::ExitCode;
use vsched_zoo::cli::{run, ZooArgs};

fn main() -> ExitCode {
    match run(ZooArgs::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vsched-zoo: error: {e:#}");
            // 2, as vsched itself: the program could not run as asked.
            ExitCode::from(2)
        }
    }
}
