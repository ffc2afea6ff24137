/* virtio-vsock (virtio 1.2 §5.10): the device as a driver and host programs see it —
 * config space and features, connections made from either side with Firecracker's
 * "CONNECT <port>\n" / "OK <port>\n" protocol, refused and timed-out connections, many
 * at once, and the resets. An in-memory guest, a fake transport, real AF_UNIX sockets
 * in a temporary directory; no KVM. */
#include <sys/resource.h>
#include <sys/stat.h>

#include "vsock_host.h"
#include "virtio/vsock_mux.h"
#include "virtio/vsock_uds.h"
#include "vmm/clock.h"

static void config_space_holds_the_guest_cid_little_endian(void **state)
{
	struct vsock_fixture *f = *state;
	uint8_t config[8], byte;

	assert_int_equal(f->dev->config_size, 8);
	f->dev->ops->config_read(f->dev, 0, config, 8);
	assert_int_equal(le64toh(*(uint64_t *)config), TEST_CID);
	f->dev->ops->config_read(f->dev, 0, &byte, 1);
	assert_int_equal(byte, TEST_CID);
	f->dev->ops->config_read(f->dev, 4, &byte, 1);
	assert_int_equal(byte, 0);
	/* guest_cid is read-only. */
	uint8_t ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	f->dev->ops->config_write(f->dev, 0, ones, 8);
	f->dev->ops->config_read(f->dev, 0, config, 8);
	assert_int_equal(le64toh(*(uint64_t *)config), TEST_CID);
}

static void device_offers_three_queues_event_idx_and_indirect(void **state)
{
	struct vsock_fixture *f = *state;
	uint64_t features = f->dev->ops->features(f->dev);

	assert_int_equal(f->dev->device_id, VIRTIO_ID_VSOCK);
	assert_int_equal(f->dev->queue_count, 3);
	assert_true(features & VIRTIO_FEATURE_EVENT_IDX);
	assert_true(features & VIRTIO_FEATURE_INDIRECT_DESC);
	/* No device feature bits: stream sockets only (§5.10.3). */
	assert_int_equal(features & 0xffffff, 0);
}

static void reserved_cids_are_refused(void **state)
{
	struct vsock_fixture *f = *state;
	const uint64_t reserved[] = {0, 1, 2, 0xffffffffULL, 1ULL << 32, UINT64_MAX};
	char path[160];
	struct virtio_vsock *vs = NULL;

	snprintf(path, sizeof(path), "%s/other.sock", f->dir);
	for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++) {
		assert_int_equal(create_vsock(f, reserved[i], path, &vs), -EINVAL);
		assert_non_null(strstr(f->log_text, "reserved"));
	}
	assert_null(vs);
	assert_int_equal(access(path, F_OK), -1);
	/* The highest allowed CID works. */
	assert_int_equal(create_vsock(f, 0xfffffffeULL, path, &vs), 0);
	virtio_vsock_destroy(vs);
}

static void socket_path_too_long_or_in_use_is_refused(void **state)
{
	struct vsock_fixture *f = *state;
	char path[200];
	struct virtio_vsock *vs = NULL;

	memset(path, 'a', sizeof(path));
	path[0] = '/';
	path[100] = '\0'; /* 100 bytes leave no room for "_4294967295" in sun_path */
	assert_int_equal(create_vsock(f, 5, path, &vs), -ENAMETOOLONG);
	assert_int_equal(create_vsock(f, 5, f->uds_path, &vs), -EADDRINUSE);
	assert_non_null(strstr(f->log_text, f->uds_path));
	assert_null(vs);
}

