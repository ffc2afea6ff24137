/* Files named by a user or a state file are opened without waiting (file_image.h): a
 * FIFO that no one writes is refused at once instead of hanging the caller in open(). */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

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
	assert_int_equal(file_image_open(path, &image), -EISDIR);
	int fd = file_open_read(path);
	alarm(0);
	/* It opens, without a writer; what it is, the caller checks with fstat(). */
	assert_true(fd >= 0);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	assert_true(S_ISFIFO(st.st_mode));
	close(fd);
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
	    cmocka_unit_test(a_regular_file_opens_for_blocking_reads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
