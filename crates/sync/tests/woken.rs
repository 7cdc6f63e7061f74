//! Regression: waiters woken from a futex sleep counted as asleep until
//! they ran. A condvar broadcast's woken waiters then looked like other
//! programs' runnable threads to the yield rule (load::yield_may_help), and
//! under a scheduler slow to run them they slept again instead of yielding
//! (docs/sync.md). A waker now takes the threads it woke off the count.
//!
//! Its own test binary: the count is process-wide.

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::time::Duration;
use vsched_sync::{futex, load};

const WAITERS: u64 = 4;

/// The tests read one process-wide count: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn woken_waiters_count_as_awake_before_they_run() {
    let _serial = SERIAL.lock().unwrap();
    static WORD: AtomicU32 = AtomicU32::new(0);
    // All on this thread's CPU, the waiters SCHED_IDLE: a woken waiter
    // cannot run before this thread, a normal one, sleeps (the kernel's
    // default scheduler pre-empts nothing for SCHED_IDLE work), so the
    // counts below are read before any woken waiter ran.
    pin_to_current_cpu();
    let (tids_tx, tids) = std::sync::mpsc::channel();
    let threads: Vec<_> = (0..WAITERS)
        .map(|_| {
            let tids_tx = tids_tx.clone();
            std::thread::spawn(move || {
                become_sched_idle();
                // SAFETY: gettid has no preconditions.
                tids_tx.send(unsafe { libc::gettid() }).unwrap();
                while WORD.load(SeqCst) == 0 {
                    futex::wait(&WORD, 0, None, false);
                }
            })
        })
        .collect();
    let tids: Vec<i32> = (0..WAITERS).map(|_| tids.recv().unwrap()).collect();
    // Counted just before the system call: wait until each is asleep in
    // the kernel, so that the wake-ups below find all of them there.
    let give_up = std::time::Instant::now() + Duration::from_secs(30);
    for tid in tids {
        while !in_futex_wait(tid) {
            assert!(
                std::time::Instant::now() < give_up,
                "thread {tid} not seen in a futex wait within 30 s \
                 (/proc/self/task/{tid}/syscall: {:?})",
                std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall"))
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    WORD.store(1, SeqCst);
    let first = futex::wake(&WORD, 1, false);
    let after_first = load::sleeping_now();
    assert_eq!(first, 1, "one waiter was asleep in the kernel");
    assert_eq!(
        after_first,
        WAITERS - 1,
        "the waiter just woken counts as awake before it runs"
    );
    let rest = futex::wake(&WORD, i32::MAX, false);
    assert_eq!(u64::from(rest), WAITERS - 1);
    assert_eq!(
        load::sleeping_now(),
        0,
        "every woken waiter counts as awake"
    );
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(
        load::sleeping_counts(),
        (0, 0),
        "each waiter counted itself out once, and the woken ones were forgotten"
    );
}

/// A wait that ends by itself (the word had changed, or a timeout) takes
/// itself off the count: no waker counted it.
#[test]
fn a_wait_that_ends_by_itself_leaves_the_count_as_it_was() {
    let _serial = SERIAL.lock().unwrap();
    static WORD: AtomicU32 = AtomicU32::new(7);
    let before = load::sleeping_counts();
    assert_eq!(
        futex::wait(&WORD, 6, None, false),
        futex::WaitResult::Changed
    );
    assert_eq!(load::sleeping_counts(), before);
}

fn pin_to_current_cpu() {
    // SAFETY: sched_getcpu has no preconditions; the set is a local,
    // zeroed cpu_set_t passed with its size.
    unsafe {
        let cpu = libc::sched_getcpu();
        assert!(cpu >= 0, "sched_getcpu");
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0,
            "sched_setaffinity"
        );
    }
}

fn become_sched_idle() {
    let none = libc::sched_param { sched_priority: 0 };
    // SAFETY: a valid sched_param for the calling thread (0).
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &none) };
    assert_eq!(rc, 0, "SCHED_IDLE needs no privilege");
}

/// Whether thread `tid` of this process is inside a futex system call
/// (/proc's syscall file starts with the call's number).
fn in_futex_wait(tid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall"))
        .is_ok_and(|s| s.split_whitespace().next() == Some(&libc::SYS_futex.to_string()))
}
