/* The host side of the agent protocol (guest-init/AGENT_PROTOCOL.md): the connection,
 * its frame I/O and the handshake. Commands and files are in agent_client_ops.c.
 *
 * Everything the guest sends is checked before use: a frame longer than the protocol's
 * limit, a payload that does not decode exactly, a value out of range, all break the
 * connection with -EPROTO; nothing the guest sends can make the client read or write
 * out of bounds, or wait past the deadlines it was given. */
#include "agent_client_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define HANDSHAKE_MIN_MS 5000
/* Retries start fast, since a restored guest's agent answers within milliseconds of its
 * monitor binding the socket, and back off to a slow poll for a guest still booting. */
#define RETRY_FIRST_MS 2
#define RETRY_MAX_MS 100
#define REPLY_LINE_MAX 64
#define DEFAULT_IO_TIMEOUT_MS 30000

void mote_agent_options_init(struct mote_agent_options *options)
{
	memset(options, 0, sizeof(*options));
	options->port = MOTE_AGENT_DEFAULT_PORT;
	options->io_timeout_ms = DEFAULT_IO_TIMEOUT_MS;
}

int64_t agent_now_ms(void)
{
	return clock_now_ns() / 1000000;
}

int64_t agent_deadline(int ms)
{
	return ms > 0 ? agent_now_ms() + ms : -1;
}

int64_t agent_transfer_deadline(const struct mote_agent *a)
{
	int64_t io = agent_deadline(a->io_timeout_ms);

	if (a->transfer_end < 0)
		return io;
	return io < 0 || a->transfer_end < io ? a->transfer_end : io;
}

int agent_poll_timeout(int64_t deadline)
{
	if (deadline < 0)
		return -1;
	int64_t left = deadline - agent_now_ms();
	if (left <= 0)
		return 0;
	return left > 1000000 ? 1000000 : (int)left;
}

void agent_printable(char *dst, size_t cap, const char *src, size_t n)
{
	size_t i;

	if (cap == 0)
		return;
	for (i = 0; i < n && i + 1 < cap; i++)
		dst[i] = src[i] >= 0x20 && src[i] < 0x7f ? src[i] : '?';
	dst[i] = '\0';
}

int agent_fail(struct mote_agent *a, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(a->why, sizeof(a->why), fmt, ap);
	va_end(ap);
	a->broken = true;
	if (!a->quiet)
		log_error(&a->log, "%s", a->why);
	return err;
}

size_t agent_out_free(const struct mote_agent *a)
{
	return CLIENT_OUT_CAP - (a->out_end - a->out_start);
}

uint8_t *agent_out_tail(struct mote_agent *a, size_t n)
{
	if (CLIENT_OUT_CAP - a->out_end < n && a->out_start > 0) {
		memmove(a->out, a->out + a->out_start, a->out_end - a->out_start);
		a->out_end -= a->out_start;
		a->out_start = 0;
	}
	return CLIENT_OUT_CAP - a->out_end >= n ? a->out + a->out_end : NULL;
}

int agent_flush_some(struct mote_agent *a)
{
	while (a->out_end > a->out_start) {
		ssize_t n = send(a->fd, a->out + a->out_start, a->out_end - a->out_start,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n < 0)
			return agent_fail(a, -errno, "sending to the agent: %s", strerror(errno));
		a->out_start += (size_t)n;
		a->out_sent += (uint64_t)n;
	}
	a->out_start = a->out_end = 0;
	return 0;
}

int agent_flush_wait(struct mote_agent *a, int64_t deadline)
{
	while (a->out_end > a->out_start) {
		struct pollfd pfd = {.fd = a->fd, .events = POLLOUT};
		int ready = poll(&pfd, 1, agent_poll_timeout(deadline));
		if (ready < 0 && errno == EINTR)
			continue;
		if (ready < 0)
			return agent_fail(a, -errno, "poll: %s", strerror(errno));
		if (ready == 0)
			return agent_fail(a, -ETIMEDOUT, "the agent takes no data (timed out)");
		int ret = agent_flush_some(a);
		if (ret)
			return ret;
	}
	return 0;
}

int agent_queue(struct mote_agent *a, uint16_t type, uint32_t id, const void *payload, size_t len,
		int64_t deadline)
{
	uint8_t *p = agent_out_tail(a, AGENT_HEADER_SIZE + len);

	if (!p) {
		int ret = agent_flush_wait(a, deadline);
		if (ret)
			return ret;
		p = agent_out_tail(a, AGENT_HEADER_SIZE + len);
		if (!p)
			return -EMSGSIZE;
	}
	agent_header_encode(
	    p, &(struct agent_header){.length = (uint32_t)len, .type = type, .id = id});
	if (len)
		memcpy(p + AGENT_HEADER_SIZE, payload, len);
	a->out_end += AGENT_HEADER_SIZE + len;
	return 0;
}

