/*
 * pingpong: thread "pinger" burns ~2 ms of CPU, then writes a byte to a
 * pipe and waits for the reply; thread "ponger" blocks reading it and writes
 * the reply at once. So ponger's off-CPU intervals (~2 ms) are ended by
 * pinger's write: pinger is the waker. When both threads have finished
 * their rounds and are parked, main prints their tids and their context
 * switch counts from /proc/self/task/TID/status ("pinger_tid=",
 * "pinger_switches=", same for ponger): the oracle.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

static int rounds = 300;
static int ping[2], pong[2];
static volatile unsigned long sink;

static long long now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Each worker ends its rounds here: it records its tid, tells main it is
 * done, and blocks on the park pipe until main closes it. While both are
 * parked nothing switches them, so the counts main reads are the counts of
 * the whole run except the last few switches after the release (being woken
 * to return and the final switch away from an exiting thread). */
static long tids[2];
static int done[2], park[2];

static void finish(int who)
{
	char c = 'd';
	tids[who] = syscall(SYS_gettid);
	if (write(done[1], &c, 1) != 1)
		exit(1);
	while (read(park[0], &c, 1) > 0)
		;
}

static char task_state(long tid)
{
	char path[64], buf[512];
	snprintf(path, sizeof(path), "/proc/self/task/%ld/stat", tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return '?';
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : '?';
}

static long long switches(long tid)
{
	char path[64], line[256];
	long long total = 0;
	snprintf(path, sizeof(path), "/proc/self/task/%ld/status", tid);
	FILE *f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "voluntary_ctxt_switches:", 24) || !strncmp(line, "nonvoluntary_ctxt_switches:", 27))
			total += atoll(strchr(line, ':') + 1);
	}
	if (f)
		fclose(f);
	return total;
}

static void *pinger(void *arg)
{
	char c = 'x';
	(void)arg;
	for (int i = 0; i < rounds; i++) {
		long long until = now() + 2000000;
		while (now() < until)
			for (int k = 0; k < 1000; k++)
				sink = sink * 31 + k;
		if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
			exit(1);
	}
	finish(0);
	return NULL;
}

static void *ponger(void *arg)
{
	char c;
	(void)arg;
	for (int i = 0; i < rounds; i++)
		if (read(ping[0], &c, 1) != 1 || write(pong[1], &c, 1) != 1)
			exit(1);
	finish(1);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t a, b;
	if (argc > 1)
		rounds = atoi(argv[1]);
	if (pipe(ping) || pipe(pong) || pipe(done) || pipe(park))
		return 1;
	pthread_create(&b, NULL, ponger, NULL);
	pthread_setname_np(b, "ponger");
	pthread_create(&a, NULL, pinger, NULL);
	pthread_setname_np(a, "pinger");
	/* Both done, then both blocked in the park read: read the oracle. */
	char c;
	for (int i = 0; i < 2; i++)
		if (read(done[0], &c, 1) != 1)
			return 1;
	while (task_state(tids[0]) != 'S' || task_state(tids[1]) != 'S')
		usleep(1000);
	long long pinger_switches = switches(tids[0]), ponger_switches = switches(tids[1]);
	printf("pinger_tid=%ld\npinger_switches=%lld\nponger_tid=%ld\nponger_switches=%lld\n",
	       tids[0], pinger_switches, tids[1], ponger_switches);
	close(park[1]);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	printf("pid=%d\n", getpid());
	return 0;
}
