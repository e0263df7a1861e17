/*
 * spinners: argv[1] threads named "spinner" burn CPU for argv[2] seconds on
 * a machine with fewer CPUs, so they preempt each other. Prints "pid=" and
 * "busy_pct=": the machine's busy share from /proc/stat over its run (the
 * oracle for the CPU usage counter), "start_ns="/"end_ns=" (monotonic) and
 * "cpu_ns=" (the process's CPU time).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double seconds = 2.0;
static volatile unsigned long sink;

static long long now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void proc_stat(unsigned long long *busy, unsigned long long *total)
{
	unsigned long long v[8] = { 0 };
	FILE *f = fopen("/proc/stat", "r");
	if (!f || fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 8)
		exit(1);
	fclose(f);
	*total = 0;
	for (int i = 0; i < 8; i++)
		*total += v[i];
	*busy = *total - v[3] - v[4];
}

__attribute__((noinline)) void *spin(void *arg)
{
	(void)arg;
	long long end = now() + (long long)(seconds * 1e9);
	while (now() < end)
		for (int i = 0; i < 10000; i++)
			sink = sink * 6364136223846793005UL + i;
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3;
	if (argc > 2)
		seconds = atof(argv[2]);
	pthread_t t[64];
	unsigned long long b0, t0, b1, t1;
	long long s = now();
	proc_stat(&b0, &t0);
	for (int i = 0; i < n && i < 64; i++) {
		pthread_create(&t[i], NULL, spin, NULL);
		pthread_setname_np(t[i], "spinner");
	}
	for (int i = 0; i < n && i < 64; i++)
		pthread_join(t[i], NULL);
	proc_stat(&b1, &t1);
	struct timespec cpu;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
	printf("pid=%d\nbusy_pct=%.2f\nstart_ns=%lld\nend_ns=%lld\ncpu_ns=%lld\n", getpid(), (b1 - b0) * 100.0 / (t1 - t0), s, now(),
	       cpu.tv_sec * 1000000000LL + cpu.tv_nsec);
	return 0;
}
