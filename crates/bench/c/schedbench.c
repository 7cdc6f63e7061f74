/*
 * Workloads of `vsched bench sched`, run inside lab guests under the
 * kernel's default scheduler and under vsched's, side by side.
 *
 *   schedbench cpu THREADS ITERS            CPU-bound threads, fixed work each
 *   schedbench rotate THREADS ITERS EVERY_US CPU,CPU,...
 *       the cpu workload's threads moving themselves along the CPU list
 *       every EVERY_US of wall time, thread i of n starting i/n of the
 *       way along (two threads on "0,1,2,3": at 0 and 2): IVH's oracle, a
 *       rotation that knows the layout
 *   schedbench barrier THREADS ROUNDS ITERS ITERS of work, then a barrier, ROUNDS times
 *   schedbench pingpong PAIRS ROUNDTRIPS    pairs of threads passing a byte through pipes
 *   schedbench messaging GROUPS FDS LOOPS   hackbench-like: in each group FDS senders
 *       write LOOPS 100-byte messages to each of FDS receivers (Unix sockets)
 *   schedbench server WORKERS REQUESTS SERVICE_US INTERVAL_US [BEST_EFFORT]
 *       a request server (Tailbench-like): a generator issues REQUESTS at
 *       random intervals (mean INTERVAL_US, open loop), WORKERS threads
 *       serve them from one queue, SERVICE_US of CPU time each; with
 *       BEST_EFFORT SCHED_IDLE threads spinning beside it
 *   schedbench idle THREADS SECONDS        SCHED_IDLE threads spinning (best-effort load)
 *   schedbench rt THREADS SECONDS          SCHED_FIFO threads (priority 10) working
 *       2 ms of every 10 ms: real-time tasks beside a sched_ext scheduler
 *   schedbench pipeline STAGES ITEMS ITERS  a dedup-like pipeline: STAGES threads
 *       handing ITEMS items through bounded blocking queues (4 items,
 *       mutex and condition variables), ITERS of work per item and stage
 *   schedbench wakeup ROUNDS                wake-up latency (Gleaner's Table 1): a
 *       thread on vCPU 0 wakes a thread blocked on a futex, ROUNDS times
 *       each with the wakee bound to vCPU 0 (same), to vCPU 1 while a
 *       SCHED_IDLE thread keeps it busy (busy), to vCPU 1 idle (idle), and
 *       free to run anywhere (free: the scheduler places it); prints
 *       "same_us S busy_us B idle_us I free_us F", the medians from the
 *       wake to the wakee running
 *   schedbench yield THREADS YIELDS        THREADS threads calling sched_yield()
 *       YIELDS times each, nothing else: with fewer threads than vCPUs
 *       each yield finds nothing else to run (a spin-wait's yield on a
 *       machine with room), which is what it costs the scheduler
 *   schedbench spread THREADS LIMIT_MS      how soon THREADS CPU-bound threads,
 *       started together, have run on THREADS different CPUs between them
 *       (consolidation's reaction to demand that needs more vCPUs; CPUs
 *       0-63); prints "spread_ms S", or "spread_ms -1" and fails after
 *       LIMIT_MS
 *   schedbench timeline THREADS SECONDS INTERVAL_MS ITERS
 *       the barrier kernel without end, its throughput over time: rounds
 *       completed in every INTERVAL_MS for SECONDS (vSched Fig. 16)
 *
 * Prints "elapsed_s SECONDS" (wall time from the first thread's start to
 * the last one's end) and nothing else on success; the server prints
 * "p95_us P p50_us P p99_us P queue_p95_us Q service_p95_us S on_cpu0_pct C"
 * instead: percentiles of a request's time from its arrival in the queue to
 * its end, of its wait before a worker started it (queue), of its serving
 * (service), and the share of requests whose service began on vCPU 0 (the
 * low-latency one in the BVS layouts). The timeline prints
 * "s_per_round S interval_ms I t0 R t1 R ...": the mean time per round over
 * the whole run, then rounds per second in each interval.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long iters, rounds, roundtrips;
static pthread_barrier_t barrier;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* `n` more links of a dependent chain of multiply-adds from `x`. */
static uint64_t advance(uint64_t x, long n)
{
	for (long i = 0; i < n; i++)
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	return x;
}

