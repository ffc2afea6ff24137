/* libmote's pause racing the VM's end, on real KVM. A pause whose VM ends meanwhile (a
 * guest power-off, a mote_vm_stop() from another thread) gives up with -EINTR, leaving
 * the event thread asked to park (vm_pause.c); the end must still stop everything and
 * mote_vm_run() return. Three held rounds make the race certain, holding a thread of the
 * VM in this program's log callback while a pause waits for it:
 *   - the one vCPU (guest-init's boot-complete write is logged on its thread), and the
 *     VM stopped: the pause returns -EINTR with the vCPU still held;
 *   - the same vCPU let go, ending the VM itself (exit_at_boot) as a guest's power-off
 *     does: the pause returns -EINTR;
 *   - the event thread (a host client's bad vsock CONNECT line is logged on it), and the
 *     VM stopped once the pause parked the vCPU: let go, the thread parks and the pause
 *     returns -EINTR, not a paused VM.
 * A fourth held round has no end meanwhile: the pause waiting for the held vCPU is
 * abandoned at libmote's bound (30 s, not before), logged, with -ETIMEDOUT and the VM
 * running on; let go, the vCPU parks at the next pause, the VM resumes and its guest
 * powers off.
 * Then ROUNDS racing rounds: a pauser thread pauses and resumes back to back from the
 * guest's first line until the VM has ended, by the guest powering off on its own (half
 * of them) or by mote_vm_stop() from the main thread.
 * In every round mote_vm_run() returns with the exit its end implies, every pause and
 * resume answers as mote.h says (0; -EINTR and -EINVAL only once the VM has ended;
 * -ETIMEDOUT only at the vCPU held past the bound), a racing round has a pause that
 * succeeded, and after the end a pause and a resume are refused with -EINVAL at once and
 * mote_vm_destroy() returns. Every wait has a deadline: a hang fails, naming the step.
 * Each round's guest console is DIR/race-N.out.
 * usage: mote-test-pause-end-race KERNEL INITRD DIR ROUNDS */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "mote.h"
#include "test_time.h"
#include "watchdog.h"

/* From a VM's creation to mote_vm_run()'s return, nested boot included. */
#define ROUND_LIMIT_S 60
/* For a call that answers at once, whatever the VM's state (a stop, a pause of an ended
 * VM): generous for a nested host under load, still far from a hang. */
#define PROMPT_LIMIT_S 5
/* Long enough for what takes milliseconds, nested included: an idle vCPU's parking (the
 * racing rounds pause hundreds of times a second), a pause's giving up. */
#define SETTLE_MS 1000
/* The guest's line: the pauser starts once it is on the console. */
#define READY_LINE "race-ready"
/* libmote's bound on a pause's wait for a vCPU (VM_PAUSE_WAIT_MS, vm_pause.c): a pause
 * the held vCPU never answers is abandoned at it, not before (the margin is this
 * program's clock reading, in whole milliseconds, around the call), and within
 * ABANDON_LIMIT_S, three times the bound: later is a pause that ignores it (failed by
 * the watchdog before hold_thread() gives up holding). */
#define PAUSE_BOUND_MS 30000
#define PAUSE_BOUND_MARGIN_MS 500
#define ABANDON_LIMIT_S 90
/* What libmote logs as it abandons a pause at a vCPU (vm_pause.c). */
#define ABANDON_MESSAGE "pause abandoned: a vCPU did not stop"
/* A stop comes at a random moment up to this long after the round's first pause that
 * succeeded: at another point of the pauser's loop each time. */
#define STOP_DELAY_MAX_MS 300

enum round_end {
	END_BY_POWER_OFF,	   /* the guest powers off on its own, a moment after its line */
	END_BY_STOP,		   /* mote_vm_stop() from the main thread while the pauser loops */
	HELD_VCPU_STOPPED,	   /* mote_vm_stop() while a pause waits for the held vCPU */
	HELD_VCPU_ENDS,		   /* the held vCPU, let go, ends the VM (exit_at_boot) */
	HELD_EVENT_THREAD_STOPPED, /* mote_vm_stop() once the pause waits for the event thread */
	HELD_VCPU_PAUSE_ABANDONED, /* the pause abandoned at the held vCPU; then a power-off */
};

