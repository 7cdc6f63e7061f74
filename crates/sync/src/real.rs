//! glibc's own functions, for the mutexes the runtime hands to glibc
//! unchanged (robust, priority-inheritance, priority-protect and
//! process-shared ones) and for initialisation, which glibc validates.
//! Looked up once with dlsym(RTLD_NEXT) and cached.

use core::ffi::{c_int, c_void, CStr};
use core::sync::atomic::{AtomicPtr, Ordering::*};
use libc::{clockid_t, pthread_mutex_t, pthread_mutexattr_t, timespec};

fn lookup(cache: &AtomicPtr<c_void>, name: &CStr) -> *mut c_void {
    let f = cache.load(Relaxed);
    if !f.is_null() {
        return f;
    }
    // SAFETY: name is NUL-terminated; RTLD_NEXT finds glibc's definition.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if f.is_null() {
        let msg = b"vsched-sync: glibc function not found; giving up\n";
        // SAFETY: writing a constant message to stderr, then aborting.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            libc::abort();
        }
    }
    cache.store(f, Relaxed);
    f
}

macro_rules! real {
    ($($rust:ident, $cache:ident = $c:literal: fn($($arg:ident: $ty:ty),*);)*) => {
        $(
            static $cache: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

            /// glibc's function of the same name.
            ///
            /// # Safety
            /// The arguments must be valid for glibc's function.
            pub unsafe fn $rust($($arg: $ty),*) -> c_int {
                let f = lookup(&$cache, $c);
                // SAFETY: f is glibc's function with exactly this signature.
                let f: unsafe extern "C" fn($($ty),*) -> c_int = unsafe { core::mem::transmute(f) };
                // SAFETY: the caller guarantees what glibc's function requires.
                unsafe { f($($arg),*) }
            }
        )*

        /// Resolves every function now (from the constructor), so that no
        /// forwarded call runs dlsym while the program holds locks.
        pub fn resolve_all() {
            $( lookup(&$cache, $c); )*
        }
    };
}

real! {
    mutex_init, MUTEX_INIT = c"pthread_mutex_init": fn(m: *mut pthread_mutex_t, a: *const pthread_mutexattr_t);
    mutex_destroy, MUTEX_DESTROY = c"pthread_mutex_destroy": fn(m: *mut pthread_mutex_t);
    mutex_lock, MUTEX_LOCK = c"pthread_mutex_lock": fn(m: *mut pthread_mutex_t);
    mutex_trylock, MUTEX_TRYLOCK = c"pthread_mutex_trylock": fn(m: *mut pthread_mutex_t);
    mutex_timedlock, MUTEX_TIMEDLOCK = c"pthread_mutex_timedlock": fn(m: *mut pthread_mutex_t, t: *const timespec);
    mutex_clocklock, MUTEX_CLOCKLOCK = c"pthread_mutex_clocklock": fn(m: *mut pthread_mutex_t, c: clockid_t, t: *const timespec);
    mutex_unlock, MUTEX_UNLOCK = c"pthread_mutex_unlock": fn(m: *mut pthread_mutex_t);
}
