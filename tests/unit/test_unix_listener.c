/* A listening Unix socket at a path (vmm/unix_listener.h): a stale socket is replaced,
 * anything else is left alone and refused, and only our own socket is removed. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
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

/* In a directory that cannot be read, and so not locked, a stale socket cannot be told
 * from one another process bound a moment ago and is about to listen on: it is left
 * alone, and the error says to remove it. Root reads any directory, so the check runs
 * in a child that drops to nobody. */
static void a_stale_socket_in_a_directory_that_cannot_be_locked_is_left_alone(void **state)
{
	struct fixture *f = *state;
	const uid_t nobody = 65534;

	if (getuid() == 0)
		assert_int_equal(chown(f->dir, nobody, nobody), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct unix_listener_id id;
		struct stat st;
		if (getuid() == 0 && (setgid(nobody) != 0 || setuid(nobody) != 0))
			_exit(10);
		leave_stale_socket(f->path);
		if (chmod(f->dir, 0300) != 0) /* write and search, no read */
			_exit(11);
		int ret = unix_listener_open(f->path, 0, 4, &id);
		if (ret != -ESTALE)
			_exit(12);
		if (lstat(f->path, &st) != 0 || !S_ISSOCK(st.st_mode))
			_exit(13);
		_exit(0);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_int_equal(chmod(f->dir, 0700), 0);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_non_null(strstr(unix_listener_strerror(-ESTALE), "remove it"));
	/* Once the directory can be locked again, the stale socket is replaced. */
	struct unix_listener_id id;
	int fd = unix_listener_open(f->path, 0, 4, &id);
	assert_true(fd >= 0);
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

/* Several processes open the same path at once, as the copies of `mote restore
 * --copies` do with a snapshot's vsock socket: exactly one may win, and its socket is
 * the one at the path. Without mutual exclusion a process could take the winner's
 * socket, bound and not yet listening, for stale, unlink it and bind its own: both
 * would succeed and the first would listen where no client can reach it. */
enum { RACERS = 12, RACE_ROUNDS = 60 };

/* One racer: waits for the start, opens, reports 1 (it listens) or 0, and keeps its
 * socket until the parent closes the hold pipe. */
static void race_once(const char *path, int start_fd, int result_fd, int hold_fd)
{
	struct unix_listener_id id;
	char go;

	if (read(start_fd, &go, 1) != 0)
		_exit(3);
	/* Room in the backlog for every loser's probe and the parent's check. */
	int fd = unix_listener_open(path, 0, 2 * RACERS, &id);
	char won = fd >= 0 ? 1 : 0;
	if (write(result_fd, &won, 1) != 1)
		_exit(3);
	(void)read(hold_fd, &go, 1);
	_exit(0);
}

static void processes_racing_for_one_path_have_exactly_one_winner(void **state)
{
	struct fixture *f = *state;

	for (int round = 0; round < RACE_ROUNDS; round++) {
		int start[2], result[2], hold[2];
		pid_t pids[RACERS];

		if (round % 2)
			leave_stale_socket(f->path);
		assert_int_equal(pipe(start), 0);
		assert_int_equal(pipe(result), 0);
		assert_int_equal(pipe(hold), 0);
		for (int i = 0; i < RACERS; i++) {
			pids[i] = fork();
			assert_true(pids[i] >= 0);
			if (pids[i] == 0) {
				close(start[1]);
				close(result[0]);
				close(hold[1]);
				race_once(f->path, start[0], result[1], hold[0]);
			}
		}
		close(start[0]);
		close(result[1]);
		close(hold[0]);
		close(start[1]); /* go */
		int winners = 0;
		char won;
		for (int i = 0; i < RACERS; i++) {
			assert_int_equal(read(result[0], &won, 1), 1);
			winners += won;
		}
		int reachable = connect_to(f->path);
		close(hold[1]);
		close(result[0]);
		for (int i = 0; i < RACERS; i++) {
			int status;
			assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
			assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
		}
		if (winners != 1)
			fail_msg("round %d: %d processes listen on %s", round, winners, f->path);
		assert_int_equal(reachable, 0);
		unlink(f->path);
	}
}

/* A process that keeps the directory locked (flock(1) on /tmp, say) gets a clear
 * refusal after a bounded wait, never a hang; the path is left alone. */
static void a_directory_kept_locked_is_refused_after_a_bounded_wait(void **state)
{
	struct fixture *f = *state;
	struct unix_listener_id id;

	int dir_fd = open(f->dir, O_RDONLY | O_DIRECTORY);
	assert_true(dir_fd >= 0);
	assert_int_equal(flock(dir_fd, LOCK_EX), 0);
	assert_int_equal(unix_listener_open(f->path, 0, 4, &id), -EBUSY);
	assert_int_equal(access(f->path, F_OK), -1);
	assert_non_null(strstr(unix_listener_strerror(-EBUSY), "locked"));
	close(dir_fd); /* unlocks */
	int fd = unix_listener_open(f->path, 0, 4, &id);
	assert_true(fd >= 0);
	assert_int_equal(connect_to(f->path), 0);
	close(fd);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(a_stale_socket_is_replaced_by_one_that_accepts),
	    TEST(a_file_that_is_not_a_socket_is_refused_and_kept),
	    TEST(a_socket_another_listener_serves_is_refused_and_kept_serving),
	    TEST(a_listener_with_a_full_backlog_is_refused_without_waiting),
	    TEST(a_stale_socket_in_a_directory_that_cannot_be_locked_is_left_alone),
	    TEST(only_the_socket_bound_is_removed),
	    TEST(a_path_too_long_or_empty_is_refused),
	    TEST(processes_racing_for_one_path_have_exactly_one_winner),
	    TEST(a_directory_kept_locked_is_refused_after_a_bounded_wait),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
