/*
 * holdlibs: keeps the files named after argv[1] mapped for argv[1]
 * seconds, asleep: dlopens each, or, if it is no library, maps it
 * executable. A hostile user's way to make the profiler compile and hold
 * tables for files of its own. Prints "pid=" and "held=N" once all are mapped.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int held = 0;

	for (int i = 2; i < argc; i++) {
		if (dlopen(argv[i], RTLD_NOW | RTLD_LOCAL)) {
			held++;
			continue;
		}
		int fd = open(argv[i], O_RDONLY);
		struct stat st;
		if (fd >= 0 && fstat(fd, &st) == 0 && mmap(NULL, st.st_size, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) != MAP_FAILED)
			held++;
		else
			fprintf(stderr, "holdlibs: %s: cannot map it\n", argv[i]);
	}
	printf("pid=%d\nheld=%d\n", getpid(), held);
	fflush(stdout);
	sleep(argc > 1 ? atoi(argv[1]) : 10);
	return 0;
}
