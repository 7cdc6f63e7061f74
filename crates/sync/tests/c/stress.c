/*
 * stress.c -- randomized stress test with invariant checks for the pthread
 * and semaphore primitives that libvsched_sync.so interposes.
 *
 * Build:  cc -O2 -pthread -o stress stress.c -ldl
 * Run:    ./stress [-o OPS] [-t THREADS] [-s SEED] [-w STALL_S] [-T LIMIT_S] [-C]
 *   -o OPS      total operations over all threads (default 1000000)
 *   -t THREADS  worker threads (default 4 x online CPUs, i.e. 4x oversubscribed)
 *   -s SEED     random seed (default: from the clock; printed)
 *   -w STALL_S  a thread making no progress for this long is a FAIL (default 8)
 *   -T LIMIT_S  the whole run may take at most this long (default 300)
 *   -C          no pthread_cancel of condvar waiters
 *
 * The threads are split into roles that exercise every primitive at once:
 *   barrier group  rounds of pthread_barrier_wait; every round checks that all
 *                  members arrived and that exactly one got SERIAL_THREAD
 *   ping-pong pair two threads handing a turn over with untimed cond waits:
 *                  any lost wake-up deadlocks them (caught by the watchdog)
 *   producers and  a bounded queue (errorcheck mutex + two condvars); items
 *   consumers      are unique, and count/sum/xor of their hashes must match,
 *                  so no item is lost or duplicated.  The main thread keeps
 *                  cancelling consumers (mostly while blocked in a cond
 *                  wait; the cleanup handler must find the mutex held) and
 *                  starting replacements
 *   mixed workers  random operations: mutex-protected counters (lock,
 *                  trylock, timedlock), recursive mutexes, an rwlock whose
 *                  writers update four words that readers must never see
 *                  torn, a counting semaphore that must never admit more
 *                  than its limit, a spinlock-protected counter, and timed
 *                  waits with short random timeouts on conds, mutexes,
 *                  rwlocks and semaphores (a timeout may never come early)
 * A watchdog thread checks that every live thread makes progress at least
 * every STALL_S seconds; otherwise it prints the state of every thread and
 * FAILs (deadlock or lost wake-up).
 *
 * Output: "# ..." comment lines, one "ok NAME" or "FAIL NAME: detail" per
 * invariant, then "ops=N" and "loaded=0|1" (whether vsched_sync_version is
 * visible, i.e. the preload library is in the process).  Exit status 0 only
 * if every check passed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000LL
#define EARLY_NS (1 * MS) /* a timed wait may not return before its deadline minus this */

/* ------------------------------------------------------------------------ */
/* Configuration, failure reporting, time, randomness                        */
/* ------------------------------------------------------------------------ */

static long g_target = 1000000;
static int g_threads;
static uint64_t g_seed;
static int g_stall_s = 8;
static int g_limit_s = 300;
static int g_cancel = 1;

static atomic_long g_ops;    /* operations done, all threads */
static atomic_int g_stop;    /* set once g_ops reaches g_target */
static int g_loaded;

static atomic_int g_failed;

static void print_tail(void)
{
    printf("ops=%ld\n", atomic_load(&g_ops));
    printf("loaded=%d\n", g_loaded);
    fflush(stdout);
}

/* An invariant broke inside an operation: report it and end the run (the
 * state is no longer trustworthy). */
static void die(const char *check, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
static void die(const char *check, const char *fmt, ...)
{
    if (atomic_exchange(&g_failed, 1) == 0) {
        char buf[600];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        printf("FAIL %s: %s\n", check, buf);
        print_tail();
        _exit(1);
    }
    for (;;)
        pause(); /* another thread is already reporting */
}

static const char *errname(int e)
{
    if (e == 0)
        return "0";
    const char *n = strerrorname_np(e);
    return n ? n : "E???";
}

/* A pthread_* call that must succeed. */
#define MUST(check, expr)                                                      \
    do {                                                                       \
        int rc_ = (expr);                                                      \
        if (rc_ != 0)                                                          \
            die(check, "%s returned %s (line %d)", #expr, errname(rc_), __LINE__); \
    } while (0)

static int64_t now_ns(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}
static struct timespec ts_from_ns(int64_t ns)
{
    struct timespec t = {(time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL)};
    return t;
}
static int64_t ts_ns(const struct timespec *t) { return (int64_t)t->tv_sec * 1000000000LL + t->tv_nsec; }

static void sleep_us(long us)
{
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&t, &t) == -1 && errno == EINTR)
        ;
}

/* xorshift64*: a private generator per thread */
static uint64_t rnd(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}
static uint64_t mix64(uint64_t x) /* splitmix64 finaliser: item fingerprints */
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

/* A timed wait that reported a timeout must not have come early. */
static void check_not_early(const char *what, clockid_t clk, const struct timespec *dl)
{
    int64_t n = now_ns(clk), d = ts_ns(dl);
    if (n < d - EARLY_NS)
        die("timed_waits", "%s timed out %.3f ms before its deadline", what, (double)(d - n) / 1e6);
}

/* ------------------------------------------------------------------------ */
/* Per-thread progress slots and the watchdog                                */
/* ------------------------------------------------------------------------ */

#define MAX_SLOTS 512
struct slot {
    const char *role;
    atomic_int active;          /* 1 while the thread is expected to progress */
    atomic_long ops;
    atomic_llong last_ns;       /* CLOCK_MONOTONIC time of its last progress */
    const char *_Atomic last_op;
    pthread_t tid;
    atomic_int ktid;            /* its kernel thread id, for the stall report */
    uint64_t rng;
};
static struct slot g_slots[MAX_SLOTS];
static int g_nslots;

static void slot_begin(struct slot *s)
{
    atomic_store(&s->ktid, gettid());
    atomic_store(&s->last_ns, now_ns(CLOCK_MONOTONIC));
    atomic_store(&s->active, 1);
}

