/*
 * cpu: one busy thread per online CPU, each running a fixed amount of work
 * through a known call chain (a -> b -> c -> leaf). Prints "elapsed_ms=N".
 * Fixed work, not fixed time, so a profiler's cost shows as a slowdown;
 * "cpu 10s" instead runs for ten seconds (a recording of known length).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long iterations = 400;
static double run_for_s; /* > 0: run for this long instead */
static volatile unsigned long sink;

__attribute__((noinline)) void leaf(void)
{
	for (int i = 0; i < 1000000; i++)
		sink = sink * 6364136223846793005UL + i;
}
__attribute__((noinline)) void c(void) { leaf(); }
__attribute__((noinline)) void b(void) { c(); }
__attribute__((noinline)) void a(void) { b(); }

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *run(void *arg)
{
	(void)arg;
	if (run_for_s > 0) {
		double end = now_s() + run_for_s;
		while (now_s() < end)
			a();
		return NULL;
	}
	for (long i = 0; i < iterations; i++)
		a();
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc > 1 && argv[1][0] && argv[1][strlen(argv[1]) - 1] == 's')
		run_for_s = atof(argv[1]);
	else if (argc > 1)
		iterations = atol(argv[1]);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	pthread_t t[256];
	struct timespec s, e;
	clock_gettime(CLOCK_MONOTONIC, &s);
	for (long i = 0; i < n && i < 256; i++)
		pthread_create(&t[i], NULL, run, NULL);
	for (long i = 0; i < n && i < 256; i++)
		pthread_join(t[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &e);
	printf("elapsed_ms=%.3f\n", (e.tv_sec - s.tv_sec) * 1e3 + (e.tv_nsec - s.tv_nsec) / 1e6);
	return 0;
}
