//! Where a replay reads code and data: the [`Memory`] trait, the live
//! process's memory ([`ProcessMemory`], with one batched read of many
//! words), and a [`Snapshot`] that reads each polled word once and keeps
//! what a replay depended on.

/// The most iovecs one process_vm_readv takes (the kernel's UIO_MAXIOV).
const IOV_MAX: usize = 1024;

/// Bytes of one auxiliary-vector entry in /proc/PID/auxv: a key and a value,
/// both 64-bit.
const AUXV_ENTRY: usize = 16;

/// Where code and data come from (the live process, or a test's bytes).
pub trait Memory {
    /// Fills `buf` from address `addr`; false if it is not readable.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool;
}

/// Another process's memory, read with process_vm_readv (a pread of
/// /proc/PID/mem allocates a bounce page per call: several times slower).
pub struct ProcessMemory {
    pid: i32,
}

impl ProcessMemory {
    /// None if the process's memory cannot be read (it is gone, or ptrace
    /// access is denied).
    pub fn open(pid: i32) -> Option<ProcessMemory> {
        let mem = ProcessMemory { pid };
        // Probe with the process's own entry point, always mapped.
        let auxv = std::fs::read(format!("/proc/{pid}/auxv")).ok()?;
        let entry = auxv
            .chunks_exact(AUXV_ENTRY)
            .map(|c| {
                let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().expect("8 bytes"));
                (word(&c[..8]), word(&c[8..]))
            })
            .find(|&(key, _)| key == libc::AT_ENTRY)?
            .1;
        let mut probe = [0u8; 1];
        let mut mem = mem;
        mem.read(entry, &mut probe).then_some(mem)
    }
}

impl Memory for ProcessMemory {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: buf.len(),
        };
        // SAFETY: local describes buf, which is writable for its length; the
        // kernel checks the remote range itself.
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        n == buf.len() as isize
    }
}

/// A word of the program's memory a replay read, and what it held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Word {
    pub addr: u64,
    pub len: usize,
    pub value: [u8; 8],
}

impl ProcessMemory {
    /// Reads many words, one system call per `IOV_MAX`; None if any is
    /// unreadable.
    pub fn read_words(&mut self, wanted: &[(u64, usize)]) -> Option<Vec<Word>> {
        let mut all = Vec::with_capacity(wanted.len());
        for chunk in wanted.chunks(IOV_MAX) {
            all.extend(self.read_chunk(chunk)?);
        }
        Some(all)
    }

    fn read_chunk(&mut self, wanted: &[(u64, usize)]) -> Option<Vec<Word>> {
        let mut values = vec![[0u8; 8]; wanted.len()];
        let local: Vec<libc::iovec> = values
            .iter_mut()
            .zip(wanted)
            .map(|(v, &(_, len))| libc::iovec {
                iov_base: v.as_mut_ptr().cast(),
                iov_len: len,
            })
            .collect();
        let remote: Vec<libc::iovec> = wanted
            .iter()
            .map(|&(addr, len)| libc::iovec {
                iov_base: addr as *mut libc::c_void,
                iov_len: len,
            })
            .collect();
        let total: usize = wanted.iter().map(|w| w.1).sum();
        // SAFETY: each local iovec points into `values`, sized to its length.
        let n = unsafe {
            libc::process_vm_readv(
                self.pid,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        (n == total as isize).then(|| {
            wanted
                .iter()
                .zip(values)
                .map(|(&(addr, len), value)| Word { addr, len, value })
                .collect()
        })
    }
}

/// Reads of at most 8 bytes, remembered: one check of all watched threads
/// reads each polled word once, and every replay sees the same value.
pub struct Snapshot<'a, M: Memory> {
    inner: &'a mut M,
    words: Vec<Word>,
    /// Words read since the last [`Snapshot::take_touched`].
    touched: Vec<Word>,
}

impl<'a, M: Memory> Snapshot<'a, M> {
    pub fn new(inner: &'a mut M) -> Self {
        Snapshot {
            inner,
            words: Vec::new(),
            touched: Vec::new(),
        }
    }