/* One operation done by the thread of slot s. */
static void progress(struct slot *s, const char *op)
{
    atomic_store_explicit(&s->last_op, op, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->ops, 1, memory_order_relaxed);
    atomic_store_explicit(&s->last_ns, now_ns(CLOCK_MONOTONIC), memory_order_relaxed);
    if (atomic_fetch_add_explicit(&g_ops, 1, memory_order_relaxed) + 1 >= g_target)
        atomic_store(&g_stop, 1);
}

static atomic_int g_watchdog_stop;
static int64_t g_start_ns;

/* The shared mutexes' lock words and owners (defined after them, below). */
static void dump_mutexes(void);

/* Whether kernel thread `tid` is the main thread or a live worker. */
static int thread_alive(int tid)
{
    if (tid == getpid())
        return 1;
    for (int i = 0; i < g_nslots; i++)
        if (atomic_load(&g_slots[i].active) && atomic_load(&g_slots[i].ktid) == tid)
            return 1;
    return 0;
}

static void dump_slots(void)
{
    int64_t now = now_ns(CLOCK_MONOTONIC);
    for (int i = 0; i < g_nslots; i++) {
        struct slot *s = &g_slots[i];
        const char *op = atomic_load(&s->last_op);
        printf("#   thread %2d %-9s %s tid=%d ops=%ld last_op=%s idle=%.2fs\n", i, s->role,
               atomic_load(&s->active) ? "live" : "done", atomic_load(&s->ktid),
               atomic_load(&s->ops), op ? op : "-",
               (double)(now - atomic_load(&s->last_ns)) / 1e9);
    }
    dump_mutexes();
}

static void *watchdog_main(void *p)
{
    (void)p;
    while (!atomic_load(&g_watchdog_stop)) {
        sleep_us(200000);
        int64_t now = now_ns(CLOCK_MONOTONIC);
        for (int i = 0; i < g_nslots; i++) {
            struct slot *s = &g_slots[i];
            if (!atomic_load(&s->active))
                continue;
            int64_t idle = now - atomic_load(&s->last_ns);
            if (idle > (int64_t)g_stall_s * 1000000000LL && !atomic_load(&g_failed)) {
                printf("# watchdog: thread %d (%s) made no progress for %.1f s\n", i, s->role,
                       (double)idle / 1e9);
                dump_slots();
                die("watchdog", "thread %d (%s) stalled for %.1f s in or after %s: "
                    "deadlock or lost wake-up", i, s->role, (double)idle / 1e9,
                    atomic_load(&s->last_op) ? atomic_load(&s->last_op) : "-");
            }
        }
        if (now - g_start_ns > (int64_t)g_limit_s * 1000000000LL) {
            dump_slots();
            die("watchdog", "time limit of %d s exceeded at ops=%ld", g_limit_s,
                atomic_load(&g_ops));
        }
    }
    return NULL;
}

/* Every role also does some of the mixed workers' random operations between
 * its own steps, so that all threads contend on the shared primitives. */
static void mixed_op(struct slot *s);

/* ------------------------------------------------------------------------ */
/* Barrier group                                                             */
/* ------------------------------------------------------------------------ */

static struct {
    pthread_barrier_t b;
    int n;
    atomic_long arrivals;   /* all arrivals ever */
    atomic_long serial_total; /* SERIAL_THREAD returns, both waits */
    /* Written only by the serial thread of a round's first wait and read by
     * every member after the second wait; the next write happens after the
     * next first wait, which nobody passes before all have read. */
    long rounds, serials;
    int finish;               /* the group's common stop decision */
} B;

static void *barrier_main(void *p)
{
    struct slot *s = p;
    slot_begin(s);
    for (long r = 0;; r++) {
        for (int k = (int)(rnd(&s->rng) % 4); k > 0; k--)
            mixed_op(s);
        atomic_fetch_add(&B.arrivals, 1);
        int rc = pthread_barrier_wait(&B.b);
        if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD)
            die("barrier_rounds", "pthread_barrier_wait returned %s", errname(rc));
        /* everyone arrived for round r; members released from it may
         * already have arrived for the second wait below */
        long a = atomic_load(&B.arrivals);
        if (a < (2 * r + 1) * B.n || a >= (2 * r + 2) * B.n)
            die("barrier_rounds", "round %ld: released with %ld arrivals, expected [%ld, %ld)", r,
                a, (2 * r + 1) * B.n, (2 * r + 2) * B.n);
        if (rc == PTHREAD_BARRIER_SERIAL_THREAD) {
            atomic_fetch_add(&B.serial_total, 1);
            B.serials++;
            B.rounds = r + 1;
            B.finish = atomic_load(&g_stop);
        }
        progress(s, "barrier_wait");
        atomic_fetch_add(&B.arrivals, 1);
        rc = pthread_barrier_wait(&B.b);
        if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD)
            die("barrier_rounds", "pthread_barrier_wait returned %s", errname(rc));
        if (rc == PTHREAD_BARRIER_SERIAL_THREAD)
            atomic_fetch_add(&B.serial_total, 1);
        a = atomic_load(&B.arrivals);
        if (a < (2 * r + 2) * B.n || a >= (2 * r + 3) * B.n)
            die("barrier_rounds", "round %ld (2nd wait): released with %ld arrivals, expected "
                "[%ld, %ld)", r, a, (2 * r + 2) * B.n, (2 * r + 3) * B.n);
        /* the serial thread's writes of the first wait are visible now */
        if (B.serials != r + 1)
            die("barrier_rounds", "after round %ld: %ld serial threads in total, expected %ld", r,
                B.serials, r + 1);
        progress(s, "barrier_wait2");
        if (B.finish)
            break;
    }
    atomic_store(&s->active, 0);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Ping-pong pair: untimed cond waits, so a lost wake-up is a deadlock       */
