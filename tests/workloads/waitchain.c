/*
 * waitchain: a wait that goes through three threads in two processes, each
 * measuring its own times (the oracles of `report --why`).
 *
 * A "client" process sends argv[2] one-byte requests over a pipe to the
 * "server" thread of this process and waits for each reply. For each one
 * the server hands a job to a "holder" thread and then waits on a mutex
 * that the holder keeps while it makes argv[3] 4 KiB O_DIRECT reads of the
 * device argv[1] and then computes for argv[4] ms of its own CPU time. A "napper" thread only sleeps on a timer
 * (2 ms naps) the whole time.
 *
 * Prints "pid=", "server=TID", "holder=TID", "napper=TID",
 * "holder_blocked_ns=" and "holder_cpu_ns=" (while holding the mutex: the
 * time the holder was blocked in its reads, i.e. their wall time less its
 * CPU time and its run-queue delay over them (schedstat), and its CPU time),
 * "napper_run_delay_ns=" (the napper's schedstat run delay over its naps),
 * "napper_late_ns=" (how much later than asked its naps ended, each measured
 * with CLOCK_MONOTONIC around its nanosleep, with no timer slack: the time
 * from its timer's expiry to running again, which holds its whole run-queue
 * delay from its waking on), "napper_t0_ns=", "napper_t1_ns=" (CLOCK_MONOTONIC
 * around its naps), and from the client
 * "client_pid=", "client=TID", "client_wait_ns=" (its round trips' wall
 * time less its own CPU time over them: the time it was off the CPU) and
 * "client_t0_ns=", "client_t1_ns=" (CLOCK_MONOTONIC around them),
 * "client_steal_ns=" (the machine's steal time over them, all CPUs, from
 * /proc/stat: time a vCPU was not run by the host, which the client's CPU
 * clock leaves out while it ran).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

static const char *device;
static int reads = 4;
static double compute_ms = 2.0;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int done;
/* job: the server asks for one; locked: the holder has the mutex. */
static sem_t job, locked;
static int req[2], rep[2];
static long server_tid, holder_tid, napper_tid;
static long long holder_blocked_ns, holder_cpu_ns, napper_run_delay_ns, napper_late_ns, napper_t0_ns, napper_t1_ns;
static volatile unsigned long sink;

static long long clock_ns(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* This thread's run-queue delay so far (schedstat's second field), from an
 * fd on /proc/thread-self/schedstat. */
static long long run_delay_ns(int fd)
{
	char buf[128];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		exit(6);
	buf[n] = 0;
	char *p = strchr(buf, ' ');
	return p ? atoll(p + 1) : 0;
}

static void *holder(void *arg)
{
	(void)arg;
	holder_tid = syscall(SYS_gettid);
	int fd = open(device, O_RDONLY | O_DIRECT);
	void *buf;
	if (fd < 0 || posix_memalign(&buf, 4096, 4096))
		exit(1);
	off_t blocks = lseek(fd, 0, SEEK_END) / 4096;
	int sched = open("/proc/thread-self/schedstat", O_RDONLY);
	if (sched < 0)
		exit(1);
	for (long i = 0;; i++) {
		sem_wait(&job);
		if (atomic_load(&done))
			break;
		pthread_mutex_lock(&lock);
		sem_post(&locked);
		long long c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), d0 = run_delay_ns(sched), t0 = clock_ns(CLOCK_MONOTONIC);
		for (int r = 0; r < reads; r++)
			if (pread(fd, buf, 4096, (off_t)(((i * reads + r) * 7919L) % blocks) * 4096) != 4096)
				exit(2);
		long long t1 = clock_ns(CLOCK_MONOTONIC), c1 = clock_ns(CLOCK_THREAD_CPUTIME_ID), d1 = run_delay_ns(sched);
		holder_blocked_ns += (t1 - t0) - (c1 - c0) - (d1 - d0);
		while (clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0 < (long long)(compute_ms * 1e6))
			for (int k = 0; k < 2000; k++)
				sink = sink * 6364136223846793005UL + k;
		holder_cpu_ns += clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
		pthread_mutex_unlock(&lock);
	}
	close(fd);
	return NULL;
}