/* Work the compiler cannot remove: a chain of `n` links. */
static uint64_t work(long n, uint64_t seed)
{
	return advance(seed | 1, n);
}

static volatile uint64_t sink;

static void *cpu_thread(void *arg)
{
	sink += work(iters, (uintptr_t)arg);
	return NULL;
}

static long yields;

static void *yield_thread(void *arg)
{
	(void)arg;
	for (long i = 0; i < yields; i++)
		sched_yield();
	return NULL;
}

/* The rotation of `schedbench rotate`: the CPU list, and how often. */
static int rotate_cpus[128], nr_rotate_cpus, nr_rotate_threads;
static double rotate_every_s, rotate_start_s;

static void pin_to(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

/* cpu_thread's work, in chunks short enough (tens of us) to move on
 * time: the same chain, only cut into pieces. */
static void *rotate_thread(void *arg)
{
	const long chunk = 20000;
	uint64_t x = (uintptr_t)arg | 1;
	int first = (int)((uintptr_t)arg * nr_rotate_cpus / nr_rotate_threads);
	int k = first;

	pin_to(rotate_cpus[k]);
	for (long done = 0; done < iters; done += chunk) {
		long n = iters - done < chunk ? iters - done : chunk;
		/* The step from one clock shared by all threads, so that they
		 * move in step and stay half the list apart. */
		int step = (int)((now_s() - rotate_start_s) / rotate_every_s);
		int due = (first + step) % nr_rotate_cpus;

		x = advance(x, n);
		if (due != k) {
			k = due;
			pin_to(rotate_cpus[k]);
		}
	}
	sink += x;
	return NULL;
}

static void *barrier_thread(void *arg)
{
	uint64_t acc = 0;

	for (long r = 0; r < rounds; r++) {
		acc += work(iters, (uintptr_t)arg + r);
		pthread_barrier_wait(&barrier);
	}
	sink += acc;
	return NULL;
}

/* Rounds of the timeline's barrier kernel completed so far. */
static long rounds_done;

static void *timeline_thread(void *arg)
{
	uint64_t acc = 0;

	for (long r = 0;; r++) {
		acc += work(iters, (uintptr_t)arg + r);
		if (pthread_barrier_wait(&barrier) == PTHREAD_BARRIER_SERIAL_THREAD)
			__atomic_fetch_add(&rounds_done, 1, __ATOMIC_RELAXED);
		sink += acc;
	}
	return NULL;
}

/* Samples the rounds done every interval_ms for seconds, prints the
 * timeline and returns; the threads are still running (exit ends them). */
static int run_timeline(long threads, long seconds, long interval_ms)
{
	long n = seconds * 1000 / interval_ms, last = 0;
	double *rate = calloc(n, sizeof(*rate));
	double start = now_s(), next = start;
	pthread_t t;

	if (!rate || n < 1)
		return 1;
	pthread_barrier_init(&barrier, NULL, threads);
	for (long i = 0; i < threads; i++)
		pthread_create(&t, NULL, timeline_thread, (void *)(uintptr_t)i);
	for (long k = 0; k < n; k++) {
		struct timespec ts;
		long done;

		/* Absolute deadlines: the intervals do not drift. */
		next += interval_ms / 1e3;
		ts.tv_sec = (time_t)next;
		ts.tv_nsec = (long)((next - ts.tv_sec) * 1e9);
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL))
			;
		done = __atomic_load_n(&rounds_done, __ATOMIC_RELAXED);
		rate[k] = (done - last) / (interval_ms / 1e3);
		last = done;
	}
	printf("s_per_round %.9f interval_ms %ld", last ? (now_s() - start) / last : 1e9,
	       interval_ms);
	for (long k = 0; k < n; k++)
		printf(" t%ld %.1f", k, rate[k]);
	printf("\n");
	fflush(stdout);
	return 0;
}

/* The messaging kernel (hackbench's thread mode, in miniature). */
#define MSG_BYTES 100
static long msg_loops, msg_fds;

struct msg_group {
	int rx[64], tx[64]; /* receiver i reads rx[i]; senders write tx[i] */
};