/* ------------------------------------------------------------------------ */

static struct {
    pthread_mutex_t m;
    pthread_cond_t c[2];
    int turn, done;
    long passes;
} PP;

struct pp_arg { struct slot *s; int me; };
static void *pingpong_main(void *p)
{
    struct pp_arg *a = p;
    struct slot *s = a->s;
    int me = a->me;
    slot_begin(s);
    MUST("pingpong", pthread_mutex_lock(&PP.m));
    for (;;) {
        while (PP.turn != me && !PP.done)
            MUST("pingpong", pthread_cond_wait(&PP.c[me], &PP.m));
        if (PP.done)
            break;
        PP.passes++;
        if (atomic_load(&g_stop))
            PP.done = 1;
        PP.turn = 1 - me;
        MUST("pingpong", pthread_cond_signal(&PP.c[1 - me]));
        MUST("pingpong", pthread_mutex_unlock(&PP.m));
        progress(s, "pingpong");
        if (rnd(&s->rng) % 4 == 0)
            mixed_op(s);
        MUST("pingpong", pthread_mutex_lock(&PP.m));
    }
    MUST("pingpong", pthread_mutex_unlock(&PP.m));
    atomic_store(&s->active, 0);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Bounded queue: producers, cancellable consumers                           */
/* ------------------------------------------------------------------------ */

#define QCAP 16
static struct {
    pthread_mutex_t m;           /* errorcheck: a cleanup unlock proves ownership */
    pthread_cond_t not_empty, not_full;
    uint64_t buf[QCAP];
    int head, count, done;
} Q;

/* fingerprints of everything produced and consumed */
static atomic_ulong q_prod_n, q_prod_sum, q_prod_xor;
static atomic_ulong q_cons_n, q_cons_sum, q_cons_xor;
static atomic_long q_cancel_in_wait, q_cancel_elsewhere, q_cancel_bad_unlock;
static atomic_int q_cancel_bad_rc; /* the first failing cleanup unlock's error */

/* short random timeout (20 us .. 500 us, sometimes already past) on clock clk */
static struct timespec short_deadline(uint64_t *rng, clockid_t clk)
{
    uint64_t r = rnd(rng);
    int64_t rel = r % 16 == 0 ? -1000 : 20000 + (int64_t)(r >> 8) % 480000;
    return ts_from_ns(now_ns(clk) + rel);
}

/* Wait on cv with the queue mutex held: mostly untimed, sometimes with a
 * short timeout (realtime or monotonic); a timeout just re-checks. */
static void q_wait(struct slot *s, pthread_cond_t *cv)
{
    uint64_t r = rnd(&s->rng) % 16;
    int rc;
    if (r == 0) {
        struct timespec dl = short_deadline(&s->rng, CLOCK_REALTIME);
        rc = pthread_cond_timedwait(cv, &Q.m, &dl);
        if (rc == ETIMEDOUT)
            check_not_early("pthread_cond_timedwait(queue)", CLOCK_REALTIME, &dl);
    } else if (r == 1) {
        struct timespec dl = short_deadline(&s->rng, CLOCK_MONOTONIC);
        rc = pthread_cond_clockwait(cv, &Q.m, CLOCK_MONOTONIC, &dl);
        if (rc == ETIMEDOUT)
            check_not_early("pthread_cond_clockwait(queue)", CLOCK_MONOTONIC, &dl);
    } else {
        rc = pthread_cond_wait(cv, &Q.m);
    }
    if (rc != 0 && rc != ETIMEDOUT)
        die("queue", "cond wait returned %s", errname(rc));
}

static void *producer_main(void *p)
{
    struct slot *s = p;
    uint64_t id = (uint64_t)(s - g_slots) << 40;  /* unique per producer */
    slot_begin(s);
    while (!atomic_load(&g_stop)) {
        MUST("queue", pthread_mutex_lock(&Q.m));
        while (Q.count == QCAP)
            q_wait(s, &Q.not_full);
        uint64_t item = id++;
        Q.buf[(Q.head + Q.count) % QCAP] = item;
        Q.count++;
        if (rnd(&s->rng) % 8 == 0)
            MUST("queue", pthread_cond_broadcast(&Q.not_empty));
        else
            MUST("queue", pthread_cond_signal(&Q.not_empty));
        MUST("queue", pthread_mutex_unlock(&Q.m));
        uint64_t h = mix64(item);
        atomic_fetch_add(&q_prod_n, 1);
        atomic_fetch_add(&q_prod_sum, h);
        atomic_fetch_xor(&q_prod_xor, h);
        progress(s, "produce");
        if (rnd(&s->rng) % 8 == 0)
            mixed_op(s);
    }
    atomic_store(&s->active, 0);
    return NULL;
}

/* Runs when a consumer is cancelled inside a cond wait: the wait must have
 * re-acquired the (errorcheck) mutex, so this unlock must succeed. */
static void consumer_cleanup(void *p)
{
    (void)p;
    int rc = pthread_mutex_unlock(&Q.m);
    if (rc != 0) {
        atomic_fetch_add(&q_cancel_bad_unlock, 1);
        int zero = 0;
        atomic_compare_exchange_strong(&q_cancel_bad_rc, &zero, rc);
    }
    atomic_fetch_add(&q_cancel_in_wait, 1);
}

static void *consumer_main(void *p)
{
    struct slot *s = p;
    int old;
    /* Cancellation is only allowed at two places: the cond wait (with a
     * cleanup handler that releases the mutex) and an explicit test point
     * where the thread holds nothing; so an item is never dropped. */
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
    slot_begin(s);
    for (;;) {
        pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old);
        atomic_fetch_add(&q_cancel_elsewhere, 1); /* undone below unless cancelled here */
        pthread_testcancel();
        atomic_fetch_sub(&q_cancel_elsewhere, 1);
        pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);

        MUST("queue", pthread_mutex_lock(&Q.m));
        while (Q.count == 0 && !Q.done) {
            pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old);
            pthread_cleanup_push(consumer_cleanup, NULL);
            q_wait(s, &Q.not_empty);
            pthread_cleanup_pop(0);
            pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
        }
        if (Q.count == 0) { /* done and drained */
            MUST("queue", pthread_mutex_unlock(&Q.m));
            break;
        }
        uint64_t item = Q.buf[Q.head];
        Q.head = (Q.head + 1) % QCAP;
        Q.count--;
        MUST("queue", pthread_cond_signal(&Q.not_full));
        MUST("queue", pthread_mutex_unlock(&Q.m));
        uint64_t h = mix64(item);
        atomic_fetch_add(&q_cons_n, 1);
        atomic_fetch_add(&q_cons_sum, h);
        atomic_fetch_xor(&q_cons_xor, h);
        progress(s, "consume");
        if (rnd(&s->rng) % 8 == 0)
            mixed_op(s); /* with cancellation disabled */
    }
    atomic_store(&s->active, 0);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Mixed workers                                                             */
