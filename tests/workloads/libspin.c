/* libspin.so: lib_spin() burns CPU for the given wall time (see spin.c). */
#include <time.h>

static volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void lib_spin(double seconds)
{
	double end = now() + seconds;
	while (now() < end)
		for (int i = 0; i < 20000; i++)
			sink = sink * 6364136223846793005UL + i;
}
