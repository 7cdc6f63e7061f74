/*
 * semantics.c -- POSIX semantics and error-path tests for the pthread and
 * unnamed-semaphore primitives that libvsched_sync.so interposes.
 *
 * The reference is glibc 2.36 on Linux x86_64: every assertion here must
 * hold when the program runs against plain glibc.  Where POSIX leaves a
 * choice open and glibc makes one, the test says so in a comment and, unless
 * real programs depend on the choice, accepts either behaviour.
 *
 * Build:  cc -O2 -pthread -o semantics semantics.c -ldl
 * Run:    ./semantics [NAME-SUBSTRING...]      (no argument: every case)
 *         ./semantics -l                        (list the case names)
 *         (./semantics --pinned-idle-waits is internal: a case re-executes
 *         the program with it)
 *
 * Every case runs in its own forked child process with an alarm() watchdog,
 * so a hang or a crash in one case is reported as that case's failure and
 * the others still run.  The parent is single-threaded when it forks.
 *
 * Output: one line per case, "ok NAME" or "FAIL NAME: detail" (a skipped
 * case prints "ok NAME # SKIP reason"), then a summary comment line and a
 * final line "loaded=1" or "loaded=0" telling whether the symbol
 * vsched_sync_version is visible (i.e. whether the preload library is in the
 * process).  The exit status is 0 only if every case passed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Harness                                                                   */
/* ------------------------------------------------------------------------ */

#define CASE_TIMEOUT_S 8     /* per-case watchdog (alarm) */
#define EXIT_REPORTED 3      /* child exit code: FAIL line already printed */
#define EXIT_SKIPPED 4       /* child exit code: SKIP line already printed */

#define MS 1000000LL         /* nanoseconds per millisecond */
#define EARLY_NS (1 * MS)    /* a timed wait may not return earlier than this before its deadline */
#define LATE_NS (2500 * MS)  /* ... nor later than this after it (noisy 2-vCPU VM) */
#define PROMPT_NS (1000 * MS)/* an immediate error return must come within this */
#define SHORT_MS 50          /* the timeout used by "times out" cases */

static const char *g_case = "?";

static const char *errname(int e)
{
    if (e == 0)
        return "0";
    const char *n = strerrorname_np(e);
    return n ? n : "E???";
}

static void fail_at(int line, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
static void fail_at(int line, const char *fmt, ...)
{
    char buf[600];
    va_list ap;
    /* printf is a cancellation point: a pending cancel must not eat the report */
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    printf("FAIL %s: line %d: %s\n", g_case, line, buf);
    fflush(stdout);
    _exit(EXIT_REPORTED); /* from any thread: ends the whole case process */
}

static void skip_case(const char *why) __attribute__((noreturn));
static void skip_case(const char *why)
{
    printf("ok %s # SKIP %s\n", g_case, why);
    fflush(stdout);
    _exit(EXIT_SKIPPED);
}

#define CHECK(c, ...)                                                          \
    do {                                                                       \
        if (!(c))                                                              \
            fail_at(__LINE__, __VA_ARGS__);                                    \
    } while (0)

/* pthread_* convention: the return value is the error number. */
#define EXPECT(expr, want)                                                     \
    do {                                                                       \
        int rc_ = (expr), w_ = (want);                                         \
        if (rc_ != w_)                                                         \
            fail_at(__LINE__, "%s returned %s, expected %s", #expr,           \
                    errname(rc_), errname(w_));                                \
    } while (0)

/* sem_* convention: 0 on success, or -1 with the error in errno. */
#define EXPECT_SEM(expr, want_errno)                                           \
    do {                                                                       \
        errno = 0;                                                             \
        int rc_ = (expr), e_ = errno, w_ = (want_errno);                       \
        if (w_ == 0 ? rc_ != 0 : (rc_ != -1 || e_ != w_))                      \
            fail_at(__LINE__, "%s returned %d (errno %s), expected %s%s",     \
                    #expr, rc_, errname(e_), w_ ? "-1 with errno " : "0",      \
                    w_ ? errname(w_) : "");                                    \
    } while (0)

/* ---- time ---- */

static int64_t now_ns(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int64_t ts_ns(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000LL + t->tv_nsec;
}

static struct timespec ts_make(time_t sec, long nsec)
{
    struct timespec t;
    t.tv_sec = sec;
    t.tv_nsec = nsec;
    return t;
}

static struct timespec ts_from_ns(int64_t ns)
{
    return ts_make((time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL));
}

/* Absolute deadline `ms` milliseconds from now on clock `c` (negative: past). */
static struct timespec in_ms(clockid_t c, int ms)
{
    return ts_from_ns(now_ns(c) + (int64_t)ms * MS);
}
static struct timespec rt_in(int ms) { return in_ms(CLOCK_REALTIME, ms); }
static struct timespec mono_in(int ms) { return in_ms(CLOCK_MONOTONIC, ms); }

/* Far-future deadlines that must mean "wait until woken", not overflow. */
static struct timespec far_future(void) { return ts_make((time_t)LONG_MAX, 0); }

static void sleep_ms(int ms)
{
    struct timespec t = ts_make(ms / 1000, (long)(ms % 1000) * 1000000L);
    while (nanosleep(&t, &t) == -1 && errno == EINTR)
        ;
}

/* A timed wait that reported a timeout must have returned at/after its
 * deadline, measured on the clock the deadline refers to, and not absurdly
 * later. */
#define CHECK_DEADLINE(clk, dl)                                                \
    do {                                                                       \
        int64_t n_ = now_ns(clk), d_ = ts_ns(&(dl));                           \
        CHECK(n_ >= d_ - EARLY_NS, "timed out %.3f ms BEFORE its deadline",    \
              (double)(d_ - n_) / 1e6);                                        \
        CHECK(n_ <= d_ + LATE_NS, "timed out %.3f ms after its deadline",      \
              (double)(n_ - d_) / 1e6);                                        \
    } while (0)

/* The statement(s) must complete promptly (an immediate error return). */
#define PROMPTLY(stmt)                                                         \
    do {                                                                       \
        int64_t s_ = now_ns(CLOCK_MONOTONIC);                                  \
        stmt;                                                                  \
        int64_t e_ = now_ns(CLOCK_MONOTONIC) - s_;                             \
        CHECK(e_ <= PROMPT_NS, "%s took %.1f ms, expected an immediate return", \
              #stmt, (double)e_ / 1e6);                                        \
    } while (0)

/* ---- threads ---- */

static pthread_t spawn(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    int rc = pthread_create(&t, NULL, fn, arg);
    CHECK(rc == 0, "pthread_create: %s", errname(rc));
    return t;
}

static void *join(pthread_t t)
{
    void *r;
    int rc = pthread_join(t, &r);
    CHECK(rc == 0, "pthread_join: %s", errname(rc));
    return r;
}

/* Run fn(arg) on a fresh thread and return its int result: for checking
 * what a call does when made by a thread other than the owner. */
typedef int (*opfn)(void *);
struct call { opfn fn; void *arg; };
static void *call_tramp(void *p)
{
    struct call *c = p;
    return (void *)(intptr_t)c->fn(c->arg);
}
static int in_thread(opfn fn, void *arg)
{
    struct call c = {fn, arg};
    return (int)(intptr_t)join(spawn(call_tramp, &c));
}

/* Poll until *v >= want; 1 if reached within ms milliseconds. */
static int wait_flag(atomic_int *v, int want, int ms)
{
    int64_t end = now_ns(CLOCK_MONOTONIC) + (int64_t)ms * MS;
    while (atomic_load(v) < want) {
        if (now_ns(CLOCK_MONOTONIC) > end)
            return 0;
        sleep_ms(1);
    }
    return 1;
}

/* Wait until an int protected by mutex m reaches want (used to know that
 * cond waiters are really inside pthread_cond_wait: they bump the counter
 * under the mutex and the wait releases it atomically). */
static int wait_locked_count(pthread_mutex_t *m, int *v, int want, int ms)
{
    int64_t end = now_ns(CLOCK_MONOTONIC) + (int64_t)ms * MS;
    for (;;) {
        EXPECT(pthread_mutex_lock(m), 0);
        int x = *v;
        EXPECT(pthread_mutex_unlock(m), 0);
        if (x >= want)
            return 1;
        if (now_ns(CLOCK_MONOTONIC) > end)
            return 0;
        sleep_ms(1);
    }
}

/* Thread-exit state without joining: EBUSY while the thread still runs. */
static int still_running(pthread_t t)
{
    void *r;
    int rc = pthread_tryjoin_np(t, &r);
    CHECK(rc == EBUSY, "thread finished early (tryjoin %s)", errname(rc));
    return 1;
}

/* ---- signals (for the "not EINTR" cases) ---- */

static atomic_int g_sigs;
static void on_sigusr1(int s)
{
    (void)s;
    atomic_fetch_add(&g_sigs, 1);
}
static void install_sigusr1(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigusr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: interrupted syscalls see EINTR */
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");
}
/* Pelt thread t with n signals while it is (presumably) blocked. */
static void pelt(pthread_t t, int n)
{
    for (int i = 0; i < n; i++) {
        EXPECT(pthread_kill(t, SIGUSR1), 0);
        sleep_ms(2);
    }
}

/* ---- process-shared memory and child processes ---- */

static void *shared_alloc(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED, "mmap: %s", strerror(errno));
    memset(p, 0, n);
    return p;
}

static pid_t fork_child(void)
{
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0)
        alarm(CASE_TIMEOUT_S); /* alarms are not inherited */
    return pid;
}

/* Reap a child of this case; a failure it reported is the case's failure. */
static void wait_child(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) == -1)
        CHECK(errno == EINTR, "waitpid: %s", strerror(errno));
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return;
    if (WIFEXITED(st) && WEXITSTATUS(st) == EXIT_REPORTED)
        _exit(EXIT_REPORTED); /* the child printed the FAIL line */
    if (WIFEXITED(st))
        fail_at(__LINE__, "child process exited with status %d", WEXITSTATUS(st));
    fail_at(__LINE__, "child process killed by signal %d (%s)", WTERMSIG(st),
            strsignal(WTERMSIG(st)));
}

/* ---- tracing a thread of a child process (ptrace) ----
 *
 * A few cases stop one thread of a child process at a chosen point of a
 * call, from the case's own process (the child's parent, so no ptrace
 * permission beyond the default is needed), and let other threads act
 * meanwhile: what an unlucky preemption there would do, made certain.
 * The thread brackets the call with trace_mark(); where the case cannot
 * trace, it is skipped. */
static void mark_nothing(int s) { (void)s; }
static void install_mark_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = mark_nothing;
    CHECK(sigaction(SIGUSR2, &sa, NULL) == 0, "sigaction");
}
static void trace_mark(void)
{
    syscall(SYS_tgkill, getpid(), (pid_t)syscall(SYS_gettid), SIGUSR2);
}

/* Shared between a traced child and its tracer. */
struct midcall {
    atomic_int tid;      /* child: the thread to trace */
    atomic_int attached; /* tracer: 1 attached, -1 cannot trace */
    atomic_int stopped;  /* tracer: 1 stopped at the call's first system call,
                          * 2 the call made none */
    atomic_int go_on;    /* child: let the call go on */
    atomic_int done;     /* tracer: the call returned and the thread is let go */
};
/* Child side: publish this thread and wait for the tracer; 1 if traced. */
static int midcall_ready(struct midcall *mc)
{
    atomic_store(&mc->tid, (int)syscall(SYS_gettid));
    while (atomic_load(&mc->attached) == 0)
        sleep_ms(1);
    return atomic_load(&mc->attached) > 0;
}
/* Tracer side: stop the marked call of child `pid` when it enters its first
 * system call, hold it there until mc->go_on, then let it finish.  Skips the
 * case (after reaping the child) if it cannot trace. */
static void midcall_trace(struct midcall *mc, pid_t pid)
{
    int tid;
    int64_t end = now_ns(CLOCK_MONOTONIC) + 5000 * MS;
    while ((tid = atomic_load(&mc->tid)) == 0) {
        CHECK(now_ns(CLOCK_MONOTONIC) < end, "the child did not get ready");
        sleep_ms(1);
    }
    if (ptrace(PTRACE_SEIZE, tid, 0, (void *)(long)PTRACE_O_TRACESYSGOOD) != 0) {
        int e = errno;
        atomic_store(&mc->attached, -1);
        wait_child(pid);
        char why[100];
        snprintf(why, sizeof why, "cannot ptrace a thread of a child process: %s", strerror(e));
        skip_case(why);
    }
    atomic_store(&mc->attached, 1);
    int st, inject = 0, marks = 0, syscall_stop = 0;
    long req = PTRACE_CONT; /* to the first mark */
    for (;;) {
        CHECK(waitpid(tid, &st, __WALL) == tid, "waitpid: %s", strerror(errno));
        if (!WIFSTOPPED(st))
            return; /* the child died: wait_child() says how */
        int sig = WSTOPSIG(st);
        if (sig == (SIGTRAP | 0x80)) {
            struct __ptrace_syscall_info si;
            memset(&si, 0, sizeof si);
            if (ptrace(PTRACE_GET_SYSCALL_INFO, tid, (void *)sizeof si, &si) <= 0) {
                si.op = PTRACE_SYSCALL_INFO_ENTRY; /* before Linux 5.3: take it as the call's */
                si.entry.nr = (uint64_t)-1;
            }
            if (si.op == PTRACE_SYSCALL_INFO_ENTRY && !syscall_stop) {
                syscall_stop = 1;
                if (si.entry.nr == SYS_tgkill) {
                    atomic_store(&mc->stopped, 2); /* the closing mark */
                } else {
                    atomic_store(&mc->stopped, 1);
                    end = now_ns(CLOCK_MONOTONIC) + 6000 * MS;
                    while (!atomic_load(&mc->go_on)) {
                        CHECK(now_ns(CLOCK_MONOTONIC) < end, "the child did not let the call go on");
                        sleep_ms(1);
                    }
                }
            }
            req = PTRACE_CONT;
        } else if (sig == SIGUSR2) {
            if (++marks == 2)
                break;
            req = PTRACE_SYSCALL; /* the call starts */
        } else {
            inject = sig; /* not ours: deliver it */
        }
        CHECK(ptrace(req, tid, 0, (void *)(long)inject) == 0, "ptrace: %s", strerror(errno));
        inject = 0;
    }
    CHECK(ptrace(PTRACE_DETACH, tid, 0, 0) == 0, "ptrace detach: %s", strerror(errno));
    if (!atomic_load(&mc->stopped))
        atomic_store(&mc->stopped, 2);
    atomic_store(&mc->done, 1);
}

/* ---- operation wrappers for in_thread() ---- */

enum op { LOCK, TRY, TIMED, CLOCK, UNLOCK, RD, WR, TRYRD, TRYWR, TIMEDRD,
          TIMEDWR, CLOCKRD, CLOCKWR };

struct mop {           /* a mutex operation */
    pthread_mutex_t *m;
    enum op k;
    struct timespec ts;
    clockid_t clk;
    int unlock_if_ok;  /* release again on success (so the thread can exit) */
};
static int mop_do(void *p)
{
    struct mop *o = p;
    int rc = EINVAL;
    switch (o->k) {
    case LOCK: rc = pthread_mutex_lock(o->m); break;
    case TRY: rc = pthread_mutex_trylock(o->m); break;
    case TIMED: rc = pthread_mutex_timedlock(o->m, &o->ts); break;
    case CLOCK: rc = pthread_mutex_clocklock(o->m, o->clk, &o->ts); break;
    case UNLOCK: rc = pthread_mutex_unlock(o->m); break;
    default: fail_at(__LINE__, "bad mutex op");
    }
    if (rc == 0 && o->unlock_if_ok && o->k != UNLOCK)
        EXPECT(pthread_mutex_unlock(o->m), 0);
    return rc;
}
/* Mutex op on another thread; on success the lock is released again. */
static int mutex_other(pthread_mutex_t *m, enum op k, struct timespec ts, clockid_t clk)
{
    struct mop o = {m, k, ts, clk, 1};
    return in_thread(mop_do, &o);
}
static struct timespec NO_TS; /* placeholder for ops without a deadline */

struct rwop {          /* an rwlock operation */
    pthread_rwlock_t *l;
    enum op k;
    struct timespec ts;
    clockid_t clk;
    int unlock_if_ok;
};
static int rw_do(void *p)
{
    struct rwop *o = p;
    int rc = EINVAL;
    switch (o->k) {
    case RD: rc = pthread_rwlock_rdlock(o->l); break;
    case WR: rc = pthread_rwlock_wrlock(o->l); break;
    case TRYRD: rc = pthread_rwlock_tryrdlock(o->l); break;
    case TRYWR: rc = pthread_rwlock_trywrlock(o->l); break;
    case TIMEDRD: rc = pthread_rwlock_timedrdlock(o->l, &o->ts); break;
    case TIMEDWR: rc = pthread_rwlock_timedwrlock(o->l, &o->ts); break;
    case CLOCKRD: rc = pthread_rwlock_clockrdlock(o->l, o->clk, &o->ts); break;
    case CLOCKWR: rc = pthread_rwlock_clockwrlock(o->l, o->clk, &o->ts); break;
    case UNLOCK: rc = pthread_rwlock_unlock(o->l); break;
    default: fail_at(__LINE__, "bad rwlock op");
    }
    if (rc == 0 && o->unlock_if_ok && o->k != UNLOCK)
        EXPECT(pthread_rwlock_unlock(o->l), 0);
    return rc;
}
static int rw_other(pthread_rwlock_t *l, enum op k, struct timespec ts, clockid_t clk)
{
    struct rwop o = {l, k, ts, clk, 1};
    return in_thread(rw_do, &o);
}

static int op_spin_trylock(void *p) { return pthread_spin_trylock(p); }
static int op_spin_unlock(void *p) { return pthread_spin_unlock(p); }

/* ---- a helper thread that holds a lock until told to release it ---- */

enum hold_kind { H_MUTEX, H_RD, H_WR, H_SPIN, H_SEM_ZERO };
struct holder {
    enum hold_kind kind;
    void *obj;
    int auto_release_ms;  /* >0: release by itself after this long */
    atomic_int held, release;
    pthread_t t;
};
static void *holder_main(void *p)
{
    struct holder *h = p;
    int rc = EINVAL;
    switch (h->kind) {
    case H_MUTEX: rc = pthread_mutex_lock(h->obj); break;
    case H_RD: rc = pthread_rwlock_rdlock(h->obj); break;
    case H_WR: rc = pthread_rwlock_wrlock(h->obj); break;
    case H_SPIN: rc = pthread_spin_lock(h->obj); break;
    default: break;
    }
    CHECK(rc == 0, "holder thread could not acquire: %s", errname(rc));
    atomic_store(&h->held, 1);
    if (h->auto_release_ms > 0)
        sleep_ms(h->auto_release_ms);
    else
        while (!atomic_load(&h->release))
            sleep_ms(1);
    switch (h->kind) {
    case H_MUTEX: rc = pthread_mutex_unlock(h->obj); break;
    case H_RD: case H_WR: rc = pthread_rwlock_unlock(h->obj); break;
    case H_SPIN: rc = pthread_spin_unlock(h->obj); break;
    default: break;
    }
    CHECK(rc == 0, "holder thread could not release: %s", errname(rc));
    return NULL;
}
/* Start a holder and return once it holds the lock. */
static void hold(struct holder *h, enum hold_kind kind, void *obj, int auto_release_ms)
{
    memset(h, 0, sizeof *h);
    h->kind = kind;
    h->obj = obj;
    h->auto_release_ms = auto_release_ms;
    h->t = spawn(holder_main, h);
    CHECK(wait_flag(&h->held, 1, 3000), "holder thread never acquired the lock");
}
static void unhold(struct holder *h)
{
    atomic_store(&h->release, 1);
    join(h->t);
}

static void mutex_init_type(pthread_mutex_t *m, int type)
{
    pthread_mutexattr_t a;
    EXPECT(pthread_mutexattr_init(&a), 0);
    EXPECT(pthread_mutexattr_settype(&a, type), 0);
    EXPECT(pthread_mutex_init(m, &a), 0);
    EXPECT(pthread_mutexattr_destroy(&a), 0);
}

/* An errorcheck mutex is held by the caller iff relocking says EDEADLK. */
#define ASSERT_OWNED(m) EXPECT(pthread_mutex_lock(m), EDEADLK)

/* Shared mutual-exclusion hammer: nthreads x iters critical sections on a
 * mutex, with a detector for two threads inside at once.  Uses lock,
 * trylock-spin and timedlock in rotation. */
struct hammer {
    pthread_mutex_t *m;
    int iters;
    atomic_int inside;
    long counter;      /* plain, protected by m */
};
static void *hammer_main(void *p)
{
    struct hammer *h = p;
    for (int i = 0; i < h->iters; i++) {
        int rc;
        switch (i % 4) {
        case 0: case 1: rc = pthread_mutex_lock(h->m); break;
        case 2:
            while ((rc = pthread_mutex_trylock(h->m)) == EBUSY)
                sched_yield();
            break;
        default: {
            struct timespec ts = rt_in(5000);
            rc = pthread_mutex_timedlock(h->m, &ts);
        }
        }
        CHECK(rc == 0, "lock in hammer: %s", errname(rc));
        CHECK(atomic_exchange(&h->inside, 1) == 0, "two threads inside the critical section");
        h->counter++;
        atomic_store(&h->inside, 0);
        EXPECT(pthread_mutex_unlock(h->m), 0);
    }
    return NULL;
}
static void hammer_mutex(pthread_mutex_t *m, int nthreads, int iters)
{
    struct hammer h = {.m = m, .iters = iters};
    pthread_t t[16];
    for (int i = 0; i < nthreads; i++)
        t[i] = spawn(hammer_main, &h);
    for (int i = 0; i < nthreads; i++)
        join(t[i]);
    CHECK(h.counter == (long)nthreads * iters, "counter %ld, expected %ld (lost update)",
          h.counter, (long)nthreads * iters);
}

/* ------------------------------------------------------------------------ */
/* Mutex cases                                                               */
/* ------------------------------------------------------------------------ */

static void mutex_basic(void)
{
    pthread_mutex_t m;
    EXPECT(pthread_mutex_init(&m, NULL), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_mutex_trylock(&m), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    struct timespec ts = rt_in(1000);
    EXPECT(pthread_mutex_timedlock(&m, &ts), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_mutex_destroy(&m), 0);
    /* destroyed mutexes may be re-initialised and used again */
    EXPECT(pthread_mutex_init(&m, NULL), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_mutex_destroy(&m), 0);
}

static void mutex_trylock_ebusy(void)
{
    pthread_mutex_t m;
    EXPECT(pthread_mutex_init(&m, NULL), 0);
    EXPECT(pthread_mutex_trylock(&m), 0);
    EXPECT(mutex_other(&m, TRY, NO_TS, 0), EBUSY);
    EXPECT(pthread_mutex_trylock(&m), EBUSY); /* the owner too: not recursive */
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(mutex_other(&m, TRY, NO_TS, 0), 0);
    struct holder h;
    hold(&h, H_MUTEX, &m, 0);
    EXPECT(pthread_mutex_trylock(&m), EBUSY);
    unhold(&h);
    EXPECT(pthread_mutex_trylock(&m), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_mutex_destroy(&m), 0);
}

static void mutex_errorcheck(void)
{
    pthread_mutex_t m;
    mutex_init_type(&m, PTHREAD_MUTEX_ERRORCHECK);
    EXPECT(pthread_mutex_unlock(&m), EPERM); /* not locked */
    EXPECT(pthread_mutex_lock(&m), 0);
    EXPECT(pthread_mutex_lock(&m), EDEADLK);
    EXPECT(pthread_mutex_trylock(&m), EBUSY); /* glibc: trylock by the owner is EBUSY */
    struct timespec ts = rt_in(2000);
    PROMPTLY(EXPECT(pthread_mutex_timedlock(&m, &ts), EDEADLK));
    ts = mono_in(2000);
    PROMPTLY(EXPECT(pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &ts), EDEADLK));
    EXPECT(mutex_other(&m, UNLOCK, NO_TS, 0), EPERM); /* not the owner */
    EXPECT(mutex_other(&m, TRY, NO_TS, 0), EBUSY);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_mutex_unlock(&m), EPERM);
    struct holder h;
    hold(&h, H_MUTEX, &m, 0);
    EXPECT(pthread_mutex_unlock(&m), EPERM); /* held by another thread */
    unhold(&h);
    EXPECT(pthread_mutex_destroy(&m), 0);
}

struct blocked_locker { pthread_mutex_t *m; atomic_int got; };
static void *blocked_locker_main(void *p)
{
    struct blocked_locker *b = p;
    EXPECT(pthread_mutex_lock(b->m), 0);
    atomic_store(&b->got, 1);
    EXPECT(pthread_mutex_unlock(b->m), 0);
    return NULL;
}

static void mutex_recursive_counting(void)
{
    pthread_mutex_t m;
    mutex_init_type(&m, PTHREAD_MUTEX_RECURSIVE);
    EXPECT(pthread_mutex_unlock(&m), EPERM); /* not locked */
    /* lock three times, with three different entry points */
    EXPECT(pthread_mutex_lock(&m), 0);
    EXPECT(pthread_mutex_trylock(&m), 0);
    struct timespec ts = rt_in(2000);
    EXPECT(pthread_mutex_timedlock(&m, &ts), 0);
    EXPECT(mutex_other(&m, UNLOCK, NO_TS, 0), EPERM); /* not the owner */
    EXPECT(mutex_other(&m, TRY, NO_TS, 0), EBUSY);
    /* a blocked locker may only get in after the third unlock */
    struct blocked_locker b = {.m = &m};
    pthread_t t = spawn(blocked_locker_main, &b);
    sleep_ms(30);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(mutex_other(&m, TRY, NO_TS, 0), EBUSY);
    sleep_ms(20);
    CHECK(atomic_load(&b.got) == 0, "another thread got the mutex with count 2 left");
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(mutex_other(&m, TRY, NO_TS, 0), EBUSY);
    sleep_ms(20);
    CHECK(atomic_load(&b.got) == 0, "another thread got the mutex with count 1 left");
    EXPECT(pthread_mutex_unlock(&m), 0);
    join(t);
    CHECK(atomic_load(&b.got) == 1, "blocked locker never got the mutex");
    EXPECT(pthread_mutex_unlock(&m), EPERM); /* fourth unlock: not owned any more */
    struct holder h;
    hold(&h, H_MUTEX, &m, 0);
    EXPECT(pthread_mutex_unlock(&m), EPERM);
    EXPECT(pthread_mutex_trylock(&m), EBUSY);
    unhold(&h);
    EXPECT(pthread_mutex_destroy(&m), 0);
}

