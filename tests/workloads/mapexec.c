/*
 * mapexec: maps the first 12 KiB of the file argv[1] readable and
 * executable, prints "pid=", then sleeps until killed. A hostile user's
 * process holding a crafted "library" mapped while root records: the
 * profiler must read that file's unwind sections (it sees an executable
 * mapping) without trusting the sizes its headers claim.
 */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	int fd = open(argv[1], O_RDONLY);
	if (fd < 0 || mmap(NULL, 0x3000, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED) {
		perror(argv[1]);
		return 1;
	}
	printf("pid=%d\n", getpid());
	fflush(stdout);
	for (;;)
		pause();
}