static void destroy_removes_the_socket(void **state)
{
	struct vsock_fixture *f = *state;
	struct stat st;

	assert_int_equal(stat(f->uds_path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	virtio_vsock_destroy(f->vsock);
	f->vsock = NULL;
	assert_int_equal(stat(f->uds_path, &st), -1);
}

static void host_connect_asks_the_guest_and_its_response_acks_ok_with_the_port(void **state)
{
	struct vsock_fixture *f = *state;
	struct vsock_pkt pkt = {0};
	char ack[32];
	int fd = host_client(f);

	host_write(fd, "CONNECT 52\n", 11);
	recv_pkt(f, &pkt, NULL);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_REQUEST);
	assert_int_equal(pkt.src_cid, VSOCK_HOST_CID);
	assert_int_equal(pkt.dst_cid, TEST_CID);
	assert_int_equal(pkt.dst_port, 52);
	assert_int_equal(pkt.src_port, 1u << 30);
	assert_int_equal(pkt.type, VIRTIO_VSOCK_TYPE_STREAM);
	assert_int_equal(pkt.buf_alloc, DEVICE_BUF_ALLOC);
	assert_int_equal(pkt.fwd_cnt, 0);
	assert_true(f->transport.interrupts[RX_QUEUE] >= 1);
	/* Nothing for the client before the guest answers. */
	host_expect_nothing(f, fd);

	struct vsock_pkt response = guest_pkt(52, pkt.src_port, VIRTIO_VSOCK_OP_RESPONSE);
	send_pkt(f, &response, NULL, 0);
	host_read(f, fd, ack, 14);
	assert_memory_equal(ack, "OK 1073741824\n", 14);
	close(fd);
}

static void host_connects_get_distinct_local_ports(void **state)
{
	struct vsock_fixture *f = *state;
	struct gconn a, b, c;
	int fa = connect_from_host(f, 52, &a);
	int fb = connect_from_host(f, 52, &b);
	int fc = connect_from_host(f, 53, &c);

	assert_int_not_equal(a.host_port, b.host_port);
	assert_int_not_equal(a.host_port, c.host_port);
	assert_int_not_equal(b.host_port, c.host_port);
	close(fa);
	close(fb);
	close(fc);
}

static void guest_rst_to_a_host_connect_closes_the_client(void **state)
{
	struct vsock_fixture *f = *state;
	struct vsock_pkt pkt = {0};
	int fd = host_client(f);

	host_write(fd, "CONNECT 99\n", 11);
	recv_pkt(f, &pkt, NULL);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_REQUEST);
	struct vsock_pkt rst = guest_pkt(99, pkt.src_port, VIRTIO_VSOCK_OP_RST);
	send_pkt(f, &rst, NULL, 0);
	host_expect_eof(f, fd);
	assert_no_pkt(f, 20); /* an RST is not answered */
	close(fd);
}

static void guest_that_never_answers_gets_rst_and_the_client_is_closed(void **state)
{
	struct vsock_fixture *f = *state;
	struct vsock_pkt pkt = {0};
	int fd = host_client(f);

	host_write(fd, "CONNECT 7\n", 10);
	recv_pkt(f, &pkt, NULL);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_REQUEST);
	expect_rst(f, 7, pkt.src_port); /* after the device's timeout */
	host_expect_eof(f, fd);
	close(fd);
}

static void connect_line_in_pieces_is_accepted(void **state)
{
	struct vsock_fixture *f = *state;
	struct vsock_pkt pkt = {0};
	int fd = host_client(f);

	host_write(fd, "conn", 4);
	run_loop(f, 10);
	host_write(fd, "ect  1234", 9);
	run_loop(f, 10);
	assert_no_pkt(f, 10);
	host_write(fd, " \n", 2);
	recv_pkt(f, &pkt, NULL);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_REQUEST);
	assert_int_equal(pkt.dst_port, 1234);
	close(fd);
}

static void bytes_after_the_connect_line_reach_the_guest_after_the_response(void **state)
{
	struct vsock_fixture *f = *state;
	struct vsock_pkt pkt = {0};
	struct gconn c;
	char data[16], ack[32];
	int fd = host_client(f);

	host_write(fd, "CONNECT 80\nhello, guest", 23);
	recv_pkt(f, &pkt, NULL);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_REQUEST);
	c = (struct gconn){
	    .guest_port = 80, .host_port = pkt.src_port, .buf_alloc = GUEST_BUF_ALLOC};
	assert_no_pkt(f, 20);
	gc_send(f, &c, VIRTIO_VSOCK_OP_RESPONSE, 0, NULL, 0);
	host_read(f, fd, ack, 14);
	gc_recv(f, &c, &pkt, data);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_RW);
	assert_int_equal(pkt.len, 12);
	assert_memory_equal(data, "hello, guest", 12);
	close(fd);
}