static void mutex_timedlock_past_deadline(void)
{
    pthread_mutex_t m;
    EXPECT(pthread_mutex_init(&m, NULL), 0);
    /* A past deadline never prevents taking a free mutex (POSIX). */
    struct timespec past = rt_in(-1000);
    EXPECT(pthread_mutex_timedlock(&m, &past), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    struct timespec zero = ts_make(0, 0);
    EXPECT(pthread_mutex_timedlock(&m, &zero), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    /* held by another thread: immediate ETIMEDOUT */
    struct holder h;
    hold(&h, H_MUTEX, &m, 0);
    PROMPTLY(EXPECT(pthread_mutex_timedlock(&m, &past), ETIMEDOUT));
    PROMPTLY(EXPECT(pthread_mutex_timedlock(&m, &zero), ETIMEDOUT));
    struct timespec neg = ts_make(-1, 0);
    PROMPTLY(EXPECT(pthread_mutex_timedlock(&m, &neg), ETIMEDOUT));
    struct timespec mpast = mono_in(-1000);
    PROMPTLY(EXPECT(pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &mpast), ETIMEDOUT));
    unhold(&h);
    EXPECT(pthread_mutex_destroy(&m), 0);
}

static void mutex_timedlock_einval(void)
{
    pthread_mutex_t m;
    EXPECT(pthread_mutex_init(&m, NULL), 0);
    struct holder h;
    hold(&h, H_MUTEX, &m, 0);
    time_t s = (time_t)(now_ns(CLOCK_REALTIME) / 1000000000LL) + 2;
    struct timespec big = ts_make(s, 1000000000L), neg = ts_make(s, -1);
    PROMPTLY(EXPECT(pthread_mutex_timedlock(&m, &big), EINVAL));
    PROMPTLY(EXPECT(pthread_mutex_timedlock(&m, &neg), EINVAL));
    time_t ms = (time_t)(now_ns(CLOCK_MONOTONIC) / 1000000000LL) + 2;
    big = ts_make(ms, 1000000000L);
    neg = ts_make(ms, -1);
    PROMPTLY(EXPECT(pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &big), EINVAL));
    PROMPTLY(EXPECT(pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &neg), EINVAL));
    unhold(&h);
    EXPECT(pthread_mutex_destroy(&m), 0);
}

static void mutex_timedlock_times_out(void)
{
    pthread_mutex_t m;
    EXPECT(pthread_mutex_init(&m, NULL), 0);
    struct holder h;
    hold(&h, H_MUTEX, &m, 0);
    struct timespec dl = rt_in(SHORT_MS);
    EXPECT(pthread_mutex_timedlock(&m, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_REALTIME, dl);
    unhold(&h);
    EXPECT(pthread_mutex_destroy(&m), 0);
}

static void mutex_timedlock_acquires_on_release(void)
{
    pthread_mutex_t m;
    EXPECT(pthread_mutex_init(&m, NULL), 0);
    struct holder h;
    hold(&h, H_MUTEX, &m, 50);  /* releases by itself after 50 ms */
    struct timespec dl = rt_in(5000);
    EXPECT(pthread_mutex_timedlock(&m, &dl), 0);
    CHECK(now_ns(CLOCK_REALTIME) < ts_ns(&dl), "acquired only at the deadline");
    EXPECT(pthread_mutex_unlock(&m), 0);
    join(h.t);
    /* the same with a far-future deadline, which must not overflow into
     * an immediate timeout */
    hold(&h, H_MUTEX, &m, 50);
    struct timespec ff = far_future();
    EXPECT(pthread_mutex_timedlock(&m, &ff), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    join(h.t);
    hold(&h, H_MUTEX, &m, 50);
    ff = ts_make((time_t)INT_MAX, 999999999L);
    EXPECT(pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &ff), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    join(h.t);
    EXPECT(pthread_mutex_destroy(&m), 0);
}

static void mutex_clocklock(void)
{
    pthread_mutex_t m;
    EXPECT(pthread_mutex_init(&m, NULL), 0);
    /* free mutex */
    struct timespec dl = mono_in(1000);
    EXPECT(pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &dl), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    dl = rt_in(1000);
    EXPECT(pthread_mutex_clocklock(&m, CLOCK_REALTIME, &dl), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    struct holder h;
    hold(&h, H_MUTEX, &m, 0);
    /* A deadline is read on the named clock.  Confusing the clocks either
     * returns at once (monotonic read as realtime: long past) or hangs
     * (realtime read as monotonic: decades ahead). */
    dl = mono_in(SHORT_MS);
    EXPECT(pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_MONOTONIC, dl);
    dl = rt_in(SHORT_MS);
    EXPECT(pthread_mutex_clocklock(&m, CLOCK_REALTIME, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_REALTIME, dl);
    unhold(&h);
    /* acquired when the holder lets go before the monotonic deadline */
    hold(&h, H_MUTEX, &m, 50);
    dl = mono_in(5000);
    EXPECT(pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &dl), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    join(h.t);
    EXPECT(pthread_mutex_destroy(&m), 0);
}

static void mutex_clocklock_invalid_clock(void)
{
    pthread_mutex_t m;
    EXPECT(pthread_mutex_init(&m, NULL), 0);
    struct timespec dl = mono_in(1000);
    /* glibc checks the clock before looking at the lock: EINVAL even when
     * the mutex is free. */
    PROMPTLY(EXPECT(pthread_mutex_clocklock(&m, CLOCK_PROCESS_CPUTIME_ID, &dl), EINVAL));
    PROMPTLY(EXPECT(pthread_mutex_clocklock(&m, (clockid_t)12345, &dl), EINVAL));
    EXPECT(pthread_mutex_trylock(&m), 0); /* and did not take it */
    EXPECT(pthread_mutex_unlock(&m), 0);
    struct holder h;
    hold(&h, H_MUTEX, &m, 0);
    PROMPTLY(EXPECT(pthread_mutex_clocklock(&m, CLOCK_THREAD_CPUTIME_ID, &dl), EINVAL));
    PROMPTLY(EXPECT(pthread_mutex_clocklock(&m, (clockid_t)-7, &dl), EINVAL));
    unhold(&h);
    EXPECT(pthread_mutex_destroy(&m), 0);
}

static pthread_mutex_t s_normal = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t s_recursive = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_mutex_t s_errorcheck = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
static pthread_mutex_t s_adaptive = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;

static void mutex_static_initializers(void)
{
    EXPECT(pthread_mutex_lock(&s_normal), 0);
    EXPECT(mutex_other(&s_normal, TRY, NO_TS, 0), EBUSY);
    EXPECT(pthread_mutex_trylock(&s_normal), EBUSY);
    EXPECT(pthread_mutex_unlock(&s_normal), 0);

    EXPECT(pthread_mutex_lock(&s_recursive), 0);
    EXPECT(pthread_mutex_lock(&s_recursive), 0);
    EXPECT(mutex_other(&s_recursive, TRY, NO_TS, 0), EBUSY);
    EXPECT(pthread_mutex_unlock(&s_recursive), 0);
    EXPECT(pthread_mutex_unlock(&s_recursive), 0);
    EXPECT(pthread_mutex_unlock(&s_recursive), EPERM);

    EXPECT(pthread_mutex_lock(&s_errorcheck), 0);
    EXPECT(pthread_mutex_lock(&s_errorcheck), EDEADLK);
    EXPECT(mutex_other(&s_errorcheck, UNLOCK, NO_TS, 0), EPERM);
    EXPECT(pthread_mutex_unlock(&s_errorcheck), 0);
    EXPECT(pthread_mutex_unlock(&s_errorcheck), EPERM);

    EXPECT(pthread_mutex_lock(&s_adaptive), 0);
    EXPECT(mutex_other(&s_adaptive, TRY, NO_TS, 0), EBUSY);
    EXPECT(pthread_mutex_unlock(&s_adaptive), 0);

    hammer_mutex(&s_normal, 4, 3000);
    hammer_mutex(&s_recursive, 4, 3000);
    hammer_mutex(&s_errorcheck, 4, 3000);
    hammer_mutex(&s_adaptive, 4, 3000);
}

/* First use of a statically initialised mutex happens from many threads at
 * once: catches lazy-initialisation races in an interposer. */
struct first_use { pthread_mutex_t *m; atomic_int go; long counter; };
static void *first_use_main(void *p)
{
    struct first_use *f = p;
    while (!atomic_load(&f->go))
        ;
    for (int i = 0; i < 200; i++) {
        EXPECT(pthread_mutex_lock(f->m), 0);
        f->counter++;
        EXPECT(pthread_mutex_unlock(f->m), 0);
    }
    return NULL;
}
static void mutex_static_first_use_contended(void)
{
    static const pthread_mutex_t inits[4] = {
        PTHREAD_MUTEX_INITIALIZER, PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP,
        PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP, PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP};
    for (int round = 0; round < 40; round++) {
        pthread_mutex_t *m = malloc(sizeof *m);
        CHECK(m, "malloc");
        *m = inits[round % 4];
        struct first_use f = {.m = m};
        pthread_t t[6];
        for (int i = 0; i < 6; i++)
            t[i] = spawn(first_use_main, &f);
        atomic_store(&f.go, 1);
        for (int i = 0; i < 6; i++)
            join(t[i]);
        CHECK(f.counter == 6 * 200, "round %d: counter %ld, expected %d", round, f.counter, 1200);
        EXPECT(pthread_mutex_destroy(m), 0);
        free(m);
    }
}

static void mutex_zero_initialized(void)
{
    /* All-zero bytes equal PTHREAD_MUTEX_INITIALIZER in glibc; programs
     * rely on it for calloc()ed structures. */
    pthread_mutex_t *m = calloc(1, sizeof *m);
    CHECK(m, "calloc");
    EXPECT(pthread_mutex_lock(m), 0);
    EXPECT(mutex_other(m, TRY, NO_TS, 0), EBUSY);
    EXPECT(pthread_mutex_unlock(m), 0);
    hammer_mutex(m, 4, 3000);
    free(m);
}

static void mutex_destroy_locked_ebusy(void)
{
    static const int types[] = {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_RECURSIVE,
                                PTHREAD_MUTEX_ERRORCHECK, PTHREAD_MUTEX_ADAPTIVE_NP};
    for (unsigned i = 0; i < sizeof types / sizeof types[0]; i++) {
        pthread_mutex_t m;
        mutex_init_type(&m, types[i]);
        EXPECT(pthread_mutex_lock(&m), 0);
        /* glibc: destroying a locked mutex fails with EBUSY, and leaves it
         * intact and still locked. */
        EXPECT(pthread_mutex_destroy(&m), EBUSY);
        EXPECT(mutex_other(&m, TRY, NO_TS, 0), EBUSY);
        EXPECT(pthread_mutex_unlock(&m), 0);
        EXPECT(mutex_other(&m, TRY, NO_TS, 0), 0);
        /* locked by another thread */
        struct holder h;
        hold(&h, H_MUTEX, &m, 0);
        EXPECT(pthread_mutex_destroy(&m), EBUSY);
        unhold(&h);
        EXPECT(pthread_mutex_destroy(&m), 0);
    }
}

static void mutex_mutual_exclusion(void)
{
    static const int types[] = {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_RECURSIVE,
                                PTHREAD_MUTEX_ERRORCHECK, PTHREAD_MUTEX_ADAPTIVE_NP};
    for (unsigned i = 0; i < sizeof types / sizeof types[0]; i++) {
        pthread_mutex_t m;
        mutex_init_type(&m, types[i]);
        hammer_mutex(&m, 6, 10000);
        EXPECT(pthread_mutex_destroy(&m), 0);
    }
}

static void *lock_report_main(void *p)
{
    return (void *)(intptr_t)pthread_mutex_lock(p);
}
static void mutex_lock_not_eintr(void)
{
    /* POSIX: pthread_mutex_lock shall not return EINTR. */
    install_sigusr1();
    pthread_mutex_t m;
    EXPECT(pthread_mutex_init(&m, NULL), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    pthread_t t = spawn(lock_report_main, &m);
    sleep_ms(30);
    pelt(t, 20);
    still_running(t);
    EXPECT(pthread_mutex_unlock(&m), 0);
    int rc = (int)(intptr_t)join(t);
    CHECK(rc == 0, "blocked pthread_mutex_lock returned %s after signals", errname(rc));
    CHECK(atomic_load(&g_sigs) > 0, "no signal was delivered");
    EXPECT(pthread_mutex_unlock(&m), 0); /* normal mutex: the thread exited holding it */
}

struct nc { pthread_mutex_t m; pthread_rwlock_t l; atomic_int about, got; int use_rw; };
static void *not_cancel_point_main(void *p)
{
    struct nc *s = p;
    atomic_store(&s->about, 1);
    if (s->use_rw)
        EXPECT(pthread_rwlock_wrlock(&s->l), 0);  /* not a cancellation point */
    else
        EXPECT(pthread_mutex_lock(&s->m), 0);     /* not a cancellation point */
    atomic_store(&s->got, 1);
    if (s->use_rw)
        EXPECT(pthread_rwlock_unlock(&s->l), 0);
    else
        EXPECT(pthread_mutex_unlock(&s->m), 0);
    pthread_testcancel(); /* the pending cancel acts here */
    atomic_store(&s->got, 2);
    return NULL;
}
static void lock_not_cancellation_point(int use_rw)
{
    struct nc s;
    memset(&s, 0, sizeof s);
    s.use_rw = use_rw;
    EXPECT(pthread_mutex_init(&s.m, NULL), 0);
    EXPECT(pthread_rwlock_init(&s.l, NULL), 0);
    if (use_rw)
        EXPECT(pthread_rwlock_rdlock(&s.l), 0);
    else
        EXPECT(pthread_mutex_lock(&s.m), 0);
    pthread_t t = spawn(not_cancel_point_main, &s);
    CHECK(wait_flag(&s.about, 1, 3000), "thread did not start");
    sleep_ms(30);
    EXPECT(pthread_cancel(t), 0);
    sleep_ms(50);
    still_running(t); /* still blocked: the lock call ignored the cancel */
    CHECK(atomic_load(&s.got) == 0, "got the lock while it was held");
    if (use_rw)
        EXPECT(pthread_rwlock_unlock(&s.l), 0);
    else
        EXPECT(pthread_mutex_unlock(&s.m), 0);
    void *r = join(t);
    CHECK(r == PTHREAD_CANCELED, "thread was not cancelled at pthread_testcancel");
    CHECK(atomic_load(&s.got) == 1,
          "got=%d: the cancel acted inside the lock call (1 expected)", atomic_load(&s.got));
}
static void mutex_lock_not_cancellation_point(void) { lock_not_cancellation_point(0); }

/* A thread with a cancel pending (deferred, enabled) runs many contended
 * operations that are not cancellation points; none may act on the cancel,
 * however they wait internally (spinning, yielding, sleeping, reading the
 * machine's load...).  Only the final pthread_testcancel does. */
struct pending {
    pthread_mutex_t m, em;
    pthread_rwlock_t l;
    pthread_spinlock_t sp;
    pthread_cond_t c;
    sem_t s;
    pthread_barrier_t b1;
    atomic_int stop;
    atomic_long progress;
    int finished;
};
enum { PENDING_ITERS = 4000 };
static void *pending_hammer_main(void *p)
{
    struct pending *s = p;
    unsigned seed = (unsigned)(uintptr_t)&seed;
    while (!atomic_load(&s->stop)) {
        EXPECT(pthread_mutex_lock(&s->m), 0);
        if (rand_r(&seed) % 8 == 0)
            sched_yield(); /* get preempted holding it */
        EXPECT(pthread_mutex_unlock(&s->m), 0);
        EXPECT(pthread_rwlock_wrlock(&s->l), 0);
        EXPECT(pthread_rwlock_unlock(&s->l), 0);
        EXPECT(pthread_mutex_lock(&s->em), 0);
        EXPECT(pthread_mutex_unlock(&s->em), 0);
    }
    return NULL;
}
static void *pending_victim_main(void *p)
{
    struct pending *s = p;
    EXPECT(pthread_cancel(pthread_self()), 0); /* pending from now on */
    for (int i = 0; i < PENDING_ITERS; i++) {
        struct timespec dl = rt_in(5000);
        switch (i % 8) {
        case 0:
            EXPECT(pthread_mutex_lock(&s->m), 0);
            EXPECT(pthread_cond_signal(&s->c), 0);
            EXPECT(pthread_cond_broadcast(&s->c), 0);
            EXPECT(pthread_mutex_unlock(&s->m), 0);
            break;
        case 1:
            EXPECT(pthread_mutex_timedlock(&s->m, &dl), 0);
            EXPECT(pthread_mutex_unlock(&s->m), 0);
            break;
        case 2:
            EXPECT(pthread_rwlock_rdlock(&s->l), 0);
            EXPECT(pthread_rwlock_unlock(&s->l), 0);
            break;
        case 3:
            EXPECT(pthread_rwlock_timedwrlock(&s->l, &dl), 0);
            EXPECT(pthread_rwlock_unlock(&s->l), 0);
            break;
        case 4:
            EXPECT(pthread_mutex_lock(&s->em), 0);
            EXPECT(pthread_mutex_unlock(&s->em), 0);
            break;
        case 5:
            EXPECT(pthread_spin_lock(&s->sp), 0);
            EXPECT(pthread_spin_unlock(&s->sp), 0);
            break;
        case 6:
            EXPECT_SEM(sem_post(&s->s), 0);
            EXPECT_SEM(sem_trywait(&s->s), 0);
            break;
        default:
            EXPECT(pthread_barrier_wait(&s->b1), PTHREAD_BARRIER_SERIAL_THREAD);
            EXPECT(pthread_rwlock_wrlock(&s->l), 0);
            EXPECT(pthread_rwlock_unlock(&s->l), 0);
        }
        atomic_fetch_add(&s->progress, 1);
    }
    s->finished = 1;
    pthread_testcancel();
    return (void *)1;
}
static void pending_cancel_not_acted_on_by_non_cancellation_points(void)
{
    struct pending s;
    memset(&s, 0, sizeof s);
    EXPECT(pthread_mutex_init(&s.m, NULL), 0);
    mutex_init_type(&s.em, PTHREAD_MUTEX_ERRORCHECK);
    EXPECT(pthread_rwlock_init(&s.l, NULL), 0);
    EXPECT(pthread_spin_init(&s.sp, 0), 0);
    EXPECT(pthread_cond_init(&s.c, NULL), 0);
    EXPECT_SEM(sem_init(&s.s, 0, 0), 0);
    EXPECT(pthread_barrier_init(&s.b1, NULL, 1), 0);
    pthread_t h[4]; /* 4 hammers + the victim on 2 vCPUs: oversubscribed */
    for (int i = 0; i < 4; i++)
        h[i] = spawn(pending_hammer_main, &s);
    pthread_t v = spawn(pending_victim_main, &s);
    void *r = join(v);
    atomic_store(&s.stop, 1);
    for (int i = 0; i < 4; i++)
        join(h[i]);
    CHECK(r == PTHREAD_CANCELED, "victim was not cancelled at pthread_testcancel");
    static const char *const what[8] = {
        "pthread_mutex_lock/cond_signal/cond_broadcast", "pthread_mutex_timedlock",
        "pthread_rwlock_rdlock", "pthread_rwlock_timedwrlock", "pthread_mutex_lock (errorcheck)",
        "pthread_spin_lock", "sem_post/sem_trywait", "pthread_barrier_wait/rwlock_wrlock"};
    long done = atomic_load(&s.progress);
    CHECK(s.finished, "a pending cancel acted in iteration %ld of %d, inside %s, which is not a "
          "cancellation point", done, PENDING_ITERS, what[done % 8]);
}
static void rwlock_wrlock_not_cancellation_point(void) { lock_not_cancellation_point(1); }

static void *lock_and_exit_main(void *p)
{
    EXPECT(pthread_mutex_lock(p), 0);
    return NULL; /* exits holding the robust mutex */
}
static void mutex_robust_owner_death(void)
{
    pthread_mutexattr_t a;
    pthread_mutex_t m;
    EXPECT(pthread_mutexattr_init(&a), 0);
    EXPECT(pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST), 0);
    EXPECT(pthread_mutex_init(&m, &a), 0);
    /* owner dies; next locker recovers it */
    join(spawn(lock_and_exit_main, &m));
    EXPECT(pthread_mutex_lock(&m), EOWNERDEAD);
    EXPECT(pthread_mutex_consistent(&m), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    /* trylock sees the death too */
    join(spawn(lock_and_exit_main, &m));
    EXPECT(pthread_mutex_trylock(&m), EOWNERDEAD);
    EXPECT(pthread_mutex_consistent(&m), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    /* not made consistent: unrecoverable afterwards */
    join(spawn(lock_and_exit_main, &m));
    struct timespec dl = rt_in(2000);
    EXPECT(pthread_mutex_timedlock(&m, &dl), EOWNERDEAD);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_mutex_lock(&m), ENOTRECOVERABLE);
    EXPECT(pthread_mutex_trylock(&m), ENOTRECOVERABLE);
    EXPECT(pthread_mutex_destroy(&m), 0);
    /* robust + errorcheck keeps the errorcheck semantics */
    EXPECT(pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK), 0);
    EXPECT(pthread_mutex_init(&m, &a), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    EXPECT(pthread_mutex_lock(&m), EDEADLK);
    EXPECT(mutex_other(&m, UNLOCK, NO_TS, 0), EPERM);
    EXPECT(pthread_mutex_unlock(&m), 0);
    hammer_mutex(&m, 4, 2000);
    EXPECT(pthread_mutex_destroy(&m), 0);
    EXPECT(pthread_mutexattr_destroy(&a), 0);
}

static void mutex_robust_pshared_process_death(void)
{
    pthread_mutex_t *m = shared_alloc(sizeof *m);
    pthread_mutexattr_t a;
    EXPECT(pthread_mutexattr_init(&a), 0);
    EXPECT(pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST), 0);
    EXPECT(pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED), 0);
    EXPECT(pthread_mutex_init(m, &a), 0);
    pid_t pid = fork_child();
    if (pid == 0) {
        EXPECT(pthread_mutex_lock(m), 0);
        _exit(0); /* dies holding it */
    }
    wait_child(pid);
    EXPECT(pthread_mutex_lock(m), EOWNERDEAD);
    EXPECT(pthread_mutex_consistent(m), 0);
    EXPECT(pthread_mutex_unlock(m), 0);
    EXPECT(pthread_mutex_trylock(m), 0);
    EXPECT(pthread_mutex_unlock(m), 0);
    EXPECT(pthread_mutex_destroy(m), 0);
}

static void mutex_priority_inherit(void)
{
    pthread_mutexattr_t a;
    pthread_mutex_t m;
    EXPECT(pthread_mutexattr_init(&a), 0);
    EXPECT(pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT), 0);
    EXPECT(pthread_mutex_init(&m, &a), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    EXPECT(mutex_other(&m, TRY, NO_TS, 0), EBUSY);
    EXPECT(pthread_mutex_unlock(&m), 0);
    struct holder h;
    hold(&h, H_MUTEX, &m, 0);
    struct timespec dl = rt_in(SHORT_MS);
    EXPECT(pthread_mutex_timedlock(&m, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_REALTIME, dl);
    unhold(&h);
    hammer_mutex(&m, 4, 3000);
    EXPECT(pthread_mutex_destroy(&m), 0);
    /* PI + errorcheck */
    EXPECT(pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK), 0);
    EXPECT(pthread_mutex_init(&m, &a), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    EXPECT(pthread_mutex_lock(&m), EDEADLK);
    EXPECT(mutex_other(&m, UNLOCK, NO_TS, 0), EPERM);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_mutex_unlock(&m), EPERM);
    EXPECT(pthread_mutex_destroy(&m), 0);
    /* PI + recursive */
    EXPECT(pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE), 0);
    EXPECT(pthread_mutex_init(&m, &a), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(mutex_other(&m, TRY, NO_TS, 0), EBUSY);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(mutex_other(&m, TRY, NO_TS, 0), 0);
    EXPECT(pthread_mutex_destroy(&m), 0);
    EXPECT(pthread_mutexattr_destroy(&a), 0);
}

static void mutex_priority_protect(void)
{
    pthread_mutexattr_t a;
    pthread_mutex_t m;
    EXPECT(pthread_mutexattr_init(&a), 0);
    EXPECT(pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_PROTECT), 0);
    EXPECT(pthread_mutexattr_setprioceiling(&a, sched_get_priority_min(SCHED_FIFO)), 0);
    EXPECT(pthread_mutex_init(&m, &a), 0);
    int rc = pthread_mutex_lock(&m);
    /* Raising to the ceiling needs CAP_SYS_NICE or RLIMIT_RTPRIO. */
    if (rc == EPERM || rc == EINVAL)
        skip_case("no privilege to raise the priority to the ceiling");
    CHECK(rc == 0, "lock of a priority-protect mutex: %s", errname(rc));
    EXPECT(mutex_other(&m, TRY, NO_TS, 0), EBUSY);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_mutex_trylock(&m), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_mutex_destroy(&m), 0);
    EXPECT(pthread_mutexattr_destroy(&a), 0);
}

struct pshared_counter { pthread_mutex_t m; pthread_spinlock_t s; long counter; int inside; };
static void pshared_hammer(struct pshared_counter *p, int use_spin, int iters)
{
    for (int i = 0; i < iters; i++) {
        if (use_spin)
            EXPECT(pthread_spin_lock(&p->s), 0);
        else
            EXPECT(pthread_mutex_lock(&p->m), 0);
        CHECK(__atomic_exchange_n(&p->inside, 1, __ATOMIC_SEQ_CST) == 0,
              "two processes inside the critical section");
        p->counter++;
        __atomic_store_n(&p->inside, 0, __ATOMIC_SEQ_CST);
        if (use_spin)
            EXPECT(pthread_spin_unlock(&p->s), 0);
        else
            EXPECT(pthread_mutex_unlock(&p->m), 0);
    }
}
static void pshared_counter_case(int use_spin)
{
    struct pshared_counter *p = shared_alloc(sizeof *p);
    if (use_spin) {
        EXPECT(pthread_spin_init(&p->s, PTHREAD_PROCESS_SHARED), 0);
    } else {
        pthread_mutexattr_t a;
        EXPECT(pthread_mutexattr_init(&a), 0);
        EXPECT(pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED), 0);
        EXPECT(pthread_mutex_init(&p->m, &a), 0);
        EXPECT(pthread_mutexattr_destroy(&a), 0);
    }
    enum { ITERS = 20000 };
    pid_t pid = fork_child();
    if (pid == 0) {
        pshared_hammer(p, use_spin, ITERS);
        _exit(0);
    }
    pshared_hammer(p, use_spin, ITERS);
    wait_child(pid);
    CHECK(p->counter == 2 * ITERS, "counter %ld, expected %d", p->counter, 2 * ITERS);
}
static void mutex_pshared_across_fork(void) { pshared_counter_case(0); }
static void spin_pshared_across_fork(void) { pshared_counter_case(1); }