struct round {
	int number;
	enum round_end end;
	unsigned cpus;
	char console_path[512];
	char vsock_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct mote_vm *vm;
	struct mote_exit exit;
	int run_result;
	int64_t run_called_ms, run_returned_ms;
	atomic_bool run_returned;
	/* The held rounds: the thread that logs hold_message waits in the log callback on
	 * release_fds[0]. */
	const char *hold_message;
	int release_fds[2];
	bool released;
	atomic_bool held, kicked;
	int held_pause_result;
	atomic_bool held_pause_returned;
	atomic_bool abandon_logged; /* ABANDON_MESSAGE came to the log callback */
	/* The pauses' answers. */
	atomic_uint pauses_ok;
	unsigned pauses_interrupted, pauses_refused;
	unsigned wrong; /* answers against mote.h */
};

struct race {
	struct watchdog dog;
	const char *kernel;
	const char *initrd;
	const char *dir;
	unsigned pauses_ok, pauses_interrupted, pauses_refused, held_interrupted;
	long long abandoned_after_ms; /* the held vCPU's pause, from its call to -ETIMEDOUT */
};

/* On the held thread: waits until released. A kick (SIGRTMIN, whose handler
 * mote_vm_run() installed) ends the poll with EINTR: a pause parking the vCPUs sends one
 * every few milliseconds. Bounded, in case this program's main thread never gets to the
 * release (the watchdog fails the test first). */
static void hold_thread(struct round *round)
{
	int64_t until = now_ms() + 2 * ROUND_LIMIT_S * 1000;

	atomic_store(&round->held, true);
	for (int64_t left; (left = until - now_ms()) > 0;) {
		struct pollfd release = {.fd = round->release_fds[0], .events = POLLIN};
		if (poll(&release, 1, (int)left) >= 0 || errno != EINTR)
			break;
		atomic_store(&round->kicked, true);
	}
}

static void release_held(struct round *round)
{
	if (!round->released && write(round->release_fds[1], "x", 1) != 1)
		perror("write");
	round->released = true;
}

static void log_message(void *opaque, enum mote_log_level level, const char *message)
{
	struct round *round = opaque;

	/* Not the info of every pause ("paused in ..."): hundreds a round. */
	if (level <= MOTE_LOG_WARN)
		fprintf(stderr, "round %d: mote: %s\n", round->number, message);
	if (strstr(message, ABANDON_MESSAGE))
		atomic_store(&round->abandon_logged, true);
	if (round->hold_message && !atomic_load(&round->held) &&
	    strstr(message, round->hold_message))
		hold_thread(round);
}

/* Some line of the console begins with text (the kernel's own lines, were it to echo
 * the command line, begin otherwise). */
static bool console_has_line(const char *path, const char *text)
{
	char line[512];
	FILE *f = fopen(path, "r");
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strncmp(line, text, strlen(text)) == 0;
	fclose(f);
	return found;
}

/* Waits until the guest printed its line: true; or, sooner, until mote_vm_run()
 * returned: false. */
static bool wait_line(struct round *round)
{
	while (!console_has_line(round->console_path, READY_LINE)) {
		if (atomic_load(&round->run_returned))
			return false;
		sleep_us(1000);
	}
	return true;
}

static void *run_thread(void *arg)
{
	struct round *round = arg;

	round->run_called_ms = now_ms();
	round->run_result = mote_vm_run(round->vm, &round->exit);
	round->run_returned_ms = now_ms();
	atomic_store(&round->run_returned, true);
	return NULL;
}

static void report_wrong(struct round *round, const char *call, int ret, enum mote_vm_state state)
{
	/* The first few: a broken pause may answer wrong a thousand times a round. */
	if (round->wrong++ < 3)
		fprintf(stderr, "round %d: %s returned %d (%s), the VM then in state %d\n",
			round->number, call, ret, strerror(-ret), state);
}

