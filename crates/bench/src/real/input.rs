//! The compressors' input: text generated from a fixed seed, so that every
//! machine compresses the same bytes (no dependence on what files this
//! machine happens to hold) and the ratio is a realistic 3-4x, not the
//! 1000x of a repeated pattern or the 1x of random bytes.

use crate::BenchError;
use std::io::{BufWriter, Write};
use std::path::Path;

/// Words drawn with a skewed distribution (common words far more often),
/// as in prose and logs; a few digits in between, as in logs.
const WORDS: &[&str] = &[
    "the",
    "of",
    "and",
    "to",
    "in",
    "a",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "had",
    "they",
    "you",
    "were",
    "their",
    "one",
    "all",
    "we",
    "can",
    "her",
    "has",
    "there",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "vcpu",
    "scheduler",
    "thread",
    "mutex",
    "barrier",
    "latency",
    "capacity",
    "preempted",
    "steal",
    "hypervisor",
    "runnable",
    "migration",
    "request",
    "response",
    "error",
    "warning",
    "info",
];

/// A 64-bit linear congruential generator (Knuth's MMIX constants): the
/// bytes only need to look varied, not be unpredictable.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    /// An index below `n`, skewed to small values (the minimum of two
    /// uniform draws): word 0 is drawn about 2n times as often as the last.
    fn skewed(&mut self, n: usize) -> usize {
        let a = self.next() as usize % n;
        let b = self.next() as usize % n;
        a.min(b)
    }
}

/// Writes `bytes` bytes of generated text to `path`.
pub fn write_text(path: &Path, bytes: u64) -> Result<(), BenchError> {
    let write_err = |source| BenchError::Write {
        what: "the compressors' input",
        source,
    };
    let file = std::fs::File::create(path).map_err(write_err)?;
    let mut out = BufWriter::new(file);
    let mut rng = Lcg(0x5eed);
    let mut written = 0u64;
    let mut line = String::with_capacity(128);
    while written < bytes {
        line.clear();
        // A log-like line: a counter, then 8-15 words.
        line.push_str(&format!("{:08} ", rng.next() % 100_000_000));
        for _ in 0..8 + rng.next() % 8 {
            line.push_str(WORDS[rng.skewed(WORDS.len())]);
            line.push(' ');
        }
        line.push('\n');
        let take = (bytes - written).min(line.len() as u64) as usize;
        out.write_all(&line.as_bytes()[..take]).map_err(write_err)?;
        written += take as u64;
    }
    out.flush().map_err(write_err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_has_the_asked_size_and_is_the_same_every_time() {
        let dir = std::env::temp_dir().join(format!("vsched-input-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        write_text(&a, 100_003).unwrap();
        write_text(&b, 100_003).unwrap();
        let (a, b) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(a.len(), 100_003);
        assert_eq!(a, b);
        // Varied text: many distinct lines, not one repeated.
        let lines: std::collections::BTreeSet<&[u8]> = a.split(|&c| c == b'\n').collect();
        assert!(lines.len() > 1000, "{} distinct lines", lines.len());
    }
}