/* ------------------------------------------------------------------------ */

#define NMUTEX 4
static struct {
    pthread_mutex_t m[NMUTEX];
    long counter[NMUTEX], shadow[NMUTEX];   /* protected by m[i] */
    atomic_int inside[NMUTEX];
    atomic_long done[NMUTEX];               /* successful increments */

    pthread_mutex_t rec;                    /* recursive */
    long rec_counter;
    atomic_int rec_inside;
    atomic_long rec_done;

    pthread_rwlock_t rw;
    long words[4];
    atomic_int readers, writers;
    atomic_long writes;

    sem_t sem;                              /* counting resource */
    atomic_int sem_inside;

    sem_t gate;                             /* posted and taken at random */
    atomic_long gate_posts, gate_takes;

    pthread_spinlock_t spin;
    long spin_counter;
    atomic_int spin_inside;
    atomic_long spin_done;

    pthread_mutex_t quiet_m;                /* errorcheck; quiet_c is never signalled */
    pthread_cond_t quiet_c, quiet_cm;       /* realtime / monotonic clock */
    atomic_long timeouts, spurious;
    atomic_long interrupted;                /* consumers' semaphore waits ended by EINTR */
} W;
#define SEM_LIMIT 3

/* acquire mutex i by a random method; 0 if a timed attempt gave up */
static int mixed_lock(struct slot *s, pthread_mutex_t *m)
{
    uint64_t r = rnd(&s->rng) % 8;
    int rc;
    if (r < 4) {
        rc = pthread_mutex_lock(m);
    } else if (r < 6) {
        while ((rc = pthread_mutex_trylock(m)) == EBUSY)
            sched_yield();
    } else {
        clockid_t clk = r == 6 ? CLOCK_REALTIME : CLOCK_MONOTONIC;
        struct timespec dl = short_deadline(&s->rng, clk);
        rc = clk == CLOCK_REALTIME ? pthread_mutex_timedlock(m, &dl)
                                   : pthread_mutex_clocklock(m, clk, &dl);
        if (rc == ETIMEDOUT) {
            check_not_early("pthread_mutex_timedlock", clk, &dl);
            atomic_fetch_add(&W.timeouts, 1);
            return 0;
        }
    }
    if (rc != 0)
        die("mutex_counters", "mutex acquire returned %s", errname(rc));
    return 1;
}

static void op_mutex(struct slot *s)
{
    int i = (int)(rnd(&s->rng) % NMUTEX);
    if (!mixed_lock(s, &W.m[i]))
        return;
    if (atomic_exchange(&W.inside[i], 1) != 0)
        die("mutex_counters", "two threads inside mutex %d", i);
    if (W.counter[i] != W.shadow[i])
        die("mutex_counters", "mutex %d: counter %ld != shadow %ld", i, W.counter[i], W.shadow[i]);
    W.counter[i]++;
    if (rnd(&s->rng) % 64 == 0)
        sched_yield(); /* sometimes get preempted inside */
    W.shadow[i]++;
    atomic_store(&W.inside[i], 0);
    atomic_fetch_add(&W.done[i], 1);
    MUST("mutex_counters", pthread_mutex_unlock(&W.m[i]));
}

static void op_recursive(struct slot *s)
{
    int depth = 1 + (int)(rnd(&s->rng) % 3);
    for (int d = 0; d < depth; d++)
        MUST("recursive_mutex", d == 1 ? pthread_mutex_trylock(&W.rec) : pthread_mutex_lock(&W.rec));
    if (atomic_exchange(&W.rec_inside, 1) != 0)
        die("recursive_mutex", "two threads inside the recursive mutex");
    W.rec_counter++;
    atomic_store(&W.rec_inside, 0);
    atomic_fetch_add(&W.rec_done, 1);
    for (int d = 0; d < depth; d++)
        MUST("recursive_mutex", pthread_mutex_unlock(&W.rec));
}

