/*
 * Workloads of `vsched bench sched`, run inside lab guests under the
 * kernel's default scheduler and under vsched's, side by side.
 *
 *   schedbench cpu THREADS ITERS            CPU-bound threads, fixed work each
 *   schedbench barrier THREADS ROUNDS ITERS ITERS of work, then a barrier, ROUNDS times
 *   schedbench pingpong PAIRS ROUNDTRIPS    pairs of threads passing a byte through pipes
 *
 * Prints "elapsed_s SECONDS" (wall time from the first thread's start to
 * the last one's end) and nothing else on success.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Work the compiler cannot remove: a dependent chain of multiply-adds. */
static uint64_t work(long n, uint64_t seed)
{
	uint64_t x = seed | 1;

	for (long i = 0; i < n; i++)
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	return x;
}

static volatile uint64_t sink;

static void *cpu_thread(void *arg)
{
	sink += work(iters, (uintptr_t)arg);
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

int main(int argc, char **argv)
{
	pthread_t t[256];
	struct pair_end ends[256];
	long n;
	double start;

	if (argc < 4) {
		fprintf(stderr, "usage: schedbench cpu|barrier|pingpong ...\n");
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
	} else if (!strcmp(argv[1], "barrier") && argc == 5) {
		rounds = arg(argv, 3);
		iters = arg(argv, 4);
		pthread_barrier_init(&barrier, NULL, n);
		for (long i = 0; i < n; i++)
			pthread_create(&t[i], NULL, barrier_thread, (void *)(uintptr_t)i);
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