static void bad_connect_lines_close_the_client(void **state)
{
	struct vsock_fixture *f = *state;
	const char *bad[] = {
	    "CONNECT\n",    "CONNECT \n",   "CONNECT x5\n",
	    "CONNECT 5x\n", "CONNECT -5\n", "CONNECT 4294967296\n",
	    "CONNECT5\n",   "HELLO 5\n",    "CONNECT 5 6\n",
	    "\n",	    "OK 5\n",	    "CONNECT 99999999999999999999\n",
	    "CONNEC 5\n",   " CONNECT 5\n",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int fd = host_client(f);
		host_write(fd, bad[i], strlen(bad[i]));
		if (!host_sees_eof_within(f, fd, WAIT_MS))
			fail_msg("the client that sent \"%s\" was not closed", bad[i]);
		close(fd);
	}
	assert_no_pkt(f, 20);
}

static void connect_line_of_32_bytes_without_newline_closes_the_client(void **state)
{
	struct vsock_fixture *f = *state;
	int fd = host_client(f);

	host_write(fd, "CONNECT 000000000000000000000052", 32);
	host_expect_eof(f, fd);
	assert_no_pkt(f, 20);
	close(fd);
}

static void client_leaving_before_its_line_ends_is_forgotten(void **state)
{
	struct vsock_fixture *f = *state;
	int fd = host_client(f);

	host_write(fd, "CONNECT 5", 9);
	run_loop(f, 10);
	close(fd);
	assert_no_pkt(f, 50);
	/* The device still serves others. */
	struct gconn c;
	close(connect_from_host(f, 5, &c));
}

static void client_that_sends_no_line_is_closed_after_the_timeout(void **state)
{
	struct vsock_fixture *f = *state;
	int fd = host_client(f);

	host_expect_nothing(f, fd);
	host_expect_eof(f, fd);
	assert_no_pkt(f, 20);
	close(fd);
}

static void client_leaving_before_the_response_withdraws_the_request(void **state)
{
	struct vsock_fixture *f = *state;
	struct vsock_pkt pkt = {0};
	int fd = host_client(f);

	host_write(fd, "CONNECT 44\n", 11);
	recv_pkt(f, &pkt, NULL);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_REQUEST);
	close(fd);
	expect_rst(f, 44, pkt.src_port);
}

static void guest_connect_without_listener_is_reset_at_once(void **state)
{
	struct vsock_fixture *f = *state;
	struct vsock_pkt request = guest_pkt(1000, 8000, VIRTIO_VSOCK_OP_REQUEST);
	struct vsock_pkt pkt = {0};

	send_pkt(f, &request, NULL, 0);
	/* Without running the event loop: the answer came with the kick. */
	assert_true(recv_pkt_within(f, &pkt, NULL, 0));
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_RST);
	assert_int_equal(pkt.src_port, 8000);
	assert_int_equal(pkt.dst_port, 1000);
	assert_int_equal(pkt.src_cid, VSOCK_HOST_CID);
	assert_int_equal(pkt.dst_cid, TEST_CID);
}

/* A listener whose backlog is full: with a backlog of 0 Linux queues one client (af_unix.c,
 * unix_recvq_full), so one unaccepted client fills it. */
static int host_listen_full(struct vsock_fixture *f, uint32_t port, int *filler)
{
	int listener = host_listen(f, port);

	assert_int_equal(listen(listener, 0), 0);
	*filler = unix_connect(f->listeners[f->listener_count - 1]);
	return listener;
}

static void guest_connect_to_a_full_backlog_waits_until_the_listener_accepts(void **state)
{
	struct vsock_fixture *f = *state;
	int filler;
	int listener = host_listen_full(f, 8000, &filler);
	struct gconn c = {.guest_port = 1000, .host_port = 8000, .buf_alloc = GUEST_BUF_ALLOC};

	gc_send(f, &c, VIRTIO_VSOCK_OP_REQUEST, 0, NULL, 0);
	/* Several retries fail while the backlog stays full: no RST meanwhile. */
	assert_no_pkt(f, 5 * VSOCK_RETRY_INTERVAL_MS);
	/* A duplicate REQUEST for the same ports is not a second connection. */
	gc_send(f, &c, VIRTIO_VSOCK_OP_REQUEST, 0, NULL, 0);
	close(host_accept(listener));
	close(filler);
	gc_expect(f, &c, VIRTIO_VSOCK_OP_RESPONSE, 0);
	int fd = host_accept(listener);
	assert_int_equal(accept(listener, NULL, NULL), -1); /* and only one */
	gc_send(f, &c, VIRTIO_VSOCK_OP_RW, 0, "late", 4);
	char got[4];
	host_read(f, fd, got, 4);
	assert_memory_equal(got, "late", 4);
	close(fd);
	close(listener);
}