/* ------------------------------------------------------------------------ */
/* Condition variable cases                                                  */
/* ------------------------------------------------------------------------ */

static void cond_timedwait_timeout_reholds_mutex(void)
{
    pthread_mutex_t m;
    pthread_cond_t c;
    mutex_init_type(&m, PTHREAD_MUTEX_ERRORCHECK);
    EXPECT(pthread_cond_init(&c, NULL), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    struct timespec dl = rt_in(SHORT_MS);
    EXPECT(pthread_cond_timedwait(&c, &m, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_REALTIME, dl);
    EXPECT(mutex_other(&m, TRY, NO_TS, 0), EBUSY); /* re-held ... */
    ASSERT_OWNED(&m);                               /* ... by this thread */
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_mutex_unlock(&m), EPERM);
    EXPECT(pthread_cond_destroy(&c), 0);
    EXPECT(pthread_mutex_destroy(&m), 0);
}

static void cond_timedwait_past_deadline(void)
{
    pthread_mutex_t m;
    pthread_cond_t c;
    mutex_init_type(&m, PTHREAD_MUTEX_ERRORCHECK);
    EXPECT(pthread_cond_init(&c, NULL), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    struct timespec past = rt_in(-1000), zero = ts_make(0, 0), neg = ts_make(-1, 0);
    PROMPTLY(EXPECT(pthread_cond_timedwait(&c, &m, &past), ETIMEDOUT));
    ASSERT_OWNED(&m);
    PROMPTLY(EXPECT(pthread_cond_timedwait(&c, &m, &zero), ETIMEDOUT));
    ASSERT_OWNED(&m);
    PROMPTLY(EXPECT(pthread_cond_timedwait(&c, &m, &neg), ETIMEDOUT));
    ASSERT_OWNED(&m);
    struct timespec mpast = mono_in(-1000);
    PROMPTLY(EXPECT(pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &mpast), ETIMEDOUT));
    ASSERT_OWNED(&m);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_cond_destroy(&c), 0);
}

static void cond_timedwait_einval(void)
{
    pthread_mutex_t m;
    pthread_cond_t c;
    mutex_init_type(&m, PTHREAD_MUTEX_ERRORCHECK);
    EXPECT(pthread_cond_init(&c, NULL), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    time_t s = (time_t)(now_ns(CLOCK_REALTIME) / 1000000000LL) + 2;
    struct timespec big = ts_make(s, 1000000000L), neg = ts_make(s, -1);
    PROMPTLY(EXPECT(pthread_cond_timedwait(&c, &m, &big), EINVAL));
    ASSERT_OWNED(&m); /* the mutex is never released on EINVAL */
    PROMPTLY(EXPECT(pthread_cond_timedwait(&c, &m, &neg), EINVAL));
    ASSERT_OWNED(&m);
    struct timespec dl = mono_in(2000);
    PROMPTLY(EXPECT(pthread_cond_clockwait(&c, &m, CLOCK_PROCESS_CPUTIME_ID, &dl), EINVAL));
    ASSERT_OWNED(&m);
    PROMPTLY(EXPECT(pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC_RAW, &dl), EINVAL));
    ASSERT_OWNED(&m);
    PROMPTLY(EXPECT(pthread_cond_clockwait(&c, &m, (clockid_t)999, &dl), EINVAL));
    ASSERT_OWNED(&m);
    big = ts_make(dl.tv_sec, 1000000000L);
    PROMPTLY(EXPECT(pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &big), EINVAL));
    ASSERT_OWNED(&m);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_cond_destroy(&c), 0);
}

/* Signal `flag` under the mutex after a delay. */
struct late_signal { pthread_mutex_t *m; pthread_cond_t *c; int *flag; int delay_ms; int broadcast; };
static void *late_signal_main(void *p)
{
    struct late_signal *s = p;
    sleep_ms(s->delay_ms);
    EXPECT(pthread_mutex_lock(s->m), 0);
    *s->flag = 1;
    EXPECT(s->broadcast ? pthread_cond_broadcast(s->c) : pthread_cond_signal(s->c), 0);
    EXPECT(pthread_mutex_unlock(s->m), 0);
    return NULL;
}

