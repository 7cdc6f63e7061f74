//! Decoding the program's instructions for the replay, cached per address
//! (a watched loop is replayed every watch period, from the same few
//! addresses).

use super::memory::Memory;
use iced_x86::{Decoder, DecoderOptions, Instruction};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Decoded instructions kept before the cache is cleared (16384: far more
/// than the loops a program waits in; cleared rather than aged, since JIT
/// code may be rewritten in place).
const CACHE_LIMIT: usize = 1 << 14;

/// The longest x86 instruction, in bytes.
const MAX_INSTRUCTION_LEN: usize = 15;

/// Bits of an x86-64 address for the decoder.
const BITNESS: u32 = 64;

/// Hashes instruction addresses for the decode cache: one multiply (the
/// default SipHash showed up in the detector's profile; addresses need no
/// protection from crafted collisions).
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn write(&mut self, bytes: &[u8]) {
        // FNV-1a (its 64-bit prime); only u64 keys are hashed in practice.
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        // Fibonacci hashing (2^64 / golden ratio), rotated so that the
        // well-mixed high bits land where the table looks.
        self.0 = v.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The program's instructions, decoded once per address.
#[derive(Default)]
pub(super) struct CodeCache {
    code: HashMap<u64, Option<Instruction>, BuildHasherDefault<AddressHasher>>,
}

impl CodeCache {
    /// The instruction at `ip` (None: unreadable or invalid).
    pub(super) fn decode(&mut self, mem: &mut impl Memory, ip: u64) -> Option<Instruction> {
        if let Some(hit) = self.code.get(&ip) {
            return *hit;
        }
        // Near the end of a mapping fewer bytes than the longest instruction
        // may be readable.
        let mut bytes = [0u8; MAX_INSTRUCTION_LEN];
        let len = (1..=MAX_INSTRUCTION_LEN)
            .rev()
            .find(|&n| mem.read(ip, &mut bytes[..n]))
            .unwrap_or(0);
        let insn = (len > 0)
            .then(|| Decoder::with_ip(BITNESS, &bytes[..len], ip, DecoderOptions::NONE).decode())
            .filter(|i| !i.is_invalid());
        if self.code.len() >= CACHE_LIMIT {
            self.code.clear();
        }
        self.code.insert(ip, insn);
        insn
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::Mnemonic;

    /// `bytes` at address 0x1000 and nothing else; counts reads.
    struct Code {
        bytes: Vec<u8>,
        reads: usize,
    }

    impl Memory for Code {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
            self.reads += 1;
            let Some(off) = addr.checked_sub(0x1000).map(|o| o as usize) else {
                return false;
            };
            let Some(src) = self.bytes.get(off..off + buf.len()) else {
                return false;
            };
            buf.copy_from_slice(src);
            true
        }
    }

    #[test]
    fn decodes_at_the_end_of_readable_memory_and_caches() {
        // pause; jne -4: the jump is the last two readable bytes.
        let mut mem = Code {
            bytes: vec![0xf3, 0x90, 0x75, 0xfc],
            reads: 0,
        };
        let mut cache = CodeCache::default();
        let jne = cache.decode(&mut mem, 0x1002).expect("decodes");
        assert_eq!(jne.mnemonic(), Mnemonic::Jne);
        assert_eq!(jne.near_branch_target(), 0x1002 + 2 - 4);
        let reads = mem.reads;
        assert_eq!(cache.decode(&mut mem, 0x1002), Some(jne));
        assert_eq!(mem.reads, reads, "the second decode is a cache hit");
        // Nothing readable: no instruction, remembered as such.
        assert_eq!(cache.decode(&mut mem, 0x9000), None);
    }

    #[test]
    fn invalid_bytes_are_no_instruction() {
        // 0x06 (push es) does not exist in 64-bit mode.
        let mut mem = Code {
            bytes: vec![0x06],
            reads: 0,
        };
        assert_eq!(CodeCache::default().decode(&mut mem, 0x1000), None);
    }
}