static void op_read(struct slot *s)
{
    uint64_t r = rnd(&s->rng) % 8;
    int rc;
    struct timespec dl;
    if (r < 5) {
        rc = pthread_rwlock_rdlock(&W.rw);
    } else if (r == 5) {
        if ((rc = pthread_rwlock_tryrdlock(&W.rw)) == EBUSY)
            return;
    } else {
        clockid_t clk = r == 6 ? CLOCK_REALTIME : CLOCK_MONOTONIC;
        dl = short_deadline(&s->rng, clk);
        rc = clk == CLOCK_REALTIME ? pthread_rwlock_timedrdlock(&W.rw, &dl)
                                   : pthread_rwlock_clockrdlock(&W.rw, clk, &dl);
        if (rc == ETIMEDOUT) {
            check_not_early("rwlock timed rdlock", clk, &dl);
            atomic_fetch_add(&W.timeouts, 1);
            return;
        }
    }
    if (rc != 0)
        die("rwlock_invariant", "read lock returned %s", errname(rc));
    atomic_fetch_add(&W.readers, 1);
    if (atomic_load(&W.writers) != 0)
        die("rwlock_invariant", "reader inside together with a writer");
    long v = __atomic_load_n(&W.words[0], __ATOMIC_RELAXED);
    for (int k = 1; k < 4; k++) {
        long x = __atomic_load_n(&W.words[k], __ATOMIC_RELAXED);
        if (x != v)
            die("rwlock_invariant", "torn read: words[0]=%ld words[%d]=%ld", v, k, x);
    }
    atomic_fetch_sub(&W.readers, 1);
    MUST("rwlock_invariant", pthread_rwlock_unlock(&W.rw));
}

static void op_write(struct slot *s)
{
    uint64_t r = rnd(&s->rng) % 8;
    int rc;
    struct timespec dl;
    if (r < 5) {
        rc = pthread_rwlock_wrlock(&W.rw);
    } else if (r == 5) {
        if ((rc = pthread_rwlock_trywrlock(&W.rw)) == EBUSY)
            return;
    } else {
        clockid_t clk = r == 6 ? CLOCK_REALTIME : CLOCK_MONOTONIC;
        dl = short_deadline(&s->rng, clk);
        rc = clk == CLOCK_REALTIME ? pthread_rwlock_timedwrlock(&W.rw, &dl)
                                   : pthread_rwlock_clockwrlock(&W.rw, clk, &dl);
        if (rc == ETIMEDOUT) {
            check_not_early("rwlock timed wrlock", clk, &dl);
            atomic_fetch_add(&W.timeouts, 1);
            return;
        }
    }
    if (rc != 0)
        die("rwlock_invariant", "write lock returned %s", errname(rc));
    if (atomic_fetch_add(&W.writers, 1) != 0)
        die("rwlock_invariant", "two writers inside");
    if (atomic_load(&W.readers) != 0)
        die("rwlock_invariant", "writer inside together with readers");
    long v = W.words[0] + 1;
    for (int k = 0; k < 4; k++) {
        __atomic_store_n(&W.words[k], v, __ATOMIC_RELAXED);
        if (k == 1 && rnd(&s->rng) % 16 == 0)
            sched_yield(); /* widen the torn window */
    }
    atomic_fetch_sub(&W.writers, 1);
    atomic_fetch_add(&W.writes, 1);
    MUST("rwlock_invariant", pthread_rwlock_unlock(&W.rw));
}

/* A semaphore wait that failed with EINTR, by a consumer: counted, and the
 * operation skipped. A SIGCANCEL that pthread_cancel sent while a consumer
 * waited with cancellation enabled can arrive late, in a semaphore wait
 * made with cancellation disabled; glibc's handler then returns, and the
 * kernel ends a timed futex wait with EINTR, which sem_wait(3) may return.
 * No other thread receives signals, so for them EINTR stays a failure. */
static int consumer_interrupted(struct slot *s, int rc, int err)
{
    if (rc != -1 || err != EINTR || strcmp(s->role, "consumer") != 0)
        return 0;
    atomic_fetch_add(&W.interrupted, 1);
    return 1;
}

static void op_sem(struct slot *s)
{
    uint64_t r = rnd(&s->rng) % 8;
    int rc;
    if (r < 5) {
        rc = sem_wait(&W.sem);
    } else if (r == 5) {
        rc = sem_trywait(&W.sem);
        if (rc == -1 && errno == EAGAIN)
            return;
    } else {
        clockid_t clk = r == 6 ? CLOCK_REALTIME : CLOCK_MONOTONIC;
        struct timespec dl = short_deadline(&s->rng, clk);
        rc = clk == CLOCK_REALTIME ? sem_timedwait(&W.sem, &dl) : sem_clockwait(&W.sem, clk, &dl);
        if (rc == -1 && errno == ETIMEDOUT) {
            check_not_early("sem timed wait", clk, &dl);
            atomic_fetch_add(&W.timeouts, 1);
            return;
        }
    }
    if (consumer_interrupted(s, rc, errno))
        return;
    if (rc != 0)
        die("sem_limit", "semaphore wait failed: %s", errname(errno));
    int in = atomic_fetch_add(&W.sem_inside, 1) + 1;
    if (in > SEM_LIMIT)
        die("sem_limit", "%d holders of a %d-token semaphore", in, SEM_LIMIT);
    int v;
    if (sem_getvalue(&W.sem, &v) != 0 || v < 0 || v > SEM_LIMIT)
        die("sem_limit", "sem_getvalue says %d (limit %d)", v, SEM_LIMIT);
    if (rnd(&s->rng) % 32 == 0)
        sched_yield();
    atomic_fetch_sub(&W.sem_inside, 1);
    if (sem_post(&W.sem) != 0)
        die("sem_limit", "sem_post: %s", errname(errno));
}

static void op_gate(struct slot *s)
{
    /* Random posts and short timed takes on a mostly-empty semaphore. */
    if (rnd(&s->rng) % 2 == 0) {
        int v;
        if (sem_getvalue(&W.gate, &v) == 0 && v < 64) {
            if (sem_post(&W.gate) != 0)
                die("sem_gate", "sem_post: %s", errname(errno));
            atomic_fetch_add(&W.gate_posts, 1);
        }
        return;
    }
    struct timespec dl = short_deadline(&s->rng, CLOCK_REALTIME);
    int rc = sem_timedwait(&W.gate, &dl);
    if (rc == 0) {
        atomic_fetch_add(&W.gate_takes, 1);
    } else if (consumer_interrupted(s, rc, errno)) {
        return;
    } else if (errno == ETIMEDOUT) {
        check_not_early("sem_timedwait(gate)", CLOCK_REALTIME, &dl);
        atomic_fetch_add(&W.timeouts, 1);
    } else {
        die("sem_gate", "sem_timedwait: %s", errname(errno));
    }
}