static void *msg_sender(void *arg)
{
	struct msg_group *g = arg;
	char msg[MSG_BYTES] = { 0 };

	for (long l = 0; l < msg_loops; l++)
		for (long r = 0; r < msg_fds; r++)
			for (long done = 0; done < MSG_BYTES;) {
				ssize_t n = write(g->tx[r], msg + done, MSG_BYTES - done);

				if (n <= 0)
					abort();
				done += n;
			}
	return NULL;
}

struct msg_receiver {
	int fd;
};

static void *msg_receiver(void *arg)
{
	struct msg_receiver *r = arg;
	char buf[MSG_BYTES * 8];
	long left = msg_fds * msg_loops * MSG_BYTES;

	while (left > 0) {
		ssize_t n = read(r->fd, buf, left < (long)sizeof(buf) ? left : (long)sizeof(buf));

		if (n <= 0)
			abort();
		left -= n;
	}
	return NULL;
}

struct pair_end {
	int in, out;
	int starts;
};

static void *pingpong_thread(void *arg)
{
	struct pair_end *e = arg;
	char b = 0;

	for (long i = 0; i < roundtrips; i++) {
		if (e->starts && write(e->out, &b, 1) != 1)
			abort();
		if (read(e->in, &b, 1) != 1)
			abort();
		if (!e->starts && write(e->out, &b, 1) != 1)
			abort();
	}
	return NULL;
}

/* The request server's state. Requests are indices; their times are kept
 * per request so that percentiles need no locking. */
static long nr_requests, service_us;
static double *issue_s, *start_s, *end_s;
static long queued, taken; /* requests issued / picked up so far */
static long started_on_cpu0; /* requests whose service began on vCPU 0 */
static int all_issued, stop_best_effort;
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queue_nonempty = PTHREAD_COND_INITIALIZER;

static double thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *server_worker(void *arg)
{
	(void)arg;
	for (;;) {
		long r;
		double until;

		pthread_mutex_lock(&queue_lock);
		while (taken == queued && !all_issued)
			pthread_cond_wait(&queue_nonempty, &queue_lock);
		if (taken == queued) {
			pthread_mutex_unlock(&queue_lock);
			return NULL;
		}
		r = taken++;
		pthread_mutex_unlock(&queue_lock);
		start_s[r] = now_s();
		if (sched_getcpu() == 0)
			__atomic_fetch_add(&started_on_cpu0, 1, __ATOMIC_RELAXED);
		/* Service is CPU time, so a pre-empted request takes longer
		 * in wall time, as a real one would. */
		until = thread_cpu_s() + service_us / 1e6;
		while (thread_cpu_s() < until)
			sink += work(100, r);
		end_s[r] = now_s();
	}
}

