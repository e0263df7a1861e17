/*
 * anonspin: code in anonymous executable memory, as a JIT makes it: a
 * counting loop copied into an mmap'd page and called until argv[1]
 * seconds of CPU have passed. Prints "pid=" and "code=" (its address, hex),
 * then flushes, so a test can write a perf map for it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* mov $0x100000, %ecx; 1: dec %ecx; jnz 1b; ret */
static const unsigned char loop[] = { 0xb9, 0x00, 0x00, 0x10, 0x00, 0xff, 0xc9, 0x75, 0xfc, 0xc3 };

static long long cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 1.0;
	void (*code)(void) = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (code == MAP_FAILED)
		return 1;
	memcpy((void *)code, loop, sizeof(loop));
	printf("pid=%d\ncode=%lx\n", getpid(), (unsigned long)code);
	fflush(stdout);
	usleep(300000);
	long long end = cpu_ns() + (long long)(seconds * 1e9);
	while (cpu_ns() < end)
		code();
	return 0;
}