/* The frame last taken is done with. */
static void agent_drop_taken(struct mote_agent *a)
{
	a->in_start += a->in_used;
	a->in_used = 0;
	if (a->in_start == a->in_len)
		a->in_start = a->in_len = 0;
}

int agent_fill(struct mote_agent *a)
{
	agent_drop_taken(a);
	if (a->in_len == CLIENT_IN_CAP && a->in_start > 0) {
		memmove(a->in, a->in + a->in_start, a->in_len - a->in_start);
		a->in_len -= a->in_start;
		a->in_start = 0;
	}
	if (a->in_len == CLIENT_IN_CAP)
		return 0;
	ssize_t n = recv(a->fd, a->in + a->in_len, CLIENT_IN_CAP - a->in_len, MSG_DONTWAIT);
	if (n > 0) {
		a->in_len += (size_t)n;
		return 0;
	}
	if (n == 0)
		return agent_fail(a, -ECONNRESET, "the agent closed the connection");
	if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
		return 0;
	return agent_fail(a, -errno, "receiving from the agent: %s", strerror(errno));
}

int agent_take_frame(struct mote_agent *a, struct agent_frame *f)
{
	agent_drop_taken(a);
	const uint8_t *frame = a->in + a->in_start;
	size_t have = a->in_len - a->in_start;
	if (have < AGENT_HEADER_SIZE)
		return 0;
	int ret = agent_header_decode(frame, AGENT_MAX_PAYLOAD, &f->h);
	if (ret == -EMSGSIZE)
		return agent_fail(a, -EPROTO, "the agent sent a frame of %u bytes (limit %u)",
				  f->h.length, AGENT_MAX_PAYLOAD);
	if (ret)
		return agent_fail(a, -EPROTO, "the agent sent a frame with flags 0x%x", f->h.flags);
	if (have - AGENT_HEADER_SIZE < f->h.length)
		return 0;
	f->payload = frame + AGENT_HEADER_SIZE;
	a->in_used = AGENT_HEADER_SIZE + f->h.length;
	return 1;
}

int agent_next_frame(struct mote_agent *a, struct agent_frame *f, int64_t deadline)
{
	for (;;) {
		int ret = agent_take_frame(a, f);
		if (ret)
			return ret < 0 ? ret : 0;
		struct pollfd pfd = {.fd = a->fd, .events = POLLIN};
		if (a->out_end > a->out_start)
			pfd.events |= POLLOUT;
		int ready = poll(&pfd, 1, agent_poll_timeout(deadline));
		if (ready < 0 && errno == EINTR)
			continue;
		if (ready < 0)
			return agent_fail(a, -errno, "poll: %s", strerror(errno));
		if (ready == 0)
			return agent_fail(a, -ETIMEDOUT, "no answer from the agent (timed out)");
		ret = (pfd.revents & POLLOUT) ? agent_flush_some(a) : 0;
		if (!ret && (pfd.revents & ~POLLOUT))
			ret = agent_fill(a);
		if (ret)
			return ret;
	}
}

int agent_error_frame(struct mote_agent *a, const struct agent_frame *f, uint16_t *answered,
		      char *message)
{
	struct agent_reader rd;
	const char *text;
	size_t n;

	agent_reader_init(&rd, f->payload, f->h.length);
	uint32_t err = agent_get_u32(&rd);
	uint16_t type = agent_get_u16(&rd);
	agent_get_u16(&rd);
	agent_get_string(&rd, &text, &n);
	if (!agent_reader_done(&rd) || n > AGENT_MESSAGE_MAX)
		return agent_fail(a, -EPROTO, "the agent sent a malformed ERROR frame");
	if (answered)
		*answered = type;
	agent_printable(message, AGENT_MESSAGE_MAX + 1, text, n);
	if (err == 0 || err > AGENT_ERRNO_MAX)
		err = EIO;
	return -(int)err;
}

int agent_remote_error(struct mote_agent *a, const struct agent_frame *f)
{
	char message[AGENT_MESSAGE_MAX + 1];
	int ret = agent_error_frame(a, f, NULL, message);

	if (!a->broken)
		log_error(&a->log, "agent: %s", message);
	return ret;
}

int agent_wait_answer(struct mote_agent *a, uint32_t id, struct agent_frame *f, int64_t deadline)
{
	char message[AGENT_MESSAGE_MAX + 1];

	for (;;) {
		int ret = agent_next_frame(a, f, deadline);
		if (ret)
			return ret;
		if (f->h.id == id)
			return 0;
		/* Connection-level trouble; anything else is a late frame of an earlier
		 * request, dropped. */
		if (f->h.id == 0 && f->h.type == AGENT_ERROR) {
			ret = agent_error_frame(a, f, NULL, message);
			return a->broken ? ret : agent_fail(a, -EPROTO, "agent: %s", message);
		}
	}
}