static void *best_effort_thread(void *arg)
{
	struct sched_param none = { 0 };

	(void)arg;
	if (sched_setscheduler(0, SCHED_IDLE, &none))
		abort();
	while (!__atomic_load_n(&stop_best_effort, __ATOMIC_RELAXED))
		sink += work(1000, 7);
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The q-quantile (nearest rank) of n values, in µs; sorts them. */
static double percentile_us(double *v, long n, double q)
{
	long rank = (long)(q * n + 0.999999);

	qsort(v, n, sizeof(*v), cmp_double);
	if (rank < 1)
		rank = 1;
	return v[rank - 1] * 1e6;
}

static int run_server(long workers, long interval_us, long best_effort)
{
	pthread_t w[128], be[128];
	double *total = calloc(nr_requests, sizeof(double));
	double *wait = calloc(nr_requests, sizeof(double));
	double *serve = calloc(nr_requests, sizeof(double));
	uint64_t rng = 0x9E3779B97F4A7C15ULL;
	double t;

	issue_s = calloc(nr_requests, sizeof(double));
	start_s = calloc(nr_requests, sizeof(double));
	end_s = calloc(nr_requests, sizeof(double));
	if (!total || !wait || !serve || !issue_s || !start_s || !end_s)
		return 1;
	for (long i = 0; i < best_effort; i++)
		pthread_create(&be[i], NULL, best_effort_thread, NULL);
	for (long i = 0; i < workers; i++)
		pthread_create(&w[i], NULL, server_worker, NULL);
	t = now_s() + 0.05; /* let the workers reach their wait */
	for (long r = 0; r < nr_requests; r++) {
		struct timespec ts;

		/* Uniform in [0, 2 x interval): mean interval, bursts included. */
		rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
		t += (double)(rng >> 11) / (double)(1ULL << 53) * 2 * interval_us / 1e6;
		ts.tv_sec = (time_t)t;
		ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
		pthread_mutex_lock(&queue_lock);
		/* Arrival is when the request reaches the queue, as a server
		 * sees it (Tailbench's queue time): the generator's own timer
		 * lateness is the "network's", not the server's. */
		issue_s[r] = now_s();
		queued++;
		pthread_cond_signal(&queue_nonempty);
		pthread_mutex_unlock(&queue_lock);
	}
	pthread_mutex_lock(&queue_lock);
	all_issued = 1;
	pthread_cond_broadcast(&queue_nonempty);
	pthread_mutex_unlock(&queue_lock);
	for (long i = 0; i < workers; i++)
		pthread_join(w[i], NULL);
	__atomic_store_n(&stop_best_effort, 1, __ATOMIC_RELAXED);
	for (long i = 0; i < best_effort; i++)
		pthread_join(be[i], NULL);
	for (long r = 0; r < nr_requests; r++) {
		total[r] = end_s[r] - issue_s[r];
		wait[r] = start_s[r] - issue_s[r];
		serve[r] = end_s[r] - start_s[r];
	}
	printf("p95_us %.0f p50_us %.0f p99_us %.0f queue_p95_us %.0f service_p95_us %.0f "
	       "on_cpu0_pct %.1f\n",
	       percentile_us(total, nr_requests, 0.95), percentile_us(total, nr_requests, 0.50),
	       percentile_us(total, nr_requests, 0.99), percentile_us(wait, nr_requests, 0.95),
	       percentile_us(serve, nr_requests, 0.95), 100.0 * started_on_cpu0 / nr_requests);
	return 0;
}

/* The pipeline: bounded queues of item numbers between stages. */
#define PIPE_SLOTS 4
struct pipe_queue {
	long items[PIPE_SLOTS];
	int head, count, closed;
	pthread_mutex_t lock;
	pthread_cond_t not_empty, not_full;
};

static struct pipe_queue pipe_queues[128];
static long nr_stages, nr_items;

static void queue_put(struct pipe_queue *q, long item)
{
	pthread_mutex_lock(&q->lock);
	while (q->count == PIPE_SLOTS)
		pthread_cond_wait(&q->not_full, &q->lock);
	q->items[(q->head + q->count) % PIPE_SLOTS] = item;
	q->count++;
	pthread_cond_signal(&q->not_empty);
	pthread_mutex_unlock(&q->lock);
}

static void queue_close(struct pipe_queue *q)
{
	pthread_mutex_lock(&q->lock);
	q->closed = 1;
	pthread_cond_broadcast(&q->not_empty);
	pthread_mutex_unlock(&q->lock);
}

/* The next item, or -1 once the queue is closed and empty. */
static long queue_take(struct pipe_queue *q)
{
	long item = -1;

	pthread_mutex_lock(&q->lock);
	while (!q->count && !q->closed)
		pthread_cond_wait(&q->not_empty, &q->lock);
	if (q->count) {
		item = q->items[q->head];
		q->head = (q->head + 1) % PIPE_SLOTS;
		q->count--;
		pthread_cond_signal(&q->not_full);
	}
	pthread_mutex_unlock(&q->lock);
	return item;
}

/* Stage `i`: takes from queue i - 1 (stage 0 makes the items), works,
 * and hands on to queue i (the last stage keeps the result). */
static void *pipeline_stage(void *arg)
{
	long i = (long)(uintptr_t)arg, item;
	uint64_t acc = 0;

	for (long k = 0;; k++) {
		item = i == 0 ? (k < nr_items ? k : -1) : queue_take(&pipe_queues[i - 1]);
		if (item < 0)
			break;
		acc += work(iters, item);
		if (i + 1 < nr_stages)
			queue_put(&pipe_queues[i], item);
	}
	if (i + 1 < nr_stages)
		queue_close(&pipe_queues[i]);
	sink += acc;
	return NULL;
}

/* The wake-up latency measurement: the wakee blocks on `wake_word`, the
 * waker stamps the time, sets it and wakes it, then blocks on
 * `ack_word` until the wakee has read the clock. */
static int wake_word, ack_word, stop_spinner;
static double wake_stamp;
static double *wake_latencies;
static long wake_rounds;

static void futex_wait(int *word, int while_value)
{
	while (__atomic_load_n(word, __ATOMIC_ACQUIRE) == while_value)
		syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, while_value, NULL, NULL, 0);
}