static void op_spin(struct slot *s)
{
    if (rnd(&s->rng) % 2)
        MUST("spin_counter", pthread_spin_lock(&W.spin));
    else
        while (pthread_spin_trylock(&W.spin) != 0)
            sched_yield();
    if (atomic_exchange(&W.spin_inside, 1) != 0)
        die("spin_counter", "two threads inside the spinlock");
    W.spin_counter++;
    if (rnd(&s->rng) % 8 == 0) /* sometimes stay a little longer (~1 us) so */
        for (volatile int k = 0; k < 300; k++) /* overlaps are more likely seen */
            ;
    atomic_store(&W.spin_inside, 0);
    atomic_fetch_add(&W.spin_done, 1);
    MUST("spin_counter", pthread_spin_unlock(&W.spin));
}

static void op_quiet_timedwait(struct slot *s)
{
    /* Nobody signals these conds: every wait must time out (or wake
     * spuriously, which POSIX allows), never early, with the mutex held. */
    int mono = (int)(rnd(&s->rng) % 2);
    clockid_t clk = mono ? CLOCK_MONOTONIC : CLOCK_REALTIME;
    MUST("timed_waits", pthread_mutex_lock(&W.quiet_m));
    struct timespec dl = short_deadline(&s->rng, clk);
    int rc;
    if (mono && rnd(&s->rng) % 2)
        rc = pthread_cond_timedwait(&W.quiet_cm, &W.quiet_m, &dl); /* condattr clock */
    else
        rc = pthread_cond_clockwait(&W.quiet_c, &W.quiet_m, clk, &dl);
    if (rc == ETIMEDOUT) {
        check_not_early("pthread_cond timed wait (never signalled)", clk, &dl);
        atomic_fetch_add(&W.timeouts, 1);
    } else if (rc == 0) {
        atomic_fetch_add(&W.spurious, 1);
    } else {
        die("timed_waits", "timed cond wait returned %s", errname(rc));
    }
    rc = pthread_mutex_unlock(&W.quiet_m); /* errorcheck: EPERM if not re-held */
    if (rc != 0)
        die("timed_waits", "mutex not held after a timed cond wait (unlock: %s)", errname(rc));
}

/* glibc's mutex layout: the lock word, and the owner's kernel thread id
 * (kept for errorcheck and recursive mutexes by glibc and vsched alike; a
 * normal mutex's owner is kept by glibc only). An owner that is no live
 * thread is how the stall of issue 15's CI run was found: a cancelled
 * consumer had died owning quiet_m. */
static void dump_mutex(const char *name, pthread_mutex_t *m)
{
    int word = __atomic_load_n(&m->__data.__lock, __ATOMIC_RELAXED);
    int owner = __atomic_load_n(&m->__data.__owner, __ATOMIC_RELAXED);
    printf("#   mutex %-9s word=%d owner=%d%s\n", name, word, owner,
           owner && !thread_alive(owner) ? " (no live thread: died holding it?)" : "");
}

static void dump_mutexes(void)
{
    char name[16];
    dump_mutex("queue", &Q.m);
    dump_mutex("pingpong", &PP.m);
    dump_mutex("quiet", &W.quiet_m);
    dump_mutex("recursive", &W.rec);
    for (int i = 0; i < NMUTEX; i++) {
        snprintf(name, sizeof name, "counter%d", i);
        dump_mutex(name, &W.m[i]);
    }
}

/* One random operation on the shared primitives. */
static void mixed_op(struct slot *s)
{
    {
        uint64_t r = rnd(&s->rng) % 100;
        if (r < 28) { op_mutex(s); progress(s, "mutex"); }
        else if (r < 42) { op_read(s); progress(s, "rdlock"); }
        else if (r < 50) { op_write(s); progress(s, "wrlock"); }
        else if (r < 62) { op_sem(s); progress(s, "sem"); }
        else if (r < 76) { op_spin(s); progress(s, "spin"); }
        else if (r < 90) { op_recursive(s); progress(s, "recursive"); }
        else if (r < 96) { op_gate(s); progress(s, "sem_gate"); }
        else { op_quiet_timedwait(s); progress(s, "cond_timedwait"); }
    }
}

