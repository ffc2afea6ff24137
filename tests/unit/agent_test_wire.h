/* Helpers for the agent's tests: a raw frame client (no libmote), a server in a
 * child process over a socketpair, a cmocka fixture around it, and checksums.
 * Included by test_agent_*.c only, after <cmocka.h>. */
#ifndef MOTE_AGENT_TEST_WIRE_H
#define MOTE_AGENT_TEST_WIRE_H

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "guest-init/agent.h"
#include "guest-init/agent_protocol.h"

#define WIRE_TIMEOUT_MS 20000

struct wire_frame {
	struct agent_header h;
	uint8_t payload[AGENT_MAX_PAYLOAD];
};

static inline int64_t wire_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Reads exactly len bytes before the deadline: 0, -ETIMEDOUT, or -ECONNRESET at EOF. */
static inline int wire_read_full(int fd, void *buf, size_t len, int64_t deadline)
{
	size_t got = 0;

	while (got < len) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int64_t left = deadline - wire_now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		int ready = poll(&pfd, 1, (int)left);
		if (ready < 0 && errno == EINTR)
			continue;
		if (ready <= 0)
			return -ETIMEDOUT;
		ssize_t n = read(fd, (uint8_t *)buf + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -ECONNRESET;
		got += (size_t)n;
	}
	return 0;
}

static inline int wire_recv_timeout(int fd, struct wire_frame *f, int timeout_ms)
{
	int64_t deadline = wire_now_ms() + timeout_ms;
	uint8_t header[AGENT_HEADER_SIZE];
	int ret = wire_read_full(fd, header, sizeof(header), deadline);

	if (ret)
		return ret;
	if (agent_header_decode(header, AGENT_MAX_PAYLOAD, &f->h))
		return -EPROTO;
	return wire_read_full(fd, f->payload, f->h.length, deadline);
}

static inline int wire_recv(int fd, struct wire_frame *f)
{
	return wire_recv_timeout(fd, f, WIRE_TIMEOUT_MS);
}

static inline int wire_write_full(int fd, const void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = send(fd, (const uint8_t *)buf + done, len - done, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -errno;
		done += (size_t)n;
	}
	return 0;
}

static inline int wire_send(int fd, uint16_t type, uint32_t id, const void *payload, size_t len)
{
	uint8_t header[AGENT_HEADER_SIZE];

	agent_header_encode(
	    header, &(struct agent_header){.length = (uint32_t)len, .type = type, .id = id});
	int ret = wire_write_full(fd, header, sizeof(header));
	return ret ? ret : wire_write_full(fd, payload, len);
}

/* EXEC payload: flags, argc, envc, cwd, argv..., env... */
static inline size_t wire_exec_payload(uint8_t *buf, size_t cap, uint32_t flags, const char *cwd,
				       const char *const *argv, const char *const *env)
{
	struct agent_writer w;
	uint32_t argc = 0, envc = 0;

	while (argv[argc])
		argc++;
	while (env && env[envc])
		envc++;
	agent_writer_init(&w, buf, cap);
	agent_put_u32(&w, flags);
	agent_put_u32(&w, argc);
	agent_put_u32(&w, envc);
	agent_put_string(&w, cwd ? cwd : "");
	for (uint32_t i = 0; i < argc; i++)
		agent_put_string(&w, argv[i]);
	for (uint32_t i = 0; i < envc; i++)
		agent_put_string(&w, env[i]);
	return w.overflow ? 0 : w.len;
}

static inline int wire_send_exec(int fd, uint32_t id, uint32_t flags, const char *cwd,
				 const char *const *argv, const char *const *env)
{
	static uint8_t payload[AGENT_MAX_PAYLOAD];
	size_t len = wire_exec_payload(payload, sizeof(payload), flags, cwd, argv, env);

	return len ? wire_send(fd, AGENT_EXEC, id, payload, len) : -E2BIG;
}

