/* The event loop without its thread: handlers run for ready fds, and what wakes them
 * can be paused and changed (event_loop_watch), as devices do for backpressure. With
 * its thread: a pause parks the thread and keeps it, so that io_uring requests it
 * submitted still complete (event_loop.h). */
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "vmm/event_loop.h"

struct counter {
	int calls;
};

static void count_call(void *opaque)
{
	((struct counter *)opaque)->calls++;
}

struct fixture {
	struct event_loop loop;
	int pipe_fds[2]; /* [0] read end, [1] write end */
	struct counter counter;
};

static int setup(void **state)
{
	static struct fixture f;

	f = (struct fixture){0};
	if (event_loop_init(&f.loop) != 0 || pipe(f.pipe_fds) != 0)
		return -1;
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	event_loop_destroy(&f->loop);
	close(f->pipe_fds[0]);
	if (f->pipe_fds[1] >= 0)
		close(f->pipe_fds[1]);
	return 0;
}

static void make_readable(struct fixture *f)
{
	assert_int_equal(write(f->pipe_fds[1], "x", 1), 1);
}

static void readable_fd_runs_its_handler(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(event_loop_add(&f->loop, f->pipe_fds[0], count_call, &f->counter), 0);
	assert_int_equal(event_loop_run_once(&f->loop, 0), 0);
	make_readable(f);
	assert_int_equal(event_loop_run_once(&f->loop, 0), 1);
	assert_int_equal(f->counter.calls, 1);
}

static void paused_fd_does_not_run_until_watched_again(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(event_loop_add(&f->loop, f->pipe_fds[0], count_call, &f->counter), 0);
	make_readable(f);
	assert_int_equal(event_loop_watch(&f->loop, f->pipe_fds[0], 0), 0);
	assert_int_equal(event_loop_run_once(&f->loop, 0), 0);
	assert_int_equal(f->counter.calls, 0);
	assert_int_equal(event_loop_watch(&f->loop, f->pipe_fds[0], EVENT_READABLE), 0);
	assert_int_equal(event_loop_run_once(&f->loop, 0), 1);
	assert_int_equal(f->counter.calls, 1);
}

static void writable_watch_runs_the_handler_when_the_fd_can_take_data(void **state)
{
	struct fixture *f = *state;

	/* The write end of an empty pipe is writable, never readable. */
	assert_int_equal(event_loop_add(&f->loop, f->pipe_fds[1], count_call, &f->counter), 0);
	assert_int_equal(event_loop_run_once(&f->loop, 0), 0);
	assert_int_equal(event_loop_watch(&f->loop, f->pipe_fds[1], EVENT_WRITABLE), 0);
	assert_int_equal(event_loop_run_once(&f->loop, 0), 1);
	assert_int_equal(event_loop_watch(&f->loop, f->pipe_fds[1], EVENT_READABLE), 0);
	assert_int_equal(event_loop_run_once(&f->loop, 0), 0);
	assert_int_equal(f->counter.calls, 1);
}

static void watching_an_unknown_fd_is_enoent(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(event_loop_watch(&f->loop, f->pipe_fds[0], EVENT_READABLE), -ENOENT);
}

static void removed_fd_never_runs_again_even_in_error(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(event_loop_add(&f->loop, f->pipe_fds[0], count_call, &f->counter), 0);
	/* With the write end closed, the read end reports a hang-up, paused or not. */
	close(f->pipe_fds[1]);
	f->pipe_fds[1] = -1;
	assert_int_equal(event_loop_watch(&f->loop, f->pipe_fds[0], 0), 0);
	assert_int_equal(event_loop_run_once(&f->loop, 0), 1);
	assert_int_equal(event_loop_remove(&f->loop, f->pipe_fds[0]), 0);
	assert_int_equal(event_loop_run_once(&f->loop, 0), 0);
	assert_int_equal(f->counter.calls, 1);
	assert_int_equal(event_loop_remove(&f->loop, f->pipe_fds[0]), -ENOENT);
	assert_int_equal(event_loop_watch(&f->loop, f->pipe_fds[0], EVENT_READABLE), -ENOENT);
}

/* What the event thread did, seen from the test's thread. */
struct thread_probe {
	int kick_fd; /* eventfd the handler consumes */
	atomic_int calls;
	atomic_int last_tid;
	/* Set: the handler also submits a read of read_fd into buf on ring. */
	struct io_uring *ring;
	int read_fd;
	char buf[8];
};