static void cond_attr_clock_monotonic(void)
{
    pthread_mutex_t m;
    pthread_cond_t c;
    pthread_condattr_t a;
    clockid_t got;
    mutex_init_type(&m, PTHREAD_MUTEX_ERRORCHECK);
    EXPECT(pthread_condattr_init(&a), 0);
    EXPECT(pthread_condattr_setclock(&a, CLOCK_MONOTONIC), 0);
    EXPECT(pthread_condattr_getclock(&a, &got), 0);
    CHECK(got == CLOCK_MONOTONIC, "getclock %d", (int)got);
    EXPECT(pthread_cond_init(&c, &a), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    /* A monotonic deadline times out on time (read as realtime it would
     * be ~50 years in the past and return at once). */
    struct timespec dl = mono_in(150);
    EXPECT(pthread_cond_timedwait(&c, &m, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_MONOTONIC, dl);
    ASSERT_OWNED(&m);
    /* Conversely a realtime-based deadline is decades ahead on the
     * monotonic clock, so the wait must last until the signal at 150 ms
     * (a realtime reading would time out at 50 ms). */
    int flag = 0;
    struct late_signal ls = {&m, &c, &flag, 150, 0};
    pthread_t t = spawn(late_signal_main, &ls);
    dl = rt_in(50);
    while (!flag) {
        int rc = pthread_cond_timedwait(&c, &m, &dl);
        CHECK(rc == 0, "timedwait returned %s: the deadline was read on CLOCK_REALTIME",
              errname(rc));
    }
    EXPECT(pthread_mutex_unlock(&m), 0);
    join(t);
    EXPECT(pthread_cond_destroy(&c), 0);
    EXPECT(pthread_condattr_destroy(&a), 0);
}

static void cond_clockwait_both_clocks(void)
{
    pthread_mutex_t m;
    pthread_cond_t c, cm;
    pthread_condattr_t a;
    mutex_init_type(&m, PTHREAD_MUTEX_ERRORCHECK);
    EXPECT(pthread_cond_init(&c, NULL), 0);
    EXPECT(pthread_condattr_init(&a), 0);
    EXPECT(pthread_condattr_setclock(&a, CLOCK_MONOTONIC), 0);
    EXPECT(pthread_cond_init(&cm, &a), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    struct timespec dl = mono_in(SHORT_MS);
    EXPECT(pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_MONOTONIC, dl);
    ASSERT_OWNED(&m);
    dl = rt_in(SHORT_MS);
    EXPECT(pthread_cond_clockwait(&c, &m, CLOCK_REALTIME, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_REALTIME, dl);
    ASSERT_OWNED(&m);
    /* clockwait's clock overrides the condattr clock */
    dl = rt_in(SHORT_MS);
    EXPECT(pthread_cond_clockwait(&cm, &m, CLOCK_REALTIME, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_REALTIME, dl);
    dl = mono_in(SHORT_MS);
    EXPECT(pthread_cond_clockwait(&cm, &m, CLOCK_MONOTONIC, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_MONOTONIC, dl);
    /* woken before the deadline */
    int flag = 0;
    struct late_signal ls = {&m, &c, &flag, 30, 0};
    pthread_t t = spawn(late_signal_main, &ls);
    dl = mono_in(5000);
    while (!flag)
        EXPECT(pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &dl), 0);
    join(t);
    flag = 0;
    t = spawn(late_signal_main, &ls);
    dl = rt_in(5000);
    while (!flag)
        EXPECT(pthread_cond_clockwait(&c, &m, CLOCK_REALTIME, &dl), 0);
    join(t);
    ASSERT_OWNED(&m);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_cond_destroy(&c), 0);
    EXPECT(pthread_cond_destroy(&cm), 0);
}

/* Waiters consume tokens: a signal must wake a waiter that takes it. */
struct tokens {
    pthread_mutex_t m;
    pthread_cond_t c;
    int waiting, tokens, woke, go;
};
static void *token_waiter_main(void *p)
{
    struct tokens *s = p;
    EXPECT(pthread_mutex_lock(&s->m), 0);
    s->waiting++;
    while (s->tokens == 0)
        EXPECT(pthread_cond_wait(&s->c, &s->m), 0);
    s->tokens--;
    s->woke++;
    s->waiting--;
    EXPECT(pthread_mutex_unlock(&s->m), 0);
    return NULL;
}
static int tokens_woke(struct tokens *s)
{
    EXPECT(pthread_mutex_lock(&s->m), 0);
    int w = s->woke;
    EXPECT(pthread_mutex_unlock(&s->m), 0);
    return w;
}
static int wait_woke(struct tokens *s, int want, int ms)
{
    int64_t end = now_ns(CLOCK_MONOTONIC) + (int64_t)ms * MS;
    while (tokens_woke(s) < want) {
        if (now_ns(CLOCK_MONOTONIC) > end)
            return 0;
        sleep_ms(1);
    }
    return 1;
}

static void cond_signal_wakes_one(void)
{
    enum { N = 4 };
    struct tokens s;
    memset(&s, 0, sizeof s);
    EXPECT(pthread_mutex_init(&s.m, NULL), 0);
    EXPECT(pthread_cond_init(&s.c, NULL), 0);
    pthread_t t[N];
    for (int i = 0; i < N; i++)
        t[i] = spawn(token_waiter_main, &s);
    CHECK(wait_locked_count(&s.m, &s.waiting, N, 3000), "waiters did not block");
    /* one token + one signal at a time: each signal must wake a waiter */
    for (int i = 1; i <= N; i++) {
        EXPECT(pthread_mutex_lock(&s.m), 0);
        s.tokens++;
        EXPECT(pthread_cond_signal(&s.c), 0);
        EXPECT(pthread_mutex_unlock(&s.m), 0);
        CHECK(wait_woke(&s, i, 3000), "signal %d was lost: %d of %d woke", i, tokens_woke(&s), i);
    }
    for (int i = 0; i < N; i++)
        join(t[i]);
    EXPECT(pthread_cond_destroy(&s.c), 0);
}

struct bcast { pthread_mutex_t m; pthread_cond_t c; int waiting, gen, woke; };
static void *bcast_waiter_main(void *p)
{
    struct bcast *s = p;
    EXPECT(pthread_mutex_lock(&s->m), 0);
    for (int round = 0; round < 30; round++) {
        int gen = s->gen;
        s->waiting++;
        while (s->gen == gen)
            EXPECT(pthread_cond_wait(&s->c, &s->m), 0);
        s->woke++;
    }
    EXPECT(pthread_mutex_unlock(&s->m), 0);
    return NULL;
}
static void cond_broadcast_wakes_all(void)
{
    enum { N = 5 };
    struct bcast s;
    memset(&s, 0, sizeof s);
    EXPECT(pthread_mutex_init(&s.m, NULL), 0);
    EXPECT(pthread_cond_init(&s.c, NULL), 0);
    pthread_t t[N];
    for (int i = 0; i < N; i++)
        t[i] = spawn(bcast_waiter_main, &s);
    for (int round = 0; round < 30; round++) {
        /* all N are inside pthread_cond_wait for this generation */
        CHECK(wait_locked_count(&s.m, &s.waiting, N * (round + 1), 3000),
              "round %d: waiters did not block", round);
        EXPECT(pthread_mutex_lock(&s.m), 0);
        s.gen++;
        EXPECT(pthread_cond_broadcast(&s.c), 0);
        EXPECT(pthread_mutex_unlock(&s.m), 0);
        CHECK(wait_locked_count(&s.m, &s.woke, N * (round + 1), 3000),
              "round %d: broadcast woke only %d of %d", round, s.woke - N * round, N);
    }
    for (int i = 0; i < N; i++)
        join(t[i]);
    EXPECT(pthread_cond_destroy(&s.c), 0);
}

static void cond_signal_without_waiters_is_lost(void)
{
    /* A signal or broadcast with nobody waiting has no effect: it must not
     * be remembered for a later waiter (conds are not semaphores). */
    pthread_mutex_t m;
    pthread_cond_t c;
    EXPECT(pthread_mutex_init(&m, NULL), 0);
    EXPECT(pthread_cond_init(&c, NULL), 0);
    EXPECT(pthread_cond_signal(&c), 0);
    EXPECT(pthread_cond_signal(&c), 0);
    EXPECT(pthread_cond_broadcast(&c), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    struct timespec dl = rt_in(SHORT_MS);
    EXPECT(pthread_cond_timedwait(&c, &m, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_REALTIME, dl);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_cond_destroy(&c), 0);
}

struct cw_other { pthread_mutex_t *m; pthread_cond_t *c; };
static int op_cond_wait(void *p)
{
    struct cw_other *o = p;
    return pthread_cond_wait(o->c, o->m);
}
static void cond_wait_mutex_not_owned_eperm(void)
{
    pthread_mutex_t m, r;
    pthread_cond_t c;
    mutex_init_type(&m, PTHREAD_MUTEX_ERRORCHECK);
    mutex_init_type(&r, PTHREAD_MUTEX_RECURSIVE);
    EXPECT(pthread_cond_init(&c, NULL), 0);
    /* The mutex is not locked at all. */
    PROMPTLY(EXPECT(pthread_cond_wait(&c, &m), EPERM));
    struct timespec dl = rt_in(2000);
    PROMPTLY(EXPECT(pthread_cond_timedwait(&c, &m, &dl), EPERM));
    dl = mono_in(2000);
    PROMPTLY(EXPECT(pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &dl), EPERM));
    PROMPTLY(EXPECT(pthread_cond_wait(&c, &r), EPERM));
    /* The mutex is locked by another thread. */
    EXPECT(pthread_mutex_lock(&m), 0);
    struct cw_other o = {&m, &c};
    PROMPTLY(EXPECT(in_thread(op_cond_wait, &o), EPERM));
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_mutex_trylock(&m), 0); /* not corrupted */
    EXPECT(pthread_mutex_unlock(&m), 0);
    /* The condition variable still works afterwards. */
    int flag = 0;
    struct late_signal ls = {&m, &c, &flag, 20, 0};
    EXPECT(pthread_mutex_lock(&m), 0);
    pthread_t t = spawn(late_signal_main, &ls);
    while (!flag)
        EXPECT(pthread_cond_wait(&c, &m), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    join(t);
    EXPECT(pthread_cond_destroy(&c), 0);
}

static pthread_cond_t s_cond = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t s_cond_mutex = PTHREAD_MUTEX_INITIALIZER;
static void cond_static_initializer(void)
{
    int flag = 0;
    struct late_signal ls = {&s_cond_mutex, &s_cond, &flag, 20, 0};
    EXPECT(pthread_mutex_lock(&s_cond_mutex), 0);
    pthread_t t = spawn(late_signal_main, &ls);
    while (!flag)
        EXPECT(pthread_cond_wait(&s_cond, &s_cond_mutex), 0);
    join(t);
    struct timespec dl = rt_in(SHORT_MS);
    EXPECT(pthread_cond_timedwait(&s_cond, &s_cond_mutex, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_REALTIME, dl);
    EXPECT(pthread_mutex_unlock(&s_cond_mutex), 0);

}

/* First use of a statically initialised cond (and a calloc()ed mutex) from
 * several threads at once. */
static void cond_static_first_use_contended(void)
{
    static const pthread_cond_t cinit = PTHREAD_COND_INITIALIZER;
    for (int round = 0; round < 20; round++) {
        struct tokens *s = calloc(1, sizeof *s);
        CHECK(s, "calloc");
        s->c = cinit;
        pthread_t w[4];
        for (int i = 0; i < 4; i++)
            w[i] = spawn(token_waiter_main, s);
        /* post tokens while the waiters may still be arriving */
        for (int i = 0; i < 4; i++) {
            EXPECT(pthread_mutex_lock(&s->m), 0);
            s->tokens++;
            EXPECT(pthread_cond_signal(&s->c), 0);
            EXPECT(pthread_mutex_unlock(&s->m), 0);
        }
        CHECK(wait_woke(s, 4, 3000), "round %d: only %d of 4 woke", round, tokens_woke(s));
        for (int i = 0; i < 4; i++)
            join(w[i]);
        EXPECT(pthread_cond_destroy(&s->c), 0);
        free(s);
    }
}

static void cond_zero_initialized(void)
{
    struct tokens *s = calloc(1, sizeof *s); /* all-zero mutex and cond */
    CHECK(s, "calloc");
    pthread_t w[3];
    for (int i = 0; i < 3; i++)
        w[i] = spawn(token_waiter_main, s);
    CHECK(wait_locked_count(&s->m, &s->waiting, 3, 3000), "waiters did not block");
    EXPECT(pthread_mutex_lock(&s->m), 0);
    s->tokens = 3;
    EXPECT(pthread_cond_broadcast(&s->c), 0);
    EXPECT(pthread_mutex_unlock(&s->m), 0);
    CHECK(wait_woke(s, 3, 3000), "only %d of 3 woke", tokens_woke(s));
    for (int i = 0; i < 3; i++)
        join(w[i]);
    free(s);
}

struct eintr_cw { pthread_mutex_t m; pthread_cond_t c; int waiting, go, bad_rc, timed; };
static void *eintr_cw_main(void *p)
{
    struct eintr_cw *s = p;
    EXPECT(pthread_mutex_lock(&s->m), 0);
    s->waiting = 1;
    struct timespec dl = rt_in(6000);
    while (!s->go) {
        int rc = s->timed ? pthread_cond_timedwait(&s->c, &s->m, &dl)
                          : pthread_cond_wait(&s->c, &s->m);
        if (rc != 0)   /* 0 with a spurious wakeup is fine; EINTR is not */
            s->bad_rc = rc;
    }
    EXPECT(pthread_mutex_unlock(&s->m), 0);
    return NULL;
}
static void cond_wait_not_eintr(void)
{
    /* POSIX: pthread_cond_wait/timedwait shall not return EINTR. */
    install_sigusr1();
    for (int timed = 0; timed < 2; timed++) {
        struct eintr_cw s;
        memset(&s, 0, sizeof s);
        s.timed = timed;
        EXPECT(pthread_mutex_init(&s.m, NULL), 0);
        EXPECT(pthread_cond_init(&s.c, NULL), 0);
        pthread_t t = spawn(eintr_cw_main, &s);
        CHECK(wait_locked_count(&s.m, &s.waiting, 1, 3000), "waiter did not block");
        pelt(t, 20);
        EXPECT(pthread_mutex_lock(&s.m), 0);
        s.go = 1;
        EXPECT(pthread_cond_signal(&s.c), 0);
        EXPECT(pthread_mutex_unlock(&s.m), 0);
        join(t);
        CHECK(s.bad_rc == 0, "%s returned %s when interrupted by a signal",
              timed ? "pthread_cond_timedwait" : "pthread_cond_wait", errname(s.bad_rc));
    }
    CHECK(atomic_load(&g_sigs) > 0, "no signal was delivered");
}

static void cond_timedwait_woken_before_deadline(void)
{
    pthread_mutex_t m;
    pthread_cond_t c;
    EXPECT(pthread_mutex_init(&m, NULL), 0);
    EXPECT(pthread_cond_init(&c, NULL), 0);
    int flag = 0;
    struct late_signal ls = {&m, &c, &flag, 40, 0};
    EXPECT(pthread_mutex_lock(&m), 0);
    pthread_t t = spawn(late_signal_main, &ls);
    struct timespec dl = rt_in(5000);
    while (!flag)
        EXPECT(pthread_cond_timedwait(&c, &m, &dl), 0);
    CHECK(now_ns(CLOCK_REALTIME) < ts_ns(&dl) - 1000 * MS, "woke only near the deadline");
    join(t);
    /* far-future deadlines mean "wait until woken", not overflow */
    flag = 0;
    t = spawn(late_signal_main, &ls);
    struct timespec ff = far_future();
    while (!flag)
        EXPECT(pthread_cond_timedwait(&c, &m, &ff), 0);
    join(t);
    flag = 0;
    ls.broadcast = 1;
    t = spawn(late_signal_main, &ls);
    ff = ts_make((time_t)INT_MAX, 999999999L);
    while (!flag)
        EXPECT(pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &ff), 0);
    join(t);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_cond_destroy(&c), 0);
}

/* Destroy (and free) a cond right after broadcasting to its waiters, before
 * they have returned: allowed by POSIX (they are no longer blocked on it). */
struct cdestroy { pthread_mutex_t m; pthread_cond_t *c; int waiting, go; };
static void *cdestroy_main(void *p)
{
    struct cdestroy *s = p;
    EXPECT(pthread_mutex_lock(&s->m), 0);
    s->waiting++;
    while (!s->go)
        EXPECT(pthread_cond_wait(s->c, &s->m), 0);
    EXPECT(pthread_mutex_unlock(&s->m), 0);
    return NULL;
}
static void cond_destroy_after_broadcast(void)
{
    for (int round = 0; round < 50; round++) {
        struct cdestroy s;
        memset(&s, 0, sizeof s);
        EXPECT(pthread_mutex_init(&s.m, NULL), 0);
        s.c = malloc(sizeof *s.c);
        CHECK(s.c, "malloc");
        EXPECT(pthread_cond_init(s.c, NULL), 0);
        pthread_t t[3];
        for (int i = 0; i < 3; i++)
            t[i] = spawn(cdestroy_main, &s);
        CHECK(wait_locked_count(&s.m, &s.waiting, 3, 3000), "waiters did not block");
        EXPECT(pthread_mutex_lock(&s.m), 0);
        s.go = 1;
        EXPECT(pthread_cond_broadcast(s.c), 0);
        EXPECT(pthread_mutex_unlock(&s.m), 0);
        EXPECT(pthread_cond_destroy(s.c), 0);
        memset(s.c, 0xA5, sizeof *s.c);
        free(s.c);
        for (int i = 0; i < 3; i++)
            join(t[i]);
        EXPECT(pthread_mutex_destroy(&s.m), 0);
    }
}

/* POSIX's own example (pthread_cond_destroy, "Destroying condition
 * variables"): a list element holds a condvar; the deleter broadcasts under
 * the list mutex, unlocks, and at once destroys the condvar and frees the
 * element, while the woken finders are still on their way out of the wait.
 * Freeing is munmap() here, so that any access to the condvar after the
 * broadcaster's destroy is a SIGSEGV, not a silent write. */
struct celt { pthread_cond_t notbusy; int busy; };
struct cfind {
    pthread_mutex_t lm;
    struct celt *ep;
    int deleted, waiting;   /* protected by lm */
    int ngo, nwaiting;      /* the new-generation waiter (re-init case) */
};
static void *cfind_main(void *p)
{
    struct cfind *s = p;
    EXPECT(pthread_mutex_lock(&s->lm), 0);
    s->waiting++;
    while (!s->deleted && s->ep->busy)
        EXPECT(pthread_cond_wait(&s->ep->notbusy, &s->lm), 0);
    EXPECT(pthread_mutex_unlock(&s->lm), 0);
    return NULL;
}
static struct celt *celt_map(void)
{
    struct celt *e = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(e != MAP_FAILED, "mmap: %s", strerror(errno));
    EXPECT(pthread_cond_init(&e->notbusy, NULL), 0);
    e->busy = 1;
    return e;
}
/* One round of the destroy-after-broadcast cases: finders wait on the
 * condvar (mostly all blocked; every fourth round in whatever state they have
 * reached), the element is deleted and broadcast, and the condvar destroyed
 * at once, while woken finders may still be leaving it. */
static void broadcast_then_destroy(struct cfind *s, pthread_t *t, int finders, int round)
{
    for (int i = 0; i < finders; i++)
        t[i] = spawn(cfind_main, s);
    if (round % 4 != 0)
        CHECK(wait_locked_count(&s->lm, &s->waiting, finders, 3000),
              "round %d: the finders did not block", round);
    EXPECT(pthread_mutex_lock(&s->lm), 0);
    s->deleted = 1;
    s->ep->busy = 0;
    EXPECT(pthread_cond_broadcast(&s->ep->notbusy), 0);
    EXPECT(pthread_mutex_unlock(&s->lm), 0);
    EXPECT(pthread_cond_destroy(&s->ep->notbusy), 0);
}
static void cond_destroy_munmap_after_broadcast(void)
{
    enum { ROUNDS = 200, FINDERS = 4 };
    struct cfind s;
    memset(&s, 0, sizeof s);
    EXPECT(pthread_mutex_init(&s.lm, NULL), 0);
    for (int round = 0; round < ROUNDS; round++) {
        s.ep = celt_map();
        s.deleted = 0;
        s.waiting = 0;
        pthread_t t[FINDERS];
        broadcast_then_destroy(&s, t, FINDERS, round);
        CHECK(munmap(s.ep, 4096) == 0, "munmap: %s", strerror(errno));
        for (int i = 0; i < FINDERS; i++)
            join(t[i]);
    }
    EXPECT(pthread_mutex_destroy(&s.lm), 0);
}

/* The same, but the memory is reused at once for a new condvar at the same
 * address, which must work at once: a waiter on the new condvar, blocked
 * while the old generation's woken waiters may still be leaving, is woken
 * by a single signal. */
static void *cnew_main(void *p)
{
    struct cfind *s = p;
    EXPECT(pthread_mutex_lock(&s->lm), 0);
    s->nwaiting++;
    while (!s->ngo)
        EXPECT(pthread_cond_wait(&s->ep->notbusy, &s->lm), 0);
    EXPECT(pthread_mutex_unlock(&s->lm), 0);
    return NULL;
}
static void cond_destroy_reinit_same_address(void)
{
    enum { ROUNDS = 200, FINDERS = 3 };
    struct cfind s;
    memset(&s, 0, sizeof s);
    EXPECT(pthread_mutex_init(&s.lm, NULL), 0);
    s.ep = celt_map();
    for (int round = 0; round < ROUNDS; round++) {
        s.deleted = 0;
        s.waiting = 0;
        s.ep->busy = 1;
        pthread_t t[FINDERS];
        broadcast_then_destroy(&s, t, FINDERS, round);
        memset(&s.ep->notbusy, 0xA5, sizeof s.ep->notbusy);
        EXPECT(pthread_cond_init(&s.ep->notbusy, NULL), 0);
        /* a new generation on the re-initialised condvar */
        EXPECT(pthread_mutex_lock(&s.lm), 0);
        s.ngo = 0;
        s.nwaiting = 0;
        EXPECT(pthread_mutex_unlock(&s.lm), 0);
        pthread_t n = spawn(cnew_main, &s);
        CHECK(wait_locked_count(&s.lm, &s.nwaiting, 1, 3000),
              "round %d: the new waiter did not block", round);
        EXPECT(pthread_mutex_lock(&s.lm), 0);
        s.ngo = 1;
        EXPECT(pthread_cond_signal(&s.ep->notbusy), 0);
        EXPECT(pthread_mutex_unlock(&s.lm), 0);
        join(n); /* a lost wake-up here is a watchdog failure */
        for (int i = 0; i < FINDERS; i++)
            join(t[i]);
    }
    /* after all that, the condvar still times out and destroys cleanly */
    EXPECT(pthread_mutex_lock(&s.lm), 0);
    struct timespec dl = rt_in(SHORT_MS);
    int rc;
    while ((rc = pthread_cond_timedwait(&s.ep->notbusy, &s.lm, &dl)) == 0)
        ; /* spurious wake-ups are allowed */
    CHECK(rc == ETIMEDOUT, "pthread_cond_timedwait returned %s", errname(rc));
    EXPECT(pthread_mutex_unlock(&s.lm), 0);
    EXPECT(pthread_cond_destroy(&s.ep->notbusy), 0);
    CHECK(munmap(s.ep, 4096) == 0, "munmap: %s", strerror(errno));
    EXPECT(pthread_mutex_destroy(&s.lm), 0);
}

/* A recursive mutex locked twice: the wait gives up one level only (glibc:
 * the mutex is not released at all; POSIX warns that it "may not actually
 * release the mutex"), and must neither deadlock on its way back nor lose
 * the count: afterwards two unlocks succeed and a third says EPERM. */
struct rsig { pthread_cond_t *c; atomic_int done; };
static void *rsig_main(void *p)
{
    struct rsig *r = p;
    /* signals without the mutex (which the waiter keeps): until it returns */
    for (int i = 0; i < 3000 && !atomic_load(&r->done); i++) {
        EXPECT(pthread_cond_signal(r->c), 0);
        sleep_ms(1);
    }
    return NULL;
}
static void cond_wait_recursive_mutex_held_twice(void)
{
    pthread_mutex_t m;
    pthread_cond_t c;
    mutex_init_type(&m, PTHREAD_MUTEX_RECURSIVE);
    EXPECT(pthread_cond_init(&c, NULL), 0);
    /* timed out */
    EXPECT(pthread_mutex_lock(&m), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    struct timespec dl = rt_in(SHORT_MS);
    int rc;
    while ((rc = pthread_cond_timedwait(&c, &m, &dl)) == 0)
        ;
    CHECK(rc == ETIMEDOUT, "pthread_cond_timedwait returned %s, expected ETIMEDOUT", errname(rc));
    CHECK_DEADLINE(CLOCK_REALTIME, dl);
    EXPECT(mutex_other(&m, TRY, NO_TS, 0), EBUSY);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_mutex_unlock(&m), EPERM);
    /* woken by a signal */
    struct rsig r = {&c, 0};
    EXPECT(pthread_mutex_lock(&m), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    pthread_t t = spawn(rsig_main, &r);
    EXPECT(pthread_cond_wait(&c, &m), 0);
    atomic_store(&r.done, 1);
    join(t);
    EXPECT(mutex_other(&m, TRY, NO_TS, 0), EBUSY);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_mutex_unlock(&m), 0);
    EXPECT(pthread_mutex_unlock(&m), EPERM);
    EXPECT(mutex_other(&m, TRY, NO_TS, 0), 0);
    EXPECT(pthread_cond_destroy(&c), 0);
    EXPECT(pthread_mutex_destroy(&m), 0);
}

/* A robust mutex whose owner dies while the caller waits on a condvar with
 * it: the wait's re-acquisition reports EOWNERDEAD (glibc returns the
 * re-lock's error), the caller then owns it and can make it consistent (or
 * leave it, making it unrecoverable). */
struct rdie { pthread_mutex_t m; pthread_cond_t c; int died, signal_it; };
static void *rdie_main(void *p)
{
    struct rdie *s = p;
    EXPECT(pthread_mutex_lock(&s->m), 0);
    s->died = 1;
    if (s->signal_it)
        EXPECT(pthread_cond_signal(&s->c), 0);
    return NULL; /* exits holding the robust mutex */
}
static void cond_wait_robust_owner_died(void)
{
    /* mode 0: cond_wait, woken by the dying owner, not made consistent;
     * 1: cond_timedwait, woken by the dying owner; 2: cond_timedwait that
     * times out (nobody signals) after the owner died */
    for (int mode = 0; mode < 3; mode++) {
        struct rdie s;
        memset(&s, 0, sizeof s);
        s.signal_it = mode < 2;
        pthread_mutexattr_t a;
        EXPECT(pthread_mutexattr_init(&a), 0);
        EXPECT(pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST), 0);
        EXPECT(pthread_mutex_init(&s.m, &a), 0);
        EXPECT(pthread_mutexattr_destroy(&a), 0);
        EXPECT(pthread_cond_init(&s.c, NULL), 0);
        EXPECT(pthread_mutex_lock(&s.m), 0);
        pthread_t t = spawn(rdie_main, &s);
        int rc, waits = 0;
        do {
            struct timespec dl = rt_in(mode == 2 ? 20 : 3000);
            rc = mode == 0 ? pthread_cond_wait(&s.c, &s.m)
                           : pthread_cond_timedwait(&s.c, &s.m, &dl);
            waits++;
        } while (!s.died && (rc == 0 || (mode == 2 && rc == ETIMEDOUT)) && waits < 200);
        CHECK(rc == EOWNERDEAD,
              "mode %d: the wait returned %s (died=%d) after the mutex's owner died holding it, "
              "expected EOWNERDEAD", mode, errname(rc), s.died);
        join(t);
        if (mode == 0) {
            EXPECT(pthread_mutex_unlock(&s.m), 0);
            EXPECT(pthread_mutex_lock(&s.m), ENOTRECOVERABLE);
        } else {
            EXPECT(pthread_mutex_consistent(&s.m), 0);
            EXPECT(pthread_mutex_unlock(&s.m), 0);
            EXPECT(pthread_mutex_lock(&s.m), 0);
            struct timespec dl = rt_in(10);
            EXPECT(pthread_cond_timedwait(&s.c, &s.m, &dl), ETIMEDOUT);
            EXPECT(pthread_mutex_unlock(&s.m), 0);
        }
        EXPECT(pthread_cond_destroy(&s.c), 0);
        EXPECT(pthread_mutex_destroy(&s.m), 0);
    }
}

/* Destroying a mutex that another thread is using in pthread_cond_wait is
 * undefined in POSIX; glibc says EBUSY (the waiter still counts as a user)
 * and leaves the mutex and the wait intact.  Real programs' teardown paths
 * rely on that EBUSY not being 0 followed by a broken mutex. */
struct mwait { pthread_mutex_t m; pthread_cond_t c; int waiting, go, timed; };
static void *mwait_main(void *p)
{
    struct mwait *s = p;
    EXPECT(pthread_mutex_lock(&s->m), 0);
    s->waiting++;
    while (!s->go) {
        if (s->timed) {
            struct timespec dl = rt_in(5000);
            EXPECT(pthread_cond_timedwait(&s->c, &s->m, &dl), 0);
        } else {
            EXPECT(pthread_cond_wait(&s->c, &s->m), 0);
        }
    }
    EXPECT(pthread_mutex_unlock(&s->m), 0);
    return NULL;
}
static void mutex_destroy_during_cond_wait_ebusy(void)
{
    static const int types[] = {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_RECURSIVE,
                                PTHREAD_MUTEX_ERRORCHECK, PTHREAD_MUTEX_ADAPTIVE_NP};
    for (int timed = 0; timed < 2; timed++)
        for (unsigned i = 0; i < sizeof types / sizeof types[0]; i++) {
            struct mwait s;
            memset(&s, 0, sizeof s);
            s.timed = timed;
            mutex_init_type(&s.m, types[i]);
            EXPECT(pthread_cond_init(&s.c, NULL), 0);
            pthread_t t = spawn(mwait_main, &s);
            CHECK(wait_locked_count(&s.m, &s.waiting, 1, 3000), "the waiter did not block");
            int rc = pthread_mutex_destroy(&s.m);
            CHECK(rc == EBUSY, "type %d, %s: pthread_mutex_destroy returned %s while a thread "
                  "waits in pthread_cond_%swait with the mutex, expected EBUSY", types[i],
                  timed ? "timed" : "untimed", errname(rc), timed ? "timed" : "");
            /* the mutex and the wait are unaffected */
            EXPECT(pthread_mutex_lock(&s.m), 0);
            s.go = 1;
            EXPECT(pthread_cond_signal(&s.c), 0);
            EXPECT(pthread_mutex_unlock(&s.m), 0);
            join(t);
            EXPECT(pthread_mutex_trylock(&s.m), 0);
            EXPECT(pthread_mutex_unlock(&s.m), 0);
            EXPECT(pthread_cond_destroy(&s.c), 0);
            EXPECT(pthread_mutex_destroy(&s.m), 0);
        }
}

/* A new waiter arrives in the middle of a pthread_cond_broadcast or
 * pthread_cond_signal made without the mutex (legal, and common): the
 * caller is stopped (traced) at the first system call of its
 * broadcast/signal (by then the call has done its bookkeeping; this is
 * where a preemption hurts most) while a new thread locks the mutex and
 * blocks in pthread_cond_wait.  Then:
 *   - the thread that was blocked before the call must be woken, even when
 *     the newcomer has a real-time priority (futexes wake the highest
 *     priority sleeper first);
 *   - once it returns holding the mutex, an ordinary pthread_mutex_lock
 *     caller must get the mutex when it unlocks (not be stranded behind a
 *     waiter moved onto the mutex);
 *   - the newcomer is still woken by a later broadcast. */
struct midcond {
    pthread_mutex_t m;
    pthread_cond_t c;
    struct midcall *mc;
    int broadcast;          /* the traced call: broadcast, else signal */
    int old_waiting, new_waiting, new_go;  /* under m */
    atomic_int go, old_has, release_old, locker_has;
};
static void *midcond_old(void *p)
{
    struct midcond *s = p;
    EXPECT(pthread_mutex_lock(&s->m), 0);
    s->old_waiting++;
    while (!atomic_load(&s->go))
        EXPECT(pthread_cond_wait(&s->c, &s->m), 0);
    atomic_store(&s->old_has, 1);
    while (!atomic_load(&s->release_old))
        sleep_ms(1);
    EXPECT(pthread_mutex_unlock(&s->m), 0);
    return NULL;
}
static void *midcond_new(void *p)
{
    struct midcond *s = p;
    EXPECT(pthread_mutex_lock(&s->m), 0);
    s->new_waiting++;
    while (!s->new_go)
        EXPECT(pthread_cond_wait(&s->c, &s->m), 0);
    EXPECT(pthread_mutex_unlock(&s->m), 0);
    return NULL;
}
static void *midcond_caller(void *p)
{
    struct midcond *s = p;
    atomic_store(&s->go, 1); /* what the waiter waits for */
    int traced = midcall_ready(s->mc);
    if (traced)
        trace_mark();
    int rc = s->broadcast ? pthread_cond_broadcast(&s->c) : pthread_cond_signal(&s->c);
    if (traced)
        trace_mark();
    CHECK(rc == 0, "pthread_cond_%s: %s", s->broadcast ? "broadcast" : "signal", errname(rc));
    return NULL;
}
static void *midcond_locker(void *p)
{
    struct midcond *s = p;
    EXPECT(pthread_mutex_lock(&s->m), 0);
    atomic_store(&s->locker_has, 1);
    EXPECT(pthread_mutex_unlock(&s->m), 0);
    return NULL;
}
static void midcond_child(struct midcond *s, int rt)
{
    install_mark_handler();
    EXPECT(pthread_mutex_init(&s->m, NULL), 0);
    EXPECT(pthread_cond_init(&s->c, NULL), 0);
    const char *what = s->broadcast ? "broadcast" : "signal";
    pthread_t old = spawn(midcond_old, s);
    CHECK(wait_locked_count(&s->m, &s->old_waiting, 1, 3000), "the waiter did not block");
    sleep_ms(30); /* asleep in the wait by now */
    pthread_t caller = spawn(midcond_caller, s);
    int64_t end = now_ns(CLOCK_MONOTONIC) + 5000 * MS;
    while (!atomic_load(&s->mc->stopped) && atomic_load(&s->mc->attached) >= 0) {
        CHECK(now_ns(CLOCK_MONOTONIC) < end, "the tracer did not stop the %s", what);
        sleep_ms(1);
    }
    int newcomer = atomic_load(&s->mc->stopped) == 1;
    pthread_t nw;
    if (newcomer) {
        pthread_attr_t a;
        EXPECT(pthread_attr_init(&a), 0);
        if (rt) {
            struct sched_param sp = {.sched_priority = 1};
            EXPECT(pthread_attr_setinheritsched(&a, PTHREAD_EXPLICIT_SCHED), 0);
            EXPECT(pthread_attr_setschedpolicy(&a, SCHED_FIFO), 0);
            EXPECT(pthread_attr_setschedparam(&a, &sp), 0);
        }
        int rc = pthread_create(&nw, &a, midcond_new, s);
        if (rc == EPERM && rt) { /* no real-time privilege: an ordinary newcomer */
            EXPECT(pthread_attr_setinheritsched(&a, PTHREAD_INHERIT_SCHED), 0);
            rc = pthread_create(&nw, &a, midcond_new, s);
        }
        CHECK(rc == 0, "pthread_create: %s", errname(rc));
        EXPECT(pthread_attr_destroy(&a), 0);
        CHECK(wait_locked_count(&s->m, &s->new_waiting, 1, 3000), "the newcomer did not block");
        sleep_ms(30);
    }
    atomic_store(&s->mc->go_on, 1);
    join(caller);
    CHECK(wait_flag(&s->old_has, 1, 3000),
          "the thread blocked in pthread_cond_wait before the %s was not woken by it "
          "(a %s waiter arrived during the call)", what, rt ? "real-time" : "new");
    pthread_t l = spawn(midcond_locker, s);
    sleep_ms(50); /* asleep on the mutex by now */
    atomic_store(&s->release_old, 1);
    CHECK(wait_flag(&s->locker_has, 1, 3000),
          "pthread_mutex_lock never returned after the mutex's owner (a cond waiter woken by "
          "the %s) unlocked it", what);
    join(old);
    join(l);
    if (newcomer) {
        EXPECT(pthread_mutex_lock(&s->m), 0);
        s->new_go = 1;
        EXPECT(pthread_cond_broadcast(&s->c), 0);
        EXPECT(pthread_mutex_unlock(&s->m), 0);
        join(nw);
    }
    EXPECT(pthread_cond_destroy(&s->c), 0);
    EXPECT(pthread_mutex_destroy(&s->m), 0);
}
static void midcond_case(int broadcast, int rt)
{
    struct midcall *mc = shared_alloc(sizeof *mc);
    pid_t pid = fork_child();
    if (pid == 0) {
        struct midcond s;
        memset(&s, 0, sizeof s);
        s.mc = mc;
        s.broadcast = broadcast;
        midcond_child(&s, rt);
        _exit(0);
    }
    midcall_trace(mc, pid);
    wait_child(pid);
}
static void cond_broadcast_new_waiter_mid_call(void) { midcond_case(1, 0); }
static void cond_signal_new_rt_waiter_mid_call(void)
{
    midcond_case(0, 1);
    midcond_case(0, 0);
}

/* Conds work with every kind of mutex: ping-pong plus a timeout. */
struct pingpong { pthread_mutex_t *m; pthread_cond_t c; int turn, rounds; };
static void *pingpong_main(void *p)
{
    struct pingpong *s = p;
    for (int i = 0; i < s->rounds; i++) {
        EXPECT(pthread_mutex_lock(s->m), 0);
        while (s->turn != 1)
            EXPECT(pthread_cond_wait(&s->c, s->m), 0);
        s->turn = 0;
        EXPECT(pthread_cond_signal(&s->c), 0);
        EXPECT(pthread_mutex_unlock(s->m), 0);
    }
    return NULL;
}
static void cond_with_mutex(pthread_mutex_t *m)
{
    struct pingpong s;
    memset(&s, 0, sizeof s);
    s.m = m;
    s.rounds = 100;
    EXPECT(pthread_cond_init(&s.c, NULL), 0);
    pthread_t t = spawn(pingpong_main, &s);
    for (int i = 0; i < s.rounds; i++) {
        EXPECT(pthread_mutex_lock(m), 0);
        while (s.turn != 0)
            EXPECT(pthread_cond_wait(&s.c, m), 0);
        s.turn = 1;
        EXPECT(pthread_cond_signal(&s.c), 0);
        EXPECT(pthread_mutex_unlock(m), 0);
    }
    join(t);
    EXPECT(pthread_mutex_lock(m), 0);
    struct timespec dl = rt_in(40);
    EXPECT(pthread_cond_timedwait(&s.c, m, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_REALTIME, dl);
    EXPECT(mutex_other(m, TRY, NO_TS, 0), EBUSY);
    EXPECT(pthread_mutex_unlock(m), 0);
    EXPECT(pthread_cond_destroy(&s.c), 0);
}
static void cond_wait_every_mutex_kind(void)
{
    static const int types[] = {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_RECURSIVE,
                                PTHREAD_MUTEX_ERRORCHECK, PTHREAD_MUTEX_ADAPTIVE_NP};
    for (int pi = 0; pi < 2; pi++)
        for (int robust = 0; robust < 2; robust++)
            for (unsigned i = 0; i < sizeof types / sizeof types[0]; i++) {
                pthread_mutexattr_t a;
                pthread_mutex_t m;
                EXPECT(pthread_mutexattr_init(&a), 0);
                EXPECT(pthread_mutexattr_settype(&a, types[i]), 0);
                if (pi)
                    EXPECT(pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT), 0);
                if (robust)
                    EXPECT(pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST), 0);
                EXPECT(pthread_mutex_init(&m, &a), 0);
                cond_with_mutex(&m);
                EXPECT(pthread_mutex_destroy(&m), 0);
                EXPECT(pthread_mutexattr_destroy(&a), 0);
            }
}

static void cond_pshared_across_fork(void)
{
    struct shm { pthread_mutex_t m; pthread_cond_t c; int turn; } *s = shared_alloc(sizeof *s);
    pthread_mutexattr_t ma;
    pthread_condattr_t ca;
    EXPECT(pthread_mutexattr_init(&ma), 0);
    EXPECT(pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED), 0);
    EXPECT(pthread_mutex_init(&s->m, &ma), 0);
    EXPECT(pthread_condattr_init(&ca), 0);
    EXPECT(pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED), 0);
    EXPECT(pthread_cond_init(&s->c, &ca), 0);
    enum { ROUNDS = 300 };
    pid_t pid = fork_child();
    int me = pid == 0 ? 1 : 0;
    for (int i = 0; i < ROUNDS; i++) {
        EXPECT(pthread_mutex_lock(&s->m), 0);
        while (s->turn != me)
            EXPECT(pthread_cond_wait(&s->c, &s->m), 0);
        s->turn = 1 - me;
        EXPECT(pthread_cond_broadcast(&s->c), 0);
        EXPECT(pthread_mutex_unlock(&s->m), 0);
    }
    if (pid == 0)
        _exit(0);
    wait_child(pid);
}

/* Cancellation of a thread blocked in a cond wait: the cleanup handler runs
 * with the mutex re-acquired. */
struct ccancel {
    pthread_mutex_t m;
    pthread_cond_t c;
    int waiting, mode;
    atomic_int cleanup_ran, cleanup_rc;
};
static void ccancel_cleanup(void *p)
{
    struct ccancel *s = p;
    /* errorcheck mutex: unlock succeeds only if this thread holds it */
    atomic_store(&s->cleanup_rc, pthread_mutex_unlock(&s->m));
    atomic_store(&s->cleanup_ran, 1);
}
static void *ccancel_main(void *p)
{
    struct ccancel *s = p;
    EXPECT(pthread_mutex_lock(&s->m), 0);
    pthread_cleanup_push(ccancel_cleanup, s);
    s->waiting = 1;
    for (;;) {
        int rc;
        struct timespec dl;
        if (s->mode == 0) {
            rc = pthread_cond_wait(&s->c, &s->m);
        } else if (s->mode == 1) {
            dl = rt_in(6000);
            rc = pthread_cond_timedwait(&s->c, &s->m, &dl);
        } else {
            dl = mono_in(6000);
            rc = pthread_cond_clockwait(&s->c, &s->m, CLOCK_MONOTONIC, &dl);
        }
        CHECK(rc == 0, "wait returned %s before the cancel", errname(rc));
    }
    pthread_cleanup_pop(0);
    return NULL;
}
static void cond_cancel_case(int mode)
{
    struct ccancel s;
    memset(&s, 0, sizeof s);
    s.mode = mode;
    atomic_store(&s.cleanup_rc, -1);
    mutex_init_type(&s.m, PTHREAD_MUTEX_ERRORCHECK);
    EXPECT(pthread_cond_init(&s.c, NULL), 0);
    pthread_t t = spawn(ccancel_main, &s);
    CHECK(wait_locked_count(&s.m, &s.waiting, 1, 3000), "waiter did not block");
    EXPECT(pthread_cancel(t), 0);
    void *r = join(t);
    CHECK(r == PTHREAD_CANCELED, "thread was not cancelled");
    CHECK(atomic_load(&s.cleanup_ran), "cleanup handler did not run");
    CHECK(atomic_load(&s.cleanup_rc) == 0,
          "cleanup handler's unlock returned %s: mutex not re-held at cancellation",
          errname(atomic_load(&s.cleanup_rc)));
    struct timespec dl = rt_in(2000);
    EXPECT(pthread_mutex_timedlock(&s.m, &dl), 0);
    EXPECT(pthread_mutex_unlock(&s.m), 0);
    /* the cond still works */
    int flag = 0;
    struct late_signal ls = {&s.m, &s.c, &flag, 10, 0};
    EXPECT(pthread_mutex_lock(&s.m), 0);
    t = spawn(late_signal_main, &ls);
    while (!flag)
        EXPECT(pthread_cond_wait(&s.c, &s.m), 0);
    EXPECT(pthread_mutex_unlock(&s.m), 0);
    join(t);
    EXPECT(pthread_cond_destroy(&s.c), 0);
}
static void cond_cancel_wait(void) { cond_cancel_case(0); }
static void cond_cancel_timedwait(void) { cond_cancel_case(1); }
static void cond_cancel_clockwait(void) { cond_cancel_case(2); }

/* A thread that disabled cancellation is not cancelled inside a wait by a
 * SIGCANCEL that arrives late. pthread_cancel decides to send the signal
 * while its target waits with cancellation enabled, and may be preempted
 * before sending it; by then the target may be in another wait with
 * cancellation disabled. glibc 2.36's handler then checks only whether the
 * target is in asynchronous mode, which a cancellable wait switches to, so
 * a wait with cancellation disabled must not switch. Found by the stress
 * test: a consumer died inside a quiet cond wait owning its mutex, and
 * every thread stalled. The case sends the signal itself (SIGCANCEL is
 * glibc's __SIGRTMIN, 32) after installing glibc's handler with one
 * pthread_cancel; the wait must run to its end. */
