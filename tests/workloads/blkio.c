/*
 * blkio: block I/O of every kind on the device argv[1], concurrently: two
 * threads read the same argv[2] 4 KiB blocks at once with O_DIRECT (their
 * requests are for the same sectors while both are in flight), a third
 * writes a block and fdatasync()s argv[3] times (each sync sends a cache
 * flush), and then argv[4] 64 KiB ranges are discarded (BLKDISCARD).
 * Prints "pid=" and the tids of "reader1=", "reader2=", "writer=".
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *path;
static int reads = 200, syncs = 20, discards = 4;
static pthread_barrier_t start;

static void *reader(void *arg)
{
	printf("reader%ld=%ld\n", (long)arg, (long)syscall(SYS_gettid));
	int fd = open(path, O_RDONLY | O_DIRECT);
	void *buf;
	if (fd < 0 || posix_memalign(&buf, 4096, 4096))
		exit(1);
	pthread_barrier_wait(&start);
	for (int i = 0; i < reads; i++)
		if (pread(fd, buf, 4096, (off_t)(i % 64) * 4096) != 4096)
			exit(2);
	close(fd);
	return NULL;
}

static void *writer(void *arg)
{
	(void)arg;
	printf("writer=%ld\n", (long)syscall(SYS_gettid));
	int fd = open(path, O_WRONLY | O_DIRECT);
	void *buf;
	if (fd < 0 || posix_memalign(&buf, 4096, 4096))
		exit(3);
	for (int i = 0; i < 4096; i++)
		((char *)buf)[i] = (char)i;
	pthread_barrier_wait(&start);
	for (int i = 0; i < syncs; i++) {
		if (pwrite(fd, buf, 4096, (off_t)(1024 + i) * 4096) != 4096 || fdatasync(fd))
			exit(4);
	}
	close(fd);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 5)
		return 2;
	path = argv[1];
	reads = atoi(argv[2]);
	syncs = atoi(argv[3]);
	discards = atoi(argv[4]);
	printf("pid=%d\n", getpid());
	pthread_barrier_init(&start, NULL, 3);
	pthread_t t[3];
	pthread_create(&t[0], NULL, reader, (void *)1);
	pthread_create(&t[1], NULL, reader, (void *)2);
	pthread_create(&t[2], NULL, writer, NULL);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	int fd = open(path, O_WRONLY);
	for (int i = 0; i < discards; i++) {
		uint64_t range[2] = { (uint64_t)(2048 + i * 16) * 4096, 65536 };
		if (ioctl(fd, BLKDISCARD, range))
			exit(5);
	}
	close(fd);
	fflush(stdout);
	return 0;
}