static void *mixed_main(void *p)
{
    struct slot *s = p;
    slot_begin(s);
    while (!atomic_load(&g_stop))
        mixed_op(s);
    atomic_store(&s->active, 0);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Setup, main loop (cancels consumers), final checks                        */
/* ------------------------------------------------------------------------ */

static struct slot *slot_alloc(const char *role)
{
    if (g_nslots >= MAX_SLOTS)
        die("setup", "too many threads");
    struct slot *s = &g_slots[g_nslots++];
    s->role = role;
    s->rng = mix64(g_seed + (uint64_t)g_nslots * 0x1234567ULL) | 1;
    atomic_store(&s->last_ns, now_ns(CLOCK_MONOTONIC));
    atomic_store(&s->active, 1);
    return s;
}
/* A thread for a new slot; fn gets arg, or the slot itself if arg is NULL. */
static struct slot *new_slot(const char *role, void *(*fn)(void *), void *arg)
{
    struct slot *s = slot_alloc(role);
    MUST("setup", pthread_create(&s->tid, NULL, fn, arg ? arg : s));
    return s;
}

static int g_all_ok = 1;
static void report(const char *name, int ok, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void report(const char *name, int ok, const char *fmt, ...)
{
    if (ok) {
        printf("ok %s\n", name);
        return;
    }
    char buf[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    printf("FAIL %s: %s\n", name, buf);
    g_all_ok = 0;
}

static void usage(const char *argv0)
{
    fprintf(stderr, "usage: %s [-o OPS] [-t THREADS] [-s SEED] [-w STALL_S] [-T LIMIT_S] [-C]\n",
            argv0);
    exit(2);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    g_threads = (int)(4 * (ncpu > 0 ? ncpu : 1));
    g_seed = (uint64_t)now_ns(CLOCK_REALTIME);
    int opt;
    while ((opt = getopt(argc, argv, "o:t:s:w:T:C")) != -1) {
        switch (opt) {
        case 'o': g_target = atol(optarg); break;
        case 't': g_threads = atoi(optarg); break;
        case 's': g_seed = strtoull(optarg, NULL, 0); break;
        case 'w': g_stall_s = atoi(optarg); break;
        case 'T': g_limit_s = atoi(optarg); break;
        case 'C': g_cancel = 0; break;
        default: usage(argv[0]);
        }
    }
    if (g_target <= 0 || g_threads <= 0 || g_stall_s <= 0 || g_limit_s <= 0)
        usage(argv[0]);
    g_loaded = dlsym(RTLD_DEFAULT, "vsched_sync_version") != NULL;
    if (g_loaded) {
        const char *(*ver)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "vsched_sync_version");
        printf("# vsched_sync_version: %s\n", ver());
    }

    /* roles */
    int n_bar = g_threads / 4 > 2 ? g_threads / 4 : 2;
    int n_prod = g_threads / 8 > 1 ? g_threads / 8 : 1;
    int n_cons = n_prod;
    int n_mixed = g_threads - n_bar - 2 - n_prod - n_cons;
    if (n_mixed < 2)
        n_mixed = 2;
    printf("# seed=%llu target_ops=%ld cpus=%ld threads=%d (barrier %d, ping-pong 2, producers %d, "
           "consumers %d, mixed %d) cancel=%d stall=%ds\n",
           (unsigned long long)g_seed, g_target, ncpu, n_bar + 2 + n_prod + n_cons + n_mixed,
           n_bar, n_prod, n_cons, n_mixed, g_cancel, g_stall_s);

    /* primitives */
    pthread_mutexattr_t ea, ra;
    pthread_mutexattr_init(&ea);
    pthread_mutexattr_settype(&ea, PTHREAD_MUTEX_ERRORCHECK);
    pthread_mutexattr_init(&ra);
    pthread_mutexattr_settype(&ra, PTHREAD_MUTEX_RECURSIVE);
    pthread_condattr_t mono;
    pthread_condattr_init(&mono);
    pthread_condattr_setclock(&mono, CLOCK_MONOTONIC);

    MUST("setup", pthread_barrier_init(&B.b, NULL, (unsigned)n_bar));
    B.n = n_bar;
    MUST("setup", pthread_mutex_init(&PP.m, NULL));
    MUST("setup", pthread_cond_init(&PP.c[0], NULL));
    MUST("setup", pthread_cond_init(&PP.c[1], &mono));
    MUST("setup", pthread_mutex_init(&Q.m, &ea));
    MUST("setup", pthread_cond_init(&Q.not_empty, NULL));
    MUST("setup", pthread_cond_init(&Q.not_full, &mono));
    static const int types[NMUTEX] = {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ERRORCHECK,
                                      PTHREAD_MUTEX_ADAPTIVE_NP, PTHREAD_MUTEX_NORMAL};
    for (int i = 0; i < NMUTEX; i++) {
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_settype(&a, types[i]);
        MUST("setup", pthread_mutex_init(&W.m[i], &a));
        pthread_mutexattr_destroy(&a);
    }
    MUST("setup", pthread_mutex_init(&W.rec, &ra));
    MUST("setup", pthread_rwlock_init(&W.rw, NULL));
    if (sem_init(&W.sem, 0, SEM_LIMIT) != 0 || sem_init(&W.gate, 0, 0) != 0)
        die("setup", "sem_init: %s", errname(errno));
    MUST("setup", pthread_spin_init(&W.spin, PTHREAD_PROCESS_PRIVATE));
    MUST("setup", pthread_mutex_init(&W.quiet_m, &ea));
    MUST("setup", pthread_cond_init(&W.quiet_c, NULL));
    MUST("setup", pthread_cond_init(&W.quiet_cm, &mono));

    /* threads */
    g_start_ns = now_ns(CLOCK_MONOTONIC);
    pthread_t wd;
    MUST("setup", pthread_create(&wd, NULL, watchdog_main, NULL));
    struct slot *bar[64], *prod[64], *cons[64], *mixed[256], *pp[2];
    if (n_bar > 64 || n_prod > 64 || n_mixed > 256)
        die("setup", "too many threads for the role tables");
    static struct pp_arg ppa[2];
    for (int i = 0; i < 2; i++) {
        ppa[i].me = i;
        ppa[i].s = pp[i] = slot_alloc("pingpong");
        MUST("setup", pthread_create(&pp[i]->tid, NULL, pingpong_main, &ppa[i]));
    }
    for (int i = 0; i < n_bar; i++)
        bar[i] = new_slot("barrier", barrier_main, NULL);
    for (int i = 0; i < n_prod; i++)
        prod[i] = new_slot("producer", producer_main, NULL);
    for (int i = 0; i < n_cons; i++)
        cons[i] = new_slot("consumer", consumer_main, NULL);
    for (int i = 0; i < n_mixed; i++)
        mixed[i] = new_slot("mixed", mixed_main, NULL);

    /* Cancel a random consumer every few milliseconds and replace it. */
    uint64_t rng = mix64(g_seed) | 1;
    long cancels = 0;
    while (!atomic_load(&g_stop)) {
        sleep_us(2000 + (long)(rnd(&rng) % 20000));
        if (!g_cancel || atomic_load(&g_stop))
            continue;
        int k = (int)(rnd(&rng) % (uint64_t)n_cons);
        struct slot *s = cons[k];
        MUST("cancel", pthread_cancel(s->tid));
        void *ret;
        MUST("cancel", pthread_join(s->tid, &ret));
        /* Q.done is only set after this loop, so a consumer cannot have
         * finished on its own. */
        if (ret != PTHREAD_CANCELED)
            die("cancel", "cancelled consumer returned normally");
        atomic_store(&s->active, 0);
        cancels++;
        /* replacement, reusing the slot */
        atomic_store(&s->last_ns, now_ns(CLOCK_MONOTONIC));
        atomic_store(&s->active, 1);
        MUST("cancel", pthread_create(&s->tid, NULL, consumer_main, s));
    }

    /* wind down: everything but the consumers stops by itself */
    for (int i = 0; i < 2; i++)
        MUST("join", pthread_join(pp[i]->tid, NULL));
    for (int i = 0; i < n_bar; i++)
        MUST("join", pthread_join(bar[i]->tid, NULL));
    for (int i = 0; i < n_mixed; i++)
        MUST("join", pthread_join(mixed[i]->tid, NULL));
    for (int i = 0; i < n_prod; i++)
        MUST("join", pthread_join(prod[i]->tid, NULL));
    MUST("queue", pthread_mutex_lock(&Q.m));
    Q.done = 1;
    MUST("queue", pthread_cond_broadcast(&Q.not_empty));
    MUST("queue", pthread_mutex_unlock(&Q.m));
    for (int i = 0; i < n_cons; i++)
        MUST("join", pthread_join(cons[i]->tid, NULL));
    atomic_store(&g_watchdog_stop, 1);
    MUST("join", pthread_join(wd, NULL));
    double secs = (double)(now_ns(CLOCK_MONOTONIC) - g_start_ns) / 1e9;

    /* final invariants */
    long mutex_done = 0, mutex_counted = 0;
    int shadow_ok = 1;
    for (int i = 0; i < NMUTEX; i++) {
        mutex_done += atomic_load(&W.done[i]);
        mutex_counted += W.counter[i];
        shadow_ok &= W.counter[i] == W.shadow[i] && W.counter[i] == atomic_load(&W.done[i]);
    }
    report("mutex_counters", shadow_ok, "counters %ld vs %ld successful increments (lost update)",
           mutex_counted, mutex_done);
    report("recursive_mutex", W.rec_counter == atomic_load(&W.rec_done), "counter %ld vs %ld",
           W.rec_counter, atomic_load(&W.rec_done));
    int words_ok = 1;
    for (int k = 0; k < 4; k++)
        words_ok &= W.words[k] == atomic_load(&W.writes);
    report("rwlock_invariant", words_ok, "words %ld %ld %ld %ld after %ld writes", W.words[0],
           W.words[1], W.words[2], W.words[3], atomic_load(&W.writes));
    int sv = -1, gv = -1;
    sem_getvalue(&W.sem, &sv);
    sem_getvalue(&W.gate, &gv);
    report("sem_limit", sv == SEM_LIMIT, "final value %d, expected %d", sv, SEM_LIMIT);
    report("sem_gate", gv == atomic_load(&W.gate_posts) - atomic_load(&W.gate_takes),
           "final value %d, expected %ld posts - %ld takes", gv, atomic_load(&W.gate_posts),
           atomic_load(&W.gate_takes));
    report("spin_counter", W.spin_counter == atomic_load(&W.spin_done), "counter %ld vs %ld",
           W.spin_counter, atomic_load(&W.spin_done));
    report("queue_no_loss_no_dup",
           atomic_load(&q_prod_n) == atomic_load(&q_cons_n) &&
               atomic_load(&q_prod_sum) == atomic_load(&q_cons_sum) &&
               atomic_load(&q_prod_xor) == atomic_load(&q_cons_xor) && Q.count == 0,
           "produced %lu consumed %lu (fingerprints %s), %d left in the queue",
           atomic_load(&q_prod_n), atomic_load(&q_cons_n),
           atomic_load(&q_prod_sum) == atomic_load(&q_cons_sum) ? "match" : "differ", Q.count);
    report("barrier_rounds", B.serials == B.rounds && B.rounds > 0 &&
               atomic_load(&B.serial_total) == 2 * B.rounds,
           "%ld serial returns over %ld rounds of two waits", atomic_load(&B.serial_total),
           B.rounds);
    report("pingpong", PP.passes > 0, "no passes");
    report("cancel_cleanup", atomic_load(&q_cancel_bad_unlock) == 0,
           "%ld of %ld consumers cancelled in a cond wait did not hold the mutex in their "
           "cleanup handler (errorcheck unlock returned %s)",
           atomic_load(&q_cancel_bad_unlock), atomic_load(&q_cancel_in_wait),
           errname(atomic_load(&q_cancel_bad_rc)));
    report("watchdog", 1, "%s", "");
    printf("# %.1f s, %.0f ops/s; barrier rounds %ld, ping-pong passes %ld, items %lu, "
           "mutex %ld, rwlock writes %ld, spin %ld, timeouts %ld, spurious %ld, cancels %ld "
           "(%ld in a cond wait, %ld at the test point), consumers' sem waits interrupted %ld\n",
           secs, (double)atomic_load(&g_ops) / secs, B.rounds, PP.passes,
           atomic_load(&q_cons_n), mutex_done, atomic_load(&W.writes), W.spin_counter,
           atomic_load(&W.timeouts), atomic_load(&W.spurious), cancels,
           atomic_load(&q_cancel_in_wait), atomic_load(&q_cancel_elsewhere),
           atomic_load(&W.interrupted));
    print_tail();
    return g_all_ok ? 0 : 1;
}