#define GLIBC_SIGCANCEL 32
struct late_cancel {
    pthread_mutex_t m;
    pthread_cond_t c;
    sem_t sem;
    int use_sem;
    atomic_int tid, waiting, past_wait;
};
static void *late_cancel_victim(void *p)
{
    struct late_cancel *s = p;
    int old;
    EXPECT(pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old), 0);
    atomic_store(&s->tid, gettid());
    /* long enough for the signal to land while the thread sleeps in it */
    struct timespec dl = rt_in(1500);
    if (s->use_sem) {
        atomic_store(&s->waiting, 1);
        int rc = sem_timedwait(&s->sem, &dl); /* nobody posts */
        CHECK(rc == -1 && (errno == ETIMEDOUT || errno == EINTR),
              "sem_timedwait returned %d (errno %s)", rc, errname(errno));
    } else {
        EXPECT(pthread_mutex_lock(&s->m), 0);
        atomic_store(&s->waiting, 1);
        int rc = pthread_cond_timedwait(&s->c, &s->m, &dl); /* nobody signals */
        CHECK(rc == ETIMEDOUT || rc == 0, "cond wait returned %s", errname(rc));
        EXPECT(pthread_mutex_unlock(&s->m), 0);
    }
    atomic_store(&s->past_wait, 1);
    EXPECT(pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old), 0);
    pthread_testcancel(); /* glibc 2.36: the late signal marked it cancelled */
    return NULL;
}
static void *pause_forever(void *p)
{
    (void)p;
    for (;;)
        pause();
    return NULL;
}
static void late_sigcancel_case(int use_sem)
{
    /* glibc installs its SIGCANCEL handler at the first pthread_cancel */
    pthread_t dummy = spawn(pause_forever, NULL);
    EXPECT(pthread_cancel(dummy), 0);
    CHECK(join(dummy) == PTHREAD_CANCELED, "the dummy thread was not cancelled");

    struct late_cancel s;
    memset(&s, 0, sizeof s);
    mutex_init_type(&s.m, PTHREAD_MUTEX_ERRORCHECK);
    EXPECT(pthread_cond_init(&s.c, NULL), 0);
    EXPECT_SEM(sem_init(&s.sem, 0, 0), 0);
    s.use_sem = use_sem;
    pthread_t t = spawn(late_cancel_victim, &s);
    CHECK(wait_flag(&s.waiting, 1, 3000), "the victim did not start waiting");
    sleep_ms(200); /* past spinning and yielding: asleep in the kernel */
    CHECK(syscall(SYS_tgkill, getpid(), atomic_load(&s.tid), GLIBC_SIGCANCEL) == 0,
          "tgkill: %s", strerror(errno));
    void *r = join(t);
    int past = atomic_load(&s.past_wait);
    if (!past && !dlsym(RTLD_DEFAULT, "vsched_sync_version"))
        skip_case("this glibc itself cancels a thread inside a wait with cancellation "
                  "disabled when SIGCANCEL arrives late; vsched must not");
    CHECK(past, "cancelled inside the %s with cancellation disabled",
          use_sem ? "semaphore wait" : "cond wait");
    /* Whether the signal still cancels the thread at its next cancellation
     * point is glibc's business: 2.36's handler marks the thread cancelled,
     * later versions drop a signal that finds cancellation disabled. */
    CHECK(r == PTHREAD_CANCELED || r == NULL, "the victim returned %p", r);
}
static void cond_wait_cancel_disabled_ignores_late_sigcancel(void) { late_sigcancel_case(0); }
static void sem_wait_cancel_disabled_ignores_late_sigcancel(void) { late_sigcancel_case(1); }

/* A waiter cancelled while a signal is in flight must not swallow it when
 * another waiter could take it (POSIX, pthread_cond_wait rationale). */
static void token_cleanup(void *p)
{
    struct tokens *s = p;
    s->waiting--;
    EXPECT(pthread_mutex_unlock(&s->m), 0);
}
static void *cancellable_token_waiter(void *p)
{
    struct tokens *s = p;
    EXPECT(pthread_mutex_lock(&s->m), 0);
    pthread_cleanup_push(token_cleanup, s);
    s->waiting++;
    while (s->tokens == 0)
        EXPECT(pthread_cond_wait(&s->c, &s->m), 0);
    s->tokens--;
    s->woke++;
    pthread_cleanup_pop(1);
    return NULL;
}
static void cond_cancel_does_not_lose_signal(void)
{
    for (int round = 0; round < 20; round++) {
        struct tokens s;
        memset(&s, 0, sizeof s);
        EXPECT(pthread_mutex_init(&s.m, NULL), 0);
        EXPECT(pthread_cond_init(&s.c, NULL), 0);
        pthread_t victim = spawn(cancellable_token_waiter, &s);
        pthread_t other = spawn(cancellable_token_waiter, &s);
        CHECK(wait_locked_count(&s.m, &s.waiting, 2, 3000), "waiters did not block");
        EXPECT(pthread_mutex_lock(&s.m), 0);
        s.tokens = 1;
        EXPECT(pthread_cond_signal(&s.c), 0);
        EXPECT(pthread_cancel(victim), 0);
        EXPECT(pthread_mutex_unlock(&s.m), 0);
        join(victim);
        /* either the victim took the token before acting on the cancel, or
         * the other waiter must get it */
        CHECK(wait_woke(&s, 1, 3000), "round %d: the signal was lost with the cancelled waiter",
              round);
        EXPECT(pthread_cancel(other), 0); /* harmless if it already finished */
        join(other);
        EXPECT(pthread_cond_destroy(&s.c), 0);
    }
}

/* Cancel racing a wake-up: whatever the interleaving, a waiter that acts on
 * the cancel inside the wait runs its cleanup handler with the mutex held,
 * and one that returns normally saw the flag. */
struct crace {
    pthread_mutex_t m; /* errorcheck */
    pthread_cond_t c;
    int waiting, flag, kind; /* kind: 0 wait, 1 timedwait, 2 clockwait (short timeouts) */
    atomic_int cleanup_rc, returned;
};
static void crace_cleanup(void *p)
{
    struct crace *s = p;
    atomic_store(&s->cleanup_rc, pthread_mutex_unlock(&s->m));
}
static void *crace_main(void *p)
{
    struct crace *s = p;
    EXPECT(pthread_mutex_lock(&s->m), 0);
    pthread_cleanup_push(crace_cleanup, s);
    s->waiting = 1;
    unsigned n = 0;
    while (!s->flag) {
        int rc;
        /* timeouts of 0..800 us race the cancel and the wake-up */
        int us = (int)(n++ % 5) * 200;
        if (s->kind == 0) {
            rc = pthread_cond_wait(&s->c, &s->m);
        } else if (s->kind == 1) {
            struct timespec dl = ts_from_ns(now_ns(CLOCK_REALTIME) + us * 1000LL);
            rc = pthread_cond_timedwait(&s->c, &s->m, &dl);
        } else {
            struct timespec dl = ts_from_ns(now_ns(CLOCK_MONOTONIC) + us * 1000LL);
            rc = pthread_cond_clockwait(&s->c, &s->m, CLOCK_MONOTONIC, &dl);
        }
        CHECK(rc == 0 || (rc == ETIMEDOUT && s->kind != 0), "wait returned %s", errname(rc));
    }
    pthread_cleanup_pop(0);
    atomic_store(&s->returned, 1);
    EXPECT(pthread_mutex_unlock(&s->m), 0);
    return NULL;
}
static void cond_cancel_races_wakeup(void)
{
    for (int round = 0; round < 300; round++) {
        struct crace s;
        memset(&s, 0, sizeof s);
        s.kind = (round / 3) % 3;
        atomic_store(&s.cleanup_rc, -1);
        mutex_init_type(&s.m, PTHREAD_MUTEX_ERRORCHECK);
        EXPECT(pthread_cond_init(&s.c, NULL), 0);
        pthread_t t = spawn(crace_main, &s);
        CHECK(wait_locked_count(&s.m, &s.waiting, 1, 3000), "waiter did not block");
        if (s.kind != 0 && round % 2)
            sleep_ms(1); /* let a few timeouts happen first */
        EXPECT(pthread_mutex_lock(&s.m), 0);
        s.flag = 1;
        switch (round % 3) {
        case 0: /* cancel while the woken waiter must wait for the mutex */
            EXPECT(pthread_cond_signal(&s.c), 0);
            EXPECT(pthread_cancel(t), 0);
            if (round % 2)
                sleep_ms(1);
            EXPECT(pthread_mutex_unlock(&s.m), 0);
            break;
        case 1: /* cancel right after the mutex is released */
            EXPECT(pthread_cond_broadcast(&s.c), 0);
            EXPECT(pthread_mutex_unlock(&s.m), 0);
            EXPECT(pthread_cancel(t), 0);
            break;
        default: /* cancel first, then wake */
            EXPECT(pthread_cancel(t), 0);
            EXPECT(pthread_cond_signal(&s.c), 0);
            EXPECT(pthread_mutex_unlock(&s.m), 0);
        }
        void *r = join(t);
        if (r == PTHREAD_CANCELED && !atomic_load(&s.returned))
            CHECK(atomic_load(&s.cleanup_rc) == 0,
                  "round %d: cancelled in the wait, but the cleanup handler's unlock returned %s "
                  "(mutex not re-acquired)", round, errname(atomic_load(&s.cleanup_rc)));
        else
            CHECK(atomic_load(&s.returned), "round %d: neither returned nor cancelled", round);
        EXPECT(pthread_mutex_trylock(&s.m), 0); /* the mutex is free again */
        EXPECT(pthread_mutex_unlock(&s.m), 0);
        EXPECT(pthread_cond_destroy(&s.c), 0);
        EXPECT(pthread_mutex_destroy(&s.m), 0);
    }
}

/* ------------------------------------------------------------------------ */
/* Barrier cases                                                             */
/* ------------------------------------------------------------------------ */

static void barrier_init_count_zero_einval(void)
{
    pthread_barrier_t b;
    EXPECT(pthread_barrier_init(&b, NULL, 0), EINVAL);
    EXPECT(pthread_barrier_init(&b, NULL, 1), 0);
    for (int i = 0; i < 10; i++)  /* count 1: every waiter is the serial one */
        EXPECT(pthread_barrier_wait(&b), PTHREAD_BARRIER_SERIAL_THREAD);
    EXPECT(pthread_barrier_destroy(&b), 0);
}

struct brounds {
    pthread_barrier_t b;
    int n, rounds;
    atomic_int *arrived, *serial;  /* per round */
};
static void *brounds_main(void *p)
{
    struct brounds *s = p;
    for (int r = 0; r < s->rounds; r++) {
        atomic_fetch_add(&s->arrived[r], 1);
        int rc = pthread_barrier_wait(&s->b);
        CHECK(rc == 0 || rc == PTHREAD_BARRIER_SERIAL_THREAD, "barrier_wait returned %s",
              errname(rc));
        int a = atomic_load(&s->arrived[r]);
        CHECK(a == s->n, "round %d: released after only %d of %d arrived", r, a, s->n);
        if (rc == PTHREAD_BARRIER_SERIAL_THREAD)
            atomic_fetch_add(&s->serial[r], 1);
    }
    return NULL;
}
static void barrier_rounds(int n, int rounds)
{
    struct brounds s;
    s.n = n;
    s.rounds = rounds;
    s.arrived = calloc(rounds, sizeof *s.arrived);
    s.serial = calloc(rounds, sizeof *s.serial);
    CHECK(s.arrived && s.serial, "calloc");
    EXPECT(pthread_barrier_init(&s.b, NULL, n), 0);
    pthread_t t[16];
    for (int i = 0; i < n; i++)
        t[i] = spawn(brounds_main, &s);
    for (int i = 0; i < n; i++)
        join(t[i]);
    for (int r = 0; r < rounds; r++)
        CHECK(atomic_load(&s.serial[r]) == 1, "round %d: %d serial threads, expected 1", r,
              atomic_load(&s.serial[r]));
    EXPECT(pthread_barrier_destroy(&s.b), 0);
    free(s.arrived);
    free(s.serial);
}
static void barrier_one_serial_per_round(void) { barrier_rounds(5, 400); }
static void barrier_reuse_and_reinit(void)
{
    barrier_rounds(2, 200);
    barrier_rounds(3, 200);
    barrier_rounds(8, 100); /* oversubscribed on 2 vCPUs */
    /* re-initialise one barrier object with different counts */
    pthread_barrier_t b;
    EXPECT(pthread_barrier_init(&b, NULL, 1), 0);
    EXPECT(pthread_barrier_wait(&b), PTHREAD_BARRIER_SERIAL_THREAD);
    EXPECT(pthread_barrier_destroy(&b), 0);
    EXPECT(pthread_barrier_init(&b, NULL, 1), 0);
    EXPECT(pthread_barrier_wait(&b), PTHREAD_BARRIER_SERIAL_THREAD);
    EXPECT(pthread_barrier_destroy(&b), 0);
}

static void *barrier_wait_report(void *p)
{
    return (void *)(intptr_t)pthread_barrier_wait(p);
}
static void barrier_wait_not_eintr(void)
{
    /* POSIX: pthread_barrier_wait shall not return EINTR. */
    install_sigusr1();
    pthread_barrier_t b;
    EXPECT(pthread_barrier_init(&b, NULL, 2), 0);
    pthread_t t = spawn(barrier_wait_report, &b);
    sleep_ms(20);
    pelt(t, 20);
    still_running(t);
    int mine = pthread_barrier_wait(&b);
    int theirs = (int)(intptr_t)join(t);
    CHECK((mine == 0 && theirs == PTHREAD_BARRIER_SERIAL_THREAD) ||
              (theirs == 0 && mine == PTHREAD_BARRIER_SERIAL_THREAD),
          "barrier_wait returned %s and %s", errname(mine), errname(theirs));
    EXPECT(pthread_barrier_destroy(&b), 0);
}

static void barrier_destroy_right_after_wait(void)
{
    /* The last thread out may destroy and free the barrier as soon as its
     * own wait returns; the others are released and must not touch it. */
    for (int round = 0; round < 100; round++) {
        pthread_barrier_t *b = malloc(sizeof *b);
        CHECK(b, "malloc");
        EXPECT(pthread_barrier_init(b, NULL, 4), 0);
        pthread_t t[3];
        for (int i = 0; i < 3; i++)
            t[i] = spawn(barrier_wait_report, b);
        int serial = 0;
        int rc = pthread_barrier_wait(b);
        CHECK(rc == 0 || rc == PTHREAD_BARRIER_SERIAL_THREAD, "wait: %s", errname(rc));
        serial += rc == PTHREAD_BARRIER_SERIAL_THREAD;
        EXPECT(pthread_barrier_destroy(b), 0);
        memset(b, 0xA5, sizeof *b);
        free(b);
        for (int i = 0; i < 3; i++) {
            rc = (int)(intptr_t)join(t[i]);
            CHECK(rc == 0 || rc == PTHREAD_BARRIER_SERIAL_THREAD, "wait: %s", errname(rc));
            serial += rc == PTHREAD_BARRIER_SERIAL_THREAD;
        }
        CHECK(serial == 1, "round %d: %d serial threads", round, serial);
    }
}

/* Two barriers used alternately; after each round the main thread destroys
 * and re-initialises the barrier it just passed.  Legal: the worker's next
 * use of that barrier comes two rounds later, after it passed the other
 * barrier with the main thread, i.e. after the re-init; nobody is blocked
 * on the barrier when it is destroyed (all were released). */
struct balt { pthread_barrier_t b[2]; int rounds; atomic_int serial; };
static void *balt_main(void *p)
{
    struct balt *s = p;
    for (int r = 0; r < s->rounds; r++) {
        int rc = pthread_barrier_wait(&s->b[r & 1]);
        CHECK(rc == 0 || rc == PTHREAD_BARRIER_SERIAL_THREAD, "round %d: wait: %s", r, errname(rc));
        if (rc == PTHREAD_BARRIER_SERIAL_THREAD)
            atomic_fetch_add(&s->serial, 1);
    }
    return NULL;
}
static void barrier_destroy_reinit_alternating(void)
{
    static const int cfg[][2] = {{2, 5000}, {3, 2000}}; /* {count, rounds} */
    for (unsigned k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
        struct balt s;
        memset(&s, 0, sizeof s);
        int n = cfg[k][0];
        s.rounds = cfg[k][1];
        EXPECT(pthread_barrier_init(&s.b[0], NULL, n), 0);
        EXPECT(pthread_barrier_init(&s.b[1], NULL, n), 0);
        pthread_t t[2];
        for (int i = 0; i < n - 1; i++)
            t[i] = spawn(balt_main, &s);
        for (int r = 0; r < s.rounds; r++) {
            int rc = pthread_barrier_wait(&s.b[r & 1]);
            CHECK(rc == 0 || rc == PTHREAD_BARRIER_SERIAL_THREAD, "count %d, round %d: wait: %s",
                  n, r, errname(rc));
            if (rc == PTHREAD_BARRIER_SERIAL_THREAD)
                atomic_fetch_add(&s.serial, 1);
            rc = pthread_barrier_destroy(&s.b[r & 1]);
            CHECK(rc == 0, "count %d, round %d: destroy right after the wait returned %s", n, r,
                  errname(rc));
            EXPECT(pthread_barrier_init(&s.b[r & 1], NULL, n), 0);
        }
        for (int i = 0; i < n - 1; i++)
            join(t[i]);
        CHECK(atomic_load(&s.serial) == s.rounds, "count %d: %d serial returns over %d rounds", n,
              atomic_load(&s.serial), s.rounds);
        EXPECT(pthread_barrier_destroy(&s.b[0]), 0);
        EXPECT(pthread_barrier_destroy(&s.b[1]), 0);
    }
}

/* More threads than the count use one barrier: every `count` arrivals make
 * one round, with one serial return per round (glibc supports this; POSIX
 * only says the count of threads must arrive before any is released).
 * The threads wait until told to stop; at most count-1 of them can be left
 * blocked then, and they are left blocked (the case process ends). */
struct bextra {
    pthread_barrier_t b;
    int count;
    atomic_int stop, entered, waits, serials;
};
static void *bextra_main(void *p)
{
    struct bextra *s = p;
    while (!atomic_load(&s->stop)) {
        atomic_fetch_add(&s->entered, 1);
        int rc = pthread_barrier_wait(&s->b);
        CHECK(rc == 0 || rc == PTHREAD_BARRIER_SERIAL_THREAD, "wait: %s", errname(rc));
        if (rc == PTHREAD_BARRIER_SERIAL_THREAD)
            atomic_fetch_add(&s->serials, 1);
        /* no more waits can have returned than make up whole rounds of
         * the arrivals so far */
        int w = atomic_fetch_add(&s->waits, 1) + 1, e = atomic_load(&s->entered);
        CHECK(w <= e / s->count * s->count,
              "count %d: %d waits returned after only %d arrivals", s->count, w, e);
    }
    return NULL;
}
static void barrier_more_threads_than_count(void)
{
    static const int cfg[][2] = {{2, 3}, {2, 5}, {3, 5}}; /* {count, threads} */
    for (unsigned k = 0; k < sizeof cfg / sizeof cfg[0]; k++) {
        struct bextra *s = calloc(1, sizeof *s); /* left in use by blocked threads */
        CHECK(s, "calloc");
        int count = cfg[k][0], n = cfg[k][1];
        s->count = count;
        EXPECT(pthread_barrier_init(&s->b, NULL, count), 0);
        pthread_t t[8];
        for (int i = 0; i < n; i++)
            t[i] = spawn(bextra_main, s);
        int64_t end = now_ns(CLOCK_MONOTONIC) + 700 * MS;
        int last = -1;
        int64_t last_change = now_ns(CLOCK_MONOTONIC);
        while (now_ns(CLOCK_MONOTONIC) < end) {
            int w = atomic_load(&s->waits);
            if (w != last) {
                last = w;
                last_change = now_ns(CLOCK_MONOTONIC);
            }
            CHECK(now_ns(CLOCK_MONOTONIC) - last_change < 1000 * MS,
                  "count %d, %d threads: stuck after %d waits returned, %d serial "
                  "(waits - count*serial = %d)", count, n, w, atomic_load(&s->serials),
                  w - count * atomic_load(&s->serials));
            sleep_ms(2);
        }
        CHECK(last > 100, "count %d, %d threads: only %d waits returned in 0.7 s", count, n, last);
        atomic_store(&s->stop, 1);
        /* all but at most count-1 threads finish */
        int exited = 0;
        char gone[8] = {0};
        end = now_ns(CLOCK_MONOTONIC) + 3000 * MS;
        while (exited < n - (count - 1)) {
            for (int i = 0; i < n; i++)
                if (!gone[i] && pthread_tryjoin_np(t[i], NULL) == 0) {
                    gone[i] = 1;
                    exited++;
                }
            CHECK(now_ns(CLOCK_MONOTONIC) < end,
                  "count %d, %d threads: only %d threads finished after the stop (%d waits, "
                  "%d serial)", count, n, exited, atomic_load(&s->waits),
                  atomic_load(&s->serials));
            sleep_ms(1);
        }
        /* settle: every completed round returned count waits, one serial */
        end = now_ns(CLOCK_MONOTONIC) + 2000 * MS;
        int w, sr;
        for (;;) {
            w = atomic_load(&s->waits);
            sr = atomic_load(&s->serials);
            if (w == count * sr || now_ns(CLOCK_MONOTONIC) > end)
                break;
            sleep_ms(1);
        }
        CHECK(w == count * sr, "count %d, %d threads: %d waits returned with %d serial returns "
              "(expected count x serial)", count, n, w, sr);
    }
}

static void barrier_init_count_too_large_einval(void)
{
    /* glibc: counts from INT_MAX up are EINVAL (its counters need the
     * headroom); such a barrier could never be passed anyway. */
    pthread_barrier_t b;
    EXPECT(pthread_barrier_init(&b, NULL, INT_MAX), EINVAL);
    EXPECT(pthread_barrier_init(&b, NULL, 0x80000000u), EINVAL);
    EXPECT(pthread_barrier_init(&b, NULL, UINT_MAX), EINVAL);
    EXPECT(pthread_barrier_init(&b, NULL, 1), 0);
    EXPECT(pthread_barrier_wait(&b), PTHREAD_BARRIER_SERIAL_THREAD);
    EXPECT(pthread_barrier_destroy(&b), 0);
}

static void barrier_pshared_across_fork(void)
{
    struct shm { pthread_barrier_t b; int count, serial; } *s = shared_alloc(sizeof *s);
    pthread_barrierattr_t a;
    EXPECT(pthread_barrierattr_init(&a), 0);
    EXPECT(pthread_barrierattr_setpshared(&a, PTHREAD_PROCESS_SHARED), 0);
    EXPECT(pthread_barrier_init(&s->b, &a, 2), 0);
    enum { ROUNDS = 200 };
    pid_t pid = fork_child();
    for (int r = 0; r < ROUNDS; r++) {
        __atomic_fetch_add(&s->count, 1, __ATOMIC_SEQ_CST);
        int rc = pthread_barrier_wait(&s->b);
        CHECK(rc == 0 || rc == PTHREAD_BARRIER_SERIAL_THREAD, "wait: %s", errname(rc));
        if (rc == PTHREAD_BARRIER_SERIAL_THREAD)
            __atomic_fetch_add(&s->serial, 1, __ATOMIC_SEQ_CST);
        /* both arrived for round r; the other may already count round r+1 */
        int c = __atomic_load_n(&s->count, __ATOMIC_SEQ_CST);
        CHECK(c == 2 * (r + 1) || c == 2 * (r + 1) + 1, "round %d: count %d", r, c);
    }
    if (pid == 0)
        _exit(0);
    wait_child(pid);
    CHECK(s->serial == ROUNDS, "%d serial returns over %d rounds", s->serial, ROUNDS);
}

/* ------------------------------------------------------------------------ */
/* Spinlock cases                                                            */
/* ------------------------------------------------------------------------ */

static void spin_trylock_ebusy(void)
{
    pthread_spinlock_t s;
    EXPECT(pthread_spin_init(&s, PTHREAD_PROCESS_PRIVATE), 0);
    EXPECT(pthread_spin_lock(&s), 0);
    EXPECT(pthread_spin_trylock(&s), EBUSY);
    EXPECT(in_thread(op_spin_trylock, (void *)&s), EBUSY);
    EXPECT(pthread_spin_unlock(&s), 0);
    EXPECT(pthread_spin_trylock(&s), 0);
    EXPECT(pthread_spin_unlock(&s), 0);
    EXPECT(pthread_spin_destroy(&s), 0);
    EXPECT(pthread_spin_init(&s, PTHREAD_PROCESS_SHARED), 0);
    EXPECT(pthread_spin_trylock(&s), 0);
    EXPECT(pthread_spin_trylock(&s), EBUSY);
    EXPECT(pthread_spin_unlock(&s), 0);
    EXPECT(pthread_spin_destroy(&s), 0);
}

static void spin_unlock_by_other_thread(void)
{
    /* glibc spinlocks have no owner: another thread may release it (a
     * token hand-off). */
    pthread_spinlock_t s;
    EXPECT(pthread_spin_init(&s, PTHREAD_PROCESS_PRIVATE), 0);
    for (int i = 0; i < 10; i++) {
        EXPECT(pthread_spin_lock(&s), 0);
        EXPECT(in_thread(op_spin_unlock, (void *)&s), 0);
        EXPECT(pthread_spin_trylock(&s), 0);
        EXPECT(pthread_spin_unlock(&s), 0);
    }
    struct holder h;
    hold(&h, H_SPIN, (void *)&s, 0);
    EXPECT(pthread_spin_trylock(&s), EBUSY);
    unhold(&h);
    EXPECT(pthread_spin_destroy(&s), 0);
}

struct spin_hammer { pthread_spinlock_t s; atomic_int inside; long counter; int iters; };
static void *spin_hammer_main(void *p)
{
    struct spin_hammer *h = p;
    for (int i = 0; i < h->iters; i++) {
        if (i & 1)
            EXPECT(pthread_spin_lock(&h->s), 0);
        else
            while (pthread_spin_trylock(&h->s) != 0)
                ;
        CHECK(atomic_exchange(&h->inside, 1) == 0, "two threads inside the spinlock");
        h->counter++;
        atomic_store(&h->inside, 0);
        EXPECT(pthread_spin_unlock(&h->s), 0);
    }
    return NULL;
}
static void spin_mutual_exclusion(void)
{
    struct spin_hammer h;
    memset(&h, 0, sizeof h);
    h.iters = 20000;
    EXPECT(pthread_spin_init(&h.s, PTHREAD_PROCESS_PRIVATE), 0);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)  /* 4 threads on 2 vCPUs: holders get preempted */
        t[i] = spawn(spin_hammer_main, &h);
    for (int i = 0; i < 4; i++)
        join(t[i]);
    CHECK(h.counter == 4L * h.iters, "counter %ld, expected %ld", h.counter, 4L * h.iters);
    EXPECT(pthread_spin_destroy(&h.s), 0);
}

/* ------------------------------------------------------------------------ */
/* Read-write lock cases                                                     */
/* ------------------------------------------------------------------------ */

