/* libmote's pause, resume, snapshot and restore, in one process, on real KVM: a guest
 * counts on its console; paused, it prints nothing; resumed, it counts on; snapshotted
 * and destroyed, then restored into a fresh VM, it counts on from where it stopped, and
 * the restored copy can be snapshotted and restored again (CYCLES times).
 * usage: mote-test-snapshot KERNEL INITRD DIR CPUS CYCLES */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mote.h"
#include "test_time.h"

#define WAIT_SECONDS 120
/* How long a VM paused before it ran is watched for output: longer than a guest takes
 * from its start to its first count, nested included (checked after its resume). */
#define PAUSED_BEFORE_RUN_MS 5000

struct vm_run {
	struct mote_vm *vm;
	struct mote_exit exit;
	int result;
	pthread_t thread;
};

static void log_to_stderr(void *opaque, enum mote_log_level level, const char *message)
{
	(void)opaque;
	if (level <= MOTE_LOG_INFO)
		fprintf(stderr, "mote: %s\n", message);
}

static void *run_thread(void *arg)
{
	struct vm_run *run = arg;

	run->result = mote_vm_run(run->vm, &run->exit);
	return NULL;
}

/* The highest "count=N" on the console so far, 0 for none. */
static long last_count(const char *path)
{
	char line[256];
	long last = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char *at = strstr(line, "count=");
		if (at)
			last = strtol(at + 6, NULL, 10);
	}
	fclose(f);
	return last;
}

