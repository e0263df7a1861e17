/*
 * names: where a name comes from. spin_via_plt calls noop() of libnoop.so
 * through the PLT in a loop (many samples land in the PLT stub). The hot
 * function is defined as a hidden internal symbol, __names_hot_impl, with
 * a global alias names_hot at the same address (as glibc defines malloc).
 * Each runs argv[1] seconds of CPU. Prints "pid=".
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int noop(int x);
static double seconds = 1.0;
static volatile unsigned long sink;

static long long cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) void spin_via_plt(void)
{
	long long end = cpu_ns() + (long long)(seconds * 1e9);
	int x = 0;
	while (cpu_ns() < end)
		for (int i = 0; i < 20000; i++)
			x = noop(x);
	sink = x;
}

__attribute__((noinline, visibility("hidden"))) void __names_hot_impl(void)
{
	long long end = cpu_ns() + (long long)(seconds * 1e9);
	while (cpu_ns() < end)
		for (int i = 0; i < 20000; i++)
			sink = sink * 6364136223846793005UL + i;
}
void names_hot(void) __attribute__((alias("__names_hot_impl")));

int main(int argc, char **argv)
{
	if (argc > 1)
		seconds = atof(argv[1]);
	printf("pid=%d\n", getpid());
	fflush(stdout);
	spin_via_plt();
	names_hot();
	return 0;
}
