/*
 * mapforks: argv[1] sleeping processes that each map a page of their own
 * program executable again every 2 s (so the profiler rewrites their entry
 * in the kernel unwinder's process map), for argv[2] seconds. A hostile
 * user's way to take every entry of that map. Prints "started=N" once all
 * children run; each exits when its time is up or its parent is gone.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 100;
	int seconds = argc > 2 ? atoi(argv[2]) : 10;
	int started = 0;

	for (int i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			int fd = open("/proc/self/exe", O_RDONLY);
			time_t end = time(NULL) + seconds;

			prctl(PR_SET_PDEATHSIG, SIGKILL);
			while (time(NULL) < end) {
				void *p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);

				sleep(2);
				if (p != MAP_FAILED)
					munmap(p, 4096);
			}
			_exit(0);
		}
		if (pid > 0)
			started++;
	}
	printf("started=%d\n", started);
	fflush(stdout);
	while (wait(NULL) > 0)
		;
	return 0;
}
