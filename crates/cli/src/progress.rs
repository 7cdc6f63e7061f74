//! A one-line progress indication on stderr, only for a terminal and only
//! for work expected to take more than a second.

use std::io::{IsTerminal, Write};
use std::time::Instant;

pub struct Progress {
    enabled: bool,
    started: Instant,
}

impl Progress {
    pub fn new(expected_s: f64) -> Progress {
        // A console without TERM (a guest's serial line, an init script) or
        // with TERM=dumb shows no progress: nobody watches it live, and the
        // redraw thread would only disturb the probers.
        let interactive = std::env::var("TERM").is_ok_and(|t| !t.is_empty() && t != "dumb");
        Progress {
            enabled: expected_s > 1.0 && interactive && std::io::stderr().is_terminal(),
            started: Instant::now(),
        }
    }

    /// Whether anything will be shown (a terminal, and long enough work).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn update(&self, what: &str, fraction: f64) {
        if !self.enabled {
            return;
        }
        let width = 24;
        let filled = ((fraction.clamp(0.0, 1.0)) * width as f64) as usize;
        eprint!(
            "\r\x1b[2K{what:<18} [{}{}] {:>3.0}%  {:.1}s",
            "#".repeat(filled),
            " ".repeat(width - filled),
            fraction * 100.0,
            self.started.elapsed().as_secs_f64()
        );
        let _ = std::io::stderr().flush();
    }

    pub fn finish(&self) {
        if self.enabled {
            eprint!("\r\x1b[2K");
            let _ = std::io::stderr().flush();
        }
    }
}
