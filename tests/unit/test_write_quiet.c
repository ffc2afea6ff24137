/* write_quiet(): EPIPE instead of SIGPIPE, whatever the process's disposition, and a
 * SIGPIPE that was pending before is left alone. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <pthread.h>

#include <cmocka.h>

#include "vmm/write_quiet.h"

static bool sigpipe_pending(void)
{
	sigset_t pending;

	assert_int_equal(sigpending(&pending), 0);
	return sigismember(&pending, SIGPIPE) == 1;
}

/* With SIGPIPE's default action (ending the process), a pipe with no reader gives EPIPE
 * and leaves no SIGPIPE behind, blocked or not. */
static void a_pipe_without_reader_gives_epipe_and_no_signal(void **state)
{
	int fds[2];
	(void)state;
	signal(SIGPIPE, SIG_DFL);
	assert_int_equal(pipe(fds), 0);
	close(fds[0]);
	errno = 0;
	assert_int_equal(write_quiet(fds[1], "x", 1), -1);
	assert_int_equal(errno, EPIPE);
	assert_false(sigpipe_pending());
	close(fds[1]);
}

/* The writer's signal mask is as it was: SIGPIPE unblocked before, unblocked after. */
static void the_signal_mask_is_restored(void **state)
{
	int fds[2];
	sigset_t mask;
	(void)state;
	assert_int_equal(pipe(fds), 0);
	assert_int_equal(write_quiet(fds[1], "ab", 2), 2);
	assert_int_equal(pthread_sigmask(SIG_SETMASK, NULL, &mask), 0);
	assert_false(sigismember(&mask, SIGPIPE));
	char buf[2];
	assert_int_equal(read(fds[0], buf, 2), 2);
	assert_memory_equal(buf, "ab", 2);
	close(fds[0]);
	close(fds[1]);
}

/* A SIGPIPE pending before the call (here raised while blocked) is not taken: it was
 * not the write's. */
static void a_sigpipe_pending_before_is_left_pending(void **state)
{
	int fds[2];
	sigset_t pipe_signal, old;
	(void)state;
	signal(SIGPIPE, SIG_DFL);
	sigemptyset(&pipe_signal);
	sigaddset(&pipe_signal, SIGPIPE);
	assert_int_equal(pthread_sigmask(SIG_BLOCK, &pipe_signal, &old), 0);
	assert_int_equal(pthread_kill(pthread_self(), SIGPIPE), 0);
	assert_int_equal(pipe(fds), 0);
	close(fds[0]);
	assert_int_equal(write_quiet(fds[1], "x", 1), -1);
	assert_int_equal(errno, EPIPE);
	assert_true(sigpipe_pending());
	/* Taken here, or unblocking it would end the test. */
	const struct timespec now = {0};
	assert_int_equal(sigtimedwait(&pipe_signal, NULL, &now), SIGPIPE);
	assert_int_equal(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);
	close(fds[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(a_pipe_without_reader_gives_epipe_and_no_signal),
	    cmocka_unit_test(the_signal_mask_is_restored),
	    cmocka_unit_test(a_sigpipe_pending_before_is_left_pending),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
