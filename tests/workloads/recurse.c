/*
 * recurse: stacks deeper than any stack copy. A thread named "recurse"
 * calls descend() argv[2] times deep (default 200), each frame holding 512
 * bytes of locals (so 200 frames are over 100 KiB of stack), then spends
 * argv[1] seconds of its own CPU time (CLOCK_THREAD_CPUTIME_ID) in
 * bottom(). The chain, thread root first: start_thread, recurse_thread,
 * descend x depth, bottom. Built with -O2 -fomit-frame-pointer by the
 * tests: only the binary's .eh_frame describes these frames.
 *
 * With argv[3] = "signal" the thread instead runs in_handler() from a
 * SIGUSR1 handler raised from under_signal() (descend x depth, then
 * under_signal), so the stack crosses a signal frame: in_handler, handler,
 * the trampoline (__restore_rt), the libc frames of raise(), under_signal,
 * descend x depth, recurse_thread, start_thread.
 *
 * With argv[3] = "exec" it runs as above, then execs itself (same pid)
 * to do it again 4 times as deep: a process whose program changes while
 * it is profiled.
 *
 * Each image naps 300 ms before it starts the thread: a program's first
 * tens of milliseconds (until the profiler has read its mappings, every
 * 20-50 ms) are unwound from a stack copy, which cannot reach the root of
 * these stacks. The tests here check the walk, not that window (the first
 * samples' latency is measured by record's own tests and the bench).
 *
 * Prints "pid=", "tid=" and "depth=" (per image).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double seconds = 1.5;
static int depth = 200;
static int use_signal;
static int use_exec;
static volatile int handler_done;
volatile unsigned long sink;

static long long cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long until;

__attribute__((noinline)) void bottom(void)
{
	while (cpu_ns() < until)
		for (int i = 0; i < 20000; i++)
			sink = sink * 6364136223846793005UL + i;
}

__attribute__((noinline)) void in_handler(void)
{
	bottom();
	sink++; /* no tail call */
}

static void handler(int sig)
{
	(void)sig;
	in_handler();
	handler_done = 1;
}

__attribute__((noinline)) void under_signal(void)
{
	raise(SIGUSR1);
	sink += handler_done;
}

__attribute__((noinline)) unsigned long descend(int n, unsigned long x)
{
	volatile char locals[512];

	memset((char *)locals, (int)x, sizeof(locals));
	if (n > 1)
		x = descend(n - 1, x * 31 + locals[n % sizeof(locals)]);
	else if (use_signal)
		under_signal();
	else
		bottom();
	/* Work after the call: no tail call. */
	sink += locals[x % sizeof(locals)];
	return x ^ (unsigned long)n;
}

static void *recurse_thread(void *arg)
{
	(void)arg;
	printf("tid=%ld\n", (long)syscall(SYS_gettid));
	fflush(stdout);
	until = cpu_ns() + (long long)(seconds * 1e9);
	sink += descend(depth, 7);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_attr_t attr;
	pthread_t t;

	if (argc > 1)
		seconds = atof(argv[1]);
	if (argc > 2)
		depth = atoi(argv[2]);
	if (argc > 3 && strcmp(argv[3], "signal") == 0) {
		use_signal = 1;
		signal(SIGUSR1, handler);
	}
	if (argc > 3 && strcmp(argv[3], "exec") == 0)
		use_exec = 1;
	printf("pid=%d\ndepth=%d\n", getpid(), depth);
	fflush(stdout);
	usleep(300 * 1000);
	/* Room for the recursion whatever the default thread stack size. */
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, (size_t)depth * 1024 + (1 << 20));
	pthread_create(&t, &attr, recurse_thread, NULL);
	pthread_setname_np(t, "recurse");
	pthread_join(t, NULL);
	if (use_exec) {
		char secs[32], deeper[32];

		snprintf(secs, sizeof(secs), "%g", seconds);
		snprintf(deeper, sizeof(deeper), "%d", depth * 4);
		execl("/proc/self/exe", "recurse", secs, deeper, (char *)NULL);
		perror("exec");
		return 1;
	}
	return 0;
}
