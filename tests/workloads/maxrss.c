/*
 * maxrss: run a command and write its peak resident set, for
 * tests/tests/inputs.rs.
 *
 * wait4's ru_maxrss keeps, across an exec, the larger of the new program's
 * peak and what the process had resident before it: a command spawned from
 * the test process (tens of MiB) "peaked" at the test's own size. Forked
 * from this small program instead, the figure is the command's own peak,
 * give or take this program's one MiB or so.
 *
 * Usage: maxrss OUT CMD [ARGS...]. Writes the peak in KiB and a newline to
 * OUT; exits as CMD did (128 + the signal that ended it, as shells say).
 * Killed, it takes CMD with it (a test's timeout kills this program).
 */
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: maxrss OUT CMD [ARGS...]\n");
		return 2;
	}
	pid_t pid = fork();
	if (pid < 0) {
		perror("maxrss: fork");
		return 2;
	}
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() == 1)
			_exit(127); /* this program was gone before the prctl */
		execvp(argv[2], argv + 2);
		perror("maxrss: exec");
		_exit(127);
	}
	int status;
	struct rusage ru;
	if (wait4(pid, &status, 0, &ru) < 0) {
		perror("maxrss: wait4");
		return 2;
	}
	FILE *out = fopen(argv[1], "w");
	if (!out || fprintf(out, "%ld\n", ru.ru_maxrss) < 0 || fclose(out)) {
		perror(argv[1]);
		return 2;
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
