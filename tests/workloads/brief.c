/*
 * brief: a process that lives a few milliseconds. Spins argv[1] ms of its
 * own CPU time (CLOCK_PROCESS_CPUTIME_ID) and exits; prints "pid=P" first.
 * At the agent's 19 Hz it is unlikely to be sampled at all: it tests that
 * short-lived processes are kept by what they are, not by luck.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static long long cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long long ms = argc > 1 ? atoll(argv[1]) : 20;
	printf("pid=%d\n", getpid());
	fflush(stdout);
	long long until = cpu_ns() + ms * 1000000LL;
	while (cpu_ns() < until)
		for (int i = 0; i < 1000; i++)
			sink = sink * 6364136223846793005UL + i;
	return 0;
}
