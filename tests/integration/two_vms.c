/* libmote runs several VMs in one process: two VMs boot at once, each in its own
 * thread with its own console file, and each powers off with its own output. Then a
 * third whose console is a pipe nobody reads: this process keeps SIGPIPE's default
 * action (ending it), as an embedder may, and the VM still powers off; its console input
 * is an fd that is not open, which is a warning; and a second mote_vm_run() of that VM
 * is refused.
 * usage: mote-test-two-vms KERNEL INITRD DIR */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mote.h"
#include "test_time.h"

/* How long each of the two guests runs on after its line (seconds): more than their
 * boots, nested included, can differ by. */
#define RUN_ON_S 5

struct vm_run {
	struct mote_config config;
	char console_path[512];
	char cmdline[256];
	struct mote_exit exit;
	int result;
	int64_t run_end_ms;	 /* mote_vm_run() returned */
	int64_t first_output_ms; /* its console first held something (main's polling) */
	atomic_bool ended;
};

static void log_to_stderr(void *opaque, enum mote_log_level level, const char *message)
{
	(void)level;
	fprintf(stderr, "vm %s: %s\n", (const char *)opaque, message);
}

static void *run_one(void *arg)
{
	struct vm_run *run = arg;
	struct mote_vm *vm;

	run->result = mote_vm_create(&run->config, &vm);
	if (run->result)
		return NULL;
	run->result = mote_vm_run(vm, &run->exit);
	run->run_end_ms = now_ms();
	mote_vm_destroy(vm);
	atomic_store(&run->ended, true);
	return NULL;
}

static int console_has(const char *path, const char *text)
{
	char line[512];
	FILE *f = fopen(path, "r");
	int found = 0;

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, text) != NULL;
	fclose(f);
	return found;
}

/* A VM whose console is a pipe with no reader: 0 when it powered off and this process
 * is still here to say so, and a second run of it was refused. */
static int run_with_console_reader_gone(const char *kernel, const char *initrd)
{
	struct mote_config config;
	struct mote_vm *vm;
	struct mote_exit exit = {0};
	int fds[2];

	signal(SIGPIPE, SIG_DFL);
	if (pipe(fds) != 0) {
		perror("pipe");
		return 1;
	}
	close(fds[0]);
	mote_config_init(&config);
	config.kernel_path = kernel;
	config.initrd_path = initrd;
	config.cmdline = "console=ttyS0 reboot=k panic=1 mote.run=\"echo nobody-reads-this\"";
	config.console = MOTE_CONSOLE_FDS;
	/* Input from an fd number that cannot be open (past the process's fd limit): a
	 * warning, not a console thread spinning on poll's POLLNVAL. */
	config.console_in_fd = (int)sysconf(_SC_OPEN_MAX) + 16;
	config.console_out_fd = fds[1];
	config.log = log_to_stderr;
	config.log_opaque = (void *)"C";
	int result = mote_vm_create(&config, &vm);
	if (result) {
		fprintf(stderr, "vm C: create: %s\n", strerror(-result));
		close(fds[1]);
		return 1;
	}
	result = mote_vm_run(vm, &exit);
	int again = mote_vm_run(vm, &exit);
	mote_vm_destroy(vm);
	close(fds[1]);
	if (result || exit.reason != MOTE_EXIT_POWER_OFF) {
		fprintf(stderr, "vm C: result %d, exit reason %d (%s)\n", result, exit.reason,
			exit.message);
		return 1;
	}
	if (again != -EALREADY) {
		fprintf(stderr, "vm C: a second mote_vm_run() gave %d, not -EALREADY\n", again);
		return 1;
	}
	printf("a VM whose console reader is gone powered off; a second run was refused\n");
	return 0;
}

int main(int argc, char **argv)
{
	static const char *names[2] = {"A", "B"};
	struct vm_run runs[2];
	pthread_t threads[2];
	int failed = 0;

	if (argc != 4) {
		fprintf(stderr, "usage: %s KERNEL INITRD DIR\n", argv[0]);
		return 2;
	}
	for (int i = 0; i < 2; i++) {
		struct vm_run *run = &runs[i];

		memset(run, 0, sizeof(*run));
		atomic_init(&run->ended, false);
		mote_config_init(&run->config);
		snprintf(run->console_path, sizeof(run->console_path), "%s/console-%s.log", argv[3],
			 names[i]);
		remove(run->console_path);
		snprintf(run->cmdline, sizeof(run->cmdline),
			 "console=ttyS0 reboot=k panic=1 quiet mote.run=\"echo I-am-%s; sleep %d\"",
			 names[i], RUN_ON_S);
		run->config.kernel_path = argv[1];
		run->config.initrd_path = argv[2];
		run->config.cmdline = run->cmdline;
		run->config.cpus = (unsigned)i + 1;
		run->config.console = MOTE_CONSOLE_FILE;
		run->config.console_path = run->console_path;
		run->config.log = log_to_stderr;
		run->config.log_opaque = (void *)names[i];
		pthread_create(&threads[i], NULL, run_one, run);
	}
	/* When each guest first wrote to its console: a guest runs from then on. */
	while (!atomic_load(&runs[0].ended) || !atomic_load(&runs[1].ended)) {
		for (int i = 0; i < 2; i++) {
			struct stat st;
			if (!runs[i].first_output_ms && stat(runs[i].console_path, &st) == 0 &&
			    st.st_size > 0)
				runs[i].first_output_ms = now_ms();
		}
		usleep(5000);
	}
	for (int i = 0; i < 2; i++) {
		char expected[32];

		pthread_join(threads[i], NULL);
		snprintf(expected, sizeof(expected), "I-am-%s", names[i]);
		if (runs[i].result || runs[i].exit.reason != MOTE_EXIT_POWER_OFF) {
			fprintf(stderr, "vm %s: result %d, exit reason %d (%s)\n", names[i],
				runs[i].result, runs[i].exit.reason, runs[i].exit.message);
			failed = 1;
		} else if (!console_has(runs[i].console_path, expected) ||
			   console_has(runs[i].console_path, i ? "I-am-A" : "I-am-B")) {
			fprintf(stderr, "vm %s: console does not hold exactly its own output\n",
				names[i]);
			failed = 1;
		}
	}
	/* At once, not one after the other: each guest was running (had written to its
	 * console) before the other's run ended. A library that made one VM's run wait for
	 * the other's inside mote_vm_run() fails this, as one that ran them in turn. Each
	 * guest runs on RUN_ON_S after its line, so boots of different lengths still
	 * overlap that way. */
	if (!failed && (!runs[0].first_output_ms || !runs[1].first_output_ms ||
			runs[0].first_output_ms >= runs[1].run_end_ms ||
			runs[1].first_output_ms >= runs[0].run_end_ms)) {
		fprintf(stderr,
			"the two VMs did not run at once: A wrote first at %lld ms and ended at "
			"%lld, B at %lld and %lld (0: never seen)\n",
			(long long)runs[0].first_output_ms, (long long)runs[0].run_end_ms,
			(long long)runs[1].first_output_ms, (long long)runs[1].run_end_ms);
		failed = 1;
	}
	if (!failed)
		printf("two VMs in one process: both ran at once and powered off with their own "
		       "output\n");
	if (run_with_console_reader_gone(argv[1], argv[2]))
		failed = 1;
	return failed;
}
