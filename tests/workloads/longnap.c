/*
 * longnap: prints "pid=" at once, then sleeps argv[1] ms in one nanosleep,
 * prints "woke_ns=" (CLOCK_MONOTONIC as the sleep returned), spins 50 ms of
 * its own CPU time and exits. The oracle for a thread that was asleep
 * before a recording began: it was off-CPU, sleeping, from the recording's
 * start until woke_ns.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long long clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long ms = argc > 1 ? atol(argv[1]) : 1500;
	struct timespec nap = { ms / 1000, (ms % 1000) * 1000000L };

	printf("pid=%d\n", (int)getpid());
	fflush(stdout);
	nanosleep(&nap, NULL);
	long long woke = clock_ns(CLOCK_MONOTONIC);
	long long cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	volatile unsigned long spin = 0;

	while (clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0 < 50000000LL)
		spin++;
	printf("woke_ns=%lld\n", woke);
	return 0;
}