uint32_t agent_new_id(struct mote_agent *a)
{
	if (++a->next_id == 0)
		a->next_id = 1;
	return a->next_id;
}

static int parse_hello(struct mote_agent *a, const struct agent_frame *f)
{
	struct agent_reader rd;
	const char *host;
	size_t n;

	if (f->h.type == AGENT_ERROR && f->h.id == 0) {
		char message[AGENT_MESSAGE_MAX + 1];
		int ret = agent_error_frame(a, f, NULL, message);
		return a->broken
			   ? ret
			   : agent_fail(a, ret, "the agent refused the connection: %s", message);
	}
	if (f->h.type != AGENT_HELLO)
		return agent_fail(a, -EPROTO, "expected HELLO from the agent, got frame type 0x%x",
				  f->h.type);
	agent_reader_init(&rd, f->payload, f->h.length);
	a->info.version = agent_get_u32(&rd);
	a->info.max_payload = agent_get_u32(&rd);
	a->info.uptime_ms = agent_get_u64(&rd);
	agent_get_string(&rd, &host, &n);
	if (!agent_reader_done(&rd) || n > AGENT_HOSTNAME_MAX)
		return agent_fail(a, -EPROTO, "the agent sent a malformed HELLO");
	if (a->info.version != AGENT_PROTOCOL_VERSION)
		return agent_fail(a, -EPROTONOSUPPORT,
				  "the agent speaks protocol version %u, not %u", a->info.version,
				  AGENT_PROTOCOL_VERSION);
	agent_printable(a->info.hostname, sizeof(a->info.hostname), host, n);
	return 0;
}

static struct mote_agent *agent_new(int fd, const struct mote_agent_options *options)
{
	struct mote_agent *a = calloc(1, sizeof(*a));

	if (!a)
		return NULL;
	a->fd = fd;
	a->log = (struct mote_log){options->log, options->log_opaque};
	a->io_timeout_ms = options->io_timeout_ms;
	a->max_download_bytes = options->max_download_bytes;
	a->transfer_timeout_ms = options->transfer_timeout_ms;
	a->transfer_end = -1;
	a->in = malloc(CLIENT_IN_CAP);
	a->out = malloc(CLIENT_OUT_CAP);
	if (!a->in || !a->out) {
		free(a->in);
		free(a->out);
		free(a);
		return NULL;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return a;
}

static void agent_free(struct mote_agent *a)
{
	if (!a)
		return;
	if (a->fd >= 0)
		close(a->fd);
	free(a->in);
	free(a->out);
	free(a);
}

/* Reads the VMM's answer to CONNECT one byte at a time: whatever follows the newline
 * is the agent's, and must stay in the socket. */
static int read_reply_line(struct mote_agent *a, char *line, size_t cap, int64_t deadline)
{
	size_t len = 0;

	for (;;) {
		struct pollfd pfd = {.fd = a->fd, .events = POLLIN};
		int ready = poll(&pfd, 1, agent_poll_timeout(deadline));
		if (ready < 0 && errno == EINTR)
			continue;
		if (ready <= 0)
			return agent_fail(a, -ETIMEDOUT, "no answer to CONNECT (timed out)");
		char c;
		ssize_t n = recv(a->fd, &c, 1, 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			return agent_fail(a, -errno, "reading the answer to CONNECT: %s",
					  strerror(errno));
		if (n == 0)
			return agent_fail(a, -ECONNRESET,
					  "the VMM closed the connection (nothing listens on "
					  "that port in the guest yet?)");
		if (c == '\n') {
			line[len] = '\0';
			return 0;
		}
		if (len + 1 >= cap) {
			char shown[REPLY_LINE_MAX];
			agent_printable(shown, sizeof(shown), line, len);
			return agent_fail(a, -EPROTO, "answer to CONNECT too long: \"%s...\"",
					  shown);
		}
		line[len++] = c;
	}
}

/* Firecracker's host-initiated vsock: "CONNECT <port>\n", answered "OK <hostport>\n". */
static int uds_handshake(struct mote_agent *a, uint32_t port, int64_t deadline)
{
	char line[REPLY_LINE_MAX], shown[REPLY_LINE_MAX];

	/* Not a frame: the line goes out through the same queue, which is empty now. */
	a->out_start = 0;
	a->out_end = (size_t)snprintf((char *)a->out, CLIENT_OUT_CAP, "CONNECT %u\n", port);
	int ret = agent_flush_wait(a, deadline);
	if (!ret)
		ret = read_reply_line(a, line, sizeof(line), deadline);
	if (ret)
		return ret;
	const char *digits = line + 3;
	size_t n = strncmp(line, "OK ", 3) == 0 ? strspn(digits, "0123456789") : 0;
	if (n == 0 || n > 10 || digits[n] != '\0') {
		agent_printable(shown, sizeof(shown), line, strlen(line));
		return agent_fail(a, -EPROTO, "unexpected answer to CONNECT %u: \"%s\"", port,
				  shown);
	}
	return 0;
}

static int wait_hello(struct mote_agent *a, int64_t deadline)
{
	struct agent_frame f;
	int ret = agent_next_frame(a, &f, deadline);

	return ret ? ret : parse_hello(a, &f);
}

/* One attempt: socket, CONNECT/OK, HELLO. */
static int connect_once(const struct mote_agent_options *options, int64_t deadline,
			struct mote_agent **out, char *why, size_t why_len)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0) {
		snprintf(why, why_len, "socket: %s", strerror(errno));
		return -errno;
	}
	memcpy(addr.sun_path, options->uds_path, strlen(options->uds_path) + 1);
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		int err = errno;
		snprintf(why, why_len, "%s: %s", options->uds_path, strerror(err));
		close(fd);
		return -err;
	}
	struct mote_agent *a = agent_new(fd, options);
	if (!a) {
		close(fd);
		snprintf(why, why_len, "out of memory");
		return -ENOMEM;
	}
	a->quiet = true;
	int ret = uds_handshake(a, options->port, deadline);
	if (!ret)
		ret = wait_hello(a, deadline);
	if (ret) {
		snprintf(why, why_len, "%s", a->why);
		agent_free(a);
		return ret;
	}
	a->quiet = false;
	*out = a;
	return 0;
}

