/* mote-pipe: joins stdin and stdout to one stream connection, like
 * `socat - VSOCK-CONNECT:CID:PORT` or `socat - TCP:ADDR:PORT`, so a guest-side test can
 * talk to the host through mote's vsock or net device. Static: it runs in a guest with
 * no libc. It moves 64 KiB per system call; busybox nc moves 1 KiB, and under nested
 * emulation its thirty-two thousand writes for 32 MiB take over a minute.
 *
 *   mote-pipe vsock-connect CID PORT   connect (CID 2 is the host)
 *   mote-pipe vsock-listen PORT        accept one connection on PORT
 *   mote-pipe tcp-connect IPV4 PORT    connect over TCP
 *   mote-pipe tcp-listen PORT          accept one TCP connection on PORT (any address)
 *
 * Options, before the mode:
 *   --stats     report on stderr, at the end, how many bytes came from the peer and how
 *               long they took, from the connection's start to the peer's end of stream:
 *               "pipe: received N bytes in S s" (the vsock benchmark's host-to-guest row)
 *   --bytes N   send at most N bytes of stdin, then shut the sending side down: with
 *               stdin /dev/zero, a stream of N bytes with no pipe or dd in front (the
 *               vsock benchmark's guest-to-host row, where an emulated guest's pipe copy
 *               would be measured as much as vsock)
 *
 * Bytes from stdin go to the peer; at the end of stdin the sending side is shut down
 * (the peer reads end of file). Bytes from the peer go to stdout until the peer shuts
 * down its side. Exit status: 0 when both directions ended cleanly, 1 when the
 * connection was refused or reset (the reason on stderr, e.g. "Connection reset by
 * peer"), 2 on bad usage. */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <linux/vm_sockets.h>

#define BUFFER_BYTES 65536
#define CONNECT_TIMEOUT_S 60

enum { EXIT_CONNECTION = 1, EXIT_USAGE = 2 };

static int usage(void)
{
	fprintf(
	    stderr,
	    "usage: mote-pipe [--stats] [--bytes N] vsock-connect CID PORT | vsock-listen PORT |\n"
	    "                 tcp-connect IPV4 PORT | tcp-listen PORT\n");
	return EXIT_USAGE;
}

static bool parse_u64(const char *text, uint64_t *out)
{
	char *end;

	if (*text < '0' || *text > '9')
		return false;
	errno = 0;
	unsigned long long value = strtoull(text, &end, 10);
	if (errno || *end)
		return false;
	*out = value;
	return true;
}

static bool parse_u32(const char *text, unsigned *out)
{
	uint64_t value;

	if (!parse_u64(text, &value) || value > 0xffffffffU)
		return false;
	*out = (unsigned)value;
	return true;
}

