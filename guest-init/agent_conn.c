/* One agent connection: the frame reader, the bounded output buffer and the poll loop
 * that drives every request in progress on it (guest-init/AGENT_PROTOCOL.md). */
#include "agent_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* How long a connection that broke the protocol may take to receive its last ERROR. */
#define CLOSING_FLUSH_MS 2000

void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

size_t conn_out_free(const struct agent_conn *c)
{
	return OUT_CAP - (c->out_end - c->out_start);
}

bool conn_has_chunk_room(const struct agent_conn *c)
{
	return conn_out_free(c) >= AGENT_HEADER_SIZE + AGENT_CHUNK_MAX + OUT_RESERVE;
}

/* Room for n more bytes at the end of the buffer, moving what is queued to the front
 * when the tail is too short. NULL (and the connection closed) if n does not fit:
 * the reserve rules make that a bug, never a reason to grow. */
static uint8_t *out_tail(struct agent_conn *c, size_t n)
{
	if (OUT_CAP - c->out_end < n && c->out_start > 0) {
		memmove(c->out, c->out + c->out_start, c->out_end - c->out_start);
		c->out_end -= c->out_start;
		c->out_start = 0;
	}
	if (OUT_CAP - c->out_end < n) {
		c->closing = true;
		c->error = -ENOBUFS;
		return NULL;
	}
	return c->out + c->out_end;
}

void conn_send(struct agent_conn *c, uint16_t type, uint32_t id, const void *payload, size_t len)
{
	uint8_t *p = out_tail(c, AGENT_HEADER_SIZE + len);

	if (!p)
		return;
	agent_header_encode(
	    p, &(struct agent_header){.length = (uint32_t)len, .type = type, .id = id});
	if (len)
		memcpy(p + AGENT_HEADER_SIZE, payload, len);
	c->out_end += AGENT_HEADER_SIZE + len;
}

void conn_send_ok(struct agent_conn *c, uint32_t id, uint64_t size, uint32_t mode)
{
	uint8_t payload[12];

	agent_le64_put(payload, size);
	agent_le32_put(payload + 8, mode);
	conn_send(c, AGENT_OK, id, payload, sizeof(payload));
}

void conn_send_error(struct agent_conn *c, uint32_t id, uint16_t request_type, int err,
		     const char *fmt, ...)
{
	uint8_t payload[12 + AGENT_MESSAGE_MAX];
	char message[AGENT_MESSAGE_MAX + 1];
	struct agent_writer w;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(message, sizeof(message), fmt, ap);
	va_end(ap);
	if (n < 0)
		message[0] = '\0';
	agent_writer_init(&w, payload, sizeof(payload));
	agent_put_u32(&w, (uint32_t)err);
	agent_put_u16(&w, request_type);
	agent_put_u16(&w, 0);
	agent_put_string_n(&w, message, strnlen(message, AGENT_MESSAGE_MAX));
	conn_send(c, AGENT_ERROR, id, payload, w.len);
}

ssize_t conn_send_from_fd(struct agent_conn *c, uint16_t type, uint32_t id, int fd)
{
	uint8_t *p = out_tail(c, AGENT_HEADER_SIZE + AGENT_CHUNK_MAX);
	ssize_t n;

	if (!p)
		return -ENOBUFS;
	do
		n = read(fd, p + AGENT_HEADER_SIZE, AGENT_CHUNK_MAX);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	if (n == 0)
		return 0;
	agent_header_encode(p,
			    &(struct agent_header){.length = (uint32_t)n, .type = type, .id = id});
	c->out_end += AGENT_HEADER_SIZE + (size_t)n;
	return n;
}

struct request *conn_find(struct agent_conn *c, uint32_t id, enum request_kind kind)
{
	for (size_t i = 0; i < AGENT_MAX_REQUESTS; i++) {
		struct request *r = &c->requests[i];
		if (r->kind != REQUEST_FREE && r->id == id &&
		    (kind == REQUEST_FREE || r->kind == kind))
			return r;
	}
	return NULL;
}

struct request *conn_new_request(struct agent_conn *c, const struct agent_header *h,
				 enum request_kind kind)
{
	struct request *free_slot = NULL;

	if (h->id == 0) {
		conn_send_error(c, 0, h->type, EINVAL, "request id 0 is reserved");
		return NULL;
	}
	if (conn_find(c, h->id, REQUEST_FREE)) {
		conn_send_error(c, h->id, h->type, EEXIST, "request id %u is already in use",
				h->id);
		return NULL;
	}
	for (size_t i = 0; i < AGENT_MAX_REQUESTS && !free_slot; i++) {
		if (c->requests[i].kind == REQUEST_FREE)
			free_slot = &c->requests[i];
	}
	if (!free_slot) {
		conn_send_error(c, h->id, h->type, EBUSY, "%d requests already in progress",
				AGENT_MAX_REQUESTS);
		return NULL;
	}
	memset(free_slot, 0, sizeof(*free_slot));
	free_slot->id = h->id;
	free_slot->kind = kind;
	return free_slot;
}