struct readers { pthread_rwlock_t l; atomic_int inside, checked; int n; };
static void *reader_together_main(void *p)
{
    struct readers *s = p;
    int i = atomic_fetch_add(&s->checked, 0); /* unused: keep threads symmetric */
    (void)i;
    static atomic_int which;
    int k = atomic_fetch_add(&which, 1) % 4;
    struct timespec dl;
    switch (k) {  /* every read-lock entry point */
    case 0: EXPECT(pthread_rwlock_rdlock(&s->l), 0); break;
    case 1: EXPECT(pthread_rwlock_tryrdlock(&s->l), 0); break;
    case 2: dl = rt_in(5000); EXPECT(pthread_rwlock_timedrdlock(&s->l, &dl), 0); break;
    default:
        dl = mono_in(5000);
        EXPECT(pthread_rwlock_clockrdlock(&s->l, CLOCK_MONOTONIC, &dl), 0);
    }
    atomic_fetch_add(&s->inside, 1);
    CHECK(wait_flag(&s->inside, s->n, 3000), "readers did not share the lock: %d of %d inside",
          atomic_load(&s->inside), s->n);
    atomic_fetch_add(&s->checked, 1);
    CHECK(wait_flag(&s->checked, s->n, 3000), "readers did not finish");
    EXPECT(pthread_rwlock_unlock(&s->l), 0);
    return NULL;
}
static void rwlock_multiple_readers(void)
{
    struct readers s;
    memset(&s, 0, sizeof s);
    s.n = 4;
    EXPECT(pthread_rwlock_init(&s.l, NULL), 0);
    pthread_t t[4];
    for (int i = 0; i < s.n; i++)
        t[i] = spawn(reader_together_main, &s);
    for (int i = 0; i < s.n; i++)
        join(t[i]);
    EXPECT(pthread_rwlock_trywrlock(&s.l), 0); /* all released */
    EXPECT(pthread_rwlock_unlock(&s.l), 0);
    EXPECT(pthread_rwlock_destroy(&s.l), 0);
}

struct rw_blocked { pthread_rwlock_t *l; int write; atomic_int got; };
static void *rw_blocked_main(void *p)
{
    struct rw_blocked *b = p;
    EXPECT(b->write ? pthread_rwlock_wrlock(b->l) : pthread_rwlock_rdlock(b->l), 0);
    atomic_store(&b->got, 1);
    EXPECT(pthread_rwlock_unlock(b->l), 0);
    return NULL;
}

/* Time out on a held rwlock from another thread, with the deadline on the
 * right clock. */
static void rw_other_times_out(pthread_rwlock_t *l, enum op k, clockid_t clk)
{
    struct timespec dl = in_ms(clk, SHORT_MS);
    EXPECT(rw_other(l, k, dl, clk), ETIMEDOUT);
    CHECK_DEADLINE(clk, dl);
}

static void rwlock_writer_excludes_readers(void)
{
    pthread_rwlock_t l;
    EXPECT(pthread_rwlock_init(&l, NULL), 0);
    EXPECT(pthread_rwlock_wrlock(&l), 0);
    EXPECT(rw_other(&l, TRYRD, NO_TS, 0), EBUSY);
    EXPECT(rw_other(&l, TRYWR, NO_TS, 0), EBUSY);
    rw_other_times_out(&l, TIMEDRD, CLOCK_REALTIME);
    rw_other_times_out(&l, TIMEDWR, CLOCK_REALTIME);
    rw_other_times_out(&l, CLOCKRD, CLOCK_MONOTONIC);
    rw_other_times_out(&l, CLOCKWR, CLOCK_MONOTONIC);
    rw_other_times_out(&l, CLOCKRD, CLOCK_REALTIME);
    rw_other_times_out(&l, CLOCKWR, CLOCK_REALTIME);
    struct timespec past = rt_in(-1000), neg = ts_make(-1, 0);
    PROMPTLY(EXPECT(rw_other(&l, TIMEDRD, past, 0), ETIMEDOUT));
    PROMPTLY(EXPECT(rw_other(&l, TIMEDWR, past, 0), ETIMEDOUT));
    PROMPTLY(EXPECT(rw_other(&l, TIMEDRD, neg, 0), ETIMEDOUT));
    PROMPTLY(EXPECT(rw_other(&l, TIMEDWR, neg, 0), ETIMEDOUT));
    /* a blocked reader gets in only after the writer leaves */
    struct rw_blocked b = {&l, 0};
    pthread_t t = spawn(rw_blocked_main, &b);
    sleep_ms(50);
    CHECK(atomic_load(&b.got) == 0, "a reader got in while the write lock was held");
    EXPECT(pthread_rwlock_unlock(&l), 0);
    join(t);
    CHECK(atomic_load(&b.got) == 1, "reader never got in");
    EXPECT(pthread_rwlock_destroy(&l), 0);
}

static void rwlock_readers_exclude_writer(void)
{
    pthread_rwlock_t l;
    EXPECT(pthread_rwlock_init(&l, NULL), 0);
    EXPECT(pthread_rwlock_rdlock(&l), 0);
    EXPECT(rw_other(&l, TRYWR, NO_TS, 0), EBUSY);
    EXPECT(rw_other(&l, TRYRD, NO_TS, 0), 0); /* readers share */
    rw_other_times_out(&l, TIMEDWR, CLOCK_REALTIME);
    rw_other_times_out(&l, CLOCKWR, CLOCK_MONOTONIC);
    struct timespec dl = rt_in(2000);
    EXPECT(rw_other(&l, TIMEDRD, dl, 0), 0);
    struct rw_blocked b = {&l, 1};
    pthread_t t = spawn(rw_blocked_main, &b);
    sleep_ms(50);
    CHECK(atomic_load(&b.got) == 0, "a writer got in while a read lock was held");
    EXPECT(pthread_rwlock_unlock(&l), 0);
    join(t);
    CHECK(atomic_load(&b.got) == 1, "writer never got in");
    EXPECT(pthread_rwlock_destroy(&l), 0);
}

static void rwlock_relock_edeadlk(void)
{
    pthread_rwlock_t l;
    EXPECT(pthread_rwlock_init(&l, NULL), 0);
    EXPECT(pthread_rwlock_wrlock(&l), 0);
    PROMPTLY(EXPECT(pthread_rwlock_wrlock(&l), EDEADLK));
    PROMPTLY(EXPECT(pthread_rwlock_rdlock(&l), EDEADLK));
    struct timespec dl = rt_in(2000);
    PROMPTLY(EXPECT(pthread_rwlock_timedwrlock(&l, &dl), EDEADLK));
    PROMPTLY(EXPECT(pthread_rwlock_timedrdlock(&l, &dl), EDEADLK));
    dl = mono_in(2000);
    PROMPTLY(EXPECT(pthread_rwlock_clockwrlock(&l, CLOCK_MONOTONIC, &dl), EDEADLK));
    PROMPTLY(EXPECT(pthread_rwlock_clockrdlock(&l, CLOCK_MONOTONIC, &dl), EDEADLK));
    EXPECT(pthread_rwlock_tryrdlock(&l), EBUSY);
    EXPECT(pthread_rwlock_trywrlock(&l), EBUSY);
    EXPECT(pthread_rwlock_unlock(&l), 0);
    /* nothing leaked: the lock is free for others */
    EXPECT(rw_other(&l, TRYWR, NO_TS, 0), 0);
    EXPECT(pthread_rwlock_destroy(&l), 0);
}

static void rwlock_timed_einval(void)
{
    pthread_rwlock_t l;
    EXPECT(pthread_rwlock_init(&l, NULL), 0);
    time_t s = (time_t)(now_ns(CLOCK_REALTIME) / 1000000000LL) + 2;
    time_t ms = (time_t)(now_ns(CLOCK_MONOTONIC) / 1000000000LL) + 2;
    struct timespec big = ts_make(s, 1000000000L), neg = ts_make(s, -1);
    struct timespec mbig = ts_make(ms, 1000000000L), mok = ts_make(ms, 0);
    struct holder h;
    hold(&h, H_WR, &l, 0);  /* blocked calls must validate */
    PROMPTLY(EXPECT(pthread_rwlock_timedrdlock(&l, &big), EINVAL));
    PROMPTLY(EXPECT(pthread_rwlock_timedrdlock(&l, &neg), EINVAL));
    PROMPTLY(EXPECT(pthread_rwlock_timedwrlock(&l, &big), EINVAL));
    PROMPTLY(EXPECT(pthread_rwlock_timedwrlock(&l, &neg), EINVAL));
    PROMPTLY(EXPECT(pthread_rwlock_clockrdlock(&l, CLOCK_MONOTONIC, &mbig), EINVAL));
    PROMPTLY(EXPECT(pthread_rwlock_clockwrlock(&l, CLOCK_MONOTONIC, &mbig), EINVAL));
    PROMPTLY(EXPECT(pthread_rwlock_clockrdlock(&l, CLOCK_PROCESS_CPUTIME_ID, &mok), EINVAL));
    PROMPTLY(EXPECT(pthread_rwlock_clockwrlock(&l, CLOCK_PROCESS_CPUTIME_ID, &mok), EINVAL));
    PROMPTLY(EXPECT(pthread_rwlock_clockrdlock(&l, (clockid_t)999, &mok), EINVAL));
    PROMPTLY(EXPECT(pthread_rwlock_clockwrlock(&l, (clockid_t)999, &mok), EINVAL));
    unhold(&h);
    hold(&h, H_RD, &l, 0);  /* read-held: the writer side must validate */
    PROMPTLY(EXPECT(pthread_rwlock_timedwrlock(&l, &big), EINVAL));
    PROMPTLY(EXPECT(pthread_rwlock_clockwrlock(&l, CLOCK_MONOTONIC, &mbig), EINVAL));
    unhold(&h);
    /* On a free lock POSIX lets an implementation skip the check and take
     * the lock (glibc checks first and says EINVAL); accept either, but a
     * success must really have taken the lock. */
    int rc = pthread_rwlock_timedwrlock(&l, &big);
    CHECK(rc == 0 || rc == EINVAL, "timedwrlock(bad nsec) on a free lock: %s", errname(rc));
    EXPECT(rw_other(&l, TRYRD, NO_TS, 0), rc == 0 ? EBUSY : 0);
    if (rc == 0)
        EXPECT(pthread_rwlock_unlock(&l), 0);
    rc = pthread_rwlock_timedrdlock(&l, &neg);
    CHECK(rc == 0 || rc == EINVAL, "timedrdlock(bad nsec) on a free lock: %s", errname(rc));
    EXPECT(rw_other(&l, TRYWR, NO_TS, 0), rc == 0 ? EBUSY : 0);
    if (rc == 0)
        EXPECT(pthread_rwlock_unlock(&l), 0);
    /* past deadlines never prevent taking a free lock */
    struct timespec past = rt_in(-1000), zero = ts_make(0, 0);
    EXPECT(pthread_rwlock_timedwrlock(&l, &past), 0);
    EXPECT(pthread_rwlock_unlock(&l), 0);
    EXPECT(pthread_rwlock_timedrdlock(&l, &zero), 0);
    EXPECT(pthread_rwlock_unlock(&l), 0);
    EXPECT(pthread_rwlock_destroy(&l), 0);
}

