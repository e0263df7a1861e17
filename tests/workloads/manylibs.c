/*
 * manylibs: a process with more executable mappings than the in-kernel
 * unwinder's entry holds (256). Loads every library named after argv[2]
 * with dlopen (the tests build them from chainstep.c: distinct files, each
 * its own mapping), then a thread named "manylibs" spends argv[1] seconds of
 * its own CPU time (CLOCK_THREAD_CPUTIME_ID) at the bottom of a chain that
 * crosses every one of them: the thread root, manylibs_thread, descend x 64,
 * step x (libraries), bottom. Built with -O2 -fomit-frame-pointer (and the
 * libraries too): only .eh_frame describes these frames.
 *
 * Prints "pid=", "tid=", "libs=" and, at the end, "cpu_ms=" (the thread's CPU time).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define DESCEND 64

typedef unsigned long (*step_fn)(void *const *steps, int k, unsigned long x);

static double seconds = 1.5;
static void **steps;
static int nlibs;
static long long until;
volatile unsigned long sink;

static long long cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The end of the chain: steps[nlibs]. */
__attribute__((noinline)) unsigned long bottom(void *const *s, int k, unsigned long x)
{
	(void)s;
	while (cpu_ns() < until)
		for (int i = 0; i < 20000; i++)
			sink = sink * 6364136223846793005UL + i + k;
	return x;
}

__attribute__((noinline)) unsigned long descend(int n, unsigned long x)
{
	if (n > 0)
		x = descend(n - 1, x * 31 + (unsigned long)n);
	else
		x = ((step_fn)steps[0])(steps, 0, x);
	/* Work after the call: no tail call. */
	sink += x;
	return x ^ (unsigned long)n;
}

static void *manylibs_thread(void *arg)
{
	(void)arg;
	printf("tid=%ld\n", (long)syscall(SYS_gettid));
	fflush(stdout);
	until = cpu_ns() + (long long)(seconds * 1e9);
	sink += descend(DESCEND, 7);
	printf("cpu_ms=%lld\n", cpu_ns() / 1000000);
	fflush(stdout);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;

	if (argc > 1)
		seconds = atof(argv[1]);
	nlibs = argc > 2 ? argc - 2 : 0;
	steps = calloc(nlibs + 1, sizeof(void *));
	for (int i = 0; i < nlibs; i++) {
		void *h = dlopen(argv[2 + i], RTLD_NOW | RTLD_LOCAL);

		if (!h || !(steps[i] = dlsym(h, "step"))) {
			fprintf(stderr, "manylibs: %s: %s\n", argv[2 + i], dlerror());
			return 1;
		}
	}
	steps[nlibs] = (void *)bottom;
	printf("pid=%d\nlibs=%d\n", getpid(), nlibs);
	fflush(stdout);
	pthread_create(&t, NULL, manylibs_thread, NULL);
	pthread_setname_np(t, "manylibs");
	pthread_join(t, NULL);
	return 0;
}