static void probe_handler(void *opaque)
{
	struct thread_probe *probe = opaque;
	uint64_t count;

	assert_int_equal(read(probe->kick_fd, &count, sizeof(count)), sizeof(count));
	if (probe->ring) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(probe->ring);
		io_uring_prep_read(sqe, probe->read_fd, probe->buf, sizeof(probe->buf), 0);
		assert_int_equal(io_uring_submit(probe->ring), 1);
	}
	atomic_store(&probe->last_tid, (int)syscall(SYS_gettid));
	atomic_fetch_add(&probe->calls, 1);
}

static void kick(struct thread_probe *probe)
{
	uint64_t one = 1;

	assert_int_equal(write(probe->kick_fd, &one, sizeof(one)), sizeof(one));
}

/* Waits up to 5 s for the handler to have run calls times. */
static void wait_for_calls(struct thread_probe *probe, int calls)
{
	for (int i = 0; i < 5000 && atomic_load(&probe->calls) < calls; i++)
		usleep(1000);
	assert_int_equal(atomic_load(&probe->calls), calls);
}

static void a_paused_thread_runs_no_handler_and_resumes_as_the_same_thread(void **state)
{
	struct fixture *f = *state;
	struct thread_probe probe = {.kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};

	assert_true(probe.kick_fd >= 0);
	assert_int_equal(event_loop_add(&f->loop, probe.kick_fd, probe_handler, &probe), 0);
	event_loop_pause(&f->loop); /* not started: nothing to park */
	assert_int_equal(event_loop_start(&f->loop), 0);
	kick(&probe);
	wait_for_calls(&probe, 1);
	int tid = atomic_load(&probe.last_tid);

	event_loop_pause(&f->loop);
	kick(&probe);
	usleep(100 * 1000);
	assert_int_equal(atomic_load(&probe.calls), 1);
	assert_int_equal(event_loop_start(&f->loop), 0);
	wait_for_calls(&probe, 2);
	assert_int_equal(atomic_load(&probe.last_tid), tid);

	/* A parked thread ends on a stop too. */
	event_loop_pause(&f->loop);
	event_loop_stop(&f->loop);
	kick(&probe);
	usleep(50 * 1000);
	assert_int_equal(atomic_load(&probe.calls), 2);
	close(probe.kick_fd);
}

/* The reason a pause parks the thread rather than end it: a read the event thread
 * submitted, still waiting for its data when the VM pauses, must complete with that
 * data. Had the thread exited, io_uring would complete it with an error
 * (-ECANCELED: io_poll_check_events() in Linux 6.1, for a task that is gone). */
static void a_read_submitted_before_a_pause_completes_during_it(void **state)
{
	struct fixture *f = *state;
	struct io_uring ring;
	int data[2];
	struct thread_probe probe = {.kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK),
				     .ring = &ring};

	assert_true(probe.kick_fd >= 0);
	assert_int_equal(pipe(data), 0);
	probe.read_fd = data[0];
	assert_int_equal(io_uring_queue_init(4, &ring, 0), 0);
	assert_int_equal(event_loop_add(&f->loop, probe.kick_fd, probe_handler, &probe), 0);
	assert_int_equal(event_loop_start(&f->loop), 0);
	kick(&probe);
	wait_for_calls(&probe, 1);

	event_loop_pause(&f->loop);
	/* The data comes while the VM is paused, as a disk's page comes in. */
	assert_int_equal(write(data[1], "page", 4), 4);
	struct io_uring_cqe *cqe;
	struct __kernel_timespec limit = {.tv_sec = 5};
	assert_int_equal(io_uring_wait_cqe_timeout(&ring, &cqe, &limit), 0);
	assert_int_equal(cqe->res, 4);
	assert_memory_equal(probe.buf, "page", 4);
	io_uring_cqe_seen(&ring, cqe);

	assert_int_equal(event_loop_start(&f->loop), 0);
	event_loop_stop(&f->loop);
	io_uring_queue_exit(&ring);
	close(data[0]);
	close(data[1]);
	close(probe.kick_fd);
}

/* A handler that holds the event thread until the test lets it go. */
struct held_handler {
	int kick_fd;
	atomic_bool running, release, finished;
};

static void held_handler_run(void *opaque)
{
	struct held_handler *held = opaque;
	uint64_t count;

	assert_int_equal(read(held->kick_fd, &count, sizeof(count)), sizeof(count));
	atomic_store(&held->running, true);
	while (!atomic_load(&held->release))
		usleep(1000);
	atomic_store(&held->finished, true);
}

static void *release_after_100_ms(void *opaque)
{
	usleep(100 * 1000);
	atomic_store(&((struct held_handler *)opaque)->release, true);
	return NULL;
}