    /// Takes values read elsewhere (a batched read) as this snapshot's.
    pub fn prefill(&mut self, words: impl IntoIterator<Item = Word>) {
        self.words.extend(words);
    }

    /// The words read since the previous call: what the last replay depends on.
    pub fn take_touched(&mut self) -> Vec<Word> {
        std::mem::take(&mut self.touched)
    }
}

impl<M: Memory> Memory for Snapshot<'_, M> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        let len = buf.len();
        if len > 8 {
            return self.inner.read(addr, buf);
        }
        // Words are at most 8 bytes; longer reads (code) are not polled.
        let word = match self.words.iter().find(|w| w.addr == addr && w.len == len) {
            Some(w) => *w,
            None => {
                if !self.inner.read(addr, buf) {
                    return false;
                }
                let mut value = [0u8; 8];
                value[..len].copy_from_slice(buf);
                let w = Word { addr, len, value };
                self.words.push(w);
                w
            }
        };
        buf.copy_from_slice(&word.value[..len]);
        if !self.touched.contains(&word) {
            self.touched.push(word);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Memory whose every byte is its address's low byte; counts reads.
    #[derive(Default)]
    struct Counting {
        reads: usize,
    }

    impl Memory for Counting {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
            self.reads += 1;
            for (i, b) in buf.iter_mut().enumerate() {
                *b = (addr + i as u64) as u8;
            }
            true
        }
    }

    #[test]
    fn a_snapshot_reads_each_word_once_and_keeps_what_was_read() {
        let mut inner = Counting::default();
        let mut snap = Snapshot::new(&mut inner);
        let mut buf = [0u8; 4];
        assert!(snap.read(0x10, &mut buf));
        assert_eq!(buf, [0x10, 0x11, 0x12, 0x13]);
        assert!(snap.read(0x10, &mut buf));
        // A different length at the same address is a different word.
        assert!(snap.read(0x10, &mut [0u8; 2]));
        let touched = snap.take_touched();
        assert_eq!(touched.len(), 2, "{touched:?}");
        assert_eq!((touched[0].addr, touched[0].len), (0x10, 4));
        // Taking the touched words starts a new list; the values stay cached.
        assert!(snap.take_touched().is_empty());
        assert!(snap.read(0x10, &mut buf));
        assert_eq!(snap.take_touched().len(), 1);
        drop(snap);
        assert_eq!(inner.reads, 2);
    }

    #[test]
    fn prefilled_words_are_served_without_reading() {
        let mut inner = Counting::default();
        let mut snap = Snapshot::new(&mut inner);
        let value = [7, 0, 0, 0, 0, 0, 0, 0];
        snap.prefill([Word {
            addr: 0x40,
            len: 1,
            value,
        }]);
        let mut byte = [0u8; 1];
        assert!(snap.read(0x40, &mut byte));
        assert_eq!(byte, [7]);
        // Reads longer than a word (instructions) go straight through.
        assert!(snap.read(0x40, &mut [0u8; 15]));
        drop(snap);
        assert_eq!(inner.reads, 1);
    }

    #[test]
    fn own_memory_is_readable_in_one_batch() {
        static WORDS: [u64; 3] = [11, 22, 33];
        let mut mem = ProcessMemory::open(std::process::id() as i32).expect("own memory");
        let wanted: Vec<(u64, usize)> = WORDS.iter().map(|w| (w as *const u64 as u64, 8)).collect();
        let read = mem.read_words(&wanted).expect("readable");
        let values: Vec<u64> = read.iter().map(|w| u64::from_ne_bytes(w.value)).collect();
        assert_eq!(values, WORDS);
        // One unmapped word fails the whole batch.
        let mut with_bad = wanted.clone();
        with_bad.push((8, 8));
        assert!(mem.read_words(&with_bad).is_none());
    }
}
