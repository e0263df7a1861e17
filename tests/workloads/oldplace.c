/*
 * oldplace: one thread's short waits from one place, then long waits from
 * six others, then it ends. The short waits (40 x 1 us asked, ~60 us each, under 3 ms in
 * all) are folded in the kernel into one run that keeps their place
 * (short_nap); the long ones (6 x 3 ms, long_1..long_6) are sent one by
 * one, each from a place of its own. A run whose place was a stack sent for
 * this thread alone (as every stack is with --unwind dwarf-copy) must not
 * outlive the stacks userspace keeps for it: the run's place is
 * short_nap's, however many places came after. Prints "pid=", then
 * "short_ns=" (its time in short_nap, CLOCK_MONOTONIC around the calls).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static volatile int calls[7];

/* Each its own function (noinline, a counter apiece: not folded into one). */
#define NAP(name, i)                                                   \
	__attribute__((noinline)) static void name(long ns)            \
	{                                                              \
		struct timespec t = { 0, ns };                         \
		calls[i]++;                                            \
		nanosleep(&t, NULL);                                   \
		__asm__ volatile("" ::: "memory");                     \
	}
NAP(short_nap, 0)
NAP(long_1, 1)
NAP(long_2, 2)
NAP(long_3, 3)
NAP(long_4, 4)
NAP(long_5, 5)
NAP(long_6, 6)

int main(void)
{
	void (*longs[])(long) = { long_1, long_2, long_3, long_4, long_5, long_6 };
	long long t0, short_ns;

	printf("pid=%d\n", getpid());
	fflush(stdout);
	/* Let the recording see the process start before it waits. */
	usleep(200000);
	t0 = now_ns();
	for (int i = 0; i < 40; i++)
		short_nap(1000);
	short_ns = now_ns() - t0;
	for (int i = 0; i < 6; i++)
		longs[i](3000000);
	printf("short_ns=%lld\n", short_ns);
	return 0;
}
