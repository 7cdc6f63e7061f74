/*
 * syncbench: pthread synchronisation micro-benchmarks for `vsched bench sync`.
 *
 * Usage: syncbench CASE THREADS OPS
 *   CASE: mutex | barrier | cond-broadcast | cond-signal | rwlock | spin-ring | spinlock
 *         | spinlock-long
 *   OPS:  lock acquisitions (mutex, rwlock), rounds (barrier) or hand-offs (rings)
 *
 * Prints one JSON line. Only the workers' loops are timed; the per-thread
 * scheduler counters are read outside the timed region.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Work units are a dependent multiply-add chain: fixed CPU work that does not
 * shrink when a thread is preempted in the middle (as time-based work would). */
enum {
    MUTEX_OUTSIDE_WORK = 150,  /* ~0.1-0.2 us between critical sections */
    BARRIER_WORK = 1000,       /* ~1 us per thread per round */
    RING_WORK = 1000,          /* ~1 us per hand-off */
    RWLOCK_OUTSIDE_WORK = 150,
    SPINLOCK_INSIDE_WORK = 300,  /* ~0.3 us critical section */
    SPINLOCK_OUTSIDE_WORK = 600,
    /* spinlock-long: a critical section of ~20 us natively (several times
     * that under TCG), long enough that a vCPU switched off every few
     * milliseconds often stops a holder inside it (I-Spinlock's case). */
    SPINLOCK_LONG_INSIDE_WORK = 20000,
    SPINLOCK_LONG_OUTSIDE_WORK = 20000,
    TABLE_SIZE = 64,
    WRITE_PERCENT = 5,
};

static volatile uint64_t sink;

static void work(unsigned units) {
    uint64_t x = units;
    for (unsigned i = 0; i < units; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        __asm__ volatile("" : "+r"(x)); /* keeps the compiler from folding the chain */
    }
    sink = x;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

struct counters {
    long voluntary, involuntary, migrations;
};

/* Reads "NAME<sep> VALUE" from a /proc file of the calling thread. */
static long proc_value(const char *path, const char *name) {
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[256];
    long value = 0;
    size_t len = strlen(name);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, name, len) == 0 && (line[len] == ':' || line[len] == ' ')) {
            char *colon = strchr(line + len, ':');
            value = colon ? atol(colon + 1) : 0;
            break;
        }
    }
    fclose(f);
    return value;
}

static struct counters read_counters(void) {
    struct counters c;
    c.voluntary = proc_value("/proc/thread-self/status", "voluntary_ctxt_switches");
    c.involuntary = proc_value("/proc/thread-self/status", "nonvoluntary_ctxt_switches");
    /* 0 where the kernel has no /proc/.../sched (built without CONFIG_SCHED_DEBUG). */
    c.migrations = proc_value("/proc/thread-self/sched", "se.nr_migrations");
    return c;
}

/* Shared state of all cases. */
static int nthreads;
static long total_ops;
static pthread_barrier_t start_gate, end_gate;

static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static long counter;

static pthread_barrier_t barrier;

static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static pthread_cond_t *conds;
static int turn, done;
static long handoffs;

static pthread_rwlock_t rwlock = PTHREAD_RWLOCK_INITIALIZER;
static long table[TABLE_SIZE];

static pthread_spinlock_t *spins;
static pthread_spinlock_t shared_spin;

/* Share of `total` done by thread `me` (the first threads take the remainder). */
static long share(long total, int me) {
    return total / nthreads + (me < total % nthreads);
}

static void mutex_case(int me) {
    for (long i = share(total_ops, me); i > 0; i--) {
        pthread_mutex_lock(&mutex);
        counter++;
        pthread_mutex_unlock(&mutex);
        work(MUTEX_OUTSIDE_WORK);
    }
}

/* A spinlock around a short critical section: with more threads than
 * vCPUs, a holder is sometimes preempted and every waiter spins in vain. */
static void spinlock_loop(int me, unsigned inside, unsigned outside) {
    for (long i = share(total_ops, me); i > 0; i--) {
        pthread_spin_lock(&shared_spin);
        counter++;
        work(inside);
        pthread_spin_unlock(&shared_spin);
        work(outside);
    }
}

static void spinlock_case(int me) {
    spinlock_loop(me, SPINLOCK_INSIDE_WORK, SPINLOCK_OUTSIDE_WORK);
}

static void spinlock_long_case(int me) {
    spinlock_loop(me, SPINLOCK_LONG_INSIDE_WORK, SPINLOCK_LONG_OUTSIDE_WORK);
}

static void barrier_case(int me) {
    (void)me;
    for (long i = 0; i < total_ops; i++) {
        work(BARRIER_WORK);
        pthread_barrier_wait(&barrier);
    }
}

/* The token holder counts the hand-off, or ends the ring once all are done. */
static int take_turn(int me) {
    if (handoffs >= total_ops)
        done = 1;
    if (done)
        return 0;
    handoffs++;
    work(RING_WORK);
    turn = (me + 1) % nthreads;
    return 1;
}

static void cond_broadcast_case(int me) {
    pthread_mutex_lock(&mutex);
    for (;;) {
        while (turn != me && !done)
            pthread_cond_wait(&cond, &mutex);
        int more = take_turn(me);
        pthread_cond_broadcast(&cond);
        if (!more)
            break;
    }
    pthread_mutex_unlock(&mutex);
}

