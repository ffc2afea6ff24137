/* Files named by a user or a state file are opened without waiting (file_image.h): a
 * FIFO that no one writes is refused at once instead of hanging the caller in open(). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "thread_syscall.h"
#include "vmm/file_image.h"

/* A blocking open() would wait forever: the alarm ends the test as a failure instead. */
#define HANG_LIMIT_S 10

static void fail_on_alarm(int sig)
{
	(void)sig;
	fail_msg("open() waited on a FIFO for %d s", HANG_LIMIT_S);
}

static void a_fifo_is_refused_at_once(void **state)
{
	char dir[] = "/tmp/mote-file-XXXXXX", path[64];
	struct file_image image;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/fifo", dir);
	assert_int_equal(mkfifo(path, 0600), 0);
	signal(SIGALRM, fail_on_alarm);
	alarm(HANG_LIMIT_S);
	assert_int_equal(file_image_open(path, &image), -EMEDIUMTYPE);
	assert_int_equal(image.fd, -1);
	assert_int_equal(file_open_read(path), -EMEDIUMTYPE);
	alarm(0);
	assert_string_equal(file_open_error(-EMEDIUMTYPE),
			    "not a regular file (a FIFO, socket or device)");
	assert_int_equal(file_open_read(dir), -EISDIR);
	unlink(path);
	rmdir(dir);
}

/* Opening a device can act on it (a watchdog arms, a tape rewinds), so what is not a
 * regular file must be refused without ever being opened. A FIFO shows whether it was:
 * a writer blocked in open() wakes up the moment any reader opens it (fifo(7)). */
struct fifo_writer {
	const char *path;
	_Atomic pid_t tid;
	atomic_bool opened;
	int fd;
};

static void *fifo_writer_open(void *arg)
{
	struct fifo_writer *writer = arg;

	atomic_store(&writer->tid, thread_own_id());
	writer->fd = open(writer->path, O_WRONLY);
	atomic_store(&writer->opened, true);
	return NULL;
}

static void a_fifo_is_never_opened(void **state)
{
	char dir[] = "/tmp/mote-file-XXXXXX", path[64];
	struct fifo_writer writer = {.path = path, .fd = -1};
	pthread_t thread;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/fifo", dir);
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(pthread_create(&thread, NULL, fifo_writer_open, &writer), 0);
	thread_wait_blocked_in(&writer.tid, SYS_openat, 0, 0,
			       "the FIFO's writer blocked in open()");

	assert_int_equal(file_open_read(path), -EMEDIUMTYPE);
	/* A reader's open wakes the writer before it returns (fs/pipe.c, fifo_open): a
	 * woken thread is runnable, no longer blocked in openat, whether it has run yet or
	 * not. So this is decided the moment file_open_read() returns, without a wait. */
	char seen[256];
	assert_true(
	    thread_blocked_in(atomic_load(&writer.tid), SYS_openat, 0, 0, seen, sizeof(seen)));
	assert_false(atomic_load(&writer.opened));

	/* Our own reader releases the writer. */
	int r = open(path, O_RDONLY | O_NONBLOCK);
	assert_true(r >= 0);
	pthread_join(thread, NULL);
	assert_true(writer.fd >= 0);
	close(writer.fd);
	close(r);
	assert_int_equal(file_open_read("/dev/null"), -EMEDIUMTYPE);
	unlink(path);
	rmdir(dir);
}

static void a_regular_file_opens_for_blocking_reads(void **state)
{
	char path[] = "/tmp/mote-file-XXXXXX";
	struct file_image image;
	char byte = 0;

	(void)state;
	int w = mkstemp(path);
	assert_true(w >= 0);
	assert_int_equal(write(w, "k", 1), 1);
	close(w);
	assert_int_equal(file_image_open(path, &image), 0);
	assert_int_equal(image.size, 1);
	assert_int_equal(file_read_at(image.fd, &byte, 1, 0), 0);
	assert_int_equal(byte, 'k');
	file_image_release(&image);
	assert_int_equal(file_open_read("/nonexistent/mote"), -ENOENT);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(a_fifo_is_refused_at_once),
	    cmocka_unit_test(a_fifo_is_never_opened),
	    cmocka_unit_test(a_regular_file_opens_for_blocking_reads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