static void guest_connect_to_a_backlog_that_stays_full_is_reset_in_the_end(void **state)
{
	struct vsock_fixture *f = *state;
	int filler;
	int listener = host_listen_full(f, 8000, &filler);
	struct vsock_pkt request = guest_pkt(1000, 8000, VIRTIO_VSOCK_OP_REQUEST);
	struct vsock_pkt pkt = {0};

	send_pkt(f, &request, NULL, 0);
	assert_no_pkt(f, VSOCK_RETRY_LIMIT_MS / 2);
	assert_true(recv_pkt_within(f, &pkt, NULL, VSOCK_RETRY_LIMIT_MS));
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_RST);
	assert_int_equal(pkt.dst_port, 1000);
	close(filler);
	close(listener);
}

static void guest_rst_withdraws_a_connect_being_retried(void **state)
{
	struct vsock_fixture *f = *state;
	int filler;
	int listener = host_listen_full(f, 8000, &filler);
	struct vsock_pkt request = guest_pkt(1000, 8000, VIRTIO_VSOCK_OP_REQUEST);
	struct vsock_pkt rst = guest_pkt(1000, 8000, VIRTIO_VSOCK_OP_RST);

	send_pkt(f, &request, NULL, 0);
	send_pkt(f, &rst, NULL, 0);
	close(host_accept(listener));
	assert_no_pkt(f, 10 * VSOCK_RETRY_INTERVAL_MS);
	assert_int_equal(accept(listener, NULL, NULL), -1); /* nobody connected */
	close(filler);
	close(listener);
}

/* The guest asks for host port 2^30 from its port 1000 while that listener's backlog is
 * full; meanwhile a host client connects to guest port 1000, and would be given local
 * port 2^30, the same pair of ports. It gets another port, and once the listener
 * accepts, the retried request becomes a connection of its own: two connections, each
 * carrying its own bytes. */
static void retried_guest_connect_and_a_host_connect_never_share_ports(void **state)
{
	struct vsock_fixture *f = *state;
	int filler;
	int listener = host_listen_full(f, 1u << 30, &filler);
	struct gconn mine = {
	    .guest_port = 1000, .host_port = 1u << 30, .buf_alloc = GUEST_BUF_ALLOC};
	struct gconn c;
	char got[5];

	gc_send(f, &mine, VIRTIO_VSOCK_OP_REQUEST, 0, NULL, 0);
	int client = connect_from_host(f, 1000, &c);
	assert_int_not_equal(c.host_port, 1u << 30);
	close(host_accept(listener));
	close(filler);
	gc_expect(f, &mine, VIRTIO_VSOCK_OP_RESPONSE, 0);
	int accepted = host_accept(listener);
	gc_send(f, &c, VIRTIO_VSOCK_OP_RW, 0, "hosts", 5);
	gc_send(f, &mine, VIRTIO_VSOCK_OP_RW, 0, "guest", 5);
	host_read(f, client, got, 5);
	assert_memory_equal(got, "hosts", 5);
	host_read(f, accepted, got, 5);
	assert_memory_equal(got, "guest", 5);
	close(client);
	close(accepted);
	close(listener);
}

static void guest_connect_to_a_listener_gets_response_and_carries_data(void **state)
{
	struct vsock_fixture *f = *state;
	int listener = host_listen(f, 8000);
	struct gconn c;
	struct vsock_pkt pkt = {0};
	char buf[16];

	int fd = connect_from_guest(f, listener, 8000, 1000, &c);
	gc_send(f, &c, VIRTIO_VSOCK_OP_RW, 0, "ping", 4);
	host_read(f, fd, buf, 4);
	assert_memory_equal(buf, "ping", 4);
	host_write(fd, "pong!", 5);
	gc_recv(f, &c, &pkt, buf);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_RW);
	assert_int_equal(pkt.len, 5);
	assert_memory_equal(buf, "pong!", 5);
	assert_int_equal(pkt.fwd_cnt, 4);
	close(fd);
	close(listener);
}

