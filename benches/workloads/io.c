/*
 * io: a fixed number of 4 KiB O_DIRECT reads at pseudo-random offsets of
 * argv[1] (a file of at least 64 MiB, created by the harness), bypassing the
 * page cache so each read is a block request. Prints "elapsed_ms=N" and
 * "reads=N".
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	long n = argc > 2 ? atol(argv[2]) : 20000;
	int fd = open(argv[1], O_RDONLY | O_DIRECT);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	off_t blocks = lseek(fd, 0, SEEK_END) / 4096;
	void *buf;
	if (blocks <= 0 || posix_memalign(&buf, 4096, 4096))
		return 1;
	unsigned long x = 88172645463325252UL;
	struct timespec s, e;
	clock_gettime(CLOCK_MONOTONIC, &s);
	for (long i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		if (pread(fd, buf, 4096, (off_t)(x % blocks) * 4096) != 4096) {
			perror("pread");
			return 1;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &e);
	printf("elapsed_ms=%.3f\nreads=%ld\n", (e.tv_sec - s.tv_sec) * 1e3 + (e.tv_nsec - s.tv_nsec) / 1e6, n);
	return 0;
}
