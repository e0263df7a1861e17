/*
 * syncserve: a client whose every request waits on a server that writes
 * 64 KiB to a file and fdatasync()s it (a database's commit, in short), each
 * side timing itself: the oracles of `report --why` for waits that end at
 * a disk's completion, most of them shorter than the marker threshold.
 *
 * usage: syncserve FILE [REQUESTS]
 *
 * The "client" thread writes a byte to the "server" thread over a pipe and
 * waits for its reply; the server writes 64 KiB at one of 64 places in
 * FILE, fdatasync()s it, and replies. Every fdatasync lies inside one of
 * the client's waits, by construction.
 *
 * Prints "pid=", "server=TID", "client=TID", "sync_ns=" (the server's
 * fdatasyncs' wall time), "sync_wait_ns=" (their wall time less the
 * server's CPU time over them, CLOCK_THREAD_CPUTIME_ID: the time it was
 * off the CPU in them), "client_wait_ns=" (the client's round trips' wall
 * time less its CPU time over them) and "client_t0_ns=", "client_t1_ns="
 * (CLOCK_MONOTONIC around its requests).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CHUNK 65536

static int requests[2], replies[2], fd, n;
static long long sync_ns, sync_wait_ns, client_wait_ns, client_t0, client_t1;
static pid_t server_tid, client_tid;
static char chunk[CHUNK];

static long long clock_ns(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *server(void *arg)
{
	(void)arg;
	server_tid = syscall(SYS_gettid);
	char c;
	for (int i = 0; i < n; i++) {
		if (read(requests[0], &c, 1) != 1)
			break;
		memset(chunk, i, sizeof chunk);
		if (pwrite(fd, chunk, sizeof chunk, (off_t)(i % 64) * CHUNK) != CHUNK) {
			perror("pwrite");
			exit(1);
		}
		long long wall = clock_ns(CLOCK_MONOTONIC), cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		if (fdatasync(fd)) {
			perror("fdatasync");
			exit(1);
		}
		wall = clock_ns(CLOCK_MONOTONIC) - wall;
		cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu;
		sync_ns += wall;
		sync_wait_ns += wall - cpu;
		if (write(replies[1], &c, 1) != 1)
			break;
	}
	return NULL;
}

static void *client(void *arg)
{
	(void)arg;
	client_tid = syscall(SYS_gettid);
	char c = 'x';
	client_t0 = clock_ns(CLOCK_MONOTONIC);
	for (int i = 0; i < n; i++) {
		long long wall = clock_ns(CLOCK_MONOTONIC), cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		if (write(requests[1], &c, 1) != 1 || read(replies[0], &c, 1) != 1)
			break;
		client_wait_ns += (clock_ns(CLOCK_MONOTONIC) - wall) - (clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu);
	}
	client_t1 = clock_ns(CLOCK_MONOTONIC);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: syncserve FILE [REQUESTS]\n");
		return 2;
	}
	n = argc > 2 ? atoi(argv[2]) : 300;
	fd = open(argv[1], O_WRONLY | O_CREAT, 0600);
	if (fd < 0 || pipe(requests) || pipe(replies)) {
		perror("syncserve");
		return 1;
	}
	/* The file's blocks exist before the first request: each sync is the
	 * data's, not the file's growth's. */
	for (int i = 0; i < 64; i++)
		if (pwrite(fd, chunk, sizeof chunk, (off_t)i * CHUNK) != CHUNK) {
			perror("pwrite");
			return 1;
		}
	fsync(fd);
	pthread_t s, c;
	pthread_create(&s, NULL, server, NULL);
	pthread_setname_np(s, "server");
	pthread_create(&c, NULL, client, NULL);
	pthread_setname_np(c, "client");
	pthread_join(c, NULL);
	pthread_join(s, NULL);
	printf("pid=%d\nserver=%d\nclient=%d\nsync_ns=%lld\nsync_wait_ns=%lld\nclient_wait_ns=%lld\n"
	       "client_t0_ns=%lld\nclient_t1_ns=%lld\n",
	       getpid(), server_tid, client_tid, sync_ns, sync_wait_ns, client_wait_ns, client_t0, client_t1);
	return 0;
}
