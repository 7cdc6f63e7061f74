//! Software cpu-clock sampling of one thread through perf_event_open.
//!
//! VMs expose no hardware counters and no LBR, but the `cpu-clock` software
//! event works everywhere: an hrtimer that, while the thread runs in user
//! mode, records its instruction pointer and general-purpose registers every
//! `period_ns` of the thread's CPU time. Those samples are all the detector
//! needs.

use crate::sample::{Sample, NREGS};
use perf_event_open_sys as sys;
use std::io;
use std::sync::atomic::{fence, Ordering};

/// x86-64 user registers recorded with each sample (perf_event_x86_regs bits):
/// AX BX CX DX SI DI BP SP IP FLAGS (0..=9) and R8..R15 (16..=23).
/// CS/SS never change and DS..GS are rejected on x86-64.
pub const REGS_MASK: u64 = 0x3ff | (0xff << 16);

const _: () = assert!(REGS_MASK.count_ones() as usize == NREGS);

/// The shortest cpu-clock period the kernel samples at (10 µs): it raises
/// shorter ones to this (perf_swevent_start_hrtimer).
pub const MIN_PERIOD_NS: u64 = 10_000;

/// Data pages of each ring buffer (a power of two). 16 pages hold about 300
/// samples: 30 ms of a busy thread at the default 100 µs period, far more
/// than the detector's drain interval.
const DATA_PAGES: usize = 16;

/// Data pages of an entry trap's ring: a trap is drained as soon as it fires.
const ENTRY_TRAP_PAGES: usize = 2;

/// The attributes every sampler shares: user-mode IP, thread, time and
/// registers, stamped with CLOCK_MONOTONIC.
fn sample_attr() -> sys::bindings::perf_event_attr {
    let mut attr = sys::bindings::perf_event_attr {
        size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
        sample_type: (sys::bindings::PERF_SAMPLE_IP
            | sys::bindings::PERF_SAMPLE_TID
            | sys::bindings::PERF_SAMPLE_TIME
            | sys::bindings::PERF_SAMPLE_REGS_USER) as u64,
        sample_regs_user: REGS_MASK,
        clockid: libc::CLOCK_MONOTONIC,
        ..Default::default()
    };
    attr.set_exclude_kernel(1);
    attr.set_exclude_hv(1);
    attr.set_use_clockid(1);
    attr
}

/// Why a thread could not be sampled.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// perf_event_open refused (perf_event_paranoid, capabilities, ptrace access).
    #[error(
        "perf_event_open is not permitted ({0}): sampling another process needs \
         kernel.perf_event_paranoid <= 2 (sysctl -w kernel.perf_event_paranoid=2) and \
         permission to ptrace it (same user, or CAP_PERFMON / CAP_SYS_ADMIN, i.e. root)"
    )]
    NotPermitted(io::Error),
    /// The thread no longer exists.
    #[error("the thread no longer exists")]
    Gone,
    /// Out of file descriptors or memory, or another failure.
    #[error("perf_event_open failed: {0}")]
    Other(io::Error),
}

/// One thread's cpu-clock sampler and its ring buffer.
pub struct ThreadSampler {
    tid: i32,
    fd: libc::c_int,
    base: *mut u8,
    map_len: usize,
    /// Bytes of the ring's data area.
    data_size: u64,
    page: usize,
    /// Samples the kernel dropped because the buffer was full.
    pub lost: u64,
}

// SAFETY: the raw pointer is this sampler's own mapping of its ring buffer,
// used only through &mut self; nothing in it is tied to the thread that
// opened it, so the sampler may move to another thread.
unsafe impl Send for ThreadSampler {}

impl ThreadSampler {
    /// Starts sampling `tid` every `period_ns` of its user-mode CPU time.
    /// With `wake_each`, every sample makes the descriptor readable (for
    /// poll); otherwise only a half-full buffer does, which costs nothing.
    pub fn open(tid: i32, period_ns: u64, wake_each: bool) -> Result<ThreadSampler, OpenError> {
        let mut attr = sample_attr();
        attr.type_ = sys::bindings::PERF_TYPE_SOFTWARE;
        attr.config = sys::bindings::PERF_COUNT_SW_CPU_CLOCK as u64;
        attr.__bindgen_anon_1.sample_period = period_ns.max(MIN_PERIOD_NS);
        if wake_each {
            attr.__bindgen_anon_2.wakeup_events = 1;
        }
        Self::open_attr(tid, &mut attr, DATA_PAGES)
    }

    /// Samples `tid` each time it executes the instruction at `ip` (a
    /// hardware execute breakpoint, one of the thread's four debug
    /// registers), waking the poller at once. The thread is not stopped:
    /// the breakpoint only writes a sample. Closing the descriptor removes
    /// the breakpoint, so nothing of it outlives vsched, not even a SIGKILL.
    pub fn open_entry_trap(tid: i32, ip: u64) -> Result<ThreadSampler, OpenError> {
        let mut attr = sample_attr();
        attr.type_ = sys::bindings::PERF_TYPE_BREAKPOINT;
        attr.bp_type = sys::bindings::HW_BREAKPOINT_X;
        attr.__bindgen_anon_3.bp_addr = ip;
        attr.__bindgen_anon_4.bp_len = std::mem::size_of::<libc::c_long>() as u64;
        attr.__bindgen_anon_1.sample_period = 1;
        attr.__bindgen_anon_2.wakeup_events = 1;
        Self::open_attr(tid, &mut attr, ENTRY_TRAP_PAGES)
    }

