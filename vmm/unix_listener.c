/* A listening Unix socket that replaces only a stale one (unix_listener.h). */
#include "unix_listener.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"

/* Whether some process accepts connections on the socket at address. The probe does
 * not wait: a listener whose backlog is full (EAGAIN) is served too. unix(7): a
 * connect to a socket nobody listens on fails with ECONNREFUSED. */
static bool socket_is_served(const struct sockaddr_un *address)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return true; /* unknown: refuse rather than remove what may be in use */
	bool served = connect(fd, (const struct sockaddr *)address, sizeof(*address)) == 0 ||
		      errno != ECONNREFUSED;
	close(fd);
	return served;
}

/* How long a process waits for others' claims in the same directory: a claim takes a
 * few system calls, so even hundreds of copies claiming at once on a loaded host take
 * far less, and only a process that holds the lock on purpose (flock(1) on /tmp, say)
 * makes this run out. */
#define DIRECTORY_LOCK_WAIT_NS (2 * 1000000000LL)
/* A claim is over in a few system calls, so a waiter retries soon, then less often
 * (copies restored at once claim their sockets one after another). */
#define DIRECTORY_LOCK_FIRST_PAUSE_US 20
#define DIRECTORY_LOCK_MAX_PAUSE_US 1000

/* Locks the directory that holds path, so that among processes that open sockets
 * there the stale check, the unlink, the bind and the listen happen one process at a
 * time. Without it two processes could both find the path stale; or one could take the
 * other's socket, bound and not listening yet, for stale, unlink it and bind its own,
 * and both would succeed, the first listening where no client can reach it. Returns
 * the locked directory's fd (closing it unlocks), -1 when the directory cannot be
 * opened for reading or does not take flocks (NFS may refuse one on a read-only fd):
 * then the claim goes unlocked and may not replace a stale socket; or -EBUSY. */
static int lock_directory_of(const char *path)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
	const char *slash = strrchr(path, '/');

	if (!slash)
		strcpy(dir, ".");
	else if (slash == path)
		strcpy(dir, "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int64_t deadline = clock_now_ns() + DIRECTORY_LOCK_WAIT_NS;
	unsigned pause_us = DIRECTORY_LOCK_FIRST_PAUSE_US;
	while (clock_now_ns() < deadline) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return fd;
		if (errno != EWOULDBLOCK && errno != EINTR) {
			close(fd);
			return -1; /* a file system without flock: unlocked */
		}
		usleep(pause_us);
		if (pause_us < DIRECTORY_LOCK_MAX_PAUSE_US)
			pause_us = pause_us * 2 < DIRECTORY_LOCK_MAX_PAUSE_US
				       ? pause_us * 2
				       : DIRECTORY_LOCK_MAX_PAUSE_US;
	}
	close(fd);
	return -EBUSY;
}

/* Binds and listens at address, the directory locked (lock_directory_of) or not. */
static int claim_path(const char *path, const struct sockaddr_un *address, int flags, int backlog,
		      bool directory_locked, struct unix_listener_id *id)
{
	struct stat st;

	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return -EEXIST;
		if (socket_is_served(address))
			return -EADDRINUSE;
		/* Stale, or another process's, bound and not listening yet: only the lock
		 * tells the two apart, so without it the socket is left where it is. */
		if (!directory_locked)
			return -ESTALE;
		unlink(path); /* stale: the process that bound it is gone */
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (const struct sockaddr *)address, sizeof(*address)) < 0 ||
	    listen(fd, backlog) < 0 || stat(path, &st) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	*id = (struct unix_listener_id){.dev = st.st_dev, .ino = st.st_ino};
	return fd;
}

int unix_listener_open(const char *path, int flags, int backlog, struct unix_listener_id *id)
{
	struct sockaddr_un address = {.sun_family = AF_UNIX};
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(address.sun_path))
		return -ENAMETOOLONG;
	memcpy(address.sun_path, path, len);
	int lock_fd = lock_directory_of(path);
	if (lock_fd == -EBUSY)
		return -EBUSY;
	int fd = claim_path(path, &address, flags, backlog, lock_fd >= 0, id);
	if (lock_fd >= 0)
		close(lock_fd);
	return fd;
}

const char *unix_listener_strerror(int err)
{
	switch (err) {
	case -ENAMETOOLONG:
		return "the path is empty or too long for a Unix socket";
	case -EEXIST:
		return "it exists and is not a socket";
	case -EADDRINUSE:
		return "another process serves it";
	case -EBUSY:
		return "another process holds its directory locked";
	case -ESTALE:
		return "a socket no process serves is there, and its directory cannot be locked "
		       "(no read permission, or no flock) to replace it safely: remove it";
	default:
		return strerror(-err);
	}
}

void unix_listener_remove(const char *path, const struct unix_listener_id *id)
{
	struct stat st;

	if (lstat(path, &st) == 0 && st.st_dev == id->dev && st.st_ino == id->ino)
		unlink(path);
}
