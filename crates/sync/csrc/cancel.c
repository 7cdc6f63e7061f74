/* Cancellation points of the interposed waits (pthread_cond_wait, sem_wait,
 * ...). glibc makes a blocking futex call cancellable by switching the thread
 * to asynchronous cancellation around it and registering a cleanup handler
 * that restores the primitive's state; Rust has no pthread_cleanup_push, so
 * these two small helpers do it in C. Compiled with -fexceptions so that the
 * forced unwind of a cancellation runs the handler and passes through. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

typedef void (*vsched_cleanup_fn)(void *);

/* futex(word, op, val, ts, NULL, bitset): 0 or -errno, errno untouched
 * (pthread functions leave errno alone). */
static long futex_keeping_errno(uint32_t *word, int op, uint32_t val,
                                const struct timespec *ts, uint32_t bitset)
{
    int saved_errno = errno;
    long rc = syscall(SYS_futex, word, op, val, ts, NULL, bitset);
    if (rc < 0)
        rc = -errno;
    errno = saved_errno;
    return rc;
}

/* The futex wait as a cancellation point, if cancellation is enabled.
 * Returns 0 or -errno. */
long vsched_futex_wait_cancelable(uint32_t *word, int op, uint32_t val,
                                  const struct timespec *ts, uint32_t bitset,
                                  vsched_cleanup_fn cleanup, void *arg)
{
    long rc;
    int old_type, old_state;
    /* With cancellation disabled the wait is no cancellation point, and the
     * thread must not switch to asynchronous cancellation either: glibc
     * 2.34-2.36's SIGCANCEL handler looks at the type only, so a signal that
     * pthread_cancel sent while the thread waited with cancellation enabled,
     * and that arrives late (the canceller was preempted between deciding
     * and sending), would cancel the thread here, holding whatever it holds.
     * Seen in the stress test: a consumer died owning a mutex. */
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old_state);
    if (old_state == PTHREAD_CANCEL_DISABLE)
        return futex_keeping_errno(word, op, val, ts, bitset);
    pthread_setcancelstate(old_state, NULL);
    pthread_cleanup_push(cleanup, arg);
    /* Acts on a cancellation that is already pending. */
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &old_type);
    rc = futex_keeping_errno(word, op, val, ts, bitset);
    pthread_setcanceltype(old_type, NULL);
    pthread_cleanup_pop(0);
    return rc;
}

/* pthread_testcancel with a cleanup handler, for waits that yield instead
 * of sleeping. */
void vsched_testcancel(vsched_cleanup_fn cleanup, void *arg)
{
    pthread_cleanup_push(cleanup, arg);
    pthread_testcancel();
    pthread_cleanup_pop(0);
}