#define MANY 100

/* MANY connections, half from each side, open at once, each carrying its own bytes
 * both ways. */
static void hundred_connections_at_once_carry_their_own_bytes(void **state)
{
	struct vsock_fixture *f = *state;
	int listener = host_listen(f, 9000);
	struct gconn c[MANY];
	int fd[MANY];
	char buf[64], expect[64];

	for (int i = 0; i < MANY; i++)
		fd[i] = i % 2 ? connect_from_host(f, 500 + (uint32_t)i, &c[i])
			      : connect_from_guest(f, listener, 9000, 2000 + (uint32_t)i, &c[i]);
	for (int i = 0; i < MANY; i++) {
		int len = snprintf(buf, sizeof(buf), "to host on connection %d", i);
		gc_send(f, &c[i], VIRTIO_VSOCK_OP_RW, 0, buf, (uint32_t)len);
		host_printf(fd[i], "to guest on connection %d", i);
	}
	for (int i = 0; i < MANY; i++) {
		int len = snprintf(expect, sizeof(expect), "to host on connection %d", i);
		host_read(f, fd[i], buf, (size_t)len);
		assert_memory_equal(buf, expect, (size_t)len);
	}
	/* The replies come in any order: each is matched to its connection by port. */
	for (int got = 0; got < MANY; got++) {
		struct vsock_pkt pkt = {0};
		recv_pkt(f, &pkt, buf);
		int i = 0;
		while (i < MANY &&
		       (c[i].guest_port != pkt.dst_port || c[i].host_port != pkt.src_port))
			i++;
		assert_true(i < MANY);
		gc_note(&c[i], &pkt);
		assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_RW);
		int len = snprintf(expect, sizeof(expect), "to guest on connection %d", i);
		assert_int_equal(pkt.len, len);
		assert_memory_equal(buf, expect, (size_t)len);
	}
	for (int i = 0; i < MANY; i++)
		close(fd[i]);
	close(listener);
}

static void connection_limit_is_1023(void **state)
{
	struct vsock_fixture *f = *state;
	struct rlimit limit;
	int listener = host_listen(f, 9000);
	static int fd[1023];
	struct gconn c;

	/* Each connection is two fds here, one in the device and one in the test. */
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &limit), 0);
	if (limit.rlim_cur < 2200) {
		limit.rlim_cur = limit.rlim_max;
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &limit), 0);
		assert_true(limit.rlim_cur >= 2200);
	}
	for (uint32_t i = 0; i < 1023; i++)
		fd[i] = connect_from_guest(f, listener, 9000, 3000 + i, &c);
	struct vsock_pkt request = guest_pkt(9999, 9000, VIRTIO_VSOCK_OP_REQUEST);
	send_pkt(f, &request, NULL, 0);
	expect_rst(f, 9999, 9000);
	/* A host client is turned away too, with a warning; the next one of the burst
	 * without another (a client connecting in a loop must not flood the log). */
	int client = unix_connect(f->uds_path);
	host_expect_eof(f, client);
	close(client);
	assert_non_null(strstr(f->log_text, "host clients refused"));
	f->log_text[0] = '\0';
	client = unix_connect(f->uds_path);
	host_expect_eof(f, client);
	close(client);
	assert_string_equal(f->log_text, "");

	/* One closes (the guest resets it): room for another. */
	struct vsock_pkt rst = guest_pkt(3000, 9000, VIRTIO_VSOCK_OP_RST);
	send_pkt(f, &rst, NULL, 0);
	host_expect_eof(f, fd[0]);
	close(fd[0]);
	fd[0] = connect_from_guest(f, listener, 9000, 9999, &c);
	for (int i = 0; i < 1023; i++)
		close(fd[i]);
	close(listener);
}