/* The first count on the console, 0 for none. */
static long first_count(const char *path)
{
	char line[256];
	long first = 0;
	FILE *f = fopen(path, "r");

	if (!f)
		return 0;
	while (!first && fgets(line, sizeof(line), f)) {
		char *at = strstr(line, "count=");
		if (at)
			first = strtol(at + 6, NULL, 10);
	}
	fclose(f);
	return first;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* Waits until the console counted past at_least; false on timeout. */
static bool wait_count(const char *path, long at_least)
{
	for (int i = 0; i < WAIT_SECONDS * 20; i++) {
		if (last_count(path) > at_least)
			return true;
		sleep_ms(50);
	}
	return false;
}

static int fail(const char *what, int err)
{
	fprintf(stderr, "snapshot cycle: %s: %s\n", what, err ? strerror(-err) : "failed");
	return 1;
}

static void end_run(struct vm_run *run)
{
	mote_vm_stop(run->vm);
	pthread_join(run->thread, NULL);
	mote_vm_destroy(run->vm);
	run->vm = NULL;
}

int main(int argc, char **argv)
{
	struct mote_config config;
	struct vm_run run = {0};
	char console[512], state[512], mem[512], cmdline[256];
	int err;

	if (argc != 6) {
		fprintf(stderr, "usage: %s KERNEL INITRD DIR CPUS CYCLES\n", argv[0]);
		return 2;
	}
	const char *dir = argv[3];
	int cycles = atoi(argv[5]);
	mote_config_init(&config);
	snprintf(console, sizeof(console), "%s/snap-console-0.log", dir);
	remove(console);
	snprintf(cmdline, sizeof(cmdline),
		 "console=ttyS0 reboot=k panic=1 quiet mote.run=\"i=0; while :; do "
		 "i=$((i+1)); echo count=$i; sleep 0.05; done\"");
	config.kernel_path = argv[1];
	config.initrd_path = argv[2];
	config.cmdline = cmdline;
	config.cpus = (unsigned)atoi(argv[4]);
	config.console = MOTE_CONSOLE_FILE;
	config.console_path = console;
	config.log = log_to_stderr;
	err = mote_vm_create(&config, &run.vm);
	if (err)
		return fail("create", err);
	/* Paused before mote_vm_run(): it starts paused, runs nothing until resumed. */
	err = mote_vm_pause(run.vm);
	if (err || mote_vm_get_state(run.vm) != MOTE_VM_PAUSED)
		return fail("pausing a VM before it runs", err);
	pthread_create(&run.thread, NULL, run_thread, &run);
	sleep_ms(PAUSED_BEFORE_RUN_MS);
	struct stat console_st;
	if (stat(console, &console_st) == 0 && console_st.st_size != 0)
		return fail("a VM paused before it ran wrote to its console", 0);
	err = mote_vm_resume(run.vm);
	if (err)
		return fail("resuming a VM paused before it ran", err);
	int64_t resumed_ms = now_ms();
	if (!wait_count(console, 0))
		return fail("the guest never counted", 0);
	/* The wait above means something only if a guest left running would have counted
	 * within it: as long as this one took from its resume to its first count. */
	int64_t to_count_ms = now_ms() - resumed_ms;
	if (to_count_ms >= PAUSED_BEFORE_RUN_MS) {
		fprintf(stderr,
			"snapshot cycle: the guest took %lld ms from its resume to count, longer "
			"than the %d ms it was watched while paused: that proves nothing\n",
			(long long)to_count_ms, PAUSED_BEFORE_RUN_MS);
		return 1;
	}
	if (!wait_count(console, 5))
		return fail("the guest never counted to 5", 0);
	printf("paused before it ran: nothing ran until resumed (%lld ms from resume to count)\n",
	       (long long)to_count_ms);

	err = mote_vm_pause(run.vm);
	if (err)
		return fail("pause", err);
	if (mote_vm_get_state(run.vm) != MOTE_VM_PAUSED)
		return fail("state after pause is not paused", 0);
	long paused_at = last_count(console);
	sleep_ms(500);
	if (last_count(console) != paused_at)
		return fail("the guest counted while paused", 0);
	err = mote_vm_resume(run.vm);
	if (err)
		return fail("resume", err);
	if (!wait_count(console, paused_at + 3))
		return fail("the guest did not count on after resume", 0);
	printf("pause and resume: paused at %ld, nothing while paused, counted on\n", paused_at);

	for (int cycle = 1; cycle <= cycles; cycle++) {
		struct mote_snapshot_params params = {.state_path = state, .mem_path = mem};
		snprintf(state, sizeof(state), "%s/snap-%d.state", dir, cycle);
		snprintf(mem, sizeof(mem), "%s/snap-%d.mem", dir, cycle);
		if (mote_vm_snapshot(run.vm, &params) != -EINVAL)
			return fail("a snapshot of a running VM was not refused", 0);
		err = mote_vm_pause(run.vm);
		if (!err)
			err = mote_vm_snapshot(run.vm, &params);
		if (err)
			return fail("snapshot", err);
		long saved = last_count(console);
		end_run(&run);

		struct mote_restore_config restore;
		mote_restore_config_init(&restore);
		snprintf(console, sizeof(console), "%s/snap-console-%d.log", dir, cycle);
		remove(console);
		restore.state_path = state;
		restore.mem_path = mem;
		restore.console = MOTE_CONSOLE_FILE;
		restore.console_path = console;
		restore.log = log_to_stderr;
		err = mote_vm_restore(&restore, &run.vm);
		if (err)
			return fail("restore", err);
		pthread_create(&run.thread, NULL, run_thread, &run);
		if (!wait_count(console, saved + 3))
			return fail("the restored guest did not count on", 0);
		/* The console may have missed the line in the UART when the snapshot was
		 * taken: the count resumes at saved + 1 or saved + 2, never from scratch. */
		long first = first_count(console);
		if (first < saved + 1 || first > saved + 2) {
			fprintf(stderr,
				"cycle %d: saved at count %ld, restored guest began at %ld\n",
				cycle, saved, first);
			return 1;
		}
		printf("cycle %d: saved at %ld, restored guest counted on from %ld\n", cycle, saved,
		       first);
	}
	end_run(&run);
	printf("snapshot cycles: all %d restored guests continued\n", cycles);
	return 0;
}