void conn_free_request(struct request *r)
{
	memset(r, 0, sizeof(*r));
	r->kind = REQUEST_FREE;
}

static void send_hello(struct agent_conn *c)
{
	uint8_t payload[16 + 4 + AGENT_HOSTNAME_MAX];
	char host[AGENT_HOSTNAME_MAX + 1] = "";
	struct agent_writer w;
	struct timespec now;
	uint64_t uptime_ms = 0;

	if (gethostname(host, sizeof(host) - 1) < 0)
		host[0] = '\0';
	host[AGENT_HOSTNAME_MAX] = '\0';
	if (clock_gettime(CLOCK_BOOTTIME, &now) == 0)
		uptime_ms = (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
	agent_writer_init(&w, payload, sizeof(payload));
	agent_put_u32(&w, AGENT_PROTOCOL_VERSION);
	agent_put_u32(&w, AGENT_MAX_PAYLOAD);
	agent_put_u64(&w, uptime_ms);
	agent_put_string(&w, host);
	conn_send(c, AGENT_HELLO, 0, payload, w.len);
}

static void power_off_request(struct agent_conn *c, const struct agent_header *h)
{
	if (h->length != 0) {
		conn_send_error(c, h->id, h->type, EPROTO, "POWER_OFF takes no payload");
		return;
	}
	if (!c->config->power_off) {
		conn_send_error(c, h->id, h->type, ENOTSUP, "power-off is not available here");
		return;
	}
	conn_send_ok(c, h->id, 0, 0);
	c->power_off_pending = true;
}

static enum frame_result dispatch(struct agent_conn *c, const struct agent_header *h,
				  const uint8_t *payload)
{
	switch (h->type) {
	case AGENT_EXEC:
		exec_start(c, h, payload);
		return FRAME_DONE;
	case AGENT_STDIN:
	case AGENT_STDIN_EOF:
		return exec_stdin(c, h, payload);
	case AGENT_SIGNAL:
		exec_signal(c, h, payload);
		return FRAME_DONE;
	case AGENT_RESIZE:
		exec_resize(c, h, payload);
		return FRAME_DONE;
	case AGENT_UPLOAD:
		upload_begin(c, h, payload);
		return FRAME_DONE;
	case AGENT_UPLOAD_DATA:
		upload_data(c, h, payload);
		return FRAME_DONE;
	case AGENT_UPLOAD_END:
		upload_end(c, h, payload);
		return FRAME_DONE;
	case AGENT_DOWNLOAD:
		download_begin(c, h, payload);
		return FRAME_DONE;
	case AGENT_POWER_OFF:
		power_off_request(c, h);
		return FRAME_DONE;
	case AGENT_CANCEL:
		file_cancel(c, h);
		return FRAME_DONE;
	default:
		conn_send_error(c, h->id, h->type, EOPNOTSUPP, "unknown frame type 0x%x", h->type);
		return FRAME_DONE;
	}
}

/* Handles every complete frame in the input, as long as the answers have room. */
static void parse_frames(struct agent_conn *c)
{
	size_t pos = 0;

	while (!c->closing && conn_out_free(c) >= OUT_RESERVE) {
		struct agent_header h;

		if (c->in_len - pos < AGENT_HEADER_SIZE)
			break;
		int ret = agent_header_decode(c->in + pos, AGENT_MAX_PAYLOAD, &h);
		if (ret == -EMSGSIZE) {
			/* Nothing after a length like that can be trusted to be a frame. */
			conn_send_error(c, 0, h.type, EMSGSIZE,
					"frame payload of %u bytes exceeds the limit of %u",
					h.length, AGENT_MAX_PAYLOAD);
			c->closing = true;
			c->error = -EPROTO;
			break;
		}
		if (c->in_len - pos - AGENT_HEADER_SIZE < h.length)
			break;
		const uint8_t *payload = c->in + pos + AGENT_HEADER_SIZE;
		if (ret == -EPROTO)
			conn_send_error(c, h.id, h.type, EPROTO, "reserved flags 0x%x are not 0",
					h.flags);
		else if (dispatch(c, &h, payload) == FRAME_BLOCKED)
			break;
		pos += AGENT_HEADER_SIZE + h.length;
	}
	if (pos) {
		memmove(c->in, c->in + pos, c->in_len - pos);
		c->in_len -= pos;
	}
}

static void receive(struct agent_conn *c)
{
	ssize_t n = recv(c->fd, c->in + c->in_len, IN_CAP - c->in_len, 0);

	if (n > 0) {
		c->in_len += (size_t)n;
	} else if (n == 0) {
		/* The client is gone (a frame cut short included): nothing is left to answer. */
		c->dead = true;
	} else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
		c->dead = true;
		c->error = -errno;
	}
}

