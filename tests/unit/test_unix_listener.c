/* A listening Unix socket at a path (vmm/unix_listener.h): a stale socket is replaced,
 * anything else is left alone and refused, and only our own socket is removed. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "vmm/unix_listener.h"

struct fixture {
	char dir[64];
	char path[128];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	snprintf(f->dir, sizeof(f->dir), "/tmp/mote-unix-listener.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/s.sock", f->dir);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	unlink(f->path);
	rmdir(f->dir);
	free(f);
	return 0;
}

/* A socket file at path whose process is gone: bound, never listened on, closed. */
static void leave_stale_socket(const char *path)
{
	struct sockaddr_un address = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	memcpy(address.sun_path, path, strlen(path));
	assert_int_equal(bind(fd, (struct sockaddr *)&address, sizeof(address)), 0);
	close(fd);
}

static int connect_to(const char *path)
{
	struct sockaddr_un address = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	memcpy(address.sun_path, path, strlen(path));
	int ret = connect(fd, (struct sockaddr *)&address, sizeof(address));
	close(fd);
	return ret;
}

static void a_stale_socket_is_replaced_by_one_that_accepts(void **state)
{
	struct fixture *f = *state;
	struct unix_listener_id id;

	leave_stale_socket(f->path);
	assert_int_equal(connect_to(f->path), -1);
	int fd = unix_listener_open(f->path, 0, 4, &id);
	assert_true(fd >= 0);
	assert_int_equal(connect_to(f->path), 0);
	unix_listener_remove(f->path, &id);
	assert_int_equal(access(f->path, F_OK), -1);
	close(fd);
}

static void a_file_that_is_not_a_socket_is_refused_and_kept(void **state)
{
	struct fixture *f = *state;
	struct unix_listener_id id;
	FILE *file = fopen(f->path, "w");

	fputs("data", file);
	fclose(file);
	assert_int_equal(unix_listener_open(f->path, 0, 4, &id), -EEXIST);
	struct stat st;
	assert_int_equal(stat(f->path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_size, 4);
}

static void a_socket_another_listener_serves_is_refused_and_kept_serving(void **state)
{
	struct fixture *f = *state;
	struct unix_listener_id first, second;

	int fd = unix_listener_open(f->path, 0, 4, &first);
	assert_true(fd >= 0);
	assert_int_equal(unix_listener_open(f->path, 0, 4, &second), -EADDRINUSE);
	assert_int_equal(connect_to(f->path), 0);
	close(fd);
}

/* A listener whose backlog is full is still served: the probe must neither wait for
 * room nor take the socket for stale. */
static void a_listener_with_a_full_backlog_is_refused_without_waiting(void **state)
{
	struct fixture *f = *state;
	struct unix_listener_id first, second;
	int clients[8], n = 0;

	int fd = unix_listener_open(f->path, 0, 0, &first);
	assert_true(fd >= 0);
	struct sockaddr_un address = {.sun_family = AF_UNIX};
	memcpy(address.sun_path, f->path, strlen(f->path));
	for (; n < 8; n++) {
		clients[n] = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
		if (connect(clients[n], (struct sockaddr *)&address, sizeof(address)) < 0) {
			assert_int_equal(errno, EAGAIN);
			break;
		}
	}
	assert_true(n < 8); /* the backlog filled up */
	assert_int_equal(unix_listener_open(f->path, 0, 4, &second), -EADDRINUSE);
	for (int i = 0; i <= n; i++)
		close(clients[i]);
	close(fd);
}

static void only_the_socket_bound_is_removed(void **state)
{
	struct fixture *f = *state;
	struct unix_listener_id id, other;

	int fd = unix_listener_open(f->path, 0, 4, &id);
	assert_true(fd >= 0);
	/* Another process replaced the path meanwhile. */
	unlink(f->path);
	int other_fd = unix_listener_open(f->path, 0, 4, &other);
	assert_true(other_fd >= 0);
	unix_listener_remove(f->path, &id);
	assert_int_equal(connect_to(f->path), 0);
	close(fd);
	close(other_fd);
}

static void a_path_too_long_or_empty_is_refused(void **state)
{
	struct fixture *f = *state;
	struct unix_listener_id id;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path) + 8];

	(void)f;
	memset(path, 'a', sizeof(path) - 1);
	path[sizeof(path) - 1] = '\0';
	assert_int_equal(unix_listener_open(path, 0, 4, &id), -ENAMETOOLONG);
	assert_int_equal(unix_listener_open("", 0, 4, &id), -ENAMETOOLONG);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(a_stale_socket_is_replaced_by_one_that_accepts),
	    TEST(a_file_that_is_not_a_socket_is_refused_and_kept),
	    TEST(a_socket_another_listener_serves_is_refused_and_kept_serving),
	    TEST(a_listener_with_a_full_backlog_is_refused_without_waiting),
	    TEST(only_the_socket_bound_is_removed),
	    TEST(a_path_too_long_or_empty_is_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