/* An agent_serve() in a child process on one end of a socketpair. */
struct wire_server {
	pid_t pid;
	int fd; /* the client's end */
};

static inline void wire_power_off_to_pipe(void *opaque)
{
	int fd = *(int *)opaque;

	if (write(fd, "P", 1) != 1) {
		/* The test then sees no byte and fails. */
	}
}

static inline int wire_server_start(struct wire_server *s, const struct agent_config *config)
{
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	s->pid = fork();
	if (s->pid < 0)
		return -errno;
	if (s->pid == 0) {
		close(sv[0]);
		_exit(agent_serve(sv[1], config) < 0 ? 1 : 0);
	}
	close(sv[1]);
	s->fd = sv[0];
	return 0;
}

/* Closes the client end and waits for the server; returns its wait status, or -1 if
 * it had to be killed after the timeout. */
static inline int wire_server_stop(struct wire_server *s)
{
	int status = 0;
	int64_t deadline = wire_now_ms() + WIRE_TIMEOUT_MS;

	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	while (waitpid(s->pid, &status, WNOHANG) == 0) {
		if (wire_now_ms() > deadline) {
			kill(s->pid, SIGKILL);
			waitpid(s->pid, &status, 0);
			return -1;
		}
		nanosleep(&(struct timespec){.tv_nsec = 5000000}, NULL);
	}
	return status;
}

/* FNV-1a, 64 bits: enough to tell two 50 MiB streams apart. */
static inline uint64_t wire_fnv(uint64_t hash, const void *data, size_t len)
{
	const uint8_t *p = data;

	for (size_t i = 0; i < len; i++)
		hash = (hash ^ p[i]) * 0x100000001b3ULL;
	return hash;
}

#define WIRE_FNV_INIT 0xcbf29ce484222325ULL

/* Deterministic test data: an xorshift stream. */
static inline void wire_fill(uint8_t *buf, size_t len, uint64_t *state)
{
	for (size_t i = 0; i < len; i++) {
		*state ^= *state << 13;
		*state ^= *state >> 7;
		*state ^= *state << 17;
		buf[i] = (uint8_t)*state;
	}
}

/* A test's fixture: a server on a socketpair, a power-off hook that writes to a pipe,
 * and a temporary directory. The cmocka setup/teardown pair. */
struct wire_fixture {
	struct wire_server server;
	struct agent_config config;
	int power_pipe[2];
	char dir[64];
	struct wire_frame frame;
};

static inline int wire_setup(void **state)
{
	static struct wire_fixture f;

	memset(&f, 0, sizeof(f));
	if (pipe(f.power_pipe) < 0)
		return -1;
	f.config = (struct agent_config){
	    .power_off = wire_power_off_to_pipe, .opaque = &f.power_pipe[1], .quiet = true};
	snprintf(f.dir, sizeof(f.dir), "/tmp/mote-agent-test-XXXXXX");
	if (!mkdtemp(f.dir))
		return -1;
	if (wire_server_start(&f.server, &f.config) < 0)
		return -1;
	*state = &f;
	return 0;
}

static inline int wire_teardown(void **state)
{
	struct wire_fixture *f = *state;
	char command[128];

	int status = wire_server_stop(&f->server);
	close(f->power_pipe[0]);
	close(f->power_pipe[1]);
	snprintf(command, sizeof(command), "rm -rf %s", f->dir);
	if (system(command) != 0)
		return -1;
	/* The server must have ended by itself, never by a crash. */
	return status >= 0 && WIFEXITED(status) ? 0 : -1;
}