/* Long after a wait with a 50 ms deadline: one that ignored it would return then. */
static void *release_after_1_s(void *opaque)
{
	usleep(1000 * 1000);
	atomic_store(&((struct held_handler *)opaque)->release, true);
	return NULL;
}

/* A pause asks the thread to park and stops the vCPUs before waiting for it
 * (vm_pause.c): the asking must not wait for a handler that is running, and the waiting
 * must not return before that handler is done. */
static void asking_to_park_does_not_wait_and_waiting_outlasts_a_running_handler(void **state)
{
	struct fixture *f = *state;
	struct held_handler held = {.kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
	pthread_t releaser;
	uint64_t one = 1;

	assert_true(held.kick_fd >= 0);
	assert_int_equal(event_loop_add(&f->loop, held.kick_fd, held_handler_run, &held), 0);
	assert_int_equal(event_loop_start(&f->loop), 0);
	assert_int_equal(write(held.kick_fd, &one, sizeof(one)), sizeof(one));
	for (int i = 0; i < 5000 && !atomic_load(&held.running); i++)
		usleep(1000);
	assert_true(atomic_load(&held.running));

	/* The handler is let go 100 ms from now: an asking that waited for it would return
	 * only after, with the handler finished. */
	assert_int_equal(pthread_create(&releaser, NULL, release_after_100_ms, &held), 0);
	event_loop_ask_park(&f->loop);
	assert_false(atomic_load(&held.finished)); /* returned with the handler still held */
	assert_int_equal(event_loop_wait_parked(&f->loop, CLOCK_FOREVER), 0);
	assert_true(atomic_load(&held.finished));

	event_loop_stop(&f->loop);
	pthread_join(releaser, NULL);
	close(held.kick_fd);
}

/* A handler held past the pause's deadline (a file that stopped answering): the wait
 * gives up with -ETIMEDOUT, the handler still running, and event_loop_start() lets the
 * thread asked to park go on: once the handler is done it serves its fds again, as the
 * same thread. */
static void waiting_to_park_gives_up_at_its_deadline_and_the_thread_goes_on(void **state)
{
	struct fixture *f = *state;
	struct held_handler held = {.kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
	uint64_t one = 1;

	assert_true(held.kick_fd >= 0);
	assert_int_equal(event_loop_add(&f->loop, held.kick_fd, held_handler_run, &held), 0);
	assert_int_equal(event_loop_start(&f->loop), 0);
	pthread_t thread = f->loop.thread;
	assert_int_equal(write(held.kick_fd, &one, sizeof(one)), sizeof(one));
	for (int i = 0; i < 5000 && !atomic_load(&held.running); i++)
		usleep(1000);
	assert_true(atomic_load(&held.running));

	pthread_t releaser;
	assert_int_equal(pthread_create(&releaser, NULL, release_after_1_s, &held), 0);
	event_loop_ask_park(&f->loop);
	int64_t start_ns = clock_now_ns();
	assert_int_equal(event_loop_wait_parked(&f->loop, start_ns + 50 * NS_PER_MS), -ETIMEDOUT);
	assert_true(clock_now_ns() - start_ns >= 50 * NS_PER_MS);
	assert_false(atomic_load(&held.finished));

	assert_int_equal(event_loop_start(&f->loop), 0);
	pthread_join(releaser, NULL);
	for (int i = 0; i < 5000 && !atomic_load(&held.finished); i++)
		usleep(1000);
	assert_true(atomic_load(&held.finished));
	atomic_store(&held.running, false);
	atomic_store(&held.finished, false);
	assert_int_equal(write(held.kick_fd, &one, sizeof(one)), sizeof(one));
	for (int i = 0; i < 5000 && !atomic_load(&held.finished); i++)
		usleep(1000);
	assert_true(atomic_load(&held.finished)); /* not parked: it ran the handler again */
	assert_true(pthread_equal(thread, f->loop.thread));

	event_loop_stop(&f->loop);
	close(held.kick_fd);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(readable_fd_runs_its_handler),
	    TEST(paused_fd_does_not_run_until_watched_again),
	    TEST(writable_watch_runs_the_handler_when_the_fd_can_take_data),
	    TEST(watching_an_unknown_fd_is_enoent),
	    TEST(removed_fd_never_runs_again_even_in_error),
	    TEST(a_paused_thread_runs_no_handler_and_resumes_as_the_same_thread),
	    TEST(a_read_submitted_before_a_pause_completes_during_it),
	    TEST(asking_to_park_does_not_wait_and_waiting_outlasts_a_running_handler),
	    TEST(waiting_to_park_gives_up_at_its_deadline_and_the_thread_goes_on),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
