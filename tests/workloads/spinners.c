/*
 * spinners: argv[1] threads named "spinner" burn CPU for argv[2] seconds of
 * wall time, on a machine with fewer CPUs, so they preempt each other. Each
 * thread prints, just before it ends, "spinner=TID run_delay_ns=R waits=N
 * cpu_ns=C wall_minus_cpu_ns=W t0_ns=A t1_ns=B in_t0_ns=C in_t1_ns=D": from
 * its own schedstat, between two reads of it, the time it spent runnable but
 * waiting for a CPU, the times it was put on one (each the end of a wait: its
 * pcount) and the time it ran on one; A and B (CLOCK_MONOTONIC) are taken just outside
 * those reads, C and D just inside them, so every wait R counts lies in
 * [A, B] and every wait in [C, D] is counted in R (the thread can be
 * preempted during a read: that wait is in one span and not the other).
 * Between C and D its wall time minus its own CLOCK_THREAD_CPUTIME_ID is W:
 * the time it was off the CPU, which for a thread that never sleeps is all
 * waiting for a CPU. Main prints "pid=" and, at the end, "cpu_ns=" (the
 * process's CPU time). With argv[3], every spinner is pinned to that CPU
 * (so they wait for one another there, whatever the machine's size).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static double seconds = 2.0;
static volatile unsigned long sink;
static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;

static long long now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void schedstat(long tid, unsigned long long *cpu, unsigned long long *delay, unsigned long long *arrivals)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/task/%ld/schedstat", tid);
	FILE *f = fopen(path, "r");
	if (!f || fscanf(f, "%llu %llu %llu", cpu, delay, arrivals) != 3)
		exit(1);
	fclose(f);
}

__attribute__((noinline)) void *spin(void *arg)
{
	(void)arg;
	long tid = syscall(SYS_gettid);
	unsigned long long cpu0, delay0, arrivals0, cpu, delay, arrivals;
	struct timespec c0, c1;
	long long t0 = now();
	schedstat(tid, &cpu0, &delay0, &arrivals0);
	long long in_t0 = now();
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
	long long end = now() + (long long)(seconds * 1e9);
	while (now() < end)
		for (int i = 0; i < 10000; i++)
			sink = sink * 6364136223846793005UL + i;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
	long long in_t1 = now();
	schedstat(tid, &cpu, &delay, &arrivals);
	long long t1 = now();
	long long thread_cpu = (c1.tv_sec - c0.tv_sec) * 1000000000LL + (c1.tv_nsec - c0.tv_nsec);
	pthread_mutex_lock(&print_lock);
	printf("spinner=%ld run_delay_ns=%llu waits=%llu cpu_ns=%llu wall_minus_cpu_ns=%lld t0_ns=%lld t1_ns=%lld in_t0_ns=%lld in_t1_ns=%lld\n", tid,
	       delay - delay0, arrivals - arrivals0, cpu, (in_t1 - in_t0) - thread_cpu, t0, t1, in_t0, in_t1);
	pthread_mutex_unlock(&print_lock);
	return NULL;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3;
	if (argc > 2)
		seconds = atof(argv[2]);
	pthread_t t[64];
	printf("pid=%d\n", getpid());
	for (int i = 0; i < n && i < 64; i++) {
		pthread_create(&t[i], NULL, spin, NULL);
		if (argc > 3) {
			cpu_set_t one;
			CPU_ZERO(&one);
			CPU_SET(atoi(argv[3]), &one);
			pthread_setaffinity_np(t[i], sizeof(one), &one);
		}
		pthread_setname_np(t[i], "spinner");
	}
	for (int i = 0; i < n && i < 64; i++)
		pthread_join(t[i], NULL);
	struct timespec cpu;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
	printf("cpu_ns=%lld\n", cpu.tv_sec * 1000000000LL + cpu.tv_nsec);
	return 0;
}