static inline void wire_expect_hello(struct wire_fixture *f)
{
	struct agent_reader rd;

	assert_int_equal(wire_recv(f->server.fd, &f->frame), 0);
	assert_int_equal(f->frame.h.type, AGENT_HELLO);
	assert_int_equal(f->frame.h.id, 0);
	agent_reader_init(&rd, f->frame.payload, f->frame.h.length);
	assert_int_equal(agent_get_u32(&rd), AGENT_PROTOCOL_VERSION);
	assert_int_equal(agent_get_u32(&rd), AGENT_MAX_PAYLOAD);
	agent_get_u64(&rd);
	char host[AGENT_HOSTNAME_MAX + 1];
	agent_get_cstring(&rd, host, sizeof(host));
	assert_true(agent_reader_done(&rd));
}

/* A fake VMM vsock socket: Firecracker's CONNECT/OK handshake, then the real agent
 * or the misbehaviour the mode asks for. One child process per connection. */
enum wire_fake_mode {
	WIRE_FAKE_AGENT,      /* "OK <n>", then the real agent */
	WIRE_FAKE_REPLY,      /* the reply line given, then close */
	WIRE_FAKE_CLOSE,      /* close at once, like a VMM whose guest does not listen */
	WIRE_FAKE_RAW,	      /* "OK <n>", then the raw bytes given, then wait for EOF */
	WIRE_FAKE_NO_REPLY_N, /* close the first close_first connections, then WIRE_FAKE_AGENT */
};

struct wire_fake_vmm {
	pid_t pid;
	enum wire_fake_mode mode;
	const char *reply;
	const uint8_t *raw;
	size_t raw_len;
	int close_first;
	int start_delay_ms;
	struct agent_config config;
};

/* The VMM side of one connection: "CONNECT <port>\n" in, then the mode's answer. */
static inline void wire_fake_connection(struct wire_fake_vmm *fake, int fd, int index)
{
	char line[64];
	size_t len = 0;
	char c;

	while (len + 1 < sizeof(line) && read(fd, &c, 1) == 1 && c != '\n')
		line[len++] = c;
	line[len] = '\0';
	if (strcmp(line, "CONNECT 52") != 0)
		_exit(3);
	enum wire_fake_mode mode = fake->mode;
	if (mode == WIRE_FAKE_NO_REPLY_N)
		mode = index < fake->close_first ? WIRE_FAKE_CLOSE : WIRE_FAKE_AGENT;
	switch (mode) {
	case WIRE_FAKE_AGENT:
		if (wire_write_full(fd, "OK 1073741824\n", 14) == 0)
			agent_serve(fd, &fake->config);
		break;
	case WIRE_FAKE_REPLY:
		wire_write_full(fd, fake->reply, strlen(fake->reply));
		break;
	case WIRE_FAKE_RAW:
		if (wire_write_full(fd, "OK 1\n", 5) == 0 &&
		    wire_write_full(fd, fake->raw, fake->raw_len) == 0)
			while (read(fd, line, sizeof(line)) > 0) {
			}
		break;
	default:
		break;
	}
	_exit(0);
}

/* Starts the fake VMM's socket at path (sizeof(sun_path) at most) in a child process. */
static inline void wire_fake_vmm_start(struct wire_fake_vmm *fake, const char *path)
{
	fake->pid = fork();
	assert_true(fake->pid >= 0);
	if (fake->pid > 0)
		return;
	if (fake->start_delay_ms)
		nanosleep(&(struct timespec){.tv_nsec = fake->start_delay_ms * 1000000L}, NULL);
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	strncpy(addr.sun_path, path, sizeof(addr.sun_path) - 1);
	int listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (bind(listen_fd, (struct sockaddr *)&addr, sizeof(addr)) < 0 ||
	    listen(listen_fd, 16) < 0)
		_exit(2);
	signal(SIGCHLD, SIG_IGN);
	for (int index = 0;; index++) {
		int fd = accept(listen_fd, NULL, NULL);
		if (fd < 0)
			continue;
		if (fork() == 0) {
			close(listen_fd);
			signal(SIGCHLD, SIG_DFL);
			wire_fake_connection(fake, fd, index);
		}
		close(fd);
	}
}

#endif