static void rwlock_clock_variants(void)
{
    pthread_rwlock_t l;
    EXPECT(pthread_rwlock_init(&l, NULL), 0);
    struct timespec dl = mono_in(1000);
    EXPECT(pthread_rwlock_clockrdlock(&l, CLOCK_MONOTONIC, &dl), 0);
    EXPECT(pthread_rwlock_unlock(&l), 0);
    EXPECT(pthread_rwlock_clockwrlock(&l, CLOCK_MONOTONIC, &dl), 0);
    EXPECT(pthread_rwlock_unlock(&l), 0);
    dl = rt_in(1000);
    EXPECT(pthread_rwlock_clockrdlock(&l, CLOCK_REALTIME, &dl), 0);
    EXPECT(pthread_rwlock_unlock(&l), 0);
    EXPECT(pthread_rwlock_clockwrlock(&l, CLOCK_REALTIME, &dl), 0);
    EXPECT(pthread_rwlock_unlock(&l), 0);
    /* held for write: both clocks time out on time (this thread) */
    struct holder h;
    hold(&h, H_WR, &l, 0);
    dl = mono_in(SHORT_MS);
    EXPECT(pthread_rwlock_clockrdlock(&l, CLOCK_MONOTONIC, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_MONOTONIC, dl);
    dl = mono_in(SHORT_MS);
    EXPECT(pthread_rwlock_clockwrlock(&l, CLOCK_MONOTONIC, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_MONOTONIC, dl);
    dl = rt_in(SHORT_MS);
    EXPECT(pthread_rwlock_timedwrlock(&l, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_REALTIME, dl);
    unhold(&h);
    /* acquired when released before the deadline; far future never overflows */
    hold(&h, H_WR, &l, 40);
    dl = mono_in(5000);
    EXPECT(pthread_rwlock_clockrdlock(&l, CLOCK_MONOTONIC, &dl), 0);
    EXPECT(pthread_rwlock_unlock(&l), 0);
    join(h.t);
    hold(&h, H_RD, &l, 40);
    struct timespec ff = far_future();
    EXPECT(pthread_rwlock_timedwrlock(&l, &ff), 0);
    EXPECT(pthread_rwlock_unlock(&l), 0);
    join(h.t);
    hold(&h, H_WR, &l, 40);
    ff = ts_make((time_t)INT_MAX, 999999999L);
    EXPECT(pthread_rwlock_clockwrlock(&l, CLOCK_MONOTONIC, &ff), 0);
    EXPECT(pthread_rwlock_unlock(&l), 0);
    join(h.t);
    EXPECT(pthread_rwlock_destroy(&l), 0);
}

static pthread_rwlock_t s_rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_rwlock_t s_rw_wnr = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static void rwlock_static_one(pthread_rwlock_t *l)
{
    EXPECT(pthread_rwlock_rdlock(l), 0);
    EXPECT(rw_other(l, TRYRD, NO_TS, 0), 0);
    EXPECT(rw_other(l, TRYWR, NO_TS, 0), EBUSY);
    EXPECT(pthread_rwlock_unlock(l), 0);
    EXPECT(pthread_rwlock_wrlock(l), 0);
    EXPECT(pthread_rwlock_wrlock(l), EDEADLK);
    EXPECT(rw_other(l, TRYRD, NO_TS, 0), EBUSY);
    EXPECT(pthread_rwlock_unlock(l), 0);
    EXPECT(rw_other(l, TRYWR, NO_TS, 0), 0);
}
static void rwlock_static_initializers(void)
{
    rwlock_static_one(&s_rw);
    rwlock_static_one(&s_rw_wnr);
}

static void rwlock_zero_initialized(void)
{
    pthread_rwlock_t *l = calloc(1, sizeof *l); /* all-zero == default initializer */
    CHECK(l, "calloc");
    rwlock_static_one(l);
    free(l);
}

static void rwlock_writer_preferred_nonrecursive(void)
{
    /* With PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP, new readers are
     * held back while a writer waits. */
    pthread_rwlock_t l = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
    EXPECT(pthread_rwlock_rdlock(&l), 0);
    struct rw_blocked w = {&l, 1};
    pthread_t t = spawn(rw_blocked_main, &w);
    /* poll until the waiting writer makes new readers fail */
    int64_t end = now_ns(CLOCK_MONOTONIC) + 3000 * MS;
    int rc;
    while ((rc = rw_other(&l, TRYRD, NO_TS, 0)) == 0 && now_ns(CLOCK_MONOTONIC) < end)
        sleep_ms(5);
    CHECK(rc == EBUSY, "tryrdlock while a writer waits: %s (expected EBUSY)", errname(rc));
    struct timespec dl = rt_in(SHORT_MS);
    EXPECT(rw_other(&l, TIMEDRD, dl, 0), ETIMEDOUT);
    CHECK(atomic_load(&w.got) == 0, "writer got in while a reader held the lock");
    EXPECT(pthread_rwlock_unlock(&l), 0);
    join(t);
    CHECK(atomic_load(&w.got) == 1, "writer never got in");
    EXPECT(pthread_rwlock_destroy(&l), 0);
}

static void rwlock_recursive_read_with_waiting_writer(void)
{
    /* Default rwlocks (PREFER_READER_NP) let a thread that already holds a
     * read lock take it again even while a writer waits; otherwise the
     * recursive read deadlocks against the writer. */
    pthread_rwlock_t l;
    EXPECT(pthread_rwlock_init(&l, NULL), 0);
    EXPECT(pthread_rwlock_rdlock(&l), 0);
    struct rw_blocked w = {&l, 1};
    pthread_t t = spawn(rw_blocked_main, &w);
    sleep_ms(50);  /* let the writer block */
    struct timespec dl = rt_in(2000);
    EXPECT(pthread_rwlock_timedrdlock(&l, &dl), 0);
    EXPECT(pthread_rwlock_tryrdlock(&l), 0);
    CHECK(atomic_load(&w.got) == 0, "writer got in while readers held the lock");
    EXPECT(pthread_rwlock_unlock(&l), 0);
    EXPECT(pthread_rwlock_unlock(&l), 0);
    sleep_ms(20);
    CHECK(atomic_load(&w.got) == 0, "writer got in while a reader held the lock");
    EXPECT(pthread_rwlock_unlock(&l), 0);
    join(t);
    CHECK(atomic_load(&w.got) == 1, "writer never got in");
    EXPECT(pthread_rwlock_destroy(&l), 0);
}

static void rwlock_recursive_read(void)
{
    pthread_rwlock_t l;
    EXPECT(pthread_rwlock_init(&l, NULL), 0);
    EXPECT(pthread_rwlock_rdlock(&l), 0);
    EXPECT(pthread_rwlock_tryrdlock(&l), 0);
    struct timespec dl = rt_in(1000);
    EXPECT(pthread_rwlock_timedrdlock(&l, &dl), 0);
    for (int i = 0; i < 3; i++) {
        EXPECT(rw_other(&l, TRYWR, NO_TS, 0), EBUSY);
        EXPECT(pthread_rwlock_unlock(&l), 0);
    }
    EXPECT(rw_other(&l, TRYWR, NO_TS, 0), 0);
    EXPECT(pthread_rwlock_destroy(&l), 0);
}

/* Readers must never see a writer's multi-word update half done. */
struct rw_inv { pthread_rwlock_t l; long w[4]; atomic_int readers, writers; int iters; };
static void *rw_inv_main(void *p)
{
    struct rw_inv *s = p;
    unsigned seed = (unsigned)(uintptr_t)&seed;
    for (int i = 0; i < s->iters; i++) {
        if (rand_r(&seed) % 4 == 0) {
            EXPECT(pthread_rwlock_wrlock(&s->l), 0);
            CHECK(atomic_fetch_add(&s->writers, 1) == 0, "two writers inside");
            CHECK(atomic_load(&s->readers) == 0, "writer inside with readers");
            long v = s->w[0] + 1;
            for (int k = 0; k < 4; k++) {
                s->w[k] = v;
                if (k == 1)
                    sched_yield(); /* widen the torn window */
            }
            atomic_fetch_sub(&s->writers, 1);
        } else {
            EXPECT(pthread_rwlock_rdlock(&s->l), 0);
            atomic_fetch_add(&s->readers, 1);
            CHECK(atomic_load(&s->writers) == 0, "reader inside with a writer");
            long v = s->w[0];
            for (int k = 1; k < 4; k++)
                CHECK(s->w[k] == v, "torn read: w[0]=%ld w[%d]=%ld", v, k, s->w[k]);
            atomic_fetch_sub(&s->readers, 1);
        }
        EXPECT(pthread_rwlock_unlock(&s->l), 0);
    }
    return NULL;
}
static void rwlock_mutual_exclusion(void)
{
    struct rw_inv s;
    memset(&s, 0, sizeof s);
    s.iters = 5000;
    EXPECT(pthread_rwlock_init(&s.l, NULL), 0);
    pthread_t t[6];
    for (int i = 0; i < 6; i++)
        t[i] = spawn(rw_inv_main, &s);
    for (int i = 0; i < 6; i++)
        join(t[i]);
    EXPECT(pthread_rwlock_destroy(&s.l), 0);
}

static void *rw_report_main(void *p)
{
    struct rw_blocked *b = p;
    int rc = b->write ? pthread_rwlock_wrlock(b->l) : pthread_rwlock_rdlock(b->l);
    if (rc == 0)
        EXPECT(pthread_rwlock_unlock(b->l), 0);
    return (void *)(intptr_t)rc;
}
static void rwlock_not_eintr(void)
{
    /* POSIX: the rwlock functions shall not return EINTR. */
    install_sigusr1();
    pthread_rwlock_t l;
    EXPECT(pthread_rwlock_init(&l, NULL), 0);
    for (int write = 0; write < 2; write++) {
        if (write)
            EXPECT(pthread_rwlock_rdlock(&l), 0);
        else
            EXPECT(pthread_rwlock_wrlock(&l), 0);
        struct rw_blocked b = {&l, write};
        pthread_t t = spawn(rw_report_main, &b);
        sleep_ms(20);
        pelt(t, 20);
        still_running(t);
        EXPECT(pthread_rwlock_unlock(&l), 0);
        int rc = (int)(intptr_t)join(t);
        CHECK(rc == 0, "blocked %s returned %s after signals",
              write ? "wrlock" : "rdlock", errname(rc));
    }
    CHECK(atomic_load(&g_sigs) > 0, "no signal was delivered");
    EXPECT(pthread_rwlock_destroy(&l), 0);
}

static void rwlock_pshared_across_fork(void)
{
    struct shm { pthread_rwlock_t l; long w[4]; } *s = shared_alloc(sizeof *s);
    pthread_rwlockattr_t a;
    EXPECT(pthread_rwlockattr_init(&a), 0);
    EXPECT(pthread_rwlockattr_setpshared(&a, PTHREAD_PROCESS_SHARED), 0);
    EXPECT(pthread_rwlock_init(&s->l, &a), 0);
    pid_t pid = fork_child();
    unsigned seed = (unsigned)getpid();
    for (int i = 0; i < 5000; i++) {
        if (rand_r(&seed) % 3 == 0) {
            EXPECT(pthread_rwlock_wrlock(&s->l), 0);
            long v = s->w[0] + 1;
            for (int k = 0; k < 4; k++)
                __atomic_store_n(&s->w[k], v, __ATOMIC_RELAXED);
        } else {
            EXPECT(pthread_rwlock_rdlock(&s->l), 0);
            long v = __atomic_load_n(&s->w[0], __ATOMIC_RELAXED);
            for (int k = 1; k < 4; k++) {
                long x = __atomic_load_n(&s->w[k], __ATOMIC_RELAXED);
                CHECK(x == v, "torn read across processes: %ld vs %ld", v, x);
            }
        }
        EXPECT(pthread_rwlock_unlock(&s->l), 0);
    }
    if (pid == 0)
        _exit(0);
    wait_child(pid);
}

/* Destruction right after the last unlock (best effort: the window is a few
 * instructions).  Ping-pong between a reader and a writer: one holds the
 * lock while the other blocks on it; the holder unlocks, the blocked one
 * gets the lock, releases it, destroys it and at once reuses the memory:
 * fills it with a pattern (a late write by the first thread's unlock shows
 * as a changed byte), unmaps it (a late access is a SIGSEGV), or
 * re-initialises it (a late write corrupts the new lock).  glibc's rwlock
 * does not touch the lock after the release that lets the next owner in. */
#define RWU_PAGE 4096
struct rwuaf {
    pthread_rwlock_t *l;
    int first_writes;        /* the first holder takes a write lock */
    int hold_ns;             /* how long the first holder keeps the lock */
    atomic_int iter, held, done, stop;
};
static void *rwuaf_main(void *p)
{
    struct rwuaf *s = p;
    for (int i = 1;; i++) {
        while (atomic_load(&s->iter) < i) {
            if (atomic_load(&s->stop))
                return NULL;
            sched_yield();
        }
        pthread_rwlock_t *l = s->l;
        EXPECT(s->first_writes ? pthread_rwlock_wrlock(l) : pthread_rwlock_rdlock(l), 0);
        atomic_store(&s->held, i);
        int64_t until = now_ns(CLOCK_MONOTONIC) + s->hold_ns;
        while (now_ns(CLOCK_MONOTONIC) < until)
            ;
        EXPECT(pthread_rwlock_unlock(l), 0);
        atomic_store(&s->done, i);
    }
}
static void rwlock_destroy_after_last_unlock(void)
{
    struct rwuaf s;
    memset(&s, 0, sizeof s);
    pthread_t t = spawn(rwuaf_main, &s);
    int64_t end = now_ns(CLOCK_MONOTONIC) + 2000 * MS;
    int i;
    for (i = 1; i <= 20000 && now_ns(CLOCK_MONOTONIC) < end; i++) {
        unsigned char *page = mmap(NULL, RWU_PAGE, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(page != MAP_FAILED, "mmap: %s", strerror(errno));
        pthread_rwlock_t *l = (pthread_rwlock_t *)page;
        EXPECT(pthread_rwlock_init(l, NULL), 0);
        int mode = i % 3;          /* 0 pattern, 1 munmap, 2 re-init */
        s.l = l;
        s.first_writes = (i / 3) % 2;
        s.hold_ns = (int)((i * 7919L) % 80) * 1000; /* 0..79 us */
        atomic_store(&s.iter, i);
        while (atomic_load(&s.held) < i)
            sched_yield();
        /* blocks until the other thread unlocks */
        if (s.first_writes)
            EXPECT(pthread_rwlock_rdlock(l), 0);
        else
            EXPECT(pthread_rwlock_wrlock(l), 0);
        EXPECT(pthread_rwlock_unlock(l), 0);
        EXPECT(pthread_rwlock_destroy(l), 0);
        switch (mode) {
        case 0:
            memset(page, 0x5A, sizeof *l);
            break;
        case 1:
            CHECK(munmap(page, RWU_PAGE) == 0, "munmap: %s", strerror(errno));
            break;
        default:
            EXPECT(pthread_rwlock_init(l, NULL), 0);
        }
        while (atomic_load(&s.done) < i)
            sched_yield();
        if (mode == 0) {
            for (unsigned k = 0; k < sizeof *l; k++)
                CHECK(page[k] == 0x5A,
                      "iteration %d: byte %u of the destroyed, reused rwlock changed to %#x "
                      "after the %s's unlock", i, k, page[k],
                      s.first_writes ? "writer" : "reader");
        } else if (mode == 2) {
            int rc = pthread_rwlock_trywrlock(l);
            CHECK(rc == 0, "iteration %d: trywrlock on the re-initialised rwlock returned %s "
                  "(the %s's unlock wrote into it?)", i, errname(rc),
                  s.first_writes ? "writer" : "reader");
            EXPECT(pthread_rwlock_unlock(l), 0);
            EXPECT(pthread_rwlock_rdlock(l), 0);
            EXPECT(pthread_rwlock_unlock(l), 0);
            EXPECT(pthread_rwlock_destroy(l), 0);
        }
        if (mode != 1)
            CHECK(munmap(page, RWU_PAGE) == 0, "munmap: %s", strerror(errno));
    }
    atomic_store(&s.stop, 1);
    join(t);
    CHECK(i > 100, "only %d iterations in 2 s", i - 1);
}

/* The same property, checked deterministically: the releasing thread is
 * single-stepped (ptrace, from this case's process) through its unlock
 * call, and after every instruction another thread of its process gets the
 * chance to take the lock (a try-lock at every step, or a lock call it is
 * blocked in), release it, destroy it and make its page inaccessible.  Once
 * that has happened, the rest of the unlock call must not touch the page:
 * if it does, it faults, and the tracer notes the fault, has the page
 * opened again and lets the unlock finish.  (POSIX: a lock may be destroyed
 * as soon as it is unlocked; the POSIX pthread_mutex_destroy example frees
 * a reference-counted object right after its mutex's release.) */
enum { SR_RDUNLOCK, SR_WRUNLOCK, SR_MUTEX };
static const char *const sr_names[] = {"reader's pthread_rwlock_unlock",
                                       "writer's pthread_rwlock_unlock",
                                       "pthread_mutex_unlock"};
struct steprel {
    int kind, blocked;      /* SR_*; the acquirer blocks in a lock call (else try-locks) */
    long page;              /* the object's page in the worker */
    atomic_int tid;         /* the releasing thread */
    atomic_int attached;    /* tracer: 1 attached, -1 cannot trace */
    atomic_int held, waiting, got;
    atomic_long req, ack;   /* tracer: try now (step number); acquirer: tried */
    atomic_int destroyed;   /* acquirer: took, released, destroyed, protected it */
    atomic_int faulted;     /* tracer: the releaser touched the protected page */
    atomic_int reopened;    /* acquirer: the page is accessible again */
    atomic_int done;        /* tracer: the releaser's unlock returned, detached */
    long fault_off, steps;
};
#define SR_PAGE 4096
static void *sr_releaser(void *p)
{
    struct steprel *sh = p;
    void *o = (void *)sh->page;
    int rc = sh->kind == SR_MUTEX ? pthread_mutex_lock(o)
             : sh->kind == SR_RDUNLOCK ? pthread_rwlock_rdlock(o) : pthread_rwlock_wrlock(o);
    CHECK(rc == 0, "lock: %s", errname(rc));
    atomic_store(&sh->held, 1);
    while (sh->blocked && !atomic_load(&sh->waiting))
        sleep_ms(1);
    if (sh->blocked)
        sleep_ms(30); /* the acquirer is asleep in its lock call by now (or spinning) */
    atomic_store(&sh->tid, (int)syscall(SYS_gettid));
    while (atomic_load(&sh->attached) == 0)
        sleep_ms(1);
    if (atomic_load(&sh->attached) > 0)
        trace_mark(); /* the tracer single-steps from here ... */
    rc = sh->kind == SR_MUTEX ? pthread_mutex_unlock(o) : pthread_rwlock_unlock(o);
    if (atomic_load(&sh->attached) > 0)
        trace_mark(); /* ... to here */
    CHECK(rc == 0, "unlock: %s", errname(rc));
    return NULL;
}
static void sr_take_down(struct steprel *sh)
{
    void *o = (void *)sh->page;
    atomic_store(&sh->got, 1);
    if (sh->kind == SR_MUTEX) {
        EXPECT(pthread_mutex_unlock(o), 0);
        EXPECT(pthread_mutex_destroy(o), 0);
    } else {
        EXPECT(pthread_rwlock_unlock(o), 0);
        EXPECT(pthread_rwlock_destroy(o), 0);
    }
    memset(o, 0x5A, 64);
    CHECK(mprotect(o, SR_PAGE, PROT_NONE) == 0, "mprotect: %s", strerror(errno));
    atomic_store(&sh->destroyed, 1);
}
static void *sr_acquirer(void *p)
{
    struct steprel *sh = p;
    void *o = (void *)sh->page;
    if (sh->blocked) {
        atomic_store(&sh->waiting, 1);
        int rc = sh->kind == SR_MUTEX ? pthread_mutex_lock(o) : pthread_rwlock_wrlock(o);
        CHECK(rc == 0, "blocked lock: %s", errname(rc));
        sr_take_down(sh);
    } else {
        long seen = 0;
        while (!atomic_load(&sh->destroyed) && !atomic_load(&sh->done)) {
            long r = atomic_load(&sh->req);
            if (r == seen) {
                sched_yield();
                continue;
            }
            seen = r;
            int rc = sh->kind == SR_MUTEX ? pthread_mutex_trylock(o) : pthread_rwlock_trywrlock(o);
            if (rc == 0)
                sr_take_down(sh);
            else
                CHECK(rc == EBUSY, "try-lock: %s", errname(rc));
            atomic_store(&sh->ack, r);
        }
    }
    while (!atomic_load(&sh->done)) {
        if (atomic_load(&sh->faulted) && !atomic_load(&sh->reopened)) {
            CHECK(mprotect(o, SR_PAGE, PROT_READ | PROT_WRITE) == 0, "mprotect: %s",
                  strerror(errno));
            atomic_store(&sh->reopened, 1);
        }
        sched_yield();
    }
    return NULL;
}
static void sr_worker(struct steprel *sh)
{
    install_mark_handler();
    void *o = mmap(NULL, SR_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(o != MAP_FAILED, "mmap: %s", strerror(errno));
    sh->page = (long)o;
    /* every call once, so that nothing is resolved lazily while stepping */
    if (sh->kind == SR_MUTEX) {
        EXPECT(pthread_mutex_init(o, NULL), 0);
        EXPECT(pthread_mutex_lock(o), 0);
        EXPECT(pthread_mutex_unlock(o), 0);
        EXPECT(pthread_mutex_trylock(o), 0);
        EXPECT(pthread_mutex_unlock(o), 0);
    } else {
        EXPECT(pthread_rwlock_init(o, NULL), 0);
        EXPECT(pthread_rwlock_rdlock(o), 0);
        EXPECT(pthread_rwlock_unlock(o), 0);
        EXPECT(pthread_rwlock_wrlock(o), 0);
        EXPECT(pthread_rwlock_unlock(o), 0);
        EXPECT(pthread_rwlock_trywrlock(o), 0);
        EXPECT(pthread_rwlock_unlock(o), 0);
    }
    pthread_t r = spawn(sr_releaser, sh);
    CHECK(wait_flag(&sh->held, 1, 3000), "the releaser did not get the lock");
    pthread_t a = spawn(sr_acquirer, sh);
    join(r);
    join(a);
}
static void step_through_release(int kind, int blocked)
{
    struct steprel *sh = shared_alloc(sizeof *sh);
    sh->kind = kind;
    sh->blocked = blocked;
    pid_t pid = fork_child();
    if (pid == 0) {
        sr_worker(sh);
        _exit(0);
    }
    int tid;
    int64_t end = now_ns(CLOCK_MONOTONIC) + 5000 * MS;
    while ((tid = atomic_load(&sh->tid)) == 0) {
        CHECK(now_ns(CLOCK_MONOTONIC) < end, "the worker did not start");
        sleep_ms(1);
    }
    if (ptrace(PTRACE_SEIZE, tid, 0, 0) != 0) {
        int e = errno;
        atomic_store(&sh->attached, -1);
        wait_child(pid);
        char why[100];
        snprintf(why, sizeof why, "cannot ptrace a thread of a child process: %s", strerror(e));
        skip_case(why);
    }
    atomic_store(&sh->attached, 1);
    int st;
    CHECK(waitpid(tid, &st, __WALL) == tid, "waitpid: %s", strerror(errno));
    CHECK(WIFSTOPPED(st) && WSTOPSIG(st) == SIGUSR2, "unexpected first stop, status %#x", st);
    long steps = 0;
    int inject = 0;
    for (;;) {
        int step = !atomic_load(&sh->destroyed);
        CHECK(ptrace(step ? PTRACE_SINGLESTEP : PTRACE_CONT, tid, 0, (void *)(long)inject) == 0,
              "ptrace: %s", strerror(errno));
        inject = 0;
        CHECK(waitpid(tid, &st, __WALL) == tid, "waitpid: %s", strerror(errno));
        if (!WIFSTOPPED(st))
            break; /* the worker died: wait_child() says how */
        int sig = WSTOPSIG(st);
        if (sig == SIGUSR2)
            break; /* the unlock call returned */
        if (sig == SIGSEGV && atomic_load(&sh->destroyed) && !atomic_load(&sh->faulted)) {
            siginfo_t si;
            CHECK(ptrace(PTRACE_GETSIGINFO, tid, 0, &si) == 0, "ptrace: %s", strerror(errno));
            sh->fault_off = (long)si.si_addr - sh->page;
            sh->steps = steps;
            atomic_store(&sh->faulted, 1);
            end = now_ns(CLOCK_MONOTONIC) + 3000 * MS;
            while (!atomic_load(&sh->reopened)) {
                CHECK(now_ns(CLOCK_MONOTONIC) < end, "the page was not opened again");
                sched_yield();
            }
            continue; /* resumed without the signal: the access is retried */
        }
        if (sig != SIGTRAP) {
            inject = sig; /* not ours: deliver it */
            continue;
        }
        CHECK(++steps < 2000000, "still inside the unlock call after %ld instructions", steps);
        if (!step)
            continue;
        if (blocked) {
            /* give the blocked thread a moment: if it got the lock, it
             * takes it down before the releaser moves on */
            int64_t until = now_ns(CLOCK_MONOTONIC) + MS / 4;
            while (!atomic_load(&sh->got) && now_ns(CLOCK_MONOTONIC) < until)
                sched_yield();
            end = now_ns(CLOCK_MONOTONIC) + 3000 * MS;
            while (atomic_load(&sh->got) && !atomic_load(&sh->destroyed))
                CHECK(now_ns(CLOCK_MONOTONIC) < end, "the acquirer did not finish");
        } else {
            atomic_store(&sh->req, steps);
            end = now_ns(CLOCK_MONOTONIC) + 3000 * MS;
            while (atomic_load(&sh->ack) != steps) {
                CHECK(now_ns(CLOCK_MONOTONIC) < end, "the acquirer did not answer");
                sched_yield();
            }
        }
    }
    if (WIFSTOPPED(st))
        CHECK(ptrace(PTRACE_DETACH, tid, 0, 0) == 0, "ptrace detach: %s", strerror(errno));
    atomic_store(&sh->done, 1);
    wait_child(pid);
    CHECK(!atomic_load(&sh->faulted),
          "%s (%s) accessed the lock at offset %ld after another thread had taken it, "
          "released it and destroyed it (%ld instructions into the call)",
          sr_names[kind], blocked ? "a thread blocked on the lock" : "try-locks at every step",
          sh->fault_off, sh->steps);
    CHECK(atomic_load(&sh->destroyed), "the lock was never taken by the other thread");
}
static void rwlock_unlock_no_access_after_release(void)
{
    for (int blocked = 0; blocked < 2; blocked++) {
        step_through_release(SR_RDUNLOCK, blocked);
        step_through_release(SR_WRUNLOCK, blocked);
    }
}
static void mutex_unlock_no_access_after_release(void)
{
    for (int blocked = 0; blocked < 2; blocked++)
        step_through_release(SR_MUTEX, blocked);
}

/* ------------------------------------------------------------------------ */
/* Semaphore cases                                                           */
/* ------------------------------------------------------------------------ */

static int sem_value(sem_t *s)
{
    int v = -12345;
    EXPECT_SEM(sem_getvalue(s, &v), 0);
    return v;
}

static void sem_init_value_and_trywait(void)
{
    sem_t s;
    EXPECT_SEM(sem_init(&s, 0, 3), 0);
    CHECK(sem_value(&s) == 3, "value %d, expected 3", sem_value(&s));
    EXPECT_SEM(sem_trywait(&s), 0);
    EXPECT_SEM(sem_wait(&s), 0);
    struct timespec dl = rt_in(1000);
    EXPECT_SEM(sem_timedwait(&s, &dl), 0);
    CHECK(sem_value(&s) == 0, "value %d, expected 0", sem_value(&s));
    EXPECT_SEM(sem_trywait(&s), EAGAIN);
    EXPECT_SEM(sem_trywait(&s), EAGAIN);
    EXPECT_SEM(sem_post(&s), 0);
    EXPECT_SEM(sem_post(&s), 0);
    CHECK(sem_value(&s) == 2, "value %d, expected 2", sem_value(&s));
    /* past deadlines never prevent taking an available token */
    struct timespec past = rt_in(-1000), zero = ts_make(0, 0);
    EXPECT_SEM(sem_timedwait(&s, &past), 0);
    EXPECT_SEM(sem_timedwait(&s, &zero), 0);
    EXPECT_SEM(sem_destroy(&s), 0);
    EXPECT_SEM(sem_init(&s, 0, 0), 0);
    CHECK(sem_value(&s) == 0, "value %d, expected 0", sem_value(&s));
    EXPECT_SEM(sem_trywait(&s), EAGAIN);
    EXPECT_SEM(sem_destroy(&s), 0);
}

static void sem_timedwait_times_out(void)
{
    sem_t s;
    EXPECT_SEM(sem_init(&s, 0, 0), 0);
    struct timespec dl = rt_in(SHORT_MS);
    EXPECT_SEM(sem_timedwait(&s, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_REALTIME, dl);
    struct timespec past = rt_in(-1000), neg = ts_make(-1, 0);
    PROMPTLY(EXPECT_SEM(sem_timedwait(&s, &past), ETIMEDOUT));
    PROMPTLY(EXPECT_SEM(sem_timedwait(&s, &neg), ETIMEDOUT));
    CHECK(sem_value(&s) == 0, "value %d after timeouts", sem_value(&s));
    EXPECT_SEM(sem_post(&s), 0);
    EXPECT_SEM(sem_trywait(&s), 0);
    EXPECT_SEM(sem_destroy(&s), 0);
}

static void sem_timedwait_einval(void)
{
    sem_t s;
    EXPECT_SEM(sem_init(&s, 0, 0), 0);
    time_t sec = (time_t)(now_ns(CLOCK_REALTIME) / 1000000000LL) + 2;
    struct timespec big = ts_make(sec, 1000000000L), neg = ts_make(sec, -1);
    PROMPTLY(EXPECT_SEM(sem_timedwait(&s, &big), EINVAL));
    PROMPTLY(EXPECT_SEM(sem_timedwait(&s, &neg), EINVAL));
    /* With a token available POSIX lets the call succeed without checking
     * (glibc checks first: EINVAL); either way the count must match. */
    EXPECT_SEM(sem_post(&s), 0);
    errno = 0;
    int rc = sem_timedwait(&s, &big);
    int e = errno;
    CHECK(rc == 0 || (rc == -1 && e == EINVAL), "sem_timedwait(bad nsec, value 1): %d/%s", rc,
          errname(e));
    CHECK(sem_value(&s) == (rc == 0 ? 0 : 1), "value %d after rc %d", sem_value(&s), rc);
    EXPECT_SEM(sem_destroy(&s), 0);
}

static void sem_clockwait_cases(void)
{
    sem_t s;
    EXPECT_SEM(sem_init(&s, 0, 0), 0);
    struct timespec dl = mono_in(SHORT_MS);
    EXPECT_SEM(sem_clockwait(&s, CLOCK_MONOTONIC, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_MONOTONIC, dl);
    dl = rt_in(SHORT_MS);
    EXPECT_SEM(sem_clockwait(&s, CLOCK_REALTIME, &dl), ETIMEDOUT);
    CHECK_DEADLINE(CLOCK_REALTIME, dl);
    dl = mono_in(1000);
    PROMPTLY(EXPECT_SEM(sem_clockwait(&s, CLOCK_PROCESS_CPUTIME_ID, &dl), EINVAL));
    PROMPTLY(EXPECT_SEM(sem_clockwait(&s, (clockid_t)999, &dl), EINVAL));
    struct timespec big = ts_make(dl.tv_sec, 1000000000L);
    PROMPTLY(EXPECT_SEM(sem_clockwait(&s, CLOCK_MONOTONIC, &big), EINVAL));
    EXPECT_SEM(sem_post(&s), 0);
    dl = mono_in(1000);
    EXPECT_SEM(sem_clockwait(&s, CLOCK_MONOTONIC, &dl), 0);
    CHECK(sem_value(&s) == 0, "value %d", sem_value(&s));
    EXPECT_SEM(sem_destroy(&s), 0);
}

struct late_post { sem_t *s; int delay_ms, n; };
static void *late_post_main(void *p)
{
    struct late_post *lp = p;
    sleep_ms(lp->delay_ms);
    for (int i = 0; i < lp->n; i++)
        EXPECT_SEM(sem_post(lp->s), 0);
    return NULL;
}
static void sem_wait_woken_by_post(void)
{
    sem_t s;
    EXPECT_SEM(sem_init(&s, 0, 0), 0);
    struct late_post lp = {&s, 30, 1};
    pthread_t t = spawn(late_post_main, &lp);
    EXPECT_SEM(sem_wait(&s), 0);
    join(t);
    t = spawn(late_post_main, &lp);
    struct timespec dl = rt_in(5000);
    EXPECT_SEM(sem_timedwait(&s, &dl), 0);
    join(t);
    t = spawn(late_post_main, &lp);
    dl = mono_in(5000);
    EXPECT_SEM(sem_clockwait(&s, CLOCK_MONOTONIC, &dl), 0);
    join(t);
    /* far-future deadlines mean "until posted" */
    t = spawn(late_post_main, &lp);
    struct timespec ff = far_future();
    EXPECT_SEM(sem_timedwait(&s, &ff), 0);
    join(t);
    t = spawn(late_post_main, &lp);
    ff = ts_make((time_t)INT_MAX, 999999999L);
    EXPECT_SEM(sem_clockwait(&s, CLOCK_MONOTONIC, &ff), 0);
    join(t);
    CHECK(sem_value(&s) == 0, "value %d", sem_value(&s));
    EXPECT_SEM(sem_destroy(&s), 0);
}

struct sem_waiter { sem_t *s; atomic_int *woke; };
static void *sem_waiter_main(void *p)
{
    struct sem_waiter *w = p;
    EXPECT_SEM(sem_wait(w->s), 0);
    atomic_fetch_add(w->woke, 1);
    return NULL;
}
static void sem_each_post_wakes_one(void)
{
    enum { N = 5 };
    sem_t s;
    atomic_int woke = 0;
    EXPECT_SEM(sem_init(&s, 0, 0), 0);
    struct sem_waiter w = {&s, &woke};
    pthread_t t[N];
    for (int i = 0; i < N; i++)
        t[i] = spawn(sem_waiter_main, &w);
    sleep_ms(50);
    int v = sem_value(&s);
    /* POSIX allows a negative count of waiters; glibc reports 0 */
    CHECK(v <= 0, "sem_getvalue with blocked waiters: %d", v);
    for (int i = 1; i <= N; i++) {
        EXPECT_SEM(sem_post(&s), 0);
        CHECK(wait_flag(&woke, i, 3000), "post %d woke nobody (%d woke)", i, atomic_load(&woke));
    }
    for (int i = 0; i < N; i++)
        join(t[i]);
    sleep_ms(10);
    CHECK(atomic_load(&woke) == N, "woke %d", atomic_load(&woke));
    CHECK(sem_value(&s) == 0, "value %d", sem_value(&s));
    EXPECT_SEM(sem_destroy(&s), 0);
}

struct sem_count { sem_t s; atomic_int inside, max_inside; int limit, iters; };
static void *sem_count_main(void *p)
{
    struct sem_count *c = p;
    for (int i = 0; i < c->iters; i++) {
        struct timespec dl;
        switch (i % 3) {
        case 0: EXPECT_SEM(sem_wait(&c->s), 0); break;
        case 1:
            while (sem_trywait(&c->s) != 0)
                CHECK(errno == EAGAIN, "sem_trywait errno %s", errname(errno));
            break;
        default: dl = rt_in(5000); EXPECT_SEM(sem_timedwait(&c->s, &dl), 0);
        }
        int in = atomic_fetch_add(&c->inside, 1) + 1;
        CHECK(in <= c->limit, "%d holders of a %d-token semaphore", in, c->limit);
        if (i % 7 == 0)
            sched_yield();
        atomic_fetch_sub(&c->inside, 1);
        EXPECT_SEM(sem_post(&c->s), 0);
    }
    return NULL;
}
static void sem_counting_resource(void)
{
    struct sem_count c;
    memset(&c, 0, sizeof c);
    c.limit = 3;
    c.iters = 2000;
    EXPECT_SEM(sem_init(&c.s, 0, c.limit), 0);
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
        t[i] = spawn(sem_count_main, &c);
    for (int i = 0; i < 8; i++)
        join(t[i]);
    CHECK(sem_value(&c.s) == c.limit, "final value %d, expected %d", sem_value(&c.s), c.limit);
    EXPECT_SEM(sem_destroy(&c.s), 0);
}

static void sem_post_eoverflow(void)
{
    sem_t s;
    EXPECT_SEM(sem_init(&s, 0, SEM_VALUE_MAX), 0);
    CHECK(sem_value(&s) == SEM_VALUE_MAX, "value %d", sem_value(&s));
    EXPECT_SEM(sem_post(&s), EOVERFLOW);
    CHECK(sem_value(&s) == SEM_VALUE_MAX, "value %d after EOVERFLOW", sem_value(&s));
    EXPECT_SEM(sem_trywait(&s), 0);
    EXPECT_SEM(sem_post(&s), 0);
    EXPECT_SEM(sem_post(&s), EOVERFLOW);
    EXPECT_SEM(sem_destroy(&s), 0);
}

static void sem_init_value_too_large(void)
{
    sem_t s;
    EXPECT_SEM(sem_init(&s, 0, (unsigned)SEM_VALUE_MAX + 1u), EINVAL);
    EXPECT_SEM(sem_init(&s, 0, UINT_MAX), EINVAL);
    EXPECT_SEM(sem_init(&s, 1, (unsigned)SEM_VALUE_MAX + 1u), EINVAL);
    EXPECT_SEM(sem_init(&s, 0, SEM_VALUE_MAX), 0);
    EXPECT_SEM(sem_destroy(&s), 0);
}

static void *sem_wait_report(void *p)
{
    errno = 0;
    int rc = sem_wait(p);
    return (void *)(intptr_t)(rc == 0 ? 0 : errno);
}
static void sem_wait_eintr(void)
{
    /* A signal handler installed without SA_RESTART interrupts sem_wait:
     * -1 with EINTR (POSIX and glibc), and no token is consumed. */
    install_sigusr1();
    sem_t s;
    EXPECT_SEM(sem_init(&s, 0, 0), 0);
    pthread_t t = spawn(sem_wait_report, &s);
    /* A signal that lands before the thread blocks is simply handled, so
     * keep signalling until the wait gives up. */
    void *r;
    int64_t end = now_ns(CLOCK_MONOTONIC) + 3000 * MS;
    do {
        sleep_ms(10);
        EXPECT(pthread_kill(t, SIGUSR1), 0);
        CHECK(now_ns(CLOCK_MONOTONIC) < end, "sem_wait was not interrupted by signals");
    } while (pthread_tryjoin_np(t, &r) == EBUSY);
    int e = (int)(intptr_t)r;
    CHECK(e == EINTR, "interrupted sem_wait: %s, expected EINTR", errname(e));
    CHECK(sem_value(&s) == 0, "value %d", sem_value(&s));
    EXPECT_SEM(sem_destroy(&s), 0);
}

static sem_t g_sig_sem;
static void post_from_handler(int sig)
{
    (void)sig;
    int saved = errno;
    sem_post(&g_sig_sem); /* async-signal-safe */
    errno = saved;
}
static void *kill_later_main(void *p)
{
    sleep_ms(30);
    EXPECT(pthread_kill(*(pthread_t *)p, SIGUSR2), 0);
    return NULL;
}
static void sem_post_from_signal_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = post_from_handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR2, &sa, NULL) == 0, "sigaction");
    EXPECT_SEM(sem_init(&g_sig_sem, 0, 0), 0);
    pthread_t self = pthread_self();
    pthread_t t = spawn(kill_later_main, &self);
    struct timespec dl = rt_in(3000);
    int rc;
    while ((rc = sem_timedwait(&g_sig_sem, &dl)) != 0)
        CHECK(errno == EINTR, "sem_timedwait: %s", errname(errno));
    join(t);
    CHECK(sem_value(&g_sig_sem) == 0, "value %d", sem_value(&g_sig_sem));
    EXPECT_SEM(sem_destroy(&g_sig_sem), 0);
}

static void sem_pshared_across_fork(void)
{
    sem_t *s = shared_alloc(2 * sizeof(sem_t));
    EXPECT_SEM(sem_init(&s[0], 1, 0), 0);
    EXPECT_SEM(sem_init(&s[1], 1, 0), 0);
    enum { ROUNDS = 500 };
    pid_t pid = fork_child();
    if (pid == 0) {
        for (int i = 0; i < ROUNDS; i++) {
            EXPECT_SEM(sem_wait(&s[0]), 0);
            EXPECT_SEM(sem_post(&s[1]), 0);
        }
        _exit(0);
    }
    for (int i = 0; i < ROUNDS; i++) {
        EXPECT_SEM(sem_post(&s[0]), 0);
        struct timespec dl = rt_in(3000);
        EXPECT_SEM(sem_timedwait(&s[1], &dl), 0);
    }
    wait_child(pid);
    CHECK(sem_value(&s[0]) == 0 && sem_value(&s[1]) == 0, "values %d %d", sem_value(&s[0]),
          sem_value(&s[1]));
}

static void sem_named_across_fork(void)
{
    /* sem_open is not interposed, but sem_wait/sem_post on its result are,
     * and the object is process-shared. */
    char name[2][64];
    sem_t *s[2];
    for (int i = 0; i < 2; i++) {
        snprintf(name[i], sizeof name[i], "/vsched-sync-test-%d-%d", (int)getpid(), i);
        s[i] = sem_open(name[i], O_CREAT | O_EXCL, 0600, 0);
        if (s[i] == SEM_FAILED)
            skip_case("sem_open failed (is /dev/shm mounted?)");
        sem_unlink(name[i]); /* the mappings keep it alive */
    }
    enum { ROUNDS = 300 };
    pid_t pid = fork_child();
    if (pid == 0) {
        for (int i = 0; i < ROUNDS; i++) {
            EXPECT_SEM(sem_wait(s[0]), 0);
            EXPECT_SEM(sem_post(s[1]), 0);
        }
        _exit(0);
    }
    for (int i = 0; i < ROUNDS; i++) {
        EXPECT_SEM(sem_post(s[0]), 0);
        struct timespec dl = rt_in(3000);
        EXPECT_SEM(sem_timedwait(s[1], &dl), 0);
    }
    wait_child(pid);
    sem_close(s[0]);
    sem_close(s[1]);
}

struct scancel { sem_t s; int mode; atomic_int about, cleanup_ran; };
static void scancel_cleanup(void *p)
{
    atomic_store(&((struct scancel *)p)->cleanup_ran, 1);
}
static void *scancel_main(void *p)
{
    struct scancel *c = p;
    pthread_cleanup_push(scancel_cleanup, c);
    atomic_store(&c->about, 1);
    struct timespec dl;
    switch (c->mode) {
    case 0: sem_wait(&c->s); break;
    case 1: dl = rt_in(6000); sem_timedwait(&c->s, &dl); break;
    default: dl = mono_in(6000); sem_clockwait(&c->s, CLOCK_MONOTONIC, &dl);
    }
    pthread_cleanup_pop(0);
    return (void *)1; /* not reached when cancelled */
}
static void sem_cancel_case(int mode)
{
    struct scancel c;
    memset(&c, 0, sizeof c);
    c.mode = mode;
    EXPECT_SEM(sem_init(&c.s, 0, 0), 0);
    pthread_t t = spawn(scancel_main, &c);
    CHECK(wait_flag(&c.about, 1, 3000), "thread did not start");
    sleep_ms(50);
    EXPECT(pthread_cancel(t), 0);
    void *r = join(t);
    CHECK(r == PTHREAD_CANCELED, "thread was not cancelled in the semaphore wait");
    CHECK(atomic_load(&c.cleanup_ran), "cleanup handler did not run");
    /* no token was created or consumed, and the semaphore still works */
    CHECK(sem_value(&c.s) == 0, "value %d after the cancel", sem_value(&c.s));
    EXPECT_SEM(sem_trywait(&c.s), EAGAIN);
    EXPECT_SEM(sem_post(&c.s), 0);
    EXPECT_SEM(sem_trywait(&c.s), 0);
    struct late_post lp = {&c.s, 10, 1};
    t = spawn(late_post_main, &lp);
    EXPECT_SEM(sem_wait(&c.s), 0);
    join(t);
    EXPECT_SEM(sem_destroy(&c.s), 0);
}
static void sem_cancel_wait(void) { sem_cancel_case(0); }
static void sem_cancel_timedwait(void) { sem_cancel_case(1); }
static void sem_cancel_clockwait(void) { sem_cancel_case(2); }

/* Idle timed waits must sleep: 1 ms sem_timedwait calls that nobody posts
 * to, in a process alone on one CPU, are a wait for the clock, and burning
 * the CPU meanwhile (spinning or yielding through the timeout) takes it from
 * whatever else would run there.  Measured twice: pinned in this process,
 * and in a fresh exec of this program that starts pinned (so a preloaded
 * library sees the one-CPU affinity from its start); meanwhile another
 * process spins on another CPU, if there is one. */
static void idle_timed_waits_measure(const char *how)
{
    enum { N = 200 };
    sem_t s;
    EXPECT_SEM(sem_init(&s, 0, 0), 0);
    int64_t cpu0 = now_ns(CLOCK_PROCESS_CPUTIME_ID), wall0 = now_ns(CLOCK_MONOTONIC);
    for (int i = 0; i < N; i++) {
        struct timespec dl = rt_in(1);
        EXPECT_SEM(sem_timedwait(&s, &dl), ETIMEDOUT);
    }
    int64_t cpu = now_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu0, wall = now_ns(CLOCK_MONOTONIC) - wall0;
    CHECK(cpu * 2 < wall, "%s: %d idle 1 ms sem_timedwait calls used %.1f ms of CPU in %.1f ms "
          "(%.0f%%): they should sleep", how, N, (double)cpu / 1e6, (double)wall / 1e6,
          100.0 * (double)cpu / (double)wall);
    /* the same for condition variables */
    pthread_mutex_t m;
    pthread_cond_t c;
    EXPECT(pthread_mutex_init(&m, NULL), 0);
    EXPECT(pthread_cond_init(&c, NULL), 0);
    EXPECT(pthread_mutex_lock(&m), 0);
    cpu0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
    wall0 = now_ns(CLOCK_MONOTONIC);
    for (int i = 0; i < N / 2; i++) {
        struct timespec dl = rt_in(1);
        int rc = pthread_cond_timedwait(&c, &m, &dl);
        CHECK(rc == 0 || rc == ETIMEDOUT, "pthread_cond_timedwait returned %s", errname(rc));
    }
    cpu = now_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
    wall = now_ns(CLOCK_MONOTONIC) - wall0;
    EXPECT(pthread_mutex_unlock(&m), 0);
    CHECK(cpu * 2 < wall, "%s: %d idle 1 ms pthread_cond_timedwait calls used %.1f ms of CPU "
          "in %.1f ms (%.0f%%): they should sleep", how, N / 2, (double)cpu / 1e6,
          (double)wall / 1e6, 100.0 * (double)cpu / (double)wall);
}
#define PINNED_IDLE_ARG "--pinned-idle-waits" /* main(): run the measurement only */
static void sem_timedwait_idle_sleeps_pinned(void)
{
    cpu_set_t all, set;
    CHECK(sched_getaffinity(0, sizeof all, &all) == 0, "sched_getaffinity: %s", strerror(errno));
    int cpu = sched_getcpu(), other = -1;
    if (cpu < 0 || !CPU_ISSET(cpu, &all))
        for (cpu = 0; !CPU_ISSET(cpu, &all); cpu++)
            ;
    for (int i = 0; i < CPU_SETSIZE && other < 0; i++)
        if (i != cpu && CPU_ISSET(i, &all))
            other = i;
    /* Something else runnable on the machine (another CPU: not competing
     * with us), as usual on a real one: a runtime that counts runnable
     * threads against its own one-CPU affinity mistakes that for
     * oversubscription. */
    pid_t spinner = -1;
    if (other >= 0) {
        spinner = fork_child();
        if (spinner == 0) {
            CPU_ZERO(&set);
            CPU_SET(other, &set);
            sched_setaffinity(0, sizeof set, &set);
            int64_t end = now_ns(CLOCK_MONOTONIC) + 3000 * MS;
            while (now_ns(CLOCK_MONOTONIC) < end)
                ;
            _exit(0);
        }
    }
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        skip_case("sched_setaffinity failed");
    idle_timed_waits_measure("pinned after start");
    pid_t pid = fork_child();
    if (pid == 0) {
        char *argv[] = {(char *)"semantics", (char *)PINNED_IDLE_ARG, NULL};
        execv("/proc/self/exe", argv);
        fail_at(__LINE__, "exec /proc/self/exe: %s", strerror(errno));
    }
    wait_child(pid);
    if (spinner > 0) {
        kill(spinner, SIGKILL);
        waitpid(spinner, NULL, 0);
    }
}

/* ------------------------------------------------------------------------ */
/* fork() safety                                                             */
/* ------------------------------------------------------------------------ */

/* Threads that keep every kind of primitive busy while the main thread
 * forks, so that the fork often lands mid-operation. */
struct churn {
    pthread_mutex_t m;
    pthread_cond_t c;
    pthread_rwlock_t l;
    sem_t s;
    pthread_spinlock_t sp;
    atomic_int stop;
    long n;
};
static void *churn_main(void *p)
{
    struct churn *c = p;
    while (!atomic_load(&c->stop)) {
        EXPECT(pthread_mutex_lock(&c->m), 0);
        c->n++;
        EXPECT(pthread_cond_broadcast(&c->c), 0);
        EXPECT(pthread_mutex_unlock(&c->m), 0);
        EXPECT(pthread_rwlock_wrlock(&c->l), 0);
        EXPECT(pthread_rwlock_unlock(&c->l), 0);
        EXPECT_SEM(sem_post(&c->s), 0);
        struct timespec dl = rt_in(5);
        sem_timedwait(&c->s, &dl);
        EXPECT(pthread_spin_lock(&c->sp), 0);
        EXPECT(pthread_spin_unlock(&c->sp), 0);
    }
    return NULL;
}

static pthread_mutex_t s_fork_static = PTHREAD_MUTEX_INITIALIZER;

/* Everything a freshly forked child must be able to do. */
static void child_uses_fresh_primitives(void)
{
    EXPECT(pthread_mutex_lock(&s_fork_static), 0);
    EXPECT(pthread_mutex_unlock(&s_fork_static), 0);
    pthread_mutex_t m;
    EXPECT(pthread_mutex_init(&m, NULL), 0);
    hammer_mutex(&m, 3, 500);
    EXPECT(pthread_mutex_destroy(&m), 0);
    pthread_mutex_t em;
    mutex_init_type(&em, PTHREAD_MUTEX_ERRORCHECK);
    EXPECT(pthread_mutex_lock(&em), 0);
    EXPECT(pthread_mutex_lock(&em), EDEADLK);
    EXPECT(pthread_mutex_unlock(&em), 0);
    cond_with_mutex(&em);
    EXPECT(pthread_mutex_destroy(&em), 0);
    pthread_rwlock_t l;
    EXPECT(pthread_rwlock_init(&l, NULL), 0);
    rwlock_static_one(&l);
    EXPECT(pthread_rwlock_destroy(&l), 0);
    sem_t s;
    EXPECT_SEM(sem_init(&s, 0, 0), 0);
    struct late_post lp = {&s, 5, 1};
    pthread_t t = spawn(late_post_main, &lp);
    EXPECT_SEM(sem_wait(&s), 0);
    join(t);
    EXPECT_SEM(sem_destroy(&s), 0);
    pthread_barrier_t b;
    EXPECT(pthread_barrier_init(&b, NULL, 2), 0);
    t = spawn(barrier_wait_report, &b);
    int r1 = pthread_barrier_wait(&b), r2 = (int)(intptr_t)join(t);
    CHECK(r1 + r2 == PTHREAD_BARRIER_SERIAL_THREAD, "barrier in child: %d %d", r1, r2);
    EXPECT(pthread_barrier_destroy(&b), 0);
    pthread_spinlock_t sp;
    EXPECT(pthread_spin_init(&sp, 0), 0);
    EXPECT(pthread_spin_lock(&sp), 0);
    EXPECT(pthread_spin_trylock(&sp), EBUSY);
    EXPECT(pthread_spin_unlock(&sp), 0);
}

static void churn_start(struct churn *c, pthread_t *t, int n)
{
    memset(c, 0, sizeof *c);
    EXPECT(pthread_mutex_init(&c->m, NULL), 0);
    EXPECT(pthread_cond_init(&c->c, NULL), 0);
    EXPECT(pthread_rwlock_init(&c->l, NULL), 0);
    EXPECT_SEM(sem_init(&c->s, 0, 0), 0);
    EXPECT(pthread_spin_init(&c->sp, 0), 0);
    for (int i = 0; i < n; i++)
        t[i] = spawn(churn_main, c);
}
static void churn_stop(struct churn *c, pthread_t *t, int n)
{
    atomic_store(&c->stop, 1);
    for (int i = 0; i < n; i++)
        join(t[i]);
}

static void fork_child_uses_primitives(void)
{
    struct churn c;
    pthread_t t[3];
    churn_start(&c, t, 3);
    /* A mutex and a semaphore held by the forking thread stay usable by
     * the child's only thread (a normal mutex has no owner check). */
    pthread_mutex_t mine;
    EXPECT(pthread_mutex_init(&mine, NULL), 0);
    for (int i = 0; i < 8; i++) {
        EXPECT(pthread_mutex_lock(&mine), 0);
        pid_t pid = fork_child();
        if (pid == 0) {
            EXPECT(pthread_mutex_unlock(&mine), 0);
            EXPECT(pthread_mutex_lock(&mine), 0);
            EXPECT(pthread_mutex_trylock(&mine), EBUSY);
            EXPECT(pthread_mutex_unlock(&mine), 0);
            child_uses_fresh_primitives();
            _exit(0);
        }
        EXPECT(pthread_mutex_unlock(&mine), 0);
        wait_child(pid);
        sleep_ms(2);
    }
    churn_stop(&c, t, 3);
}

static void *fork_from_thread_main(void *p)
{
    (void)p;
    pid_t pid = fork_child();
    if (pid == 0) {
        child_uses_fresh_primitives();
        _exit(0);
    }
    wait_child(pid);
    return NULL;
}
static void fork_from_secondary_thread(void)
{
    struct churn c;
    pthread_t t[2];
    churn_start(&c, t, 2);
    pthread_mutex_t held;
    EXPECT(pthread_mutex_init(&held, NULL), 0);
    EXPECT(pthread_mutex_lock(&held), 0); /* main holds a lock across the fork */
    for (int i = 0; i < 5; i++)
        join(spawn(fork_from_thread_main, NULL));
    EXPECT(pthread_mutex_unlock(&held), 0);
    churn_stop(&c, t, 2);
}

/* The classic pthread_atfork pattern: prepare takes a lock, both sides
 * release it after the fork. */
static pthread_mutex_t s_atfork = PTHREAD_MUTEX_INITIALIZER;
static void atfork_prepare(void) { EXPECT(pthread_mutex_lock(&s_atfork), 0); }
static void atfork_release(void) { EXPECT(pthread_mutex_unlock(&s_atfork), 0); }
static void *atfork_user_main(void *p)
{
    atomic_int *stop = p;
    while (!atomic_load(stop)) {
        EXPECT(pthread_mutex_lock(&s_atfork), 0);
        sched_yield();
        EXPECT(pthread_mutex_unlock(&s_atfork), 0);
    }
    return NULL;
}
static void fork_atfork_lock_handoff(void)
{
    EXPECT(pthread_atfork(atfork_prepare, atfork_release, atfork_release), 0);
    atomic_int stop = 0;
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        t[i] = spawn(atfork_user_main, &stop);
    for (int i = 0; i < 8; i++) {
        pid_t pid = fork_child();
        if (pid == 0) {
            EXPECT(pthread_mutex_lock(&s_atfork), 0);
            EXPECT(pthread_mutex_unlock(&s_atfork), 0);
            hammer_mutex(&s_atfork, 2, 500);
            _exit(0);
        }
        wait_child(pid);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++)
        join(t[i]);
}

/* ------------------------------------------------------------------------ */
/* Miscellaneous                                                             */
/* ------------------------------------------------------------------------ */

/* glibc compatibility (not POSIX): successful and error-returning pthread
 * calls leave errno alone; code that checks errno after an unrelated call
 * followed by a lock operation relies on it. */
struct errno_ctx { pthread_mutex_t m; pthread_cond_t c; pthread_rwlock_t l; pthread_spinlock_t sp;
                   pthread_barrier_t b; };
static void *errno_main(void *p)
{
    struct errno_ctx *x = p;
#define KEEP(stmt)                                                             \
    do {                                                                       \
        errno = 4242;                                                          \
        (void)(stmt);                                                          \
        CHECK(errno == 4242, "%s changed errno to %s", #stmt, errname(errno)); \
    } while (0)
    for (int i = 0; i < 3000; i++) {
        KEEP(pthread_mutex_lock(&x->m));
        KEEP(pthread_cond_broadcast(&x->c));
        KEEP(pthread_mutex_unlock(&x->m));
        KEEP(pthread_mutex_trylock(&x->m) == 0 && pthread_mutex_unlock(&x->m));
        KEEP(pthread_rwlock_rdlock(&x->l));
        KEEP(pthread_rwlock_unlock(&x->l));
        KEEP(pthread_rwlock_wrlock(&x->l));
        KEEP(pthread_rwlock_unlock(&x->l));
        KEEP(pthread_spin_lock(&x->sp));
        KEEP(pthread_spin_unlock(&x->sp));
        if (i % 100 == 0) {
            KEEP(pthread_mutex_lock(&x->m));
            struct timespec dl = rt_in(1);
            KEEP(pthread_cond_timedwait(&x->c, &x->m, &dl));
            KEEP(pthread_mutex_unlock(&x->m));
            KEEP(pthread_barrier_wait(&x->b));
        }
    }
#undef KEEP
    return NULL;
}
static void errno_preserved_glibc_compat(void)
{
    struct errno_ctx x;
    EXPECT(pthread_mutex_init(&x.m, NULL), 0);
    EXPECT(pthread_cond_init(&x.c, NULL), 0);
    EXPECT(pthread_rwlock_init(&x.l, NULL), 0);
    EXPECT(pthread_spin_init(&x.sp, 0), 0);
    EXPECT(pthread_barrier_init(&x.b, NULL, 4), 0);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        t[i] = spawn(errno_main, &x);
    for (int i = 0; i < 4; i++)
        join(t[i]);
    EXPECT(pthread_barrier_destroy(&x.b), 0);
}

static void vsched_version_symbol(void)
{
    const char *(*ver)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "vsched_sync_version");
    if (!ver)
        skip_case("library not loaded");
    const char *v = ver();
    CHECK(v && *v, "vsched_sync_version() returned %s", v ? "an empty string" : "NULL");
    for (const char *q = v; *q; q++)
        CHECK(*q >= 0x20 && *q < 0x7f, "unprintable version string");
}

/* ------------------------------------------------------------------------ */
/* Case table and runner                                                     */
/* ------------------------------------------------------------------------ */

struct tcase { const char *name; void (*fn)(void); };
#define C(n) {#n, n}
static const struct tcase cases[] = {
    C(mutex_basic),
    C(mutex_trylock_ebusy),
    C(mutex_errorcheck),
    C(mutex_recursive_counting),
    C(mutex_timedlock_past_deadline),
    C(mutex_timedlock_einval),
    C(mutex_timedlock_times_out),
    C(mutex_timedlock_acquires_on_release),
    C(mutex_clocklock),
    C(mutex_clocklock_invalid_clock),
    C(mutex_static_initializers),
    C(mutex_static_first_use_contended),
    C(mutex_zero_initialized),
    C(mutex_destroy_locked_ebusy),
    C(mutex_mutual_exclusion),
    C(mutex_lock_not_eintr),
    C(mutex_lock_not_cancellation_point),
    C(pending_cancel_not_acted_on_by_non_cancellation_points),
    C(mutex_robust_owner_death),
    C(mutex_robust_pshared_process_death),
    C(mutex_priority_inherit),
    C(mutex_priority_protect),
    C(mutex_pshared_across_fork),
    C(cond_timedwait_timeout_reholds_mutex),
    C(cond_timedwait_past_deadline),
    C(cond_timedwait_einval),
    C(cond_attr_clock_monotonic),
    C(cond_clockwait_both_clocks),
    C(cond_signal_wakes_one),
    C(cond_broadcast_wakes_all),
    C(cond_signal_without_waiters_is_lost),
    C(cond_wait_mutex_not_owned_eperm),
    C(cond_static_initializer),
    C(cond_static_first_use_contended),
    C(cond_zero_initialized),
    C(cond_wait_not_eintr),
    C(cond_timedwait_woken_before_deadline),
    C(cond_destroy_after_broadcast),
    C(cond_destroy_munmap_after_broadcast),
    C(cond_destroy_reinit_same_address),
    C(cond_wait_recursive_mutex_held_twice),
    C(cond_wait_robust_owner_died),
    C(mutex_destroy_during_cond_wait_ebusy),
    C(cond_broadcast_new_waiter_mid_call),
    C(cond_signal_new_rt_waiter_mid_call),
    C(cond_wait_every_mutex_kind),
    C(cond_pshared_across_fork),
    C(cond_cancel_wait),
    C(cond_cancel_timedwait),
    C(cond_cancel_clockwait),
    C(cond_cancel_does_not_lose_signal),
    C(cond_cancel_races_wakeup),
    C(barrier_init_count_zero_einval),
    C(barrier_one_serial_per_round),
    C(barrier_reuse_and_reinit),
    C(barrier_wait_not_eintr),
    C(barrier_destroy_right_after_wait),
    C(barrier_destroy_reinit_alternating),
    C(barrier_more_threads_than_count),
    C(barrier_init_count_too_large_einval),
    C(barrier_pshared_across_fork),
    C(spin_trylock_ebusy),
    C(spin_unlock_by_other_thread),
    C(spin_mutual_exclusion),
    C(spin_pshared_across_fork),
    C(rwlock_multiple_readers),
    C(rwlock_writer_excludes_readers),
    C(rwlock_readers_exclude_writer),
    C(rwlock_relock_edeadlk),
    C(rwlock_timed_einval),
    C(rwlock_clock_variants),
    C(rwlock_static_initializers),
    C(rwlock_zero_initialized),
    C(rwlock_writer_preferred_nonrecursive),
    C(rwlock_recursive_read_with_waiting_writer),
    C(rwlock_recursive_read),
    C(rwlock_mutual_exclusion),
    C(rwlock_not_eintr),
    C(rwlock_wrlock_not_cancellation_point),
    C(rwlock_pshared_across_fork),
    C(rwlock_destroy_after_last_unlock),
    C(rwlock_unlock_no_access_after_release),
    C(mutex_unlock_no_access_after_release),
    C(sem_init_value_and_trywait),
    C(sem_timedwait_times_out),
    C(sem_timedwait_einval),
    C(sem_clockwait_cases),
    C(sem_wait_woken_by_post),
    C(sem_each_post_wakes_one),
    C(sem_counting_resource),
    C(sem_post_eoverflow),
    C(sem_init_value_too_large),
    C(sem_wait_eintr),
    C(sem_post_from_signal_handler),
    C(sem_pshared_across_fork),
    C(sem_named_across_fork),
    C(sem_cancel_wait),
    C(sem_cancel_timedwait),
    C(sem_cancel_clockwait),
    C(cond_wait_cancel_disabled_ignores_late_sigcancel),
    C(sem_wait_cancel_disabled_ignores_late_sigcancel),
    C(sem_timedwait_idle_sleeps_pinned),
    C(fork_child_uses_primitives),
    C(fork_from_secondary_thread),
    C(fork_atfork_lock_handoff),
    C(errno_preserved_glibc_compat),
    C(vsched_version_symbol),
};
#undef C
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* Run one case in a child process; 1 if it passed (or was skipped). */
static int run_case(const struct tcase *tc)
{
    fflush(stdout);
    int64_t start = now_ns(CLOCK_MONOTONIC);
    pid_t pid = fork();
    if (pid < 0) {
        printf("FAIL %s: fork: %s\n", tc->name, strerror(errno));
        return 0;
    }
    if (pid == 0) {
        g_case = tc->name;
        alarm(CASE_TIMEOUT_S);
        tc->fn();
        fflush(stdout);
        _exit(0);
    }
    int st;
    while (waitpid(pid, &st, 0) == -1 && errno == EINTR)
        ;
    double ms = (double)(now_ns(CLOCK_MONOTONIC) - start) / 1e6;
    if (WIFEXITED(st)) {
        switch (WEXITSTATUS(st)) {
        case 0: printf("ok %s\n", tc->name); return 1;
        case EXIT_SKIPPED: return 1;     /* the child printed "ok NAME # SKIP" */
        case EXIT_REPORTED: return 0;    /* the child printed the FAIL line */
        default:
            printf("FAIL %s: exited with status %d\n", tc->name, WEXITSTATUS(st));
            return 0;
        }
    }
    int sig = WTERMSIG(st);
    if (sig == SIGALRM)
        printf("FAIL %s: watchdog: still running after %d s (hang, deadlock or lost wake-up)\n",
               tc->name, CASE_TIMEOUT_S);
    else
        printf("FAIL %s: killed by signal %d (%s) after %.0f ms\n", tc->name, sig,
               strsignal(sig), ms);
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && strcmp(argv[1], PINNED_IDLE_ARG) == 0) {
        /* re-executed by sem_timedwait_idle_sleeps_pinned, already pinned */
        g_case = "sem_timedwait_idle_sleeps_pinned";
        alarm(CASE_TIMEOUT_S);
        idle_timed_waits_measure("started pinned");
        fflush(stdout);
        _exit(0);
    }
    if (argc > 1 && strcmp(argv[1], "-l") == 0) {
        for (int i = 0; i < NCASES; i++)
            printf("%s\n", cases[i].name);
        return 0;
    }
    alarm(600); /* outer watchdog for the whole run */
    const char *(*ver)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "vsched_sync_version");
    if (ver)
        printf("# vsched_sync_version: %s\n", ver());
    int run = 0, passed = 0;
    int64_t start = now_ns(CLOCK_MONOTONIC);
    for (int i = 0; i < NCASES; i++) {
        int selected = argc <= 1;
        for (int a = 1; a < argc && !selected; a++)
            selected = strstr(cases[i].name, argv[a]) != NULL;
        if (!selected)
            continue;
        run++;
        passed += run_case(&cases[i]);
    }
    printf("# %d of %d cases passed in %.1f s\n", passed, run,
           (double)(now_ns(CLOCK_MONOTONIC) - start) / 1e9);
    printf("loaded=%d\n", ver != NULL);
    return passed == run && run > 0 ? 0 : 1;
}
