/*
 * forkexec: forks argv[1] children one after another; each spends argv[2]
 * ms of its own CPU (CLOCK_THREAD_CPUTIME_ID) in level6(), called through
 * main() -> child_work() -> level1() -> ... -> level6(), then execs
 * /bin/true. A child's stacks from before its exec belong to the image it
 * was forked with: a profiler that applies the exec first would unwind
 * them in the new program's mappings. Built -O2 -fomit-frame-pointer by
 * the tests. Prints "pid=" (the parent's), then "child=" for each child.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

volatile unsigned long sink;

static long long cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) unsigned long level6(unsigned long x)
{
	for (int i = 0; i < 20000; i++)
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

__attribute__((noinline)) void child_work(double ms)
{
	long long end = cpu_ns() + (long long)(ms * 1e6);
	while (cpu_ns() < end)
		sink += level1(sink);
	sink += 1;
}

int main(int argc, char **argv)
{
	int children = argc > 1 ? atoi(argv[1]) : 10;
	double ms = argc > 2 ? atof(argv[2]) : 40;
	printf("pid=%d\n", getpid());
	fflush(stdout);
	for (int i = 0; i < children; i++) {
		pid_t c = fork();
		if (c < 0)
			return 1;
		if (c == 0) {
			child_work(ms);
			execl("/bin/true", "true", (char *)NULL);
			_exit(127);
		}
		printf("child=%d\n", c);
		fflush(stdout);
		if (waitpid(c, NULL, 0) < 0)
			return 1;
	}
	return 0;
}
