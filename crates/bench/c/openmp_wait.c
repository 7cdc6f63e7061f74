/*
 * openmp_wait: an lu-style OpenMP kernel for `vsched bench spin`: many short
 * parallel loops, each ending in a barrier that libgomp busy-waits on under
 * OMP_WAIT_POLICY=active.
 *
 * Usage: openmp_wait [REGIONS]   (default 1000)
 * Prints one JSON line: elapsed_s, units (= regions), checksum.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
    int regions = argc > 1 ? atoi(argv[1]) : 1000;
    enum { N = 4096 };
    static double a[N], b[N];
    for (int i = 0; i < N; i++) { a[i] = i; b[i] = 0; }
    double start = now();
    for (int r = 0; r < regions; r++) {
        #pragma omp parallel for schedule(static)
        for (int i = 1; i < N - 1; i++) {
            double x = a[i];
            for (int k = 0; k < 8; k++) x = 0.5 * x + 0.25 * (a[i - 1] + a[i + 1]);
            b[i] = x;
        }
        #pragma omp parallel for schedule(static)
        for (int i = 1; i < N - 1; i++) a[i] = b[i];
    }
    printf("{\"program\":\"openmp\",\"elapsed_s\":%f,\"units\":%d,\"checksum\":%f}\n", now() - start, regions, a[N / 2]);
    return 0;
}
