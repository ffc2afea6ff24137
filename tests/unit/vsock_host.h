/* The host's side of the virtio-vsock tests: AF_UNIX clients of the device's socket,
 * listeners on "<uds_path>_<port>", and whole connections made from either side with
 * Firecracker's protocol. Reads never block: they run the device while they wait, and
 * give up (failing the test) after WAIT_MS. */
#ifndef MOTE_TEST_VSOCK_HOST_H
#define MOTE_TEST_VSOCK_HOST_H

#include <fcntl.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "vsock_guest.h"

static inline void set_nonblocking(int fd)
{
	assert_int_equal(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
}

static inline int unix_connect(const char *path)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_true(strlen(path) < sizeof(addr.sun_path));
	memcpy(addr.sun_path, path, strlen(path) + 1);
	assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	set_nonblocking(fd);
	return fd;
}

/* A host client of the device's socket, with the device's accept done. */
static inline int host_client(struct vsock_fixture *f)
{
	int fd = unix_connect(f->uds_path);

	run_loop(f, 0);
	return fd;
}

/* A host program listening on "<uds_path>_<port>". */
static inline int host_listen(struct vsock_fixture *f, uint32_t port)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	assert_true(fd >= 0 && f->listener_count < MAX_LISTENERS);
	char *path = f->listeners[f->listener_count++];
	snprintf(path, sizeof(f->listeners[0]), "%s_%u", f->uds_path, port);
	assert_true(strlen(path) < sizeof(addr.sun_path));
	memcpy(addr.sun_path, path, strlen(path) + 1);
	assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
	assert_int_equal(listen(fd, 1024), 0);
	return fd;
}

static inline int host_accept(int listen_fd)
{
	int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

	assert_true(fd >= 0);
	return fd;
}

static inline void host_write(int fd, const void *buf, size_t len)
{
	assert_int_equal(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
}

static inline void host_printf(int fd, const char *fmt, ...)
{
	char line[128];
	va_list ap;

	va_start(ap, fmt);
	int len = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	host_write(fd, line, (size_t)len);
}

/* Reads exactly len bytes, running the device meanwhile. */
static inline void host_read(struct vsock_fixture *f, int fd, void *buf, size_t len)
{
	size_t got = 0;

	for (int waited = 0; got < len; waited += 5) {
		ssize_t n = recv(fd, (uint8_t *)buf + got, len - got, 0);
		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		assert_true(n < 0 && errno == EAGAIN);
		if (waited >= WAIT_MS)
			fail_msg("the host read %zu of %zu bytes", got, len);
		run_loop(f, 5);
	}
}

/* Whether the device closed (or shut for writing) the host end: EOF, after reading
 * and discarding whatever came before it. */
static inline bool host_sees_eof_within(struct vsock_fixture *f, int fd, int wait_ms)
{
	char buf[4096];

	for (int waited = 0;; waited += 5) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			return true;
		if (n > 0)
			continue;
		assert_int_equal(errno, EAGAIN);
		if (waited >= wait_ms)
			return false;
		run_loop(f, 5);
	}
}

static inline void host_expect_eof(struct vsock_fixture *f, int fd)
{
	assert_true(host_sees_eof_within(f, fd, WAIT_MS));
}

/* Nothing to read on fd now, and no EOF either. */
static inline void host_expect_nothing(struct vsock_fixture *f, int fd)
{
	char byte;

	run_loop(f, 20);
	assert_int_equal(recv(fd, &byte, 1, 0), -1);
	assert_int_equal(errno, EAGAIN);
}

/* Whole connections. */

/* A host program connects to guest port port: the guest is asked, accepts, and the
 * program reads "OK <the port the guest saw>\n". */
static inline int connect_from_host(struct vsock_fixture *f, uint32_t port, struct gconn *c)
{
	struct vsock_pkt pkt;
	char expect[32], ack[32];
	int fd = host_client(f);

	host_printf(fd, "CONNECT %u\n", port);
	recv_pkt(f, &pkt, NULL);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_REQUEST);
	assert_int_equal(pkt.dst_port, port);
	assert_true(pkt.src_port >= (1u << 30));
	assert_true(pkt.buf_alloc == DEVICE_BUF_ALLOC || pkt.buf_alloc == DEVICE_BUF_ALLOC_SMALL);
	*c = (struct gconn){
	    .guest_port = port, .host_port = pkt.src_port, .buf_alloc = GUEST_BUF_ALLOC};
	gc_note(c, &pkt);
	gc_send(f, c, VIRTIO_VSOCK_OP_RESPONSE, 0, NULL, 0);
	int len = snprintf(expect, sizeof(expect), "OK %u\n", c->host_port);
	host_read(f, fd, ack, (size_t)len);
	assert_memory_equal(ack, expect, (size_t)len);
	return fd;
}

/* The guest connects from guest_port to host port port, where listen_fd listens: the
 * device answers RESPONSE and the host program accepts. */
static inline int connect_from_guest(struct vsock_fixture *f, int listen_fd, uint32_t port,
				     uint32_t guest_port, struct gconn *c)
{
	*c = (struct gconn){
	    .guest_port = guest_port, .host_port = port, .buf_alloc = GUEST_BUF_ALLOC};
	gc_send(f, c, VIRTIO_VSOCK_OP_REQUEST, 0, NULL, 0);
	gc_expect(f, c, VIRTIO_VSOCK_OP_RESPONSE, 0);
	assert_true(c->peer_buf_alloc == DEVICE_BUF_ALLOC ||
		    c->peer_buf_alloc == DEVICE_BUF_ALLOC_SMALL);
	return host_accept(listen_fd);
}

static inline uint8_t pattern(uint64_t offset, unsigned seed)
{
	return (uint8_t)(offset * 131 + (offset >> 11) + seed * 7);
}

static inline void fill_pattern(uint8_t *buf, uint64_t offset, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = pattern(offset + i, seed);
}

static inline void assert_pattern(const uint8_t *buf, uint64_t offset, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		if (buf[i] != pattern(offset + i, seed))
			fail_msg("byte %llu differs", (unsigned long long)(offset + i));
}

#endif
