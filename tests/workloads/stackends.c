/*
 * stackends: where stacks end. Built with -nostartfiles: its own _start, in
 * assembly without unwind information, leaves garbage in the frame pointer
 * and calls c_main (an entry function is the bottom of the main thread's
 * stack, whatever an unwinder reads below it). c_main runs a thread whose
 * start, also assembly without unwind information, pushes ASCII text where
 * a return address would be, points the frame pointer at it and calls
 * spin_under_junk (a walk by frame pointer from there reads the text as a
 * return address). Then main spins in spin_on_main. Each spins argv[1]
 * seconds of CPU. Prints "pid=" and "junk_tid=".
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double seconds = 1.0;
static volatile unsigned long sink;

static long long cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noinline)) void spin_under_junk(void)
{
	long long end = cpu_ns() + (long long)(seconds * 1e9);
	while (cpu_ns() < end)
		for (int i = 0; i < 20000; i++)
			sink = sink * 6364136223846793005UL + i;
}

__attribute__((noinline)) void spin_on_main(void)
{
	long long end = cpu_ns() + (long long)(seconds * 1e9);
	while (cpu_ns() < end)
		for (int i = 0; i < 20000; i++)
			sink = sink * 6364136223846793005UL + i;
}

/* junk_frame: a fake frame of ASCII ("._truth_i" and "fake_ret"), rbp
 * pointing at it, then a call. No CFI: unwinders fall back to rbp. */
__asm__(".text\n"
	".globl junk_frame\n"
	".type junk_frame, @function\n"
	"junk_frame:\n"
	"  push %rbp\n"
	"  movabs $0x695f68747572742e, %rax\n"
	"  push %rax\n"
	"  movabs $0x7465725f656b6166, %rax\n"
	"  push %rax\n"
	"  mov %rsp, %rbp\n"
	"  sub $8, %rsp\n"
	"  call spin_under_junk\n"
	"  add $24, %rsp\n"
	"  pop %rbp\n"
	"  ret\n"
	".size junk_frame, .-junk_frame\n");
void junk_frame(void);

static long junk_tid;

static void *junk_thread(void *arg)
{
	(void)arg;
	junk_tid = syscall(SYS_gettid);
	junk_frame();
	return NULL;
}

__attribute__((noinline, used)) void c_main(long *sp)
{
	int argc = (int)sp[0];
	char **argv = (char **)(sp + 1);
	if (argc > 1)
		seconds = atof(argv[1]);
	pthread_t t;
	pthread_create(&t, NULL, junk_thread, NULL);
	spin_on_main();
	pthread_join(t, NULL);
	printf("pid=%d\njunk_tid=%ld\n", getpid(), junk_tid);
	fflush(stdout);
	exit(0);
}

/* _start: no CFI, a garbage frame pointer, then c_main(initial sp). */
__asm__(".text\n"
	".globl _start\n"
	".type _start, @function\n"
	"_start:\n"
	"  mov %rsp, %rdi\n"
	"  movabs $0x123456789abcdef0, %rbp\n"
	"  and $-16, %rsp\n"
	"  call c_main\n"
	"  hlt\n"
	".size _start, .-_start\n");
