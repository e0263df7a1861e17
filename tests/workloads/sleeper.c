/*
 * sleeper: a thread named "sleeper" calls nanosleep(25 ms) argv[1] times from
 * sleep_loop(), timing each sleep with CLOCK_MONOTONIC. Prints "pid=", "tid="
 * "slept_ns=" (the summed wall time of the sleeps): the oracle for
 * off-CPU time, and "longest_ns=" (the longest one: a loaded machine wakes a
 * sleep late). The syscall is inline for the same reason as in syscalls.c.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static int count = 40;
static long long slept_ns, longest_ns;
static long tid;

static long long now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long raw_nanosleep(const struct timespec *req)
{
#if defined(__x86_64__)
	long ret;
	__asm__ volatile("syscall" : "=a"(ret) : "0"((long)SYS_nanosleep), "D"(req), "S"(0L) : "rcx", "r11", "memory");
	return ret;
#else
	return nanosleep(req, NULL);
#endif
}

__attribute__((noinline)) void sleep_loop(void)
{
	struct timespec req = { 0, 25 * 1000 * 1000 };
	for (int i = 0; i < count; i++) {
		long long t0 = now();
		raw_nanosleep(&req);
		long long took = now() - t0;
		slept_ns += took;
		if (took > longest_ns)
			longest_ns = took;
	}
}

static void *sleeper(void *arg)
{
	(void)arg;
	tid = syscall(SYS_gettid);
	sleep_loop();
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;
	if (argc > 1)
		count = atoi(argv[1]);
	pthread_create(&t, NULL, sleeper, NULL);
	pthread_setname_np(t, "sleeper");
	pthread_join(t, NULL);
	printf("pid=%d\ntid=%ld\nslept_ns=%lld\nlongest_ns=%lld\n", getpid(), tid, slept_ns, longest_ns);
	return 0;
}
