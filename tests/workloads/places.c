/*
 * places: one thread sleeps from four places for argv[1] seconds, in
 * rounds: nap_a, nap_b, nap_a (3 ms each: long waits, markers of their
 * own) then nap_c, nap_d, nap_c (200 us each: short waits, folded in the
 * kernel by stack). nap_a and nap_b are the same code, as are nap_c and
 * nap_d: the same libc call, at the same stack depth, with the same
 * locals; only their return addresses tell them apart. A tracer that
 * reuses a stack for "the same place" must not give one the other's
 * waits. Prints "pid=", then each function's time asleep, measured around
 * its calls with CLOCK_MONOTONIC: "a_ns=" "b_ns=" "c_ns=" "d_ns=".
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

/* Each its own copy (noinline, and a counter apiece so that the linker
 * does not fold them into one). */
static volatile int calls[4];

#define NAP(name, i)                                                   \
	__attribute__((noinline)) static void name(long ns)            \
	{                                                              \
		struct timespec t = { 0, ns };                         \
		calls[i]++;                                            \
		nanosleep(&t, NULL);                                   \
		__asm__ volatile("" ::: "memory");                     \
	}
NAP(nap_a, 0)
NAP(nap_b, 1)
NAP(nap_c, 2)
NAP(nap_d, 3)

static long long spent[4];

static void timed(void (*f)(long), int i, long ns)
{
	long long t0 = now_ns();

	f(ns);
	spent[i] += now_ns() - t0;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 1.5;
	long long end = now_ns() + (long long)(seconds * 1e9);

	printf("pid=%d\n", getpid());
	fflush(stdout);
	while (now_ns() < end) {
		timed(nap_a, 0, 3000000);
		timed(nap_b, 1, 3000000);
		timed(nap_a, 0, 3000000);
		for (int k = 0; k < 5; k++) {
			timed(nap_c, 2, 200000);
			timed(nap_d, 3, 200000);
			timed(nap_c, 2, 200000);
		}
	}
	printf("a_ns=%lld\nb_ns=%lld\nc_ns=%lld\nd_ns=%lld\n", spent[0], spent[1], spent[2], spent[3]);
	return 0;
}
