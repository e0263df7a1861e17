/*
 * odirect: a thread named "direct" makes argv[2] 4 KiB O_DIRECT reads at
 * spread offsets of the file or device argv[1] (each one a block request
 * that misses the page cache), sleeping argv[3] microseconds (default 0)
 * before each. Prints "pid=", "tid=", "reads=".
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>

static const char *path;
static int count = 200;
static int pause_us;
static long tid;

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
	printf("pid=%d\ntid=%ld\nreads=%d\n", getpid(), tid, count);
	return 0;
}
