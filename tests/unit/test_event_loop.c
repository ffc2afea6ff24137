/* The event loop without its thread: handlers run for ready fds, and what wakes them
 * can be paused and changed (event_loop_watch), as devices do for backpressure. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
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

#define TEST(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(readable_fd_runs_its_handler),
	    TEST(paused_fd_does_not_run_until_watched_again),
	    TEST(writable_watch_runs_the_handler_when_the_fd_can_take_data),
	    TEST(watching_an_unknown_fd_is_enoent),
	    TEST(removed_fd_never_runs_again_even_in_error),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
