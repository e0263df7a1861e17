/*
 * fork: starts a fixed number of short-lived processes one after another
 * (fork, exec /bin/true, wait). Prints "elapsed_ms=N".
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 2000;
	struct timespec s, e;
	clock_gettime(CLOCK_MONOTONIC, &s);
	for (long i = 0; i < n; i++) {
		pid_t p = fork();
		if (p == 0) {
			execl("/bin/true", "true", (char *)NULL);
			_exit(127);
		}
		int st;
		if (p < 0 || waitpid(p, &st, 0) < 0)
			return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &e);
	printf("elapsed_ms=%.3f\n", (e.tv_sec - s.tv_sec) * 1e3 + (e.tv_nsec - s.tv_nsec) / 1e6);
	return 0;
}
