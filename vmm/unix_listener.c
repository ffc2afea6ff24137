/* A listening Unix socket that replaces only a stale one (unix_listener.h). */
#include "unix_listener.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

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

int unix_listener_open(const char *path, int flags, int backlog, struct unix_listener_id *id)
{
	struct sockaddr_un address = {.sun_family = AF_UNIX};
	size_t len = strlen(path);
	struct stat st;

	if (len == 0 || len >= sizeof(address.sun_path))
		return -ENAMETOOLONG;
	memcpy(address.sun_path, path, len);
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return -EEXIST;
		if (socket_is_served(&address))
			return -EADDRINUSE;
		unlink(path); /* stale: the process that bound it is gone */
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | flags, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&address, sizeof(address)) < 0 || listen(fd, backlog) < 0 ||
	    stat(path, &st) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	*id = (struct unix_listener_id){.dev = st.st_dev, .ino = st.st_ino};
	return fd;
}

void unix_listener_remove(const char *path, const struct unix_listener_id *id)
{
	struct stat st;

	if (lstat(path, &st) == 0 && st.st_dev == id->dev && st.st_ino == id->ino)
		unlink(path);
}