static int failed(const char *what)
{
	fprintf(stderr, "pipe: %s: %s\n", what, strerror(errno));
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

/* Copies from in to out until in ends or limit bytes moved, adding the bytes moved to
 * *moved. */
static int copy(int in, int out, const char *what, uint64_t limit, uint64_t *moved)
{
	static char buf[BUFFER_BYTES];

	for (;;) {
		size_t want = sizeof(buf);
		if (limit - *moved < want)
			want = (size_t)(limit - *moved);
		if (want == 0)
			return 0;
		ssize_t n = read(in, buf, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return failed(what);
		if (n == 0)
			return 0;
		if (!write_all(out, buf, (size_t)n))
			return failed(what);
		*moved += (uint64_t)n;
	}
}

/* The two directions in two processes, as netcat does: one loop that blocks writing to
 * the peer while the peer blocks writing back (an echo server with full buffers) would
 * deadlock both. The child sends stdin and then shuts the sending side; this process
 * copies the peer's bytes to stdout until the peer shuts down its side. */
static int pump(int sock, bool stats, uint64_t send_limit)
{
	struct timespec start, end;
	uint64_t sent_bytes = 0, received = 0;

	clock_gettime(CLOCK_MONOTONIC, &start);
	pid_t sender = fork();

	if (sender < 0)
		return failed("fork");
	if (sender == 0) {
		int status = copy(STDIN_FILENO, sock, "send to the peer", send_limit, &sent_bytes);
		if (status == 0 && shutdown(sock, SHUT_WR) < 0)
			status = failed("shutdown");
		_exit(status);
	}
	int status = copy(sock, STDOUT_FILENO, "receive from the peer", UINT64_MAX, &received);
	clock_gettime(CLOCK_MONOTONIC, &end);
	if (stats)
		fprintf(stderr, "pipe: received %llu bytes in %.3f s\n",
			(unsigned long long)received,
			(double)(end.tv_sec - start.tv_sec) +
			    (double)(end.tv_nsec - start.tv_nsec) / 1e9);
	int sent;
	while (waitpid(sender, &sent, 0) < 0 && errno == EINTR)
		;
	if (status == 0 && !(WIFEXITED(sent) && WEXITSTATUS(sent) == 0))
		status = EXIT_CONNECTION;
	return status;
}

/* Accepts one connection on sock, bound to addr; returns it, or -1 with a message. */
static int accept_one(int sock, const struct sockaddr *addr, socklen_t len)
{
	if (bind(sock, addr, len) < 0 || listen(sock, 1) < 0) {
		failed("listen");
		return -1;
	}
	int conn = accept(sock, NULL, NULL);
	if (conn < 0)
		failed("accept");
	close(sock);
	return conn;
}

static int vsock_open(bool listening, unsigned cid, unsigned port)
{
	struct sockaddr_vm addr = {.svm_family = AF_VSOCK, .svm_port = port};
	int sock = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (sock < 0) {
		failed("socket(AF_VSOCK)");
		return -1;
	}
	if (listening) {
		addr.svm_cid = VMADDR_CID_ANY;
		return accept_one(sock, (struct sockaddr *)&addr, sizeof(addr));
	}
	addr.svm_cid = cid;
	/* Linux gives a vsock connect 2 s by default. Under nested emulation a host
	 * listener that accepts slowly (binaries read cold after the outer guest was
	 * booted again) holds the device's connect longer than that. */
	struct timeval patience = {.tv_sec = CONNECT_TIMEOUT_S};
	if (setsockopt(sock, AF_VSOCK, SO_VM_SOCKETS_CONNECT_TIMEOUT, &patience, sizeof(patience)) <
	    0) {
		failed("setsockopt(SO_VM_SOCKETS_CONNECT_TIMEOUT)");
		return -1;
	}
	if (connect(sock, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		failed("connect");
		return -1;
	}
	return sock;
}

static int tcp_open(bool listening, struct in_addr ip, unsigned port)
{
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int sock = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (sock < 0) {
		failed("socket(AF_INET)");
		return -1;
	}
	if (listening) {
		int on = 1;
		(void)setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
		addr.sin_addr.s_addr = htonl(INADDR_ANY);
		return accept_one(sock, (struct sockaddr *)&addr, sizeof(addr));
	}
	addr.sin_addr = ip;
	if (connect(sock, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		failed("connect");
		return -1;
	}
	return sock;
}

int main(int argc, char **argv)
{
	unsigned cid = 0, port;
	struct in_addr ip;
	int sock;

	/* A peer gone away is an error to report, not a reason to die silently. */
	signal(SIGPIPE, SIG_IGN);
	bool stats = false;
	uint64_t send_limit = UINT64_MAX;
	for (;;) {
		if (argc > 1 && strcmp(argv[1], "--stats") == 0) {
			stats = true;
			argc--;
			argv++;
		} else if (argc > 2 && strcmp(argv[1], "--bytes") == 0) {
			if (!parse_u64(argv[2], &send_limit))
				return usage();
			argc -= 2;
			argv += 2;
		} else {
			break;
		}
	}
	if (argc == 4 && strcmp(argv[1], "vsock-connect") == 0 && parse_u32(argv[2], &cid) &&
	    parse_u32(argv[3], &port))
		sock = vsock_open(false, cid, port);
	else if (argc == 3 && strcmp(argv[1], "vsock-listen") == 0 && parse_u32(argv[2], &port))
		sock = vsock_open(true, 0, port);
	else if (argc == 4 && strcmp(argv[1], "tcp-connect") == 0 &&
		 inet_pton(AF_INET, argv[2], &ip) == 1 && parse_u32(argv[3], &port) &&
		 port <= 65535)
		sock = tcp_open(false, ip, port);
	else if (argc == 3 && strcmp(argv[1], "tcp-listen") == 0 && parse_u32(argv[2], &port) &&
		 port <= 65535)
		sock = tcp_open(true, (struct in_addr){0}, port);
	else
		return usage();
	if (sock < 0)
		return EXIT_CONNECTION;
	int status = pump(sock, stats, send_limit);
	close(sock);
	return status;
}