static void cond_signal_case(int me) {
    pthread_mutex_lock(&mutex);
    for (;;) {
        while (turn != me && !done)
            pthread_cond_wait(&conds[me], &mutex);
        if (!take_turn(me))
            break;
        pthread_cond_signal(&conds[turn]);
    }
    /* Everyone still waiting must see `done`. */
    for (int t = 0; t < nthreads; t++)
        pthread_cond_signal(&conds[t]);
    pthread_mutex_unlock(&mutex);
}

static void rwlock_case(int me) {
    uint64_t rng = 0x9e3779b97f4a7c15ULL * (me + 1);
    for (long i = share(total_ops, me); i > 0; i--) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        unsigned slot = rng % TABLE_SIZE;
        if (rng / TABLE_SIZE % 100 < WRITE_PERCENT) {
            pthread_rwlock_wrlock(&rwlock);
            table[slot]++;
            pthread_rwlock_unlock(&rwlock);
        } else {
            pthread_rwlock_rdlock(&rwlock);
            sink = table[slot] + table[(slot + 1) % TABLE_SIZE];
            pthread_rwlock_unlock(&rwlock);
        }
        work(RWLOCK_OUTSIDE_WORK);
    }
}

/* Each thread's own spinlock is its turn; the holder unlocks the next one's
 * (glibc allows unlocking a spinlock another thread locked). */
static void spin_ring_case(int me) {
    int next = (me + 1) % nthreads;
    for (;;) {
        pthread_spin_lock(&spins[me]);
        int more = take_turn(me);
        pthread_spin_unlock(&spins[next]);
        if (!more)
            break;
    }
}

struct worker {
    pthread_t thread;
    int me;
    void (*body)(int);
    struct counters start, end;
};

static void *worker_main(void *arg) {
    struct worker *w = arg;
    w->start = read_counters();
    pthread_barrier_wait(&start_gate);
    w->body(w->me);
    pthread_barrier_wait(&end_gate);
    w->end = read_counters();
    return NULL;
}

static void (*body_of(const char *name))(int) {
    static const struct {
        const char *name;
        void (*body)(int);
    } cases[] = {
        {"mutex", mutex_case},           {"barrier", barrier_case},
        {"cond-broadcast", cond_broadcast_case}, {"cond-signal", cond_signal_case},
        {"rwlock", rwlock_case},         {"spin-ring", spin_ring_case},
        {"spinlock", spinlock_case},     {"spinlock-long", spinlock_long_case},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(cases[i].name, name) == 0)
            return cases[i].body;
    return NULL;
}

static void init_primitives(void) {
    pthread_barrier_init(&start_gate, NULL, nthreads + 1);
    pthread_barrier_init(&end_gate, NULL, nthreads + 1);
    pthread_barrier_init(&barrier, NULL, nthreads);
    conds = calloc(nthreads, sizeof *conds);
    spins = calloc(nthreads, sizeof *spins);
    pthread_spin_init(&shared_spin, PTHREAD_PROCESS_PRIVATE);
    for (int t = 0; t < nthreads; t++) {
        pthread_cond_init(&conds[t], NULL);
        pthread_spin_init(&spins[t], PTHREAD_PROCESS_PRIVATE);
        if (t > 0)
            pthread_spin_lock(&spins[t]); /* only thread 0 holds the token at first */
    }
}

int main(int argc, char **argv) {
    void (*body)(int) = argc == 4 ? body_of(argv[1]) : NULL;
    nthreads = argc == 4 ? atoi(argv[2]) : 0;
    total_ops = argc == 4 ? atol(argv[3]) : 0;
    if (!body || nthreads < 2 || total_ops < 1) {
        fprintf(stderr, "usage: %s mutex|barrier|cond-broadcast|cond-signal|rwlock|spin-ring|spinlock|spinlock-long THREADS(>=2) OPS\n",
                argv[0]);
        return 2;
    }
    init_primitives();
    struct worker *workers = calloc(nthreads, sizeof *workers);
    for (int t = 0; t < nthreads; t++) {
        workers[t] = (struct worker){.me = t, .body = body};
        if (pthread_create(&workers[t].thread, NULL, worker_main, &workers[t]) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    pthread_barrier_wait(&start_gate);
    double start = now();
    pthread_barrier_wait(&end_gate);
    double elapsed = now() - start;

    struct counters sum = {0, 0, 0};
    for (int t = 0; t < nthreads; t++) {
        pthread_join(workers[t].thread, NULL);
        sum.voluntary += workers[t].end.voluntary - workers[t].start.voluntary;
        sum.involuntary += workers[t].end.involuntary - workers[t].start.involuntary;
        sum.migrations += workers[t].end.migrations - workers[t].start.migrations;
    }
    int loaded = dlsym(RTLD_DEFAULT, "vsched_sync_version") != NULL;
    printf("{\"case\":\"%s\",\"threads\":%d,\"ops\":%ld,\"elapsed_s\":%.6f,\"ns_per_op\":%.1f,"
           "\"voluntary_ctxt_switches\":%ld,\"involuntary_ctxt_switches\":%ld,\"migrations\":%ld,"
           "\"loaded\":%d}\n",
           argv[1], nthreads, total_ops, elapsed, elapsed * 1e9 / total_ops, sum.voluntary,
           sum.involuntary, sum.migrations, loaded);
    return 0;
}
