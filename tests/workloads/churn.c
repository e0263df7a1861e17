/*
 * churn: a user's process churn, as a hostile or merely busy user makes
 * it. For argv[1] seconds, argv[2] times a second, a new copy of this
 * program (a file of its own, one byte different: a new binary to read)
 * is written in the directory argv[3] and started with a large command
 * line (64 arguments of 2 KiB); each child maps its own file 300 times
 * executable (300 mappings to look at), spins ~5 ms of CPU so it is
 * sampled, and exits. The last 64 copies are kept, older ones removed.
 * Prints "started" once running, then "children=N" at its end.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double cpu(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int child(void)
{
	int fd = open("/proc/self/exe", O_RDONLY);
	for (int i = 0; fd >= 0 && i < 300; i++)
		mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
	volatile unsigned long x = 0;
	double end = cpu() + 0.005;
	while (cpu() < end)
		x++;
	return 0;
}

/* Copy this program to `to`, with `salt` appended (a file of its own). */
static int copy_self(const char *to, unsigned salt)
{
	static char *image;
	static ssize_t size;
	if (!image) {
		int in = open("/proc/self/exe", O_RDONLY);
		struct stat st;
		if (in < 0 || fstat(in, &st))
			return -1;
		image = malloc(st.st_size + 16);
		size = read(in, image, st.st_size);
		close(in);
		if (size != st.st_size)
			return -1;
	}
	int out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0755);
	if (out < 0)
		return -1;
	int ok = write(out, image, size) == size && write(out, &salt, sizeof(salt)) == sizeof(salt);
	close(out);
	return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "child") == 0)
		return child();
	if (argc < 4)
		return 2;
	double seconds = atof(argv[1]), rate = atof(argv[2]);
	const char *dir = argv[3];
	static char big[64][2048];
	char *args[67];
	args[1] = "child";
	for (int i = 0; i < 64; i++) {
		memset(big[i], 'a' + i % 26, sizeof(big[i]) - 1);
		args[2 + i] = big[i];
	}
	args[66] = NULL;
	signal(SIGCHLD, SIG_DFL);
	printf("started\n");
	fflush(stdout);
	double start = now(), next = start;
	unsigned n = 0;
	char path[4096], old[4096];
	while (now() - start < seconds) {
		snprintf(path, sizeof(path), "%s/c-%u", dir, n);
		if (copy_self(path, n) == 0) {
			pid_t pid = fork();
			if (pid == 0) {
				args[0] = path;
				execv(path, args);
				_exit(127);
			}
			n++;
		}
		if (n > 64) {
			snprintf(old, sizeof(old), "%s/c-%u", dir, n - 65);
			unlink(old);
		}
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
		next += 1.0 / rate;
		double wait = next - now();
		if (wait > 0)
			usleep((useconds_t)(wait * 1e6));
	}
	while (wait(NULL) > 0)
		;
	printf("children=%u\n", n);
	return 0;
}