static void futex_set_and_wake(int *word, int value)
{
	__atomic_store_n(word, value, __ATOMIC_RELEASE);
	syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *wakee_thread(void *arg)
{
	int cpu = (int)(intptr_t)arg;

	if (cpu >= 0)
		pin_to(cpu);
	for (long r = 0; r < wake_rounds; r++) {
		futex_wait(&wake_word, 0);
		wake_latencies[r] = (now_s() - wake_stamp) * 1e6;
		__atomic_store_n(&wake_word, 0, __ATOMIC_RELAXED);
		futex_set_and_wake(&ack_word, 1);
	}
	return NULL;
}

static void *idle_spinner(void *arg)
{
	struct sched_param sp = { 0 };

	pin_to((int)(intptr_t)arg);
	sched_setscheduler(0, SCHED_IDLE, &sp);
	while (!__atomic_load_n(&stop_spinner, __ATOMIC_RELAXED))
		;
	return NULL;
}

/* Median wake-up latency in us with the wakee on `cpu` (-1: anywhere),
 * vCPU `busy_cpu` kept busy meanwhile (-1: none). */
static double wake_latency_us(int cpu, int busy_cpu)
{
	pthread_t wakee, spinner;
	struct timespec pause = { 0, 2000000 };
	double median;

	if (busy_cpu >= 0) {
		stop_spinner = 0;
		pthread_create(&spinner, NULL, idle_spinner, (void *)(intptr_t)busy_cpu);
	}
	pthread_create(&wakee, NULL, wakee_thread, (void *)(intptr_t)cpu);
	for (long r = 0; r < wake_rounds; r++) {
		/* Long enough for the wakee to block and its vCPU to halt. */
		nanosleep(&pause, NULL);
		__atomic_store_n(&ack_word, 0, __ATOMIC_RELAXED);
		wake_stamp = now_s();
		futex_set_and_wake(&wake_word, 1);
		futex_wait(&ack_word, 0);
	}
	pthread_join(wakee, NULL);
	if (busy_cpu >= 0) {
		stop_spinner = 1;
		pthread_join(spinner, NULL);
	}
	qsort(wake_latencies, wake_rounds, sizeof(double), cmp_double);
	median = wake_latencies[wake_rounds / 2];
	return median;
}

static int run_wakeup(long rounds_each)
{
	if (rounds_each < 1 || sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		fprintf(stderr, "schedbench: wakeup needs 1+ rounds and 2+ vCPUs\n");
		return 2;
	}
	wake_rounds = rounds_each;
	wake_latencies = calloc(rounds_each, sizeof(double));
	if (!wake_latencies)
		return 1;
	pin_to(0);
	double same = wake_latency_us(0, -1);
	double busy = wake_latency_us(1, 1);
	double idle = wake_latency_us(1, -1);
	/* The waker may run anywhere too: where the scheduler wakes from. */
	cpu_set_t all;
	CPU_ZERO(&all);
	for (int c = 0; c < sysconf(_SC_NPROCESSORS_ONLN) && c < CPU_SETSIZE; c++)
		CPU_SET(c, &all);
	sched_setaffinity(0, sizeof(all), &all);
	double any = wake_latency_us(-1, -1);
	printf("same_us %.1f busy_us %.1f idle_us %.1f free_us %.1f\n", same, busy, idle, any);
	return 0;
}

static long arg(char **argv, int i)
{
	char *end;
	long v = strtol(argv[i], &end, 10);

	if (*end || v <= 0) {
		fprintf(stderr, "schedbench: argument %d must be a positive number\n", i);
		exit(2);
	}
	return v;
}

static long rt_seconds;

/*
 * A real-time thread (SCHED_FIFO 10, above every sched_ext task): 2 ms of
 * work every 10 ms for rt_seconds, a periodic RT load beside the
 * scheduler. Needs root (the lab's guests run as root).
 */
static void *rt_thread(void *unused)
{
	struct sched_param sp = { .sched_priority = 10 };
	double end = now_s() + rt_seconds;

	(void)unused;
	if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp)) {
		fprintf(stderr, "schedbench: SCHED_FIFO refused\n");
		exit(1);
	}
	while (now_s() < end) {
		double burst_end = now_s() + 0.002;

		while (now_s() < burst_end)
			;
		usleep(8000);
	}
	return NULL;
}

