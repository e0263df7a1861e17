/*
 * pipewaits: two threads pass a byte back and forth over two pipes argv[1]
 * times, so each waits only briefly (tens of microseconds) and only asleep
 * in read(2). The echo spins 10 µs of its own CPU time before each answer,
 * so every wait lasts at least that even when both threads share one CPU
 * (beside a busy CPU they do, and the waits were ~1 µs). The thread named "waiter" prints "tid=", and, over its run,
 * "t0_ns=" "t1_ns=" (CLOCK_MONOTONIC), "off_cpu_ns=" (its wall time minus
 * its own CLOCK_THREAD_CPUTIME_ID: the time it was not on a CPU) and
 * "waits=" (its voluntary context switches, from /proc) and "run_delay_ns="
 * (the time it spent runnable but not running, from its schedstat: the
 * kernel's own account of its waits for a CPU), and "steal_ns=" (the
 * machine's steal time over its run, all CPUs, from /proc/stat: time a
 * vCPU was not run by the host, which its CPU clock leaves out while it
 * ran). Main prints "pid=".
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int rounds = 20000;
static int ab[2], ba[2];

static long voluntary_switches(void)
{
	char line[256];
	long n = -1;
	FILE *f = fopen("/proc/thread-self/status", "r");
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "voluntary_ctxt_switches: %ld", &n) == 1)
			break;
	if (f)
		fclose(f);
	return n;
}

static long long run_delay_ns(void)
{
	long long cpu = 0, delay = -1;
	FILE *f = fopen("/proc/thread-self/schedstat", "r");
	if (f && fscanf(f, "%lld %lld", &cpu, &delay) != 2)
		delay = -1;
	if (f)
		fclose(f);
	return delay;
}

static long long clock_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The machine's steal time so far, all CPUs, ns (USER_HZ ticks). */
static long long steal_ns(void)
{
	long long v[8] = { 0 };
	FILE *f = fopen("/proc/stat", "r");
	if (!f)
		return 0;
	if (fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 8)
		v[7] = 0;
	fclose(f);
	return v[7] * (1000000000LL / sysconf(_SC_CLK_TCK));
}

__attribute__((noinline)) void *waiter(void *arg)
{
	(void)arg;
	char c = 0;
	long v0 = voluntary_switches();
	long long d0 = run_delay_ns(), s0 = steal_ns();
	long long t0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	for (int i = 0; i < rounds; i++) {
		if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1)
			exit(1);
	}
	long long c1 = clock_ns(CLOCK_THREAD_CPUTIME_ID), t1 = clock_ns(CLOCK_MONOTONIC);
	long v1 = voluntary_switches();
	long long d1 = run_delay_ns(), s1 = steal_ns();
	printf("tid=%ld\nt0_ns=%lld\nt1_ns=%lld\noff_cpu_ns=%lld\nwaits=%ld\nrun_delay_ns=%lld\nsteal_ns=%lld\n", (long)syscall(SYS_gettid), t0, t1, (t1 - t0) - (c1 - c0), v1 - v0,
	       d1 - d0, s1 - s0);
	return NULL;
}

__attribute__((noinline)) void *echo(void *arg)
{
	(void)arg;
	char c;
	for (int i = 0; i < rounds; i++) {
		if (read(ab[0], &c, 1) != 1)
			exit(1);
		long long until = clock_ns(CLOCK_THREAD_CPUTIME_ID) + 10000;
		while (clock_ns(CLOCK_THREAD_CPUTIME_ID) < until)
			;
		if (write(ba[1], &c, 1) != 1)
			exit(1);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		rounds = atoi(argv[1]);
	if (pipe(ab) || pipe(ba))
		return 1;
	pthread_t w, e;
	pthread_create(&e, NULL, echo, NULL);
	pthread_create(&w, NULL, waiter, NULL);
	pthread_setname_np(w, "waiter");
	pthread_setname_np(e, "echo");
	pthread_join(w, NULL);
	pthread_join(e, NULL);
	printf("pid=%d\n", getpid());
	return 0;
}
