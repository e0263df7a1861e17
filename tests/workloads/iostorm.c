/*
 * iostorm: for argv[2] seconds, the I/O-heavy mix a database server makes:
 * two threads ("reader1", "reader2") read one 4 KiB block of argv[1] (a
 * block device) with O_DIRECT over and over, each read a block request;
 * one ("syncer") writes 4 KiB to the file argv[3] and fdatasyncs it; two
 * ("ping", "pong") pass a byte back and forth over two pipes (short
 * waits). Prints "reads=", "syncs=" and "trips=" when done.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double seconds;
static const char *device, *sync_path;
static long reads[2], syncs, trips;
static int to_pong[2], to_ping[2];

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void *reader(void *arg)
{
	long i = (long)arg;
	char name[16];
	snprintf(name, sizeof(name), "reader%ld", i + 1);
	pthread_setname_np(pthread_self(), name);
	int fd = open(device, O_RDONLY | O_DIRECT);
	void *buf;
	if (fd < 0 || posix_memalign(&buf, 4096, 4096)) {
		perror(device);
		exit(1);
	}
	double end = now() + seconds;
	while (now() < end) {
		if (pread(fd, buf, 4096, 0) != 4096) {
			perror("pread");
			exit(1);
		}
		reads[i]++;
	}
	return NULL;
}

static void *syncer(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "syncer");
	int fd = open(sync_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	char block[4096];
	memset(block, 's', sizeof(block));
	if (fd < 0) {
		perror(sync_path);
		exit(1);
	}
	double end = now() + seconds;
	while (now() < end) {
		if (pwrite(fd, block, sizeof(block), 0) != sizeof(block) || fdatasync(fd)) {
			perror("fdatasync");
			exit(1);
		}
		syncs++;
	}
	return NULL;
}

static void *pong(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "pong");
	char c;
	while (read(to_pong[0], &c, 1) == 1 && c)
		if (write(to_ping[1], &c, 1) != 1)
			break;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 4)
		return 2;
	device = argv[1];
	seconds = atof(argv[2]);
	sync_path = argv[3];
	if (pipe(to_pong) || pipe(to_ping))
		return 1;
	pthread_t t[4];
	pthread_create(&t[0], NULL, reader, (void *)0L);
	pthread_create(&t[1], NULL, reader, (void *)1L);
	pthread_create(&t[2], NULL, syncer, NULL);
	pthread_create(&t[3], NULL, pong, NULL);
	pthread_setname_np(pthread_self(), "ping");
	double end = now() + seconds;
	char c = 1;
	while (now() < end) {
		if (write(to_pong[1], &c, 1) != 1 || read(to_ping[0], &c, 1) != 1)
			return 1;
		trips++;
	}
	c = 0;
	if (write(to_pong[1], &c, 1) != 1)
		return 1;
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	printf("reads=%ld\nsyncs=%ld\ntrips=%ld\n", reads[0] + reads[1], syncs, trips);
	return 0;
}
