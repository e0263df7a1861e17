/*
 * cpulog: the main thread burns CPU for argv[1] seconds of wall time and
 * logs, every 2 ms of wall time, its CLOCK_MONOTONIC and its own
 * CLOCK_THREAD_CPUTIME_ID: how much CPU it got in any stretch of time, by
 * its own clock, whatever else ran on the machine. Prints "pid=" at start
 * and, at the end, writes one "at_ns=M cpu_ns=C" line per reading to the
 * file argv[2] (a pipe nobody reads until the end would fill).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define MAX_READINGS 20000

static volatile unsigned long sink;
static long long at_ns[MAX_READINGS], cpu_ns[MAX_READINGS];

static long long clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 2.0;
	printf("pid=%d\n", getpid());
	fflush(stdout);
	long long start = clock_ns(CLOCK_MONOTONIC), end = start + (long long)(seconds * 1e9);
	int n = 0;
	for (long long now = start, next = start; now < end; now = clock_ns(CLOCK_MONOTONIC)) {
		if (now >= next && n < MAX_READINGS) {
			cpu_ns[n] = clock_ns(CLOCK_THREAD_CPUTIME_ID);
			at_ns[n++] = clock_ns(CLOCK_MONOTONIC);
			next = now + 2000000;
		}
		for (int i = 0; i < 2000; i++)
			sink = sink * 6364136223846793005UL + i;
	}
	FILE *log = argc > 2 ? fopen(argv[2], "w") : stdout;
	if (!log)
		return 1;
	for (int i = 0; i < n; i++)
		fprintf(log, "at_ns=%lld cpu_ns=%lld\n", at_ns[i], cpu_ns[i]);
	return fclose(log) != 0;
}
