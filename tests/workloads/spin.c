/*
 * spin: the main thread burns CPU in short_lived_spin() for argv[1] seconds
 * of wall time, then exits. Used for processes that start and end during a
 * recording, for -p, and for binaries deleted or truncated while they run.
 * With -DSPIN_IN_LIB the spinning function lives in libspin.so instead.
 * Prints "pid=" (its first line: tests read it first) and "start_ns="
 * (CLOCK_MONOTONIC as main begins) at start,
 * and "cpu_ns=" (its CPU time) at the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#ifdef SPIN_IN_LIB
void lib_spin(double seconds);
#else
static volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void short_lived_spin(double seconds)
{
	double end = now() + seconds;
	while (now() < end)
		for (int i = 0; i < 20000; i++)
			sink = sink * 6364136223846793005UL + i;
}
#endif

int main(int argc, char **argv)
{
	struct timespec started;
	clock_gettime(CLOCK_MONOTONIC, &started);
	double seconds = argc > 1 ? atof(argv[1]) : 0.5;
	printf("pid=%d\nstart_ns=%lld\n", getpid(), started.tv_sec * 1000000000LL + started.tv_nsec);
	fflush(stdout);
#ifdef SPIN_IN_LIB
	lib_spin(seconds);
#else
	short_lived_spin(seconds);
#endif
	struct timespec cpu;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
	printf("cpu_ns=%lld\n", cpu.tv_sec * 1000000000LL + cpu.tv_nsec);
	return 0;
}
