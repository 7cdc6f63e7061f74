//! The non-spinning zoo: compute kernels with short inner loops, the code a
//! spin detector must never mistake for waiting.

use crate::work::Rng;
use std::hint::black_box;

pub const NAMES: &[&str] = &[
    "reduction",
    "stencil",
    "random-access",
    "pointer-chase",
    "hash",
    "sort",
    "matmul",
    "string-search",
    "prefix-sum",
    "crc32",
    "binary-search",
    "collatz",
];

/// Working state of one thread: buffers allocated once.
pub struct Kernel {
    name: &'static str,
    a: Vec<u64>,
    b: Vec<u64>,
    f: Vec<f64>,
    g: Vec<f64>,
    next: Vec<u32>,
    text: Vec<u8>,
    seed: u64,
}

impl Kernel {
    pub fn new(name: &str, seed: u64) -> Option<Kernel> {
        let name = *NAMES.iter().find(|n| **n == name)?;
        let n = 1 << 16;
        let mut rng = Rng(seed | 1);
        let mut rnd = move || rng.next();
        let a: Vec<u64> = (0..n).map(|_| rnd()).collect();
        // A single random cycle through all slots, for pointer chasing.
        let mut order: Vec<u32> = (0..n as u32).collect();
        for i in (1..n).rev() {
            order.swap(i, (rnd() % (i as u64 + 1)) as usize);
        }
        let mut next = vec![0u32; n];
        for i in 0..n {
            next[order[i] as usize] = order[(i + 1) % n];
        }
        let text: Vec<u8> = (0..n).map(|_| b'a' + (rnd() % 4) as u8).collect();
        Some(Kernel {
            name,
            b: a.clone(),
            f: (0..n).map(|i| i as f64 * 0.5).collect(),
            g: vec![0.0; n],
            a,
            next,
            text,
            seed,
        })
    }

    /// Runs one pass (a fraction of a millisecond to a few ms); returns a value
    /// so the work cannot be optimised away.
    pub fn pass(&mut self) -> u64 {
        self.seed = self.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let s = self.seed;
        black_box(match self.name {
            "reduction" => self.a.iter().fold(0u64, |acc, &v| acc.wrapping_add(v ^ s)),
            "stencil" => {
                let f = &self.f;
                for i in 1..f.len() - 1 {
                    self.g[i] = 0.25 * f[i - 1] + 0.5 * f[i] + 0.25 * f[i + 1];
                }
                std::mem::swap(&mut self.f, &mut self.g);
                self.f[1 + (s as usize) % 1000].to_bits()
            }
            "random-access" => {
                let mut x = s | 1;
                let mask = self.a.len() - 1;
                for _ in 0..(1 << 15) {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let i = (x >> 33) as usize & mask;
                    self.a[i] = self.a[i].wrapping_add(x);
                }
                self.a[(s as usize) & mask]
            }
            "pointer-chase" => {
                let mut p = (s as usize) & (self.next.len() - 1);
                for _ in 0..(1 << 15) {
                    p = self.next[p] as usize;
                }
                p as u64
            }
            "hash" => {
                let mut h = 0xcbf2_9ce4_8422_2325u64 ^ s;
                for &byte in &self.text {
                    h ^= byte as u64;
                    h = h.wrapping_mul(0x0100_0000_01b3);
                }
                h
            }
            "sort" => {
                let len = 1 << 13;
                let start = (s as usize) % (self.a.len() - len);
                self.b[..len].copy_from_slice(&self.a[start..start + len]);
                self.b[..len].sort_unstable();
                self.b[len / 2]
            }
            "matmul" => {
                const N: usize = 48;
                let (x, y) = self.f.split_at_mut(N * N);
                let out = &mut self.g[..N * N];
                for i in 0..N {
                    for j in 0..N {
                        let mut acc = 0.0;
                        for k in 0..N {
                            acc += x[i * N + k] * y[k * N + j];
                        }
                        out[i * N + j] = acc;
                    }
                }
                x[(s as usize) % N] += 1.0;
                out[(s as usize) % (N * N)].to_bits()
            }
            "string-search" => {
                let needle = [b'a', b'b', b'c', b'd', b'a', b'b', b'c', b'c'];
                let mut hits = 0u64;
                for w in self.text.windows(needle.len()) {
                    if w == needle {
                        hits += 1;
                    }
                }
                hits ^ s
            }
            "prefix-sum" => {
                let mut acc = s;
                for v in self.b.iter_mut() {
                    acc = acc.wrapping_add(*v);
                    *v = acc;
                }
                acc
            }
            "crc32" => {
                let mut crc = !(s as u32);
                for &byte in &self.text[..1 << 13] {
                    crc ^= byte as u32;
                    for _ in 0..8 {
                        crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
                    }
                }
                !crc as u64
            }
            "binary-search" => {
                let len = 1 << 12;
                let sorted = &mut self.b[..len];
                if s % 64 == 0 || !sorted.is_sorted() {
                    sorted.sort_unstable();
                }
                let mut found = 0u64;
                let mut key = s;
                for _ in 0..(1 << 12) {
                    key = key
                        .wrapping_mul(2862933555777941757)
                        .wrapping_add(3037000493);
                    if sorted.binary_search(&key).is_ok() {
                        found += 1;
                    }
                }
                found ^ key
            }
            "collatz" => {
                let mut steps = 0u64;
                for start in (s % 1000 + 1)..(s % 1000 + 400) {
                    let mut n = start;
                    while n != 1 {
                        n = if n % 2 == 0 { n / 2 } else { 3 * n + 1 };
                        steps += 1;
                    }
                }
                steps
            }
            _ => unreachable!("names are checked in new()"),
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_kernel_is_deterministic_and_input_dependent() {
        for name in super::NAMES {
            let run = |seed| {
                let mut k = super::Kernel::new(name, seed).unwrap();
                (0..3).map(|_| k.pass()).collect::<Vec<u64>>()
            };
            let a = run(42);
            assert_eq!(a, run(42), "{name} must be deterministic");
            assert!(
                a[0] != a[1] || a[1] != a[2],
                "{name} must depend on its pass seed"
            );
        }
        assert!(super::Kernel::new("nope", 1).is_none());
    }
}
