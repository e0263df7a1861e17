/*
 * pingpong: thread "pinger" burns ~2 ms of CPU, then writes a byte to a
 * pipe and waits for the reply; thread "ponger" blocks reading it and writes
 * the reply at once. So ponger's off-CPU intervals (~2 ms) are ended by
 * pinger's write: pinger is the waker. Each thread prints its tid and its
 * context switch counts from /proc/self/task/TID/status just before it
 * ends ("pinger_tid=", "pinger_switches=", same for ponger): the oracle.
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

static void report(const char *who)
{
	long tid = syscall(SYS_gettid);
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
	printf("%s_tid=%ld\n%s_switches=%lld\n", who, tid, who, total);
	fflush(stdout);
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
	report("pinger");
	return NULL;
}

static void *ponger(void *arg)
{
	char c;
	(void)arg;
	for (int i = 0; i < rounds; i++)
		if (read(ping[0], &c, 1) != 1 || write(pong[1], &c, 1) != 1)
			exit(1);
	report("ponger");
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t a, b;
	if (argc > 1)
		rounds = atoi(argv[1]);
	if (pipe(ping) || pipe(pong))
		return 1;
	pthread_create(&b, NULL, ponger, NULL);
	pthread_setname_np(b, "ponger");
	pthread_create(&a, NULL, pinger, NULL);
	pthread_setname_np(a, "pinger");
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	printf("pid=%d\n", getpid());
	return 0;
}
