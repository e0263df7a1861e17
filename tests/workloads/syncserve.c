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
 * Prints, as key=value lines:
 * - pid, server (its tid), client (its tid);
 * - steal_ns: the VM's CPUs' steal over the client's loop, from /proc/stat
 *   in clock ticks (10 ms): time the host ran something else while this
 *   guest's CPUs wanted to run. A thread's CPU clock leaves it out, a
 *   tracer's switch times cannot;
 * - server_t0_ns, server_t1_ns: CLOCK_MONOTONIC around the server's loop,
 *   before its first schedstat read and after its last;
 * - server_cpu_ns, server_run_delay_ns: its CPU time and its run delay
 *   (/proc/thread-self/schedstat) over its loop;
 * - sync_ns: the wall time of the server's fdatasyncs; sync_wait_ns: their
 *   wall time less its CPU time over them (CLOCK_THREAD_CPUTIME_ID), the
 *   time it was off the CPU in them, steal included; sync_run_delay_ns: of
 *   that, the time it was runnable, waiting for a CPU (its schedstat's run
 *   delay over them);
 * - client_wait_ns: the client's round trips' wall time less its CPU time
 *   over them; client_t0_ns, client_t1_ns: CLOCK_MONOTONIC around its
 *   requests.
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
static long long server_t0, server_t1, steal_ns, server_cpu_ns, server_run_delay_ns, sync_ns, sync_wait_ns, sync_run_delay_ns, client_wait_ns, client_t0, client_t1;
static pid_t server_tid, client_tid;
static char chunk[CHUNK];

static long long clock_ns(clockid_t c)
{
	struct timespec t;
	clock_gettime(c, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* The time the host ran something else while this VM's CPUs wanted to
 * run, summed over CPUs, ns (/proc/stat's steal; 0 on bare metal). */
static long long steal_so_far_ns(void)
{
	FILE *f = fopen("/proc/stat", "r");
	long long v[8] = {0};
	if (!f || fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
			 &v[6], &v[7]) != 8) {
		fprintf(stderr, "/proc/stat: unreadable\n");
		exit(1);
	}
	fclose(f);
	return v[7] * (1000000000LL / sysconf(_SC_CLK_TCK));
}

/* The calling thread's run delay so far, ns (schedstat's second field). */
static long long run_delay_ns(int schedstat)
{
	char buf[128];
	ssize_t len = pread(schedstat, buf, sizeof buf - 1, 0);
	if (len <= 0) {
		perror("schedstat");
		exit(1);
	}
	buf[len] = 0;
	long long on_cpu, delay;
	if (sscanf(buf, "%lld %lld", &on_cpu, &delay) != 2) {
		fprintf(stderr, "schedstat: unreadable\n");
		exit(1);
	}
	return delay;
}

static void *server(void *arg)
{
	(void)arg;
	server_tid = syscall(SYS_gettid);
	int schedstat = open("/proc/thread-self/schedstat", O_RDONLY);
	if (schedstat < 0) {
		perror("/proc/thread-self/schedstat");
		exit(1);
	}
	server_t0 = clock_ns(CLOCK_MONOTONIC);
	long long cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), delay0 = run_delay_ns(schedstat);
	char c;
	for (int i = 0; i < n; i++) {
		if (read(requests[0], &c, 1) != 1)
			break;
		memset(chunk, i, sizeof chunk);
		if (pwrite(fd, chunk, sizeof chunk, (off_t)(i % 64) * CHUNK) != CHUNK) {
			perror("pwrite");
			exit(1);
		}
		long long delay = run_delay_ns(schedstat);
		long long wall = clock_ns(CLOCK_MONOTONIC), cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		if (fdatasync(fd)) {
			perror("fdatasync");
			exit(1);
		}
		wall = clock_ns(CLOCK_MONOTONIC) - wall;
		cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu;
		sync_run_delay_ns += run_delay_ns(schedstat) - delay;
		sync_ns += wall;
		sync_wait_ns += wall - cpu;
		if (write(replies[1], &c, 1) != 1)
			break;
	}
	server_cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	server_run_delay_ns = run_delay_ns(schedstat) - delay0;
	server_t1 = clock_ns(CLOCK_MONOTONIC);
	return NULL;
}

static void *client(void *arg)
{
	(void)arg;
	client_tid = syscall(SYS_gettid);
	char c = 'x';
	long long steal0 = steal_so_far_ns();
	client_t0 = clock_ns(CLOCK_MONOTONIC);
	for (int i = 0; i < n; i++) {
		long long wall = clock_ns(CLOCK_MONOTONIC), cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		if (write(requests[1], &c, 1) != 1 || read(replies[0], &c, 1) != 1)
			break;
		client_wait_ns += (clock_ns(CLOCK_MONOTONIC) - wall) - (clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu);
	}
	client_t1 = clock_ns(CLOCK_MONOTONIC);
	steal_ns = steal_so_far_ns() - steal0;
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
	printf("pid=%d\nserver=%d\nclient=%d\nsteal_ns=%lld\nserver_t0_ns=%lld\nserver_t1_ns=%lld\nserver_cpu_ns=%lld\nserver_run_delay_ns=%lld\nsync_ns=%lld\nsync_wait_ns=%lld\nsync_run_delay_ns=%lld\n"
	       "client_wait_ns=%lld\nclient_t0_ns=%lld\nclient_t1_ns=%lld\n",
	       getpid(), server_tid, client_tid, steal_ns, server_t0, server_t1, server_cpu_ns, server_run_delay_ns, sync_ns, sync_wait_ns, sync_run_delay_ns, client_wait_ns,
	       client_t0, client_t1);
	return 0;
}