static void transport_reset_drops_connections_and_sends_the_event(void **state)
{
	struct vsock_fixture *f = *state;
	int listener = host_listen(f, 8000);
	struct gconn a, b;
	int fa = connect_from_host(f, 52, &a);
	int fb = connect_from_guest(f, listener, 8000, 1000, &b);
	uint32_t *event = guest(f, EVENT_BUF_BASE, 4);

	virtio_vsock_transport_reset(f->vsock);
	assert_int_equal(used_idx(f, EVENT_QUEUE), 1);
	assert_int_equal(used(f, EVENT_QUEUE)->ring[0].id, 0);
	assert_int_equal(used(f, EVENT_QUEUE)->ring[0].len, 4);
	assert_int_equal(le32toh(*event), VIRTIO_VSOCK_EVENT_TRANSPORT_RESET);
	assert_int_equal(f->transport.interrupts[EVENT_QUEUE], 1);
	host_expect_eof(f, fa);
	host_expect_eof(f, fb);
	/* The guest drops its sockets itself: the device sends no RSTs. */
	assert_no_pkt(f, 20);
	/* The old connections are unknown now. */
	gc_send(f, &a, VIRTIO_VSOCK_OP_RW, 0, "x", 1);
	expect_rst(f, a.guest_port, a.host_port);
	close(fa);
	close(fb);
	close(listener);
}

static void listener_and_pending_clients_survive_transport_reset(void **state)
{
	struct vsock_fixture *f = *state;
	struct vsock_pkt pkt = {0};
	struct gconn c;
	int pending = host_client(f);

	host_write(pending, "CONNECT", 7);
	run_loop(f, 10);
	virtio_vsock_transport_reset(f->vsock);
	host_write(pending, " 61\n", 4);
	/* It waits, like new clients, until the guest hands the event buffer back: asked
	 * before that, the guest could reset it with the others. */
	assert_no_pkt(f, 10);
	offer(f, EVENT_QUEUE, 0);
	notify(f, EVENT_QUEUE);
	recv_pkt(f, &pkt, NULL);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_REQUEST);
	assert_int_equal(pkt.dst_port, 61);
	close(connect_from_host(f, 62, &c));
	close(pending);
}

/* A guest that never handles the reset holds no client for ever: each is closed after
 * the timeout for a CONNECT line, the log says why once, and clients are answered
 * again once the guest hands the event buffer back. */
static void clients_held_past_the_timeout_are_closed_with_one_warning(void **state)
{
	struct vsock_fixture *f = *state;
	struct vsock_pkt pkt = {0};

	virtio_vsock_transport_reset(f->vsock);
	int first = host_client(f);
	host_printf(first, "CONNECT 61\n");
	assert_true(host_sees_eof_within(f, first, TEST_TIMEOUT_MS + WAIT_MS));
	assert_non_null(strstr(f->log_text, "has not handled the transport reset"));
	f->log_text[0] = '\0';
	int second = host_client(f);
	host_printf(second, "CONNECT 62\n");
	assert_true(host_sees_eof_within(f, second, TEST_TIMEOUT_MS + WAIT_MS));
	assert_string_equal(f->log_text, "");
	assert_no_pkt(f, 0);

	offer(f, EVENT_QUEUE, 0);
	notify(f, EVENT_QUEUE);
	int later = host_client(f);
	host_printf(later, "CONNECT 63\n");
	recv_pkt(f, &pkt, NULL);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_REQUEST);
	assert_int_equal(pkt.dst_port, 63);
	close(first);
	close(second);
	close(later);
}

/* A pause: the VM stands still (its event thread parked, so nothing runs the loop) for
 * twice the timeout, and the resume tells the device for how long. */
static void stand_still(struct vsock_fixture *f)
{
	int64_t start_ns = clock_now_ns();

	usleep(2 * TEST_TIMEOUT_MS * 1000);
	f->dev->ops->resumed(f->dev, (uint64_t)(clock_now_ns() - start_ns));
}

/* A pause does not count against the guest: a connect it had not answered when the VM
 * stopped is still waiting at the resume, and the guest's answer gets through. */
