/*
 * odirect: a thread named "direct" makes argv[2] 4 KiB O_DIRECT reads at
 * spread offsets of the file or device argv[1] (each one a block request
 * that misses the page cache), sleeping argv[3] microseconds (default 0)
 * before each. Prints "pid=", "tid=", "reads=", and "run_delay_ns=" and
 * "t_end_ns=": the reader's schedstat run delay (the time it spent runnable,
 * waiting for a CPU, since it was created), read just after t_end
 * (CLOCK_MONOTONIC), so every wait for a CPU before t_end is counted in it.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <time.h>
#include <sys/syscall.h>

static const char *path;
static int count = 200;
static int pause_us;
static long tid;
static unsigned long long run_delay_ns;
static long long t_end_ns;

static void *direct(void *arg)
{
	(void)arg;
	tid = syscall(SYS_gettid);
	int fd = open(path, O_RDONLY | O_DIRECT);
	void *buf;
	if (fd < 0 || posix_memalign(&buf, 4096, 4096))
		exit(1);
	off_t blocks = lseek(fd, 0, SEEK_END) / 4096;
	for (int i = 0; i < count; i++) {
		if (pause_us)
			usleep(pause_us);
		if (pread(fd, buf, 4096, (off_t)((i * 7919L) % blocks) * 4096) != 4096)
			exit(2);
	}
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	t_end_ns = ts.tv_sec * 1000000000LL + ts.tv_nsec;
	unsigned long long cpu;
	FILE *f = fopen("/proc/thread-self/schedstat", "r");
	if (!f || fscanf(f, "%llu %llu", &cpu, &run_delay_ns) != 2)
		exit(3);
	fclose(f);
	close(fd);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;
	if (argc < 3)
		return 2;
	path = argv[1];
	count = atoi(argv[2]);
	if (argc > 3)
		pause_us = atoi(argv[3]);
	pthread_create(&t, NULL, direct, NULL);
	pthread_setname_np(t, "direct");
	pthread_join(t, NULL);
	printf("pid=%d\ntid=%ld\nreads=%d\nrun_delay_ns=%llu\nt_end_ns=%lld\n", getpid(), tid, count, run_delay_ns, t_end_ns);
	return 0;
}