    fn open_attr(
        tid: i32,
        attr: &mut sys::bindings::perf_event_attr,
        data_pages: usize,
    ) -> Result<ThreadSampler, OpenError> {
        // SAFETY: attr is fully initialised; pid = tid, any CPU, no group.
        let fd = unsafe {
            sys::perf_event_open(attr, tid, -1, -1, sys::bindings::PERF_FLAG_FD_CLOEXEC as _)
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ESRCH) | Some(libc::ENOENT) => OpenError::Gone,
                Some(libc::EACCES) | Some(libc::EPERM) => OpenError::NotPermitted(e),
                _ => OpenError::Other(e),
            });
        }
        // SAFETY: plain sysconf query.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let map_len = page * (1 + data_pages);
        // SAFETY: mapping the event's ring buffer, as perf_event_open(2) describes.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            // SAFETY: closing the fd we own.
            unsafe { libc::close(fd) };
            return Err(OpenError::Other(e));
        }
        Ok(ThreadSampler {
            tid,
            fd,
            base: base as *mut u8,
            map_len,
            data_size: (data_pages * page) as u64,
            page,
            lost: 0,
        })
    }

    pub fn tid(&self) -> i32 {
        self.tid
    }

    /// Changes the sampling period (effective from the next sample).
    pub fn set_period(&mut self, period_ns: u64) -> bool {
        // SAFETY: PERF_EVENT_IOC_PERIOD reads one u64 through the pointer.
        unsafe {
            libc::ioctl(
                self.fd,
                sys::bindings::PERIOD as _,
                &period_ns as *const u64,
            ) == 0
        }
    }

    /// The descriptor, to poll for new samples.
    pub fn fd(&self) -> libc::c_int {
        self.fd
    }

    /// Hands every sample recorded since the last call to `f`, oldest first.
    pub fn drain(&mut self, mut f: impl FnMut(Sample)) {
        let meta = self.base as *mut sys::bindings::perf_event_mmap_page;
        // SAFETY: the mapping is one metadata page followed by the data
        // pages: base + one page is inside it.
        let data = unsafe { self.base.add(self.page) };
        let size = self.data_size;
        // SAFETY: the first page is the kernel's metadata page, mapped for
        // the sampler's life; data_head is read before the records
        // (acquire), data_tail written after them (release), as
        // perf_event_open(2) prescribes.
        let head = unsafe { std::ptr::read_volatile(&(*meta).data_head) };
        fence(Ordering::Acquire);
        // SAFETY: as above; only we write data_tail.
        let mut tail = unsafe { std::ptr::read_volatile(&(*meta).data_tail) };
        // Larger than any record asked for: a sample is 8 + 4*8 + 18*8 bytes.
        let mut record = [0u8; 512];
        while tail < head {
            let header = read_bytes::<8>(data, size, tail);
            let kind = u32::from_ne_bytes(header[0..4].try_into().unwrap());
            let len = u16::from_ne_bytes(header[6..8].try_into().unwrap()) as usize;
            if len == 0 {
                break;
            }
            if len <= record.len() {
                copy_ring(data, size, tail, &mut record[..len]);
                match kind {
                    sys::bindings::PERF_RECORD_SAMPLE => {
                        if let Some(s) = parse_sample(&record[8..len]) {
                            f(s);
                        }
                    }
                    sys::bindings::PERF_RECORD_LOST => {
                        // id, lost
                        self.lost += u64::from_ne_bytes(record[16..24].try_into().unwrap());
                    }
                    _ => {}
                }
            }
            tail += len as u64;
        }
        fence(Ordering::Release);
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(&mut (*meta).data_tail, tail) };
    }
}

impl Drop for ThreadSampler {
    fn drop(&mut self) {
        // SAFETY: unmapping and closing what `open` created.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.map_len);
            libc::close(self.fd);
        }
    }
}

fn read_bytes<const N: usize>(data: *const u8, size: u64, at: u64) -> [u8; N] {
    let mut out = [0u8; N];
    copy_ring(data, size, at, &mut out);
    out
}

/// Copies `out.len()` bytes starting at ring offset `at`, wrapping around.
fn copy_ring(data: *const u8, size: u64, at: u64, out: &mut [u8]) {
    let start = (at % size) as usize;
    let first = out.len().min(size as usize - start);
    // SAFETY: both ranges lie inside the data area of `size` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(data.add(start), out.as_mut_ptr(), first);
        std::ptr::copy_nonoverlapping(data, out.as_mut_ptr().add(first), out.len() - first);
    }
}

/// Parses the body of a PERF_RECORD_SAMPLE laid out as IP, TID, TIME, REGS_USER.
pub fn parse_sample(body: &[u8]) -> Option<Sample> {
    let word = |i: usize| -> Option<u64> {
        body.get(i * 8..i * 8 + 8)
            .map(|b| u64::from_ne_bytes(b.try_into().unwrap()))
    };
    let ip = word(0)?;
    let pid_tid = word(1)?;
    let time_ns = word(2)?;
    let abi = word(3)?;
    let mut regs = [0u64; NREGS];
    if abi == 0 {
        // No user registers (the sample hit a kernel thread): useless here.
        return None;
    }
    for (i, r) in regs.iter_mut().enumerate() {
        *r = word(4 + i)?;
    }
    Some(Sample {
        time_ns,
        tid: (pid_tid >> 32) as i32,
        ip,
        regs,
        after_pause: false,
    })
}