static void a_pause_does_not_count_against_a_connect_the_guest_has_not_answered(void **state)
{
	struct vsock_fixture *f = *state;
	struct vsock_pkt pkt = {0};
	char ack[32], expect[32];

	int fd = host_client(f);
	host_printf(fd, "CONNECT 64\n");
	recv_pkt(f, &pkt, NULL);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_REQUEST);
	stand_still(f);
	host_expect_nothing(f, fd);
	struct gconn c = {
	    .guest_port = 64, .host_port = pkt.src_port, .buf_alloc = GUEST_BUF_ALLOC};
	gc_send(f, &c, VIRTIO_VSOCK_OP_RESPONSE, 0, NULL, 0);
	int len = snprintf(expect, sizeof(expect), "OK %u\n", pkt.src_port);
	host_read(f, fd, ack, (size_t)len);
	assert_memory_equal(ack, expect, (size_t)len);
	assert_null(strstr(f->log_text, "did not answer"));
	close(fd);
}

/* Nor against a client held for a transport reset: it is still held at the resume,
 * and closed only once its own time has run out (the pause moved the deadline on,
 * and did not lift it). */
static void a_pause_does_not_count_against_a_held_client(void **state)
{
	struct vsock_fixture *f = *state;

	virtio_vsock_transport_reset(f->vsock);
	int fd = host_client(f);
	host_printf(fd, "CONNECT 65\n");
	host_expect_nothing(f, fd); /* taken in, held */
	stand_still(f);
	host_expect_nothing(f, fd);
	assert_string_equal(f->log_text, "");
	assert_true(host_sees_eof_within(f, fd, TEST_TIMEOUT_MS + WAIT_MS));
	assert_non_null(strstr(f->log_text, "has not handled the transport reset"));
	close(fd);
}

static void transport_reset_event_waits_for_an_event_buffer(void **state)
{
	struct vsock_fixture *f = *state;

	/* The driver had not offered event buffers yet. */
	reset_device(f);
	activate(f, false);
	offer_rx_buffers(f);
	virtio_vsock_transport_reset(f->vsock);
	assert_int_equal(used_idx(f, EVENT_QUEUE), 0);
	offer_event_buffers(f);
	notify(f, EVENT_QUEUE);
	assert_int_equal(used_idx(f, EVENT_QUEUE), 1);
	assert_int_equal(le32toh(*(uint32_t *)guest(f, EVENT_BUF_BASE, 4)),
			 VIRTIO_VSOCK_EVENT_TRANSPORT_RESET);
	/* One event per reset. */
	notify(f, EVENT_QUEUE);
	assert_int_equal(used_idx(f, EVENT_QUEUE), 1);
}

static void device_reset_closes_connections_and_the_device_works_again(void **state)
{
	struct vsock_fixture *f = *state;
	struct gconn c;
	int fd = connect_from_host(f, 52, &c);

	reset_device(f);
	host_expect_eof(f, fd);
	close(fd);
	assert_int_equal(used_idx(f, EVENT_QUEUE), 0); /* no event: the driver is gone */

	activate(f, true);
	fd = connect_from_host(f, 52, &c);
	gc_send(f, &c, VIRTIO_VSOCK_OP_RW, 0, "again", 5);
	char buf[5];
	host_read(f, fd, buf, 5);
	assert_memory_equal(buf, "again", 5);
	close(fd);
}

/* The transport set DEVICE_NEEDS_RESET: what host sockets bring, which no queue
 * notification gates, no longer reaches the guest's receive queue. */
static void host_connect_waits_while_the_transport_waits_for_a_reset(void **state)
{
	struct vsock_fixture *f = *state;
	struct vsock_pkt pkt = {0};

	pthread_mutex_lock(&f->dev->lock);
	f->dev->needs_reset = true; /* what virtio-mmio does */
	pthread_mutex_unlock(&f->dev->lock);
	int fd = host_client(f);
	host_write(fd, "CONNECT 52\n", 11);
	assert_no_pkt(f, 100);
	assert_int_equal(used_idx(f, RX_QUEUE), 0);
	close(fd);

	reset_device(f);
	activate(f, true);
	fd = host_client(f);
	host_write(fd, "CONNECT 52\n", 11);
	recv_pkt(f, &pkt, NULL);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_REQUEST);
	close(fd);
}