/* A pause's answer as mote.h has it for a VM that runs until it ends, with this thread
 * the only one to pause and resume it: 0 leaves it paused; -EINTR (it ended meanwhile)
 * and -EINVAL (not running) come only once it has ended, which is for good. */
static void check_pause(struct round *round, int ret)
{
	enum mote_vm_state state = mote_vm_get_state(round->vm);
	bool ended = state == MOTE_VM_ENDED;
	bool ok = ended && (ret == -EINTR || ret == -EINVAL);

	if (ret == 0) {
		atomic_fetch_add(&round->pauses_ok, 1);
		ok = state == MOTE_VM_PAUSED || ended;
	} else if (ret == -EINTR) {
		round->pauses_interrupted++;
	} else if (ret == -EINVAL) {
		round->pauses_refused++;
	}
	if (!ok)
		report_wrong(round, "mote_vm_pause()", ret, state);
}

/* A resume's: 0 leaves it running; -EINVAL only once it has ended. */
static void check_resume(struct round *round, int ret)
{
	enum mote_vm_state state = mote_vm_get_state(round->vm);
	bool ended = state == MOTE_VM_ENDED;
	bool ok = ret == 0 ? state == MOTE_VM_RUNNING || ended : ended && ret == -EINVAL;

	if (!ok)
		report_wrong(round, "mote_vm_resume()", ret, state);
}

/* Pauses and resumes from the guest's line until the VM has ended. */
static void *pauser_thread(void *arg)
{
	struct round *round = arg;
	unsigned seed = (unsigned)getpid() * 31u + (unsigned)round->number;

	if (!wait_line(round))
		return NULL;
	while (mote_vm_get_state(round->vm) != MOTE_VM_ENDED) {
		check_pause(round, mote_vm_pause(round->vm));
		check_resume(round, mote_vm_resume(round->vm));
		/* Up to a millisecond, often less: the guest gets on towards its power-off
		 * (its clock stands still while paused), and each pause starts at another
		 * point of what the guest and the monitor are doing. */
		sleep_us(rand_r(&seed) % 1000);
	}
	return NULL;
}

/* A held round's one pause. */
static void *held_pause_thread(void *arg)
{
	struct round *round = arg;

	round->held_pause_result = mote_vm_pause(round->vm);
	atomic_store(&round->held_pause_returned, true);
	return NULL;
}