static void flush(struct agent_conn *c)
{
	while (c->out_end > c->out_start) {
		ssize_t n = send(c->fd, c->out + c->out_start, c->out_end - c->out_start,
				 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK) {
				c->dead = true;
				c->error = -errno;
			}
			return;
		}
		c->out_start += (size_t)n;
	}
	c->out_start = c->out_end = 0;
}

/* Moves every request forward; returns what the slowest of them waits for. */
static unsigned progress(struct agent_conn *c)
{
	unsigned waits = WAIT_EVENTS;

	for (size_t i = 0; i < AGENT_MAX_REQUESTS; i++) {
		struct request *r = &c->requests[i];
		if (r->kind == REQUEST_EXEC)
			waits |= exec_progress(c, r);
		else if (r->kind == REQUEST_DOWNLOAD)
			waits |= download_progress(c, r);
	}
	return waits;
}

/* The poll timeout, decided after the flush: a request that waits for output room
 * must not sleep once the flush has made some (nothing else would wake it). */
static int poll_timeout(const struct agent_conn *c, unsigned waits)
{
	if ((waits & WAIT_ROOM) && conn_has_chunk_room(c))
		return 0;
	if (waits & WAIT_TIMER)
		return 50;
	return -1;
}

static size_t build_poll_set(struct agent_conn *c, struct pollfd *fds, struct poll_owner *owners)
{
	size_t n = 1;

	fds[0] = (struct pollfd){.fd = c->fd};
	if (!c->closing && c->in_len < IN_CAP)
		fds[0].events |= POLLIN;
	if (c->out_end > c->out_start)
		fds[0].events |= POLLOUT;
	owners[0] = (struct poll_owner){.role = ROLE_SOCKET};
	for (size_t i = 0; i < AGENT_MAX_REQUESTS; i++) {
		if (c->requests[i].kind == REQUEST_EXEC)
			exec_poll_add(c, &c->requests[i], fds, owners, &n);
	}
	return n;
}

static void abort_all(struct agent_conn *c)
{
	for (size_t i = 0; i < AGENT_MAX_REQUESTS; i++) {
		struct request *r = &c->requests[i];
		if (r->kind == REQUEST_EXEC)
			exec_abort(r);
		else if (r->kind == REQUEST_UPLOAD)
			upload_abort(r);
		else if (r->kind == REQUEST_DOWNLOAD)
			download_abort(r);
		conn_free_request(r);
	}
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A command must never inherit a closed 0-2 slot that a pipe would then fill, and the
 * client's socket must not leak into commands. */
static void prepare_process(int fd)
{
	for (int i = 0; i <= 2; i++) {
		if (fcntl(i, F_GETFD) < 0) {
			int null_fd = open("/dev/null", O_RDWR);
			if (null_fd >= 0 && null_fd != i) {
				dup2(null_fd, i);
				close(null_fd);
			}
		}
	}
	signal(SIGPIPE, SIG_IGN);
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static void serve_loop(struct agent_conn *c)
{
	struct pollfd fds[POLL_MAX];
	struct poll_owner owners[POLL_MAX];
	int64_t closing_deadline = -1;

	send_hello(c);
	while (!c->dead) {
		parse_frames(c);
		unsigned waits = progress(c);
		flush(c);
		if (c->dead)
			break;
		int timeout = poll_timeout(c, waits);
		if (c->power_off_pending && c->out_end == c->out_start) {
			c->power_off_pending = false;
			c->config->power_off(c->config->opaque);
		}
		if (c->closing) {
			if (c->out_end == c->out_start)
				break;
			if (closing_deadline < 0)
				closing_deadline = now_ms() + CLOSING_FLUSH_MS;
			if (now_ms() >= closing_deadline)
				break;
			timeout = CLOSING_FLUSH_MS;
		}

		size_t n = build_poll_set(c, fds, owners);
		int ready = poll(fds, n, timeout);
		if (ready < 0) {
			if (errno == EINTR)
				continue;
			c->error = -errno;
			break;
		}
		if (fds[0].revents & POLLIN)
			receive(c);
		else if (fds[0].revents & (POLLHUP | POLLERR) && !(fds[0].revents & POLLOUT))
			c->dead = true;
		for (size_t i = 1; i < n; i++) {
			if (fds[i].revents)
				exec_poll_event(c, owners[i].request, owners[i].role);
		}
	}
}

int agent_serve(int fd, const struct agent_config *config)
{
	struct agent_conn *c = calloc(1, sizeof(*c));
	int ret;

	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	c->fd = fd;
	c->config = config;
	c->in = malloc(IN_CAP);
	c->out = malloc(OUT_CAP);
	if (!c->in || !c->out) {
		ret = -ENOMEM;
		goto out;
	}
	prepare_process(fd);
	serve_loop(c);
	ret = c->error;
	abort_all(c);
out:
	close(fd);
	free(c->in);
	free(c->out);
	free(c);
	return ret;
}