static void event_idx_suppresses_interrupts_and_publishes_avail_event(void **state)
{
	struct vsock_fixture *f = *state;
	uint16_t *tx_avail_event = guest(f, RING_BASE(TX_QUEUE) + 0x2000 + 4 + 8 * QSIZE, 2);

	reset_device(f);
	activate_with(f, true, true);
	avail(f, RX_QUEUE)->ring[QSIZE] = 0; /* used_event: once the first is used */
	for (uint32_t i = 0; i < 3; i++) {
		struct vsock_pkt request = guest_pkt(1000 + i, 8000, VIRTIO_VSOCK_OP_REQUEST);
		send_pkt(f, &request, NULL, 0);
		assert_int_equal(*tx_avail_event, i + 1);
	}
	assert_int_equal(used_idx(f, RX_QUEUE), 3);
	assert_int_equal(f->transport.interrupts[RX_QUEUE], 1);
	for (uint32_t i = 0; i < 3; i++)
		expect_rst(f, 1000 + i, 8000);
}

static void connect_lines_parse_as_firecracker_reads_them(void **state)
{
	uint32_t port = 0;
	(void)state;

	assert_int_equal(vsock_uds_parse_connect("CONNECT 52\n", 11, &port), 0);
	assert_int_equal(port, 52);
	assert_int_equal(vsock_uds_parse_connect("connect\t4294967295 \n", 20, &port), 0);
	assert_int_equal(port, UINT32_MAX);
	assert_int_equal(vsock_uds_parse_connect("Connect 0\n", 10, &port), 0);
	assert_int_equal(port, 0);
	assert_int_equal(vsock_uds_parse_connect("CONNECT 52", 10, &port), -EINVAL);
	assert_int_equal(vsock_uds_parse_connect("CONNECT 52\r\n", 12, &port), -EINVAL);
	assert_int_equal(vsock_uds_parse_connect("CONNECT", 7, &port), -EINVAL);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, vsock_setup, vsock_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(config_space_holds_the_guest_cid_little_endian),
	    TEST(device_offers_three_queues_event_idx_and_indirect),
	    TEST(reserved_cids_are_refused),
	    TEST(socket_path_too_long_or_in_use_is_refused),
	    TEST(destroy_removes_the_socket),
	    TEST(host_connect_asks_the_guest_and_its_response_acks_ok_with_the_port),
	    TEST(host_connects_get_distinct_local_ports),
	    TEST(guest_rst_to_a_host_connect_closes_the_client),
	    TEST(guest_that_never_answers_gets_rst_and_the_client_is_closed),
	    TEST(connect_line_in_pieces_is_accepted),
	    TEST(bytes_after_the_connect_line_reach_the_guest_after_the_response),
	    TEST(bad_connect_lines_close_the_client),
	    TEST(connect_line_of_32_bytes_without_newline_closes_the_client),
	    TEST(client_leaving_before_its_line_ends_is_forgotten),
	    TEST(client_that_sends_no_line_is_closed_after_the_timeout),
	    TEST(client_leaving_before_the_response_withdraws_the_request),
	    TEST(guest_connect_without_listener_is_reset_at_once),
	    TEST(guest_connect_to_a_full_backlog_waits_until_the_listener_accepts),
	    TEST(guest_connect_to_a_backlog_that_stays_full_is_reset_in_the_end),
	    TEST(guest_rst_withdraws_a_connect_being_retried),
	    TEST(retried_guest_connect_and_a_host_connect_never_share_ports),
	    TEST(guest_connect_to_a_listener_gets_response_and_carries_data),
	    TEST(hundred_connections_at_once_carry_their_own_bytes),
	    TEST(connection_limit_is_1023),
	    TEST(transport_reset_drops_connections_and_sends_the_event),
	    TEST(listener_and_pending_clients_survive_transport_reset),
	    TEST(clients_held_past_the_timeout_are_closed_with_one_warning),
	    TEST(a_pause_does_not_count_against_a_connect_the_guest_has_not_answered),
	    TEST(a_pause_does_not_count_against_a_held_client),
	    TEST(transport_reset_event_waits_for_an_event_buffer),
	    TEST(device_reset_closes_connections_and_the_device_works_again),
	    TEST(host_connect_waits_while_the_transport_waits_for_a_reset),
	    TEST(event_idx_suppresses_interrupts_and_publishes_avail_event),
	    TEST(connect_lines_parse_as_firecracker_reads_them),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