static int round_fail(struct round *round, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int round_fail(struct round *round, const char *fmt, ...)
{
	va_list args;

	fprintf(stderr, "round %d: FAIL: ", round->number);
	va_start(args, fmt);
	vfprintf(stderr, fmt, args);
	va_end(args);
	fputc('\n', stderr);
	return 1;
}

/* Fails the round unless a call that must answer at once answered want_ret, the VM then
 * in want_state. */
static int expect_answer(struct round *round, const char *call, int ret, int want_ret,
			 enum mote_vm_state want_state)
{
	enum mote_vm_state state = mote_vm_get_state(round->vm);

	if (ret == want_ret && state == want_state)
		return 0;
	return round_fail(round, "%s returned %d (%s), the VM then in state %d: not %d in state %d",
			  call, ret, strerror(-ret), state, want_ret, want_state);
}

static int create_vm(struct race *race, struct round *round, const char *command)
{
	struct mote_config config;
	char cmdline[256];

	snprintf(round->console_path, sizeof(round->console_path), "%s/race-%d.out", race->dir,
		 round->number);
	remove(round->console_path);
	snprintf(cmdline, sizeof(cmdline),
		 "console=ttyS0 reboot=k panic=1 quiet noreplace-smp mote.run=\"%s\"", command);
	mote_config_init(&config);
	config.kernel_path = race->kernel;
	config.initrd_path = race->initrd;
	config.cmdline = cmdline;
	config.cpus = round->cpus;
	config.console = MOTE_CONSOLE_FILE;
	config.console_path = round->console_path;
	config.exit_at_boot = round->end == HELD_VCPU_ENDS;
	if (round->end == HELD_EVENT_THREAD_STOPPED) {
		snprintf(round->vsock_path, sizeof(round->vsock_path), "%s/race-%d.sock", race->dir,
			 round->number);
		config.vsock.guest_cid = 3;
		config.vsock.uds_path = round->vsock_path;
	}
	config.log = log_message;
	config.log_opaque = round;
	int err = mote_vm_create(&config, &round->vm);
	if (err)
		return round_fail(round, "mote_vm_create: %s", strerror(-err));
	return 0;
}

/* A host client of the VM's vsock socket whose first line is no "CONNECT <port>": the
 * event thread logs it (vsock_mux.c). The client's fd, or -1. */
static int send_bad_connect_line(struct round *round)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	memcpy(addr.sun_path, round->vsock_path, sizeof(addr.sun_path));
	if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
	    write(fd, "PAUSE RACE\n", 11) != 11) {
		round_fail(round, "a client of %s: %s", round->vsock_path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* What every round ends with, once mote_vm_run() returned: the exit its end implies, the
 * VM ended for good (a pause and a resume refused at once), and a destroy that returns.
 * Adds the round's answers to the totals. */
static int finish_round(struct race *race, struct round *round)
{
	static const char *const ends[] = {
	    [END_BY_POWER_OFF] = "powered off",
	    [END_BY_STOP] = "stopped",
	    [HELD_VCPU_STOPPED] = "stopped, its vCPU held",
	    [HELD_VCPU_ENDS] = "ended by its held vCPU",
	    [HELD_EVENT_THREAD_STOPPED] = "stopped, its event thread held",
	    [HELD_VCPU_PAUSE_ABANDONED] = "powered off after a pause abandoned at its held vCPU",
	};
	static const enum mote_exit_reason reasons[] = {
	    [END_BY_POWER_OFF] = MOTE_EXIT_POWER_OFF,
	    [END_BY_STOP] = MOTE_EXIT_ERROR,
	    [HELD_VCPU_STOPPED] = MOTE_EXIT_ERROR,
	    [HELD_VCPU_ENDS] = MOTE_EXIT_BOOT_COMPLETE,
	    [HELD_EVENT_THREAD_STOPPED] = MOTE_EXIT_ERROR,
	    [HELD_VCPU_PAUSE_ABANDONED] = MOTE_EXIT_POWER_OFF,
	};
	enum mote_exit_reason reason = reasons[round->end];
	int error = reason == MOTE_EXIT_ERROR ? -EINTR : 0;
	int failed = 0;

	if (round->run_result || round->exit.reason != reason || round->exit.error != error)
		failed = round_fail(round,
				    "mote_vm_run() returned %d, exit reason %d error %d (%s); "
				    "expected 0, reason %d error %d",
				    round->run_result, round->exit.reason, round->exit.error,
				    round->exit.message, reason, error);
	if (mote_vm_get_state(round->vm) != MOTE_VM_ENDED)
		failed = round_fail(round, "state %d after mote_vm_run() returned, not ended",
				    mote_vm_get_state(round->vm));
	watchdog_arm(&race->dog, PROMPT_LIMIT_S, "round %d: mote_vm_pause() of the ended VM",
		     round->number);
	int paused = mote_vm_pause(round->vm);
	watchdog_arm(&race->dog, PROMPT_LIMIT_S, "round %d: mote_vm_resume() of the ended VM",
		     round->number);
	int resumed = mote_vm_resume(round->vm);
	if (paused != -EINVAL || resumed != -EINVAL)
		failed = round_fail(
		    round, "the ended VM's pause returned %d and its resume %d, not -EINVAL",
		    paused, resumed);
	watchdog_arm(&race->dog, PROMPT_LIMIT_S, "round %d: mote_vm_destroy()", round->number);
	mote_vm_destroy(round->vm);
	round->vm = NULL;
	watchdog_disarm(&race->dog);
	if (round->wrong)
		failed =
		    round_fail(round, "%u pause or resume answers against mote.h (the first above)",
			       round->wrong);

	/* From the VM's end (run_ns after mote_vm_run() started) to its return. */
	long long after_end_ms = (long long)(round->run_returned_ms - round->run_called_ms) -
				 (long long)(round->exit.run_ns / 1000000);
	printf("round %d (%u vCPU, %s): %u pauses succeeded, %u gave up with -EINTR, %u "
	       "refused; mote_vm_run() returned %lld ms after the end\n",
	       round->number, round->cpus, ends[round->end], atomic_load(&round->pauses_ok),
	       round->pauses_interrupted, round->pauses_refused, after_end_ms);
	fflush(stdout);
	race->pauses_ok += atomic_load(&round->pauses_ok);
	race->pauses_interrupted += round->pauses_interrupted;
	race->pauses_refused += round->pauses_refused;
	return failed;
}

/* With a thread of the VM held, a pause waits for it, and the VM ends meanwhile; the
 * pause must give up with -EINTR. A held vCPU and a stop: at once, the vCPU still held
 * (its pause point is never reached). The held vCPU let go, ending the VM itself: it
 * never gets to its pause point either. A held event thread and a stop: the pause has
 * parked the vCPU and waits for the event thread to park; let go, the thread parks and
 * the pause must find the VM ended, not paused. */
static int pause_on_held_thread(struct race *race, struct round *round)
{
	bool late = round->end == HELD_EVENT_THREAD_STOPPED;
	pthread_t pause;
	int failed = 0;

	pthread_create(&pause, NULL, held_pause_thread, round);
	if (late) {
		/* Checked after the stop below: a pause still parking would give up then. */
		sleep_us(SETTLE_MS * 1000L);
	} else {
		/* A kick means the pause is parking the vCPUs: nothing else kicks a running
		 * VM's vCPU, and with this one held the guest can do nothing. */
		watchdog_arm(&race->dog, PROMPT_LIMIT_S,
			     "round %d: the pause never kicked the held vCPU", round->number);
		while (!atomic_load(&round->kicked) && !atomic_load(&round->held_pause_returned))
			sleep_us(1000);
	}
	if (atomic_load(&round->held_pause_returned))
		failed = round_fail(round, "a pause returned %d while a thread of the VM was held",
				    round->held_pause_result);
	watchdog_arm(&race->dog, PROMPT_LIMIT_S, "round %d: ending the VM", round->number);
	if (round->end == HELD_VCPU_ENDS)
		release_held(round);
	else
		mote_vm_stop(round->vm);
	if (late) {
		sleep_us(SETTLE_MS * 1000L);
		if (atomic_load(&round->held_pause_returned) && !failed)
			failed =
			    round_fail(round,
				       "the pause returned at the stop, the event thread still "
				       "held: it had not parked the vCPU in %d ms, and the VM did "
				       "not end after the park",
				       SETTLE_MS);
		release_held(round);
	}
	watchdog_arm(&race->dog, PROMPT_LIMIT_S,
		     "round %d: the pause waiting for the held thread did not give up when the VM "
		     "ended",
		     round->number);
	pthread_join(pause, NULL);
	if (round->held_pause_result == -EINTR) {
		round->pauses_interrupted++;
		race->held_interrupted++;
	} else {
		failed = round_fail(
		    round, "the pause the VM's end interrupted returned %d (%s), not -EINTR",
		    round->held_pause_result, strerror(-round->held_pause_result));
	}
	return failed;
}

/* With the vCPU held and the VM not ending, a pause waits for the vCPU until its bound,
 * then gives up: -ETIMEDOUT, not before the bound, logged, the VM running. Let go, the
 * vCPU parks at the next pause, and a resume lets the guest go on to its power-off. */
static int pause_abandoned_at_held_vcpu(struct race *race, struct round *round)
{
	int failed = 0;

	watchdog_arm(&race->dog, ABANDON_LIMIT_S,
		     "round %d: the pause waiting for the held vCPU was not abandoned",
		     round->number);
	int64_t called_ms = now_ms();
	int ret = mote_vm_pause(round->vm);
	long long waited_ms = (long long)(now_ms() - called_ms);
	enum mote_vm_state state = mote_vm_get_state(round->vm);
	if (ret != -ETIMEDOUT || state != MOTE_VM_RUNNING)
		failed = round_fail(round,
				    "the pause the held vCPU never answered returned %d (%s) after "
				    "%lld ms, the VM then in state %d: not -ETIMEDOUT, running",
				    ret, strerror(-ret), waited_ms, state);
	else if (waited_ms < PAUSE_BOUND_MS - PAUSE_BOUND_MARGIN_MS)
		failed = round_fail(round,
				    "the pause was abandoned after %lld ms, before its bound of "
				    "%d ms",
				    waited_ms, PAUSE_BOUND_MS);
	if (!atomic_load(&round->abandon_logged))
		failed = round_fail(round, "the abandoned pause logged no \"%s\"", ABANDON_MESSAGE);
	race->abandoned_after_ms = waited_ms;

	release_held(round);
	watchdog_arm(&race->dog, PROMPT_LIMIT_S, "round %d: a pause once the held vCPU was let go",
		     round->number);
	if (expect_answer(round, "a pause once the held vCPU was let go", mote_vm_pause(round->vm),
			  0, MOTE_VM_PAUSED))
		failed = 1;
	else
		atomic_fetch_add(&round->pauses_ok, 1);
	watchdog_arm(&race->dog, PROMPT_LIMIT_S, "round %d: resuming the paused VM", round->number);
	if (expect_answer(round, "the resume", mote_vm_resume(round->vm), 0, MOTE_VM_RUNNING))
		failed = 1;
	return failed;
}

/* The race made certain: a pause waits for a thread of the VM, held, when the VM ends;
 * the end finishes once the thread is let go. Or, with no end meanwhile, the pause
 * waits for the held vCPU until it is abandoned. */
static int held_round(struct race *race, struct round *round)
{
	pthread_t run;
	int client = -1, failed;

	round->hold_message = round->end == HELD_EVENT_THREAD_STOPPED ? "sent no valid CONNECT line"
								      : "guest boot complete";
	if (pipe(round->release_fds) != 0) {
		perror("pipe");
		return 1;
	}
	/* The abandoned pause's guest powers off a moment after its line: it gets there
	 * only once its vCPU is let go and the VM resumed after the pause that follows. */
	if (create_vm(race, round,
		      round->end == HELD_VCPU_PAUSE_ABANDONED ? "echo " READY_LINE "; sleep 2"
							      : "echo " READY_LINE "; sleep 600")) {
		close(round->release_fds[0]);
		close(round->release_fds[1]);
		return 1;
	}
	watchdog_arm(&race->dog, ROUND_LIMIT_S, "round %d: no thread of the VM logged \"%s\"",
		     round->number, round->hold_message);
	pthread_create(&run, NULL, run_thread, round);
	/* The event thread is held once the guest is up: its vCPU idles, easy to park. */
	if (round->end == HELD_EVENT_THREAD_STOPPED &&
	    (!wait_line(round) || (client = send_bad_connect_line(round)) < 0))
		mote_vm_stop(round->vm);
	while (!atomic_load(&round->held) && !atomic_load(&round->run_returned))
		sleep_us(1000);
	if (atomic_load(&round->held) && round->end == HELD_VCPU_PAUSE_ABANDONED)
		failed = pause_abandoned_at_held_vcpu(race, round);
	else if (atomic_load(&round->held))
		failed = pause_on_held_thread(race, round);
	else
		failed = round_fail(round, "the VM ended before a thread of it was held");
	release_held(round);
	watchdog_arm(&race->dog, ROUND_LIMIT_S,
		     "round %d: mote_vm_run() did not return once the held thread was let go",
		     round->number);
	pthread_join(run, NULL);
	if (round->end == HELD_VCPU_PAUSE_ABANDONED &&
	    !console_has_line(round->console_path, READY_LINE))
		failed = round_fail(round, "the guest never printed its line: it did not run on");
	failed |= finish_round(race, round);
	if (client >= 0)
		close(client);
	close(round->release_fds[0]);
	close(round->release_fds[1]);
	return failed;
}

/* The pauser pauses and resumes while the VM ends on its own or is stopped. */
static int racing_round(struct race *race, struct round *round)
{
	pthread_t run, pauser;
	unsigned seed = (unsigned)getpid() + (unsigned)round->number;
	int failed = 0;

	if (create_vm(race, round,
		      round->end == END_BY_POWER_OFF ? "echo " READY_LINE "; sleep 0.3"
						     : "echo " READY_LINE "; sleep 600"))
		return 1;
	watchdog_arm(&race->dog, ROUND_LIMIT_S,
		     "round %d: the VM did not end, or mote_vm_run() did not return, or the "
		     "pauser did not end with it",
		     round->number);
	pthread_create(&run, NULL, run_thread, round);
	pthread_create(&pauser, NULL, pauser_thread, round);
	if (round->end == END_BY_STOP) {
		while (!atomic_load(&round->pauses_ok) && !atomic_load(&round->run_returned))
			sleep_us(1000);
		sleep_us((long)(rand_r(&seed) % STOP_DELAY_MAX_MS) * 1000);
		mote_vm_stop(round->vm);
	}
	pthread_join(run, NULL);
	pthread_join(pauser, NULL);
	if (!atomic_load(&round->pauses_ok))
		failed =
		    round_fail(round, "no pause succeeded before the end (guest line seen: %s)",
			       console_has_line(round->console_path, READY_LINE) ? "yes" : "no");
	return finish_round(race, round) | failed;
}

int main(int argc, char **argv)
{
	static const enum round_end held_ends[] = {HELD_VCPU_STOPPED, HELD_VCPU_ENDS,
						   HELD_EVENT_THREAD_STOPPED,
						   HELD_VCPU_PAUSE_ABANDONED};
	const int held_rounds = (int)(sizeof(held_ends) / sizeof(held_ends[0]));
	struct race race = {0};
	int failed = 0;

	if (argc != 5 || atoi(argv[4]) < 1) {
		fprintf(stderr, "usage: %s KERNEL INITRD DIR ROUNDS\n", argv[0]);
		return 2;
	}
	race.kernel = argv[1];
	race.initrd = argv[2];
	race.dir = argv[3];
	int rounds = atoi(argv[4]);
	if (watchdog_start(&race.dog, "pause end race")) {
		fprintf(stderr, "pause end race: cannot start the watchdog\n");
		return 1;
	}

	for (int i = 0; i < held_rounds; i++) {
		struct round round = {.number = 1 + i, .end = held_ends[i], .cpus = 1};
		failed |= held_round(&race, &round);
	}
	/* Each end with one and with two vCPUs, in turn. */
	for (int i = 0; i < rounds; i++) {
		struct round round = {
		    .number = 1 + held_rounds + i,
		    .end = i % 2 ? END_BY_STOP : END_BY_POWER_OFF,
		    .cpus = 1 + (unsigned)(i / 2 % 2),
		};
		failed |= racing_round(&race, &round);
	}
	if (failed) {
		printf("pause end race: FAILED (above)\n");
		return 1;
	}
	printf("pause end race: all %d held rounds and all %d racing rounds ended and every run "
	       "returned; pauses: %u succeeded, %u gave up with -EINTR as the VM ended (%u of "
	       "them in the held rounds), 1 abandoned with -ETIMEDOUT after %lld ms at the held "
	       "vCPU (the VM running on), %u refused after the end\n",
	       held_rounds, rounds, race.pauses_ok, race.pauses_interrupted, race.held_interrupted,
	       race.abandoned_after_ms, race.pauses_refused);
	return 0;
}