/*
 * spread: the threads note every CPU they find themselves on in one shared
 * mask; the moment the mask first holds as many CPUs as there are
 * threads, the demand has reached that many vCPUs. Under a consolidated
 * set the threads start where their parent runs, on the narrowed set, and
 * only a widening lets one of them reach another vCPU.
 */
static long spread_threads;
static double spread_start_s, spread_limit_s;
static uint64_t spread_cpus;	/* bit c: some thread ran on CPU c */
static uint64_t spread_at_us;	/* 0 until spread */

static void *spread_thread(void *unused)
{
	(void)unused;
	while (!__atomic_load_n(&spread_at_us, __ATOMIC_RELAXED)) {
		double t = now_s() - spread_start_s;
		uint64_t bit = 1ULL << (sched_getcpu() & 63);

		if (!(__atomic_load_n(&spread_cpus, __ATOMIC_RELAXED) & bit)) {
			uint64_t seen = __atomic_or_fetch(&spread_cpus, bit, __ATOMIC_RELAXED);
			uint64_t none = 0;
			/* +1: a spread at 0 us must not read as "not yet". */
			uint64_t us = (uint64_t)(t * 1e6) + 1;

			if (__builtin_popcountll(seen) >= spread_threads)
				__atomic_compare_exchange_n(&spread_at_us, &none, us, 0,
							    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
		}
		if (t > spread_limit_s)
			break;
	}
	return NULL;
}

static int run_spread(long threads, long limit_ms)
{
	pthread_t t[128];

	spread_threads = threads;
	spread_limit_s = limit_ms / 1e3;
	spread_start_s = now_s();
	for (long i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, spread_thread, NULL);
	for (long i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	if (!spread_at_us) {
		printf("spread_ms -1\n");
		return 1;
	}
	printf("spread_ms %.3f\n", spread_at_us / 1e3);
	return 0;
}

int main(int argc, char **argv)
{
	pthread_t t[256];
	struct pair_end ends[256];
	long n;
	double start;

	if (argc == 3 && !strcmp(argv[1], "wakeup"))
		return run_wakeup(arg(argv, 2));
	if (argc < 4) {
		fprintf(stderr, "usage: schedbench cpu|yield|rotate|barrier|pipeline|pingpong|messaging|server|idle|rt|spread|timeline|wakeup ...\n");
		return 2;
	}
	n = arg(argv, 2);
	if (n > 128) {
		fprintf(stderr, "schedbench: at most 128 threads or pairs\n");
		return 2;
	}
	start = now_s();
	if (!strcmp(argv[1], "cpu")) {
		iters = arg(argv, 3);
		for (long i = 0; i < n; i++)
			pthread_create(&t[i], NULL, cpu_thread, (void *)(uintptr_t)i);
	} else if (!strcmp(argv[1], "yield")) {
		yields = arg(argv, 3);
		for (long i = 0; i < n; i++)
			pthread_create(&t[i], NULL, yield_thread, NULL);
	} else if (!strcmp(argv[1], "rotate") && argc == 6) {
		iters = arg(argv, 3);
		rotate_every_s = arg(argv, 4) / 1e6;
		for (char *c = strtok(argv[5], ","); c && nr_rotate_cpus < 128; c = strtok(NULL, ","))
			rotate_cpus[nr_rotate_cpus++] = atoi(c);
		if (!nr_rotate_cpus) {
			fprintf(stderr, "schedbench: rotate needs a CPU list\n");
			return 2;
		}
		nr_rotate_threads = n;
		rotate_start_s = now_s();
		for (long i = 0; i < n; i++)
			pthread_create(&t[i], NULL, rotate_thread, (void *)(uintptr_t)i);
	} else if (!strcmp(argv[1], "barrier") && argc == 5) {
		rounds = arg(argv, 3);
		iters = arg(argv, 4);
		pthread_barrier_init(&barrier, NULL, n);
		for (long i = 0; i < n; i++)
			pthread_create(&t[i], NULL, barrier_thread, (void *)(uintptr_t)i);
	} else if (!strcmp(argv[1], "pipeline") && argc == 5) {
		nr_stages = n;
		nr_items = arg(argv, 3);
		iters = arg(argv, 4);
		for (long i = 0; i < n; i++) {
			pthread_mutex_init(&pipe_queues[i].lock, NULL);
			pthread_cond_init(&pipe_queues[i].not_empty, NULL);
			pthread_cond_init(&pipe_queues[i].not_full, NULL);
		}
		for (long i = 0; i < n; i++)
			pthread_create(&t[i], NULL, pipeline_stage, (void *)(uintptr_t)i);
	} else if (!strcmp(argv[1], "spread") && argc == 4) {
		if (n < 2 || n > 64) {
			fprintf(stderr, "schedbench: spread needs 2-64 threads\n");
			return 2;
		}
		return run_spread(n, arg(argv, 3));
	} else if (!strcmp(argv[1], "timeline") && argc == 6) {
		long seconds = arg(argv, 3), interval_ms = arg(argv, 4);

		iters = arg(argv, 5);
		if (seconds > 3600 || interval_ms > seconds * 1000) {
			fprintf(stderr, "schedbench: at most an hour, in intervals shorter than it\n");
			return 2;
		}
		return run_timeline(n, seconds, interval_ms);
	} else if (!strcmp(argv[1], "messaging") && argc == 5) {
		static struct msg_group groups[128];
		static struct msg_receiver rx[256];
		long groups_n = n, threads = 0;

		msg_fds = arg(argv, 3);
		msg_loops = arg(argv, 4);
		if (groups_n * msg_fds * 2 > 256 || msg_fds > 64) {
			fprintf(stderr, "schedbench: at most 256 threads (GROUPS x FDS x 2), 64 FDS\n");
			return 2;
		}
		for (long g = 0; g < groups_n; g++)
			for (long r = 0; r < msg_fds; r++) {
				int sv[2];

				if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
					return 1;
				groups[g].rx[r] = sv[0];
				groups[g].tx[r] = sv[1];
			}
		for (long g = 0; g < groups_n; g++)
			for (long r = 0; r < msg_fds; r++) {
				long k = g * msg_fds + r;

				rx[k].fd = groups[g].rx[r];
				pthread_create(&t[threads++], NULL, msg_receiver, &rx[k]);
				pthread_create(&t[threads++], NULL, msg_sender, &groups[g]);
			}
		n = threads;
	} else if (!strcmp(argv[1], "server") && (argc == 6 || argc == 7)) {
		long best_effort = argc == 7 ? atol(argv[6]) : 0;

		nr_requests = arg(argv, 3);
		service_us = arg(argv, 4);
		if (best_effort < 0 || best_effort > 128) {
			fprintf(stderr, "schedbench: 0-128 best-effort threads\n");
			return 2;
		}
		return run_server(n, arg(argv, 5), best_effort);
	} else if (!strcmp(argv[1], "idle")) {
		long seconds = arg(argv, 3);

		for (long i = 0; i < n; i++)
			pthread_create(&t[i], NULL, best_effort_thread, NULL);
		sleep(seconds);
		return 0;
	} else if (!strcmp(argv[1], "rt")) {
		rt_seconds = arg(argv, 3);
		for (long i = 0; i < n; i++)
			pthread_create(&t[i], NULL, rt_thread, NULL);
	} else if (!strcmp(argv[1], "pingpong")) {
		roundtrips = arg(argv, 3);
		for (long p = 0; p < n; p++) {
			int ab[2], ba[2];

			if (pipe(ab) || pipe(ba))
				return 1;
			ends[2 * p] = (struct pair_end){ .in = ba[0], .out = ab[1], .starts = 1 };
			ends[2 * p + 1] = (struct pair_end){ .in = ab[0], .out = ba[1], .starts = 0 };
		}
		n *= 2;
		for (long i = 0; i < n; i++)
			pthread_create(&t[i], NULL, pingpong_thread, &ends[i]);
	} else {
		fprintf(stderr, "schedbench: unknown workload %s\n", argv[1]);
		return 2;
	}
	for (long i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	printf("elapsed_s %.6f\n", now_s() - start);
	return 0;
}
