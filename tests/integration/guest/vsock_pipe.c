/* mote-vsock-pipe: joins stdin and stdout to one AF_VSOCK stream connection, like
 * `socat - VSOCK-CONNECT:CID:PORT`, so a guest-side test can talk to the host through
 * mote's vsock device. Static: it runs in a guest with no libc.
 *
 *   mote-vsock-pipe connect CID PORT   connect (CID 2 is the host)
 *   mote-vsock-pipe listen PORT        accept one connection on PORT
 *
 * Bytes from stdin go to the peer; at the end of stdin the sending side is shut down
 * (the peer reads end of file). Bytes from the peer go to stdout until the peer shuts
 * down its side. Exit status: 0 when both directions ended cleanly, 1 when the
 * connection was refused or reset (the reason on stderr, e.g. "Connection reset by
 * peer"), 2 on bad usage. */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/vm_sockets.h>

#define BUFFER_BYTES 65536

enum { EXIT_CONNECTION = 1, EXIT_USAGE = 2 };

static int usage(void)
{
	fprintf(stderr, "usage: mote-vsock-pipe connect CID PORT | listen PORT\n");
	return EXIT_USAGE;
}

static bool parse_u32(const char *text, unsigned *out)
{
	char *end;

	errno = 0;
	unsigned long value = strtoul(text, &end, 10);
	if (errno || *end || end == text || value > 0xffffffffUL)
		return false;
	*out = (unsigned)value;
	return true;
}

static int failed(const char *what)
{
	fprintf(stderr, "vsock-pipe: %s: %s\n", what, strerror(errno));
	return EXIT_CONNECTION;
}

/* Writes all n bytes, or returns false. */
static bool write_all(int fd, const char *buf, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, buf, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		buf += w;
		n -= (size_t)w;
	}
	return true;
}

/* Copies in both directions until the peer has shut down its side and stdin ended. */
static int pump(int sock)
{
	static char buf[BUFFER_BYTES];
	bool stdin_open = true, peer_open = true;

	while (peer_open) {
		struct pollfd fds[2] = {{.fd = sock, .events = POLLIN},
					{.fd = stdin_open ? STDIN_FILENO : -1, .events = POLLIN}};
		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return failed("poll");
		}
		if (fds[0].revents) {
			ssize_t n = read(sock, buf, sizeof(buf));
			if (n < 0 && errno != EINTR)
				return failed("read from the peer");
			if (n == 0)
				peer_open = false;
			if (n > 0 && !write_all(STDOUT_FILENO, buf, (size_t)n))
				return failed("write to stdout");
		}
		if (stdin_open && fds[1].revents) {
			ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
			if (n < 0 && errno != EINTR)
				return failed("read stdin");
			if (n == 0) {
				stdin_open = false;
				if (shutdown(sock, SHUT_WR) < 0)
					return failed("shutdown");
			}
			if (n > 0 && !write_all(sock, buf, (size_t)n))
				return failed("write to the peer");
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_vm addr = {.svm_family = AF_VSOCK};
	unsigned cid = 0, port;
	bool listening;

	if (argc == 4 && strcmp(argv[1], "connect") == 0 && parse_u32(argv[2], &cid) &&
	    parse_u32(argv[3], &port))
		listening = false;
	else if (argc == 3 && strcmp(argv[1], "listen") == 0 && parse_u32(argv[2], &port))
		listening = true;
	else
		return usage();

	int sock = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sock < 0)
		return failed("socket(AF_VSOCK)");
	addr.svm_port = port;
	if (listening) {
		addr.svm_cid = VMADDR_CID_ANY;
		if (bind(sock, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(sock, 1) < 0)
			return failed("listen");
		int conn = accept(sock, NULL, NULL);
		if (conn < 0)
			return failed("accept");
		close(sock);
		sock = conn;
	} else {
		addr.svm_cid = cid;
		if (connect(sock, (struct sockaddr *)&addr, sizeof(addr)) < 0)
			return failed("connect");
	}
	int status = pump(sock);
	close(sock);
	return status;
}