static void *server(void *arg)
{
	(void)arg;
	server_tid = syscall(SYS_gettid);
	char c;
	while (read(req[0], &c, 1) == 1) {
		sem_post(&job);
		sem_wait(&locked);
		/* Waits for the holder's reads and computing. */
		pthread_mutex_lock(&lock);
		pthread_mutex_unlock(&lock);
		if (write(rep[1], &c, 1) != 1)
			exit(3);
	}
	return NULL;
}

static void *napper(void *arg)
{
	(void)arg;
	napper_tid = syscall(SYS_gettid);
	struct timespec nap = { 0, 2000000 };
	int sched = open("/proc/thread-self/schedstat", O_RDONLY);
	if (sched < 0)
		exit(1);
	/* Its timer fires when asked, not up to 50 us later: the lateness it
	 * measures is then the way from the timer to the CPU. */
	prctl(PR_SET_TIMERSLACK, 1UL);
	napper_t0_ns = clock_ns(CLOCK_MONOTONIC);
	long long d0 = run_delay_ns(sched);
	while (!atomic_load(&done)) {
		long long before = clock_ns(CLOCK_MONOTONIC);
		nanosleep(&nap, NULL);
		napper_late_ns += clock_ns(CLOCK_MONOTONIC) - before - 2000000;
	}
	napper_run_delay_ns = run_delay_ns(sched) - d0;
	napper_t1_ns = clock_ns(CLOCK_MONOTONIC);
	return NULL;
}

/* The machine's steal time so far, all CPUs, ns (USER_HZ ticks). */
static long long steal_ns(void)
{
	long long v[8] = { 0 };
	FILE *f = fopen("/proc/stat", "r");
	if (!f)
		return 0;
	if (fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 8)
		v[7] = 0;
	fclose(f);
	return v[7] * (1000000000LL / sysconf(_SC_CLK_TCK));
}

static void client(int requests)
{
	prctl(PR_SET_NAME, "client");
	long long wall = 0, cpu = 0, steal = steal_ns(), first = clock_ns(CLOCK_MONOTONIC);
	char c = 'x';
	for (int i = 0; i < requests; i++) {
		long long t0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
		if (write(req[1], &c, 1) != 1 || read(rep[0], &c, 1) != 1)
			exit(4);
		wall += clock_ns(CLOCK_MONOTONIC) - t0;
		cpu += clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
	}
	long long last = clock_ns(CLOCK_MONOTONIC);
	steal = steal_ns() - steal;
	printf("client_pid=%d\nclient=%ld\nclient_wait_ns=%lld\nclient_t0_ns=%lld\nclient_t1_ns=%lld\nclient_steal_ns=%lld\n", getpid(), (long)syscall(SYS_gettid), wall - cpu,
	       first, last, steal);
	fflush(stdout);
	exit(0);
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	device = argv[1];
	int requests = atoi(argv[2]);
	if (argc > 3)
		reads = atoi(argv[3]);
	if (argc > 4)
		compute_ms = atof(argv[4]);
	if (pipe(req) || pipe(rep) || sem_init(&job, 0, 0) || sem_init(&locked, 0, 0))
		return 1;
	pthread_t h, s, n;
	pthread_create(&h, NULL, holder, NULL);
	pthread_setname_np(h, "holder");
	pthread_create(&s, NULL, server, NULL);
	pthread_setname_np(s, "server");
	pthread_create(&n, NULL, napper, NULL);
	pthread_setname_np(n, "napper");
	fflush(stdout);
	pid_t child = fork();
	if (child == 0)
		client(requests);
	int status;
	waitpid(child, &status, 0);
	atomic_store(&done, 1);
	close(req[1]);
	pthread_join(s, NULL);
	sem_post(&job);
	pthread_join(h, NULL);
	pthread_join(n, NULL);
	printf("pid=%d\nserver=%ld\nholder=%ld\nnapper=%ld\nholder_blocked_ns=%lld\nholder_cpu_ns=%lld\nnapper_run_delay_ns=%lld\n"
	       "napper_late_ns=%lld\nnapper_t0_ns=%lld\nnapper_t1_ns=%lld\n",
	       getpid(), server_tid, holder_tid, napper_tid, holder_blocked_ns, holder_cpu_ns, napper_run_delay_ns, napper_late_ns,
	       napper_t0_ns, napper_t1_ns);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 5;
}
