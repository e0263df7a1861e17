/*
 * roundtrips: a client process in short round trips with a server process
 * over two pipes, each timing itself (the oracles of `report --why` for
 * waits too short for a marker each).
 *
 * Two phases: argv[1] requests for which the server computes argv[2] µs of
 * its own CPU time each (waits well under 0.1 ms: folded in the kernel),
 * then argv[3] requests of argv[4] µs (waits between 0.1 and 1 ms: sent,
 * then summed by sysprof). For each phase N (1, 2) it prints
 * "pN_t0_ns=", "pN_t1_ns=" (CLOCK_MONOTONIC around the client's loop),
 * "pN_client_wait_ns=" (the loop's wall time less the client's own CPU
 * time over it: the time the client was off the CPU) and
 * "pN_client_run_delay_ns=" (the client's run-queue delay over its loop,
 * from its schedstat), "pN_client_woken_ns=" (summed over the requests,
 * from the server's clock just before it writes the reply to the client's
 * just after its read returns: the time from its wakeup to running again,
 * and a little of the two system calls; the server sends its clock as the
 * reply), "pN_server_cpu_ns=" (the server's own CPU time
 * over the phase, from before it reads the first request to after it
 * writes the last reply), "pN_server_woken_ns=" (as the client's, from the
 * client's clock just before it writes each request, sent as the request,
 * to the server's just after its read returns), "pN_server_run_delay_ns="
 * (the server's run-queue delay over the phase, from its schedstat), "pN_steal_ns=" (the machine's steal time over
 * the client's loop, all CPUs, from /proc/stat: time a vCPU was runnable
 * but not run by the host, which the client's CPU clock leaves out while
 * its thread was on the CPU), and "client=TID", "server=TID".
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sys/wait.h>

static long long clock_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* This thread's run-queue delay so far (schedstat's second field), ns. */
static long long run_delay_ns(void)
{
	char path[64];
	long long run = 0, delay = 0;
	snprintf(path, sizeof(path), "/proc/self/task/%ld/schedstat", (long)syscall(SYS_gettid));
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%lld %lld", &run, &delay) != 2)
		delay = -1;
	fclose(f);
	return delay;
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

/* Burn `us` µs of this thread's CPU time. */
static void compute(long us)
{
	volatile unsigned long sink = 0;
	long long until = clock_ns(CLOCK_THREAD_CPUTIME_ID) + us * 1000LL;

	while (clock_ns(CLOCK_THREAD_CPUTIME_ID) < until)
		for (int i = 0; i < 200; i++)
			sink += i;
}

int main(int argc, char **argv)
{
	long n[2] = { argc > 1 ? atol(argv[1]) : 10000, argc > 3 ? atol(argv[3]) : 1000 };
	long us[2] = { argc > 2 ? atol(argv[2]) : 20, argc > 4 ? atol(argv[4]) : 300 };
	int req[2], rep[2], told[2];

	if (pipe(req) || pipe(rep) || pipe(told))
		return 1;
	pid_t server = fork();
	if (server == 0) {
		/* Per phase: CPU time, woken-to-running, run delay. */
		long long told_back[6] = { 0 };
		printf("server=%ld\n", (long)syscall(SYS_gettid));
		fflush(stdout);
		for (int p = 0; p < 2; p++) {
			long long c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), d0 = run_delay_ns();
			for (long i = 0; i < n[p]; i++) {
				long long asked;
				if (read(req[0], &asked, sizeof(asked)) != sizeof(asked))
					return 1;
				told_back[2 + p] += clock_ns(CLOCK_MONOTONIC) - asked;
				compute(us[p]);
				long long sent = clock_ns(CLOCK_MONOTONIC);
				if (write(rep[1], &sent, sizeof(sent)) != sizeof(sent))
					return 1;
			}
			told_back[p] = clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
			told_back[4 + p] = run_delay_ns() - d0;
		}
		if (write(told[1], told_back, sizeof(told_back)) != sizeof(told_back))
			return 1;
		return 0;
	}
	printf("client=%ld\n", (long)syscall(SYS_gettid));
	long long t[2][2], wait[2], delay[2], steal[2], woken[2] = { 0, 0 };
	for (int p = 0; p < 2; p++) {
		long long d0 = run_delay_ns(), s0 = steal_ns();
		long long w0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		for (long i = 0; i < n[p]; i++) {
			long long sent, asked = clock_ns(CLOCK_MONOTONIC);
			if (write(req[1], &asked, sizeof(asked)) != sizeof(asked) ||
			    read(rep[0], &sent, sizeof(sent)) != sizeof(sent))
				return 1;
			woken[p] += clock_ns(CLOCK_MONOTONIC) - sent;
		}
		long long w1 = clock_ns(CLOCK_MONOTONIC), c1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		t[p][0] = w0;
		t[p][1] = w1;
		wait[p] = (w1 - w0) - (c1 - c0);
		delay[p] = run_delay_ns() - d0;
		steal[p] = steal_ns() - s0;
	}
	long long told_back[6];
	if (read(told[0], told_back, sizeof(told_back)) != sizeof(told_back))
		return 1;
	waitpid(server, NULL, 0);
	for (int p = 0; p < 2; p++) {
		printf("p%d_steal_ns=%lld\np%d_client_woken_ns=%lld\n", p + 1, steal[p], p + 1, woken[p]);
		printf("p%d_t0_ns=%lld\np%d_t1_ns=%lld\np%d_client_wait_ns=%lld\np%d_client_run_delay_ns=%lld\np%d_server_cpu_ns=%lld\n", p + 1,
		       t[p][0], p + 1, t[p][1], p + 1, wait[p], p + 1, delay[p], p + 1, told_back[p]);
		printf("p%d_server_woken_ns=%lld\np%d_server_run_delay_ns=%lld\n", p + 1, told_back[2 + p], p + 1,
		       told_back[4 + p]);
	}
	return 0;
}