/* Errors that mean "not yet": no socket yet, nobody accepting, the guest not
 * listening yet (the VMM closes the connection). */
static bool worth_retrying(int err)
{
	return err == -ENOENT || err == -ECONNREFUSED || err == -ECONNRESET || err == -EAGAIN ||
	       err == -EPIPE;
}

static int next_retry_ms(int retry_ms)
{
	return retry_ms * 2 < RETRY_MAX_MS ? retry_ms * 2 : RETRY_MAX_MS;
}

int mote_agent_connect(const struct mote_agent_options *options, struct mote_agent **agent_out)
{
	struct mote_log log = {options->log, options->log_opaque};
	int64_t start = agent_now_ms();
	int64_t deadline = start + (options->wait_ms > 0 ? options->wait_ms : 0);
	char why[sizeof(((struct mote_agent *)0)->why)] = "";
	int ret;

	*agent_out = NULL;
	if (!options->uds_path || !options->uds_path[0] ||
	    strlen(options->uds_path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		log_error(&log, "agent: the vsock socket path is missing or too long");
		return -EINVAL;
	}
	for (int retry_ms = RETRY_FIRST_MS;; retry_ms = next_retry_ms(retry_ms)) {
		int64_t now = agent_now_ms();
		int64_t attempt_deadline =
		    deadline > now + HANDSHAKE_MIN_MS ? deadline : now + HANDSHAKE_MIN_MS;
		ret = connect_once(options, attempt_deadline, agent_out, why, sizeof(why));
		if (!ret)
			return 0;
		if (!worth_retrying(ret) || agent_now_ms() + retry_ms > deadline)
			break;
		nanosleep(&(struct timespec){.tv_nsec = retry_ms * 1000000L}, NULL);
	}
	if (worth_retrying(ret) && options->wait_ms > 0) {
		log_error(&log, "no agent answered on %s port %u within %d ms: %s",
			  options->uds_path, options->port, options->wait_ms, why);
		return -ETIMEDOUT;
	}
	log_error(&log, "cannot reach the agent on %s port %u: %s", options->uds_path,
		  options->port, why);
	return ret;
}

int mote_agent_attach(int fd, const struct mote_agent_options *options,
		      struct mote_agent **agent_out)
{
	int wait = options->wait_ms > HANDSHAKE_MIN_MS ? options->wait_ms : HANDSHAKE_MIN_MS;
	struct mote_agent *a = agent_new(fd, options);

	*agent_out = NULL;
	if (!a) {
		close(fd);
		return -ENOMEM;
	}
	int ret = wait_hello(a, agent_deadline(wait));
	if (ret) {
		agent_free(a);
		return ret;
	}
	*agent_out = a;
	return 0;
}

const struct mote_agent_info *mote_agent_info(const struct mote_agent *agent)
{
	return &agent->info;
}

bool mote_agent_broken(const struct mote_agent *agent)
{
	return agent->broken;
}

void mote_agent_close(struct mote_agent *agent)
{
	agent_free(agent);
}

int agent_usable(struct mote_agent *a)
{
	if (!a->broken)
		return 0;
	log_error(&a->log, "agent: the connection is broken (%s)", a->why);
	return -ENOTCONN;
}
