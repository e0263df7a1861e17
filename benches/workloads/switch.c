/*
 * switch: two threads ping-pong one byte over a pair of pipes for a fixed
 * number of round trips: two context switches each way. Prints
 * "elapsed_ms=N" and "switches=N" (the round trips times four).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long rounds = 200000;
static int ping[2], pong[2];

static void *echo(void *arg)
{
	char c;
	(void)arg;
	for (long i = 0; i < rounds; i++) {
		if (read(ping[0], &c, 1) != 1 || write(pong[1], &c, 1) != 1)
			exit(1);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc > 1)
		rounds = atol(argv[1]);
	if (pipe(ping) || pipe(pong))
		return 1;
	pthread_t t;
	struct timespec s, e;
	pthread_create(&t, NULL, echo, NULL);
	clock_gettime(CLOCK_MONOTONIC, &s);
	char c = 'x';
	for (long i = 0; i < rounds; i++) {
		if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
			return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &e);
	pthread_join(t, NULL);
	printf("elapsed_ms=%.3f\nswitches=%ld\n", (e.tv_sec - s.tv_sec) * 1e3 + (e.tv_nsec - s.tv_nsec) / 1e6, rounds * 4);
	return 0;
}
