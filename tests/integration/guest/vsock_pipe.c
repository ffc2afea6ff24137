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
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/vm_sockets.h>

#define BUFFER_BYTES 65536
#define CONNECT_TIMEOUT_S 60

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

/* Copies from in to out until in ends. */
static int copy(int in, int out, const char *what)
{
	static char buf[BUFFER_BYTES];

	for (;;) {
		ssize_t n = read(in, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return failed(what);
		if (n == 0)
			return 0;
		if (!write_all(out, buf, (size_t)n))
			return failed(what);
	}
}

/* The two directions in two processes, as netcat does: one loop that blocks writing to
 * the peer while the peer blocks writing back (an echo server with full buffers) would
 * deadlock both. The child sends stdin and then shuts the sending side; this process
 * copies the peer's bytes to stdout until the peer shuts down its side. */
static int pump(int sock)
{
	pid_t sender = fork();

	if (sender < 0)
		return failed("fork");
	if (sender == 0) {
		int status = copy(STDIN_FILENO, sock, "send to the peer");
		if (status == 0 && shutdown(sock, SHUT_WR) < 0)
			status = failed("shutdown");
		_exit(status);
	}
	int status = copy(sock, STDOUT_FILENO, "receive from the peer");
	int sent;
	while (waitpid(sender, &sent, 0) < 0 && errno == EINTR)
		;
	if (status == 0 && !(WIFEXITED(sent) && WEXITSTATUS(sent) == 0))
		status = EXIT_CONNECTION;
	return status;
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

	/* A peer gone away is an error to report, not a reason to die silently. */
	signal(SIGPIPE, SIG_IGN);
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
		/* Linux gives a vsock connect 2 s by default. Under nested emulation a host
		 * listener that accepts slowly (binaries read cold after the outer guest was
		 * booted again) holds the device's connect longer than that. */
		struct timeval patience = {.tv_sec = CONNECT_TIMEOUT_S};
		if (setsockopt(sock, AF_VSOCK, SO_VM_SOCKETS_CONNECT_TIMEOUT, &patience,
			       sizeof(patience)) < 0)
			return failed("setsockopt(SO_VM_SOCKETS_CONNECT_TIMEOUT)");
		if (connect(sock, (struct sockaddr *)&addr, sizeof(addr)) < 0)
			return failed("connect");
	}
	int status = pump(sock);
	close(sock);
	return status;
}
