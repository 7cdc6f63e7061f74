//! Reading the sampled program's code: was the thread on a PAUSE?
//!
//! PAUSE (`F3 90`) is a spin-wait hint. It is slow (tens to over a hundred
//! cycles), so a timer interrupt usually finds the thread just past it, or
//! about to execute it. Bytes are read once per instruction pointer from
//! /proc/PID/mem and cached.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

const PAUSE: [u8; 2] = [0xf3, 0x90];

/// Entries kept before the cache is cleared (JIT code may be rewritten).
const CACHE_LIMIT: usize = 1 << 16;

pub struct PauseSites {
    mem: Option<File>,
    cache: HashMap<u64, bool>,
}

impl PauseSites {
    /// Reads code of process `pid`. Without access to its memory every answer
    /// is "no", and detection falls back to repeated states alone.
    pub fn open(pid: i32) -> PauseSites {
        PauseSites {
            mem: File::open(format!("/proc/{pid}/mem")).ok(),
            cache: HashMap::new(),
        }
    }

    pub fn readable(&self) -> bool {
        self.mem.is_some()
    }

    /// Whether the instruction just before `ip`, or at `ip`, is a PAUSE.
    pub fn at_pause(&mut self, ip: u64) -> bool {
        if let Some(&hit) = self.cache.get(&ip) {
            return hit;
        }
        let Some(mem) = &self.mem else { return false };
        let mut bytes = [0u8; 4];
        let hit = ip >= 2
            && mem.read_exact_at(&mut bytes, ip - 2).is_ok()
            && (bytes[0..2] == PAUSE || bytes[2..4] == PAUSE);
        if self.cache.len() >= CACHE_LIMIT {
            self.cache.clear();
        }
        self.cache.insert(ip, hit);
        hit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_pause_in_own_code() {
        #[inline(never)]
        fn spin_hint() {
            std::hint::spin_loop();
        }
        spin_hint();
        let mut sites = PauseSites::open(std::process::id() as i32);
        assert!(sites.readable());
        let f = spin_hint as fn() as usize as u64;
        // Find the PAUSE within the function's first bytes.
        let found = (0..32).any(|off| sites.at_pause(f + off));
        assert!(
            found,
            "no PAUSE found in a function that executes spin_loop()"
        );
        // Plain arithmetic code has none.
        #[inline(never)]
        fn add(a: u64, b: u64) -> u64 {
            a.wrapping_mul(b).wrapping_add(a)
        }
        std::hint::black_box(add(3, 4));
        let g = add as fn(u64, u64) -> u64 as usize as u64;
        assert!(!(2..12).any(|off| sites.at_pause(g + off)));
    }
}
