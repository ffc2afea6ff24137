/* The agent's listener: one child process per connection (agent_serve), so that a
 * connection that breaks, or a bug it finds, never touches another; the vsock socket
 * is the only transport-specific part. */
#include "agent_internal.h"

#include <errno.h>
#include <linux/vm_sockets.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define REAP_INTERVAL_MS 1000
#define LISTEN_TRIES 50
#define LISTEN_RETRY_MS 100

/* One message per write(), so the agent's lines do not interleave with others. */
static void say(const struct agent_config *config, const char *fmt, ...)
{
	char line[256];
	va_list ap;
	int n;

	if (config->quiet)
		return;
	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0) {
		/* Nowhere else to report it. */
	}
}

static unsigned reap_children(unsigned live)
{
	while (live > 0 && waitpid(-1, NULL, WNOHANG) > 0)
		live--;
	return live;
}

/* Over the limit: an ERROR frame in place of HELLO, sent without waiting. */
static void refuse(int fd)
{
	uint8_t frame[AGENT_HEADER_SIZE + 64];
	struct agent_writer w;
	static const char message[] = "too many connections";

	agent_writer_init(&w, frame, sizeof(frame));
	size_t at = agent_frame_open(&w, AGENT_ERROR, 0);
	agent_put_u32(&w, EBUSY);
	agent_put_u16(&w, 0);
	agent_put_u16(&w, 0);
	agent_put_string(&w, message);
	agent_frame_close(&w, at);
	if (send(fd, frame, w.len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
		/* The client sees the connection close either way. */
	}
}

int agent_accept_loop(int listen_fd, const struct agent_config *config)
{
	unsigned live = 0;

	for (;;) {
		struct pollfd pfd = {.fd = listen_fd, .events = POLLIN};
		int ready = poll(&pfd, 1, REAP_INTERVAL_MS);

		live = reap_children(live);
		if (ready < 0 && errno != EINTR)
			return -errno;
		if (ready <= 0)
			continue;
		int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			/* The peer gave up, or a transient shortage: keep listening. */
			if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN ||
			    errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM || errno == EPROTO || errno == EPERM)
				continue;
			return -errno;
		}
		if (live >= AGENT_MAX_CONNECTIONS) {
			refuse(fd);
			close(fd);
			continue;
		}
		pid_t pid = fork();
		if (pid == 0) {
			close(listen_fd);
			_exit(agent_serve(fd, config) < 0 ? 1 : 0);
		}
		if (pid < 0) {
			say(config, "mote-agent: fork: %s", strerror(errno));
			refuse(fd);
		} else {
			live++;
		}
		close(fd);
	}
}

int agent_listen_vsock(uint32_t port)
{
	struct sockaddr_vm addr = {
	    .svm_family = AF_VSOCK,
	    .svm_port = port,
	    .svm_cid = VMADDR_CID_ANY,
	};
	int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(fd, 16) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

int agent_main(uint32_t port, const struct agent_config *config)
{
	int fd = -1;

	/* guest-init starts the agent once the kernel has probed its devices, so the
	 * vsock transport is normally there at once; a few retries cover a late one. */
	for (int i = 0; i < LISTEN_TRIES && fd < 0; i++) {
		fd = agent_listen_vsock(port);
		if (fd < 0 && i + 1 < LISTEN_TRIES)
			nanosleep(&(struct timespec){.tv_nsec = LISTEN_RETRY_MS * 1000000L}, NULL);
	}
	if (fd < 0) {
		say(config, "mote-agent: cannot listen on vsock port %u: %s", port, strerror(-fd));
		return AGENT_EXIT_CANNOT_LISTEN;
	}
	say(config, "mote-agent: listening on vsock port %u", port);
	int ret = agent_accept_loop(fd, config);
	say(config, "mote-agent: accept: %s", strerror(-ret));
	close(fd);
	return 1;
}
