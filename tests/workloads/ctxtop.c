/*
 * ctxtop: a function run on a stack of its own (makecontext) whose top is
 * the end of what can be read: the stack is an mmap'd region with a
 * PROT_NONE page right above it, as a Go M's system stack can have an
 * untouched page above it. ctx_main's return address (into glibc's
 * __start_context) lies in the last bytes below that page. ctx_main calls
 * ctx_level through frames of many sizes (alloca of 8..504 bytes, which gcc
 * rounds to 16), so the leaf ctx_spin runs at each 16-byte offset modulo 64
 * from that top; each call spins ~1 ms of CPU. Runs argv[1] seconds of
 * CPU. Prints "pid=" and "tid=".
 */
#define _GNU_SOURCE
#include <alloca.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define STACK_BYTES (256 * 1024)

static double seconds = 1.0;
static volatile unsigned long sink;
static ucontext_t main_ctx, work_ctx;

static long long cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) void ctx_spin(void)
{
	long long end = cpu_ns() + 1000000;
	while (cpu_ns() < end)
		for (int i = 0; i < 2000; i++)
			sink = sink * 6364136223846793005UL + i;
}

__attribute__((noinline)) void ctx_level(unsigned words)
{
	volatile unsigned long *pad = alloca(words * sizeof(unsigned long));
	pad[0] = words;
	ctx_spin();
	sink += pad[0];
}

__attribute__((noinline)) void ctx_main(void)
{
	long long end = cpu_ns() + (long long)(seconds * 1e9);
	for (unsigned turn = 0; cpu_ns() < end; turn++)
		ctx_level(1 + turn % 63);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		seconds = atof(argv[1]);
	long page = sysconf(_SC_PAGESIZE);
	/* The stack, then a page nobody can read. */
	char *region = mmap(NULL, STACK_BYTES + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (region == MAP_FAILED || mprotect(region + STACK_BYTES, page, PROT_NONE)) {
		perror("ctxtop: mmap");
		return 1;
	}
	printf("pid=%d\ntid=%ld\n", getpid(), syscall(SYS_gettid));
	fflush(stdout);
	getcontext(&work_ctx);
	work_ctx.uc_stack.ss_sp = region;
	work_ctx.uc_stack.ss_size = STACK_BYTES;
	work_ctx.uc_link = &main_ctx;
	makecontext(&work_ctx, ctx_main, 0);
	swapcontext(&main_ctx, &work_ctx);
	return 0;
}
