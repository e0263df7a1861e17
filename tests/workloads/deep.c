/*
 * deep: a thread named "deep" spends argv[1] seconds of CPU in level6(),
 * called through level1() -> level2() -> ... -> level6(), every level a real
 * frame (noinline, and each does work after its call so no tail call).
 * Built with -O2 -fomit-frame-pointer by the tests: frame-pointer walking
 * cannot see these frames, .eh_frame unwinding can. Prints "pid=", "tid=".
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static double seconds = 1.5;
static long tid;
volatile unsigned long sink;

static long long cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) unsigned long level6(unsigned long x)
{
	for (int i = 0; i < 200000; i++)
		x = x * 6364136223846793005UL + i;
	return x;
}
#define LEVEL(n, next)                                                  \
	__attribute__((noinline)) unsigned long level##n(unsigned long x) \
	{                                                               \
		unsigned long r = next(x + n);                           \
		sink += r;                                               \
		return r ^ n;                                            \
	}
LEVEL(5, level6)
LEVEL(4, level5)
LEVEL(3, level4)
LEVEL(2, level3)
LEVEL(1, level2)

static void *deep(void *arg)
{
	(void)arg;
	tid = syscall(SYS_gettid);
	long long end = cpu_ns() + (long long)(seconds * 1e9);
	while (cpu_ns() < end)
		sink += level1(sink);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;
	if (argc > 1)
		seconds = atof(argv[1]);
	pthread_create(&t, NULL, deep, NULL);
	pthread_setname_np(t, "deep");
	pthread_join(t, NULL);
	printf("pid=%d\ntid=%ld\n", getpid(), tid);
	return 0;
}
