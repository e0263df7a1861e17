/*
 * syscalls: a thread named "reader" reads /dev/zero in 1 MiB chunks for
 * argv[1] seconds of its own CPU time (CLOCK_THREAD_CPUTIME_ID: on a loaded
 * machine wall time would give fewer samples than a test expects), so most of its time is spent in the kernel (clearing user
 * pages) below the user function read_loop(): stacks must hold both.
 * The syscall is issued inline, not through libc's read(), because Debian's
 * libc has no frame pointers: with frame-pointer unwinding a libc leaf hides
 * its caller, which is what DWARF unwinding is for, not this test.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double seconds = 2.0;
static char buf[1 << 20];

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long raw_read(int fd, void *p, unsigned long n)
{
#if defined(__x86_64__)
	long ret;
	__asm__ volatile("syscall" : "=a"(ret) : "0"(0L /* SYS_read */), "D"((long)fd), "S"(p), "d"(n)
			 : "rcx", "r11", "memory");
	return ret;
#else
	return read(fd, p, n);
#endif
}

__attribute__((noinline)) void read_loop(int fd)
{
	double end = now() + seconds;
	while (now() < end)
		if (raw_read(fd, buf, sizeof(buf)) < 0)
			exit(1);
}

__attribute__((noinline)) void *reader(void *arg)
{
	(void)arg;
	int fd = open("/dev/zero", O_RDONLY);
	if (fd < 0)
		exit(1);
	read_loop(fd);
	close(fd);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;
	if (argc > 1)
		seconds = atof(argv[1]);
	pthread_create(&t, NULL, reader, NULL);
	pthread_setname_np(t, "reader");
	printf("pid=%d\n", getpid());
	fflush(stdout);
	pthread_join(t, NULL);
	return 0;
}
