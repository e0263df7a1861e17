/*
 * latewaker: a thread that wakes into a busy CPU and waits there. Two
 * threads pinned to one CPU (argv[2], default the last): a "spinner" at
 * nice 0 that burns CPU until the other is done, and a "sleeper" at nice 19
 * that sleeps argv[1] times 2 ms, each followed by 100 us of work. Woken,
 * the sleeper waits in the run queue behind the spinner, so much of its
 * off-CPU time after each sleep is run delay, not sleep.
 *
 * Prints "pid=P", then lines "sleeper=TID", "run_delay_ns=R", "waits=N",
 * "t0_ns=A", "t1_ns=B": from the sleeper's own schedstat, read at A and B
 * (CLOCK_MONOTONIC, just outside the reads), the time it spent runnable
 * but not running between them, and the times it was put on the CPU.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile int done;
static volatile unsigned long sink;
static int cpu;

static long long now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void pin(void)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0) {
		perror("sched_setaffinity");
		exit(1);
	}
}

static void schedstat(long tid, unsigned long long *delay, unsigned long long *arrivals)
{
	char path[64];
	unsigned long long run;
	snprintf(path, sizeof(path), "/proc/self/task/%ld/schedstat", tid);
	FILE *f = fopen(path, "r");
	if (!f || fscanf(f, "%llu %llu %llu", &run, delay, arrivals) != 3) {
		fprintf(stderr, "cannot read %s\n", path);
		exit(1);
	}
	fclose(f);
}

/* Runs `us` of its own CPU time: more than nice 19's share of the CPU, so
 * that the scheduler makes it wait after its wakeups (with 10 us a wakeup
 * it stayed under its share and preempted the spinner at once). */
static void work_us(long us)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	long long end = ts.tv_sec * 1000000000LL + ts.tv_nsec + us * 1000;
	do {
		for (int i = 0; i < 1000; i++)
			sink++;
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	} while (ts.tv_sec * 1000000000LL + ts.tv_nsec < end);
}

static void *spinner(void *arg)
{
	(void)arg;
	pin();
	while (!done)
		sink++;
	return NULL;
}

int main(int argc, char **argv)
{
	int sleeps = argc > 1 ? atoi(argv[1]) : 200;
	cpu = argc > 2 ? atoi(argv[2]) : (int)sysconf(_SC_NPROCESSORS_ONLN) - 1;
	printf("pid=%d\n", getpid());
	fflush(stdout);
	pthread_t spin;
	pthread_create(&spin, NULL, spinner, NULL);
	pthread_setname_np(spin, "spinner");
	pthread_setname_np(pthread_self(), "sleeper");
	pin();
	long tid = syscall(SYS_gettid);
	if (setpriority(PRIO_PROCESS, tid, 19) != 0) {
		perror("setpriority");
		return 1;
	}
	/* Let the spinner reach the CPU first. */
	struct timespec nap = { 0, 20 * 1000 * 1000 };
	nanosleep(&nap, NULL);
	unsigned long long d0, d1, a0, a1;
	long long t0 = now();
	schedstat(tid, &d0, &a0);
	nap.tv_nsec = 2 * 1000 * 1000;
	for (int i = 0; i < sleeps; i++) {
		nanosleep(&nap, NULL);
		work_us(100);
	}
	schedstat(tid, &d1, &a1);
	long long t1 = now();
	done = 1;
	pthread_join(spin, NULL);
	printf("sleeper=%ld\nrun_delay_ns=%llu\nwaits=%llu\nt0_ns=%lld\nt1_ns=%lld\n", tid,
	       d1 - d0, a1 - a0, t0, t1);
	return 0;
}
