/*
 * split: one thread named "splitter" burns CPU in hot_three() and hot_one()
 * in a 3:1 ratio of *thread CPU time* (measured with CLOCK_THREAD_CPUTIME_ID,
 * so preemption does not skew the split), for argv[1] seconds of CPU.
 * Prints "pid=P" at start and "cpu_ns=N" at the end: the splitter's whole
 * CPU time, its exit included (which faults in pages and takes 2-3 ms on a
 * VM): the process's CPU clock less the main thread's, read by the main
 * thread once the splitter is gone. Both clocks are exact, where a schedstat
 * can be a tick stale.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double seconds = 2.0;
static volatile unsigned long sink;

static long long thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Pure arithmetic between clock reads, so almost every sample lands here
 * and not in the vDSO. */
#define SPIN_FOR(ns)                                                   \
	do {                                                           \
		long long until = thread_cpu_ns() + (ns);              \
		while (thread_cpu_ns() < until)                        \
			for (int i = 0; i < 20000; i++)                \
				sink = sink * 6364136223846793005UL + i; \
	} while (0)

__attribute__((noinline)) void hot_three(void) { SPIN_FOR(30000000LL); }
__attribute__((noinline)) void hot_one(void) { SPIN_FOR(10000000LL); }

__attribute__((noinline)) void *worker(void *arg)
{
	(void)arg;
	long long end = thread_cpu_ns() + (long long)(seconds * 1e9);
	while (thread_cpu_ns() < end) {
		hot_three();
		hot_one();
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;
	if (argc > 1)
		seconds = atof(argv[1]);
	pthread_create(&t, NULL, worker, NULL);
	pthread_setname_np(t, "splitter");
	printf("pid=%d\n", getpid());
	fflush(stdout);
	pthread_join(t, NULL);
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	long long process_ns = ts.tv_sec * 1000000000LL + ts.tv_nsec;
	printf("cpu_ns=%lld\n", process_ns - thread_cpu_ns());
	return 0;
}
