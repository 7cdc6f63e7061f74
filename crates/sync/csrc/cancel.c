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

/* futex(word, op, val, ts, NULL, bitset) as a cancellation point. Returns 0
 * or -errno. */
long vsched_futex_wait_cancelable(uint32_t *word, int op, uint32_t val,
                                  const struct timespec *ts, uint32_t bitset,
                                  vsched_cleanup_fn cleanup, void *arg)
{
    long rc;
    int old_type;
    int saved_errno = errno; /* pthread functions leave errno alone */
    pthread_cleanup_push(cleanup, arg);
    /* Acts on a cancellation that is already pending. */
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &old_type);
    rc = syscall(SYS_futex, word, op, val, ts, NULL, bitset);
    if (rc < 0)
        rc = -errno;
    errno = saved_errno;
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
