/* Host AF_UNIX sockets for virtio-vsock (vsock_uds.h). */
#include "vsock_uds.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* The most "_<port>" adds to uds_path: "_4294967295". */
#define PORT_SUFFIX_MAX 11
#define LISTEN_BACKLOG 128

static int uds_address(const char *path, struct sockaddr_un *addr)
{
	size_t len = strlen(path);

	*addr = (struct sockaddr_un){.sun_family = AF_UNIX};
	if (len == 0 || len >= sizeof(addr->sun_path))
		return -ENAMETOOLONG;
	memcpy(addr->sun_path, path, len + 1);
	return 0;
}

int vsock_uds_path_check(const char *uds_path)
{
	struct sockaddr_un addr;

	if (!uds_path || !*uds_path)
		return -EINVAL;
	return strlen(uds_path) + PORT_SUFFIX_MAX >= sizeof(addr.sun_path) ? -ENAMETOOLONG : 0;
}

int vsock_uds_listen(const char *uds_path, struct unix_listener_id *id)
{
	return unix_listener_open(uds_path, SOCK_NONBLOCK, LISTEN_BACKLOG, id);
}

int vsock_uds_accept(int listen_fd)
{
	int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

	if (fd >= 0)
		return fd;
	return errno == EWOULDBLOCK ? -EAGAIN : -errno;
}

int vsock_uds_connect_port(const char *uds_path, uint32_t port)
{
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct sockaddr_un addr;

	if ((size_t)snprintf(path, sizeof(path), "%s_%u", uds_path, port) >= sizeof(path))
		return -ENAMETOOLONG;
	int err = uds_address(path, &addr);
	if (err)
		return err;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* A non-blocking AF_UNIX connect completes at once or fails: with EAGAIN when the
	 * listener's backlog is full. The guest gets its RST now rather than a wait. */
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		err = errno == EWOULDBLOCK ? -EAGAIN : -errno;
		close(fd);
		return err;
	}
	return fd;
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t';
}

int vsock_uds_parse_connect(const char *line, size_t len, uint32_t *port)
{
	static const char command[] = "CONNECT";
	size_t n = sizeof(command) - 1;
	size_t i = n;
	uint64_t value = 0;
	size_t digits = 0;

	if (len <= n || line[len - 1] != '\n' || strncasecmp(line, command, n) != 0)
		return -EINVAL;
	len--; /* the "\n" */
	if (!is_blank(line[i]))
		return -EINVAL;
	while (i < len && is_blank(line[i]))
		i++;
	for (; i < len && line[i] >= '0' && line[i] <= '9'; i++, digits++) {
		value = value * 10 + (uint64_t)(line[i] - '0');
		if (value > UINT32_MAX)
			return -EINVAL;
	}
	while (i < len && is_blank(line[i]))
		i++;
	if (digits == 0 || i != len)
		return -EINVAL;
	*port = (uint32_t)value;
	return 0;
}

int vsock_uds_read_connect(int fd, char *line, size_t *len, uint32_t *port)
{
	char peek[VSOCK_UDS_LINE_MAX];
	size_t room = VSOCK_UDS_LINE_MAX - *len;

	/* Look first, then take only up to the "\n": what follows it is stream data for
	 * the guest. Without a "\n" everything seen is taken, so the level-triggered
	 * loop does not wake again for the same bytes. */
	ssize_t seen = recv(fd, peek, room, MSG_PEEK | MSG_DONTWAIT);
	if (seen == 0)
		return -ECONNRESET;
	if (seen < 0)
		return errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
	char *eol = memchr(peek, '\n', (size_t)seen);
	size_t take = eol ? (size_t)(eol - peek) + 1 : (size_t)seen;
	ssize_t got = recv(fd, line + *len, take, MSG_DONTWAIT);
	if (got < 0)
		return errno == EWOULDBLOCK || errno == EINTR ? 0 : -errno;
	if ((size_t)got != take)
		return -EIO; /* a stream socket hands out what it just showed */
	*len += take;
	if (eol)
		return vsock_uds_parse_connect(line, *len, port) == 0 ? 1 : -EINVAL;
	return *len == VSOCK_UDS_LINE_MAX ? -EMSGSIZE : 0;
}

int vsock_uds_send_all(int fd, const void *buf, size_t len)
{
	ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);

	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return (size_t)n == len ? 0 : -EAGAIN;
}
