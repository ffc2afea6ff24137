/* mote-measure: runs a command and prints "WALL_US MAXRSS_KIB STATUS" for it: wall
 * time from just before exec to its exit, and its peak resident set (wait4's rusage).
 * The command's stdout and stderr go to /dev/null unless MEASURE_KEEP_OUTPUT is set. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

int main(int argc, char **argv)
{
	struct rusage usage;
	long long start;
	int status;
	pid_t pid;

	if (argc < 2) {
		fprintf(stderr, "usage: mote-measure CMD [ARGS...]\n");
		return 2;
	}
	start = now_us();
	pid = fork();
	if (pid < 0) {
		perror("mote-measure: fork");
		return 1;
	}
	if (pid == 0) {
		if (!getenv("MEASURE_KEEP_OUTPUT")) {
			int null = open("/dev/null", O_WRONLY);
			dup2(null, STDOUT_FILENO);
			dup2(null, STDERR_FILENO);
		}
		int in = open("/dev/null", O_RDONLY);
		dup2(in, STDIN_FILENO);
		execvp(argv[1], argv + 1);
		_exit(127);
	}
	if (wait4(pid, &status, 0, &usage) < 0) {
		perror("mote-measure: wait4");
		return 1;
	}
	printf("%lld %ld %d\n", now_us() - start, usage.ru_maxrss,
	       WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
	return 0;
}
