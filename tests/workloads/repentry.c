/*
 * repentry: two threads on one CPU, each calling fill_at_entry() over and
 * over, a function whose first instruction is a long `rep stosb` (16 MiB):
 * an interrupt there leaves the thread's instruction pointer at the
 * function's first byte, and the two threads preempt each other there.
 * before_entry() lies right before it in memory and never runs, so a
 * profiler that names any frame of this program `before_entry` looked up
 * the byte before the instruction the thread was at.
 * Runs argv[1] seconds (default 2). Prints "pid=" first.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Laid out in this order, with call frame information for the unwinders:
 * fill_at_entry takes the destination in rdi and the count in rcx. */
__asm__(".text\n"
	".globl before_entry\n"
	".type before_entry, @function\n"
	"before_entry:\n"
	".cfi_startproc\n"
	"	ret\n"
	".cfi_endproc\n"
	".size before_entry, .-before_entry\n"
	".globl fill_at_entry\n"
	".type fill_at_entry, @function\n"
	"fill_at_entry:\n"
	".cfi_startproc\n"
	"	rep stosb\n"
	"	ret\n"
	".cfi_endproc\n"
	".size fill_at_entry, .-fill_at_entry\n");

#define FILL_BYTES (16u << 20)

static double seconds = 2.0;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void fill(unsigned char *dst, unsigned long n)
{
	/* A call from inline assembly: built with -mno-red-zone. */
	__asm__ volatile("call fill_at_entry" : "+D"(dst), "+c"(n) : "a"(0x5a) : "memory", "cc");
}

static void *filler(void *arg)
{
	unsigned char *buf = malloc(FILL_BYTES);
	double end = now() + seconds;
	(void)arg;
	while (now() < end)
		fill(buf, FILL_BYTES);
	free(buf);
	return NULL;
}

int main(int argc, char **argv)
{
	cpu_set_t one;
	pthread_t t[2];

	if (argc > 1)
		seconds = atof(argv[1]);
	printf("pid=%d\n", getpid());
	fflush(stdout);
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	sched_setaffinity(0, sizeof(one), &one);
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, filler, NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	return 0;
}
