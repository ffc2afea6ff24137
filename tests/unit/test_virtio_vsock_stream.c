/* virtio-vsock streams (virtio 1.2 §5.10.6.3, §5.10.6.5): bytes both ways arrive whole
 * and in order, transfers much larger than either side's credit window wait for credit
 * and never exceed it, and shutdowns and closes on either side reach the other. */
#include "vsock_host.h"

#define BIG (2u << 20)
/* Rounds in a row without progress after which a transfer has failed. */
#define MAX_IDLE_ROUNDS 200

static void host_bytes_reach_the_guest_in_order(void **state)
{
	struct vsock_fixture *f = *state;
	struct gconn c;
	struct vsock_pkt pkt = {0};
	uint8_t out[10000], in[10000];
	size_t got = 0;
	int fd = connect_from_host(f, 52, &c);

	fill_pattern(out, 0, sizeof(out), 1);
	host_write(fd, out, sizeof(out));
	while (got < sizeof(out)) {
		gc_recv(f, &c, &pkt, in + got);
		assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_RW);
		assert_true(pkt.len > 0 && pkt.len <= RX_DATA);
		got += pkt.len;
	}
	assert_int_equal(got, sizeof(out));
	assert_memory_equal(in, out, sizeof(out));
	close(fd);
}

static void guest_bytes_reach_the_host_in_order(void **state)
{
	struct vsock_fixture *f = *state;
	int listener = host_listen(f, 8000);
	struct gconn c;
	static uint8_t out[VSOCK_MAX_PAYLOAD * 4], in[VSOCK_MAX_PAYLOAD * 4];
	int fd = connect_from_guest(f, listener, 8000, 1000, &c);

	fill_pattern(out, 0, sizeof(out), 2);
	/* Packets of every size up to the largest allowed. */
	uint32_t sent = 0;
	for (uint32_t len = 1; sent + len <= sizeof(out) && len <= VSOCK_MAX_PAYLOAD; len *= 3) {
		gc_send(f, &c, VIRTIO_VSOCK_OP_RW, 0, out + sent, len);
		sent += len;
	}
	gc_send(f, &c, VIRTIO_VSOCK_OP_RW, 0, out + sent, VSOCK_MAX_PAYLOAD);
	sent += VSOCK_MAX_PAYLOAD;
	host_read(f, fd, in, sent);
	assert_memory_equal(in, out, sent);
	close(fd);
	close(listener);
}

/* The guest's application takes everything it got and says so (§5.10.6.3). */
static void guest_consumes(struct vsock_fixture *f, struct gconn *c)
{
	c->fwd_cnt = c->rx_cnt;
	gc_send(f, c, VIRTIO_VSOCK_OP_CREDIT_UPDATE, 0, NULL, 0);
}

static void host_transfer_beyond_the_guest_credit_waits_for_credit_updates(void **state)
{
	struct vsock_fixture *f = *state;
	uint8_t *out = malloc(BIG), *in = malloc(BIG);
	struct gconn c;
	size_t written = 0, got = 0;
	unsigned pauses = 0;
	int fd = connect_from_host(f, 52, &c);

	/* A window that is no multiple of the rx buffers: packets must be cut to it. */
	c.buf_alloc = 50000;
	gc_send(f, &c, VIRTIO_VSOCK_OP_CREDIT_UPDATE, 0, NULL, 0);
	fill_pattern(out, 0, BIG, 3);
	for (int idle = 0; got < BIG; idle++) {
		struct vsock_pkt pkt = {0};

		assert_true(idle < MAX_IDLE_ROUNDS);
		if (written < BIG) {
			ssize_t n = send(fd, out + written, BIG - written, MSG_NOSIGNAL);
			if (n > 0)
				written += (size_t)n;
		}
		if (!recv_pkt_within(f, &pkt, in + got, 20)) {
			/* Only a guest out of credit gets nothing while bytes wait. */
			assert_int_equal(c.rx_cnt - c.fwd_cnt, c.buf_alloc);
			pauses++;
			guest_consumes(f, &c);
			continue;
		}
		gc_note(&c, &pkt); /* and so never beyond the credit */
		if (pkt.op == VIRTIO_VSOCK_OP_CREDIT_REQUEST) {
			assert_int_equal(c.rx_cnt - c.fwd_cnt, c.buf_alloc);
			pauses++;
			guest_consumes(f, &c);
			continue;
		}
		assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_RW);
		got += pkt.len;
		idle = 0;
	}
	assert_true(pauses >= BIG / 50000 - 1);
	assert_memory_equal(in, out, BIG);
	free(out);
	free(in);
	close(fd);
}

static void device_asks_for_credit_when_the_guest_has_none(void **state)
{
	struct vsock_fixture *f = *state;
	int listener = host_listen(f, 8000);
	struct gconn c = {.guest_port = 1000, .host_port = 8000, .buf_alloc = 3000};
	struct vsock_pkt pkt = {0};
	uint8_t out[10000], in[10000];

	gc_send(f, &c, VIRTIO_VSOCK_OP_REQUEST, 0, NULL, 0);
	gc_expect(f, &c, VIRTIO_VSOCK_OP_RESPONSE, 0);
	int fd = host_accept(listener);
	fill_pattern(out, 0, sizeof(out), 4);
	host_write(fd, out, sizeof(out));

	gc_recv(f, &c, &pkt, in);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_RW);
	assert_int_equal(pkt.len, 3000); /* all the credit, less than the buffer */
	gc_expect(f, &c, VIRTIO_VSOCK_OP_CREDIT_REQUEST, 0);
	assert_no_pkt(f, 30); /* no more data, and one request is enough */

	size_t got = 3000;
	while (got < sizeof(out)) {
		guest_consumes(f, &c);
		gc_recv(f, &c, &pkt, in + got);
		if (pkt.op == VIRTIO_VSOCK_OP_CREDIT_REQUEST)
			continue;
		assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_RW);
		got += pkt.len;
	}
	assert_memory_equal(in, out, sizeof(out));
	close(fd);
	close(listener);
}

static void guest_transfer_beyond_the_device_credit_follows_credit_updates(void **state)
{
	struct vsock_fixture *f = *state;
	uint8_t *out = malloc(BIG), *in = malloc(BIG);
	int listener = host_listen(f, 8000);
	struct gconn c;
	size_t got = 0;
	bool blocked = false;
	int fd = connect_from_guest(f, listener, 8000, 1000, &c);

	fill_pattern(out, 0, BIG, 5);
	for (int idle = 0; got < BIG; idle++) {
		struct vsock_pkt pkt = {0};

		assert_true(idle < MAX_IDLE_ROUNDS);
		uint32_t room = gc_peer_free(&c);
		if (c.tx_cnt < BIG && room > 0) {
			uint32_t len = room < 16384 ? room : 16384;
			if (len > BIG - c.tx_cnt)
				len = BIG - c.tx_cnt;
			gc_send(f, &c, VIRTIO_VSOCK_OP_RW, 0, out + c.tx_cnt, len);
			idle = 0;
		} else if (c.tx_cnt < BIG && !blocked) {
			/* The host has read nothing yet: the device took its whole window on
			 * top of what the socket holds, and not a byte more. */
			assert_int_equal(c.tx_cnt - c.peer_fwd_cnt, DEVICE_BUF_ALLOC);
			assert_true(c.tx_cnt > DEVICE_BUF_ALLOC);
			blocked = true;
		}
		while (recv_pkt_within(f, &pkt, NULL, 0)) {
			gc_note(&c, &pkt);
			assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_CREDIT_UPDATE);
			assert_int_equal(pkt.buf_alloc, DEVICE_BUF_ALLOC);
		}
		if (!blocked)
			continue;
		ssize_t n = recv(fd, in + got, BIG - got, 0);
		if (n > 0) {
			got += (size_t)n;
			idle = 0;
		} else {
			run_loop(f, 5);
		}
	}
	assert_true(blocked);
	assert_memory_equal(in, out, BIG);
	free(out);
	free(in);
	close(fd);
	close(listener);
}

/* A buffer the device took but had nothing for goes back to the ring untouched: the
 * next packet lands in the very next buffer, none is swallowed. */
static void rx_buffers_are_used_in_order_and_none_is_swallowed(void **state)
{
	struct vsock_fixture *f = *state;
	struct gconn c;
	struct vsock_pkt pkt = {0};
	uint8_t out[RX_DATA], in[RX_DATA];
	int fd = connect_from_host(f, 52, &c);
	uint16_t last = f->rx_last_id;

	/* Exactly one buffer full: the device cannot tell the socket is empty until it
	 * tries to read again. */
	fill_pattern(out, 0, sizeof(out), 10);
	host_write(fd, out, sizeof(out));
	gc_recv(f, &c, &pkt, in);
	assert_int_equal(pkt.len, RX_DATA);
	assert_int_equal(f->rx_last_id, (last + 2) % QSIZE);
	run_loop(f, 20);
	host_write(fd, "x", 1);
	gc_recv(f, &c, &pkt, in);
	assert_int_equal(pkt.len, 1);
	assert_int_equal(f->rx_last_id, (last + 4) % QSIZE);
	close(fd);
}

/* A buffer with room for a header only cannot carry data; it waits for a control
 * packet instead of being returned empty or swallowed. */
static void header_only_rx_buffer_waits_for_a_control_packet(void **state)
{
	struct vsock_fixture *f = *state;
	struct gconn c;
	int fd = connect_from_host(f, 52, &c);
	uint16_t next = (uint16_t)((f->rx_last_id + 2) % QSIZE);

	desc(f, RX_QUEUE, next)->flags &= (uint16_t)~VRING_DESC_F_NEXT;
	host_write(fd, "data", 4);
	uint16_t before = used_idx(f, RX_QUEUE);
	run_loop(f, 20);
	assert_int_equal(used_idx(f, RX_QUEUE), before);
	gc_send(f, &c, VIRTIO_VSOCK_OP_CREDIT_REQUEST, 0, NULL, 0);
	gc_expect(f, &c, VIRTIO_VSOCK_OP_CREDIT_UPDATE, 0);
	assert_int_equal(f->rx_last_id, next);
	close(fd);
}

static void credit_request_is_answered_with_what_was_forwarded(void **state)
{
	struct vsock_fixture *f = *state;
	int listener = host_listen(f, 8000);
	struct gconn c;
	uint8_t data[1000], in[1000];
	int fd = connect_from_guest(f, listener, 8000, 1000, &c);

	fill_pattern(data, 0, sizeof(data), 6);
	gc_send(f, &c, VIRTIO_VSOCK_OP_RW, 0, data, sizeof(data));
	host_read(f, fd, in, sizeof(in));
	gc_send(f, &c, VIRTIO_VSOCK_OP_CREDIT_REQUEST, 0, NULL, 0);
	gc_expect(f, &c, VIRTIO_VSOCK_OP_CREDIT_UPDATE, 0);
	assert_int_equal(c.peer_buf_alloc, DEVICE_BUF_ALLOC);
	assert_int_equal(c.peer_fwd_cnt, sizeof(data));
	close(fd);
	close(listener);
}

static void host_shutdown_write_becomes_shutdown_send_after_the_data(void **state)
{
	struct vsock_fixture *f = *state;
	struct gconn c;
	struct vsock_pkt pkt = {0};
	char buf[16];
	int fd = connect_from_host(f, 52, &c);

	host_write(fd, "last words", 10);
	assert_int_equal(shutdown(fd, SHUT_WR), 0);
	gc_recv(f, &c, &pkt, buf);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_RW);
	assert_memory_equal(buf, "last words", 10);
	gc_expect(f, &c, VIRTIO_VSOCK_OP_SHUTDOWN, VIRTIO_VSOCK_SHUTDOWN_SEND);
	/* The other direction still works. */
	gc_send(f, &c, VIRTIO_VSOCK_OP_RW, 0, "reply", 5);
	host_read(f, fd, buf, 5);
	assert_memory_equal(buf, "reply", 5);
	/* The guest closes: a clean disconnect ends with the device's RST. */
	gc_send(f, &c, VIRTIO_VSOCK_OP_SHUTDOWN, VSOCK_SHUTDOWN_BOTH, NULL, 0);
	expect_rst(f, c.guest_port, c.host_port);
	host_expect_eof(f, fd);
	close(fd);
}

static void guest_shutdown_send_gives_the_host_eof_and_the_host_still_sends(void **state)
{
	struct vsock_fixture *f = *state;
	int listener = host_listen(f, 8000);
	struct gconn c;
	struct vsock_pkt pkt = {0};
	char buf[16];
	int fd = connect_from_guest(f, listener, 8000, 1000, &c);

	gc_send(f, &c, VIRTIO_VSOCK_OP_RW, 0, "bye", 3);
	gc_send(f, &c, VIRTIO_VSOCK_OP_SHUTDOWN, VIRTIO_VSOCK_SHUTDOWN_SEND, NULL, 0);
	host_read(f, fd, buf, 3);
	assert_memory_equal(buf, "bye", 3);
	host_expect_eof(f, fd);
	host_write(fd, "still here", 10);
	gc_recv(f, &c, &pkt, buf);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_RW);
	assert_memory_equal(buf, "still here", 10);
	/* The host closes: the guest is told neither side sends or receives. */
	close(fd);
	gc_expect(f, &c, VIRTIO_VSOCK_OP_SHUTDOWN, VSOCK_SHUTDOWN_BOTH);
	gc_send(f, &c, VIRTIO_VSOCK_OP_RST, 0, NULL, 0);
	/* The connection is gone, and no RST follows the guest's. */
	assert_no_pkt(f, 2 * TEST_TIMEOUT_MS);
	gc_send(f, &c, VIRTIO_VSOCK_OP_RW, 0, "late", 4);
	expect_rst(f, c.guest_port, c.host_port);
	close(listener);
}

static void guest_shutdown_rcv_makes_host_writes_fail(void **state)
{
	struct vsock_fixture *f = *state;
	struct gconn c;
	char buf[4];
	int fd = connect_from_host(f, 52, &c);

	gc_send(f, &c, VIRTIO_VSOCK_OP_SHUTDOWN, VIRTIO_VSOCK_SHUTDOWN_RCV, NULL, 0);
	assert_int_equal(send(fd, "x", 1, MSG_NOSIGNAL), -1);
	assert_int_equal(errno, EPIPE);
	/* The guest still sends. */
	gc_send(f, &c, VIRTIO_VSOCK_OP_RW, 0, "ok", 2);
	host_read(f, fd, buf, 2);
	assert_memory_equal(buf, "ok", 2);
	assert_no_pkt(f, 20);
	close(fd);
}

static void guest_close_is_answered_with_rst_and_the_host_sees_eof(void **state)
{
	struct vsock_fixture *f = *state;
	struct gconn c;
	int fd = connect_from_host(f, 52, &c);

	gc_send(f, &c, VIRTIO_VSOCK_OP_SHUTDOWN, VSOCK_SHUTDOWN_BOTH, NULL, 0);
	expect_rst(f, c.guest_port, c.host_port);
	host_expect_eof(f, fd);
	close(fd);
}

static void guest_close_delivers_what_the_host_has_not_read_yet(void **state)
{
	struct vsock_fixture *f = *state;
	int listener = host_listen(f, 8000);
	struct gconn c;
	uint8_t *out = malloc(BIG), *in = malloc(BIG);
	int fd = connect_from_guest(f, listener, 8000, 1000, &c);

	/* The host reads nothing: the socket fills, then the device's buffer. */
	fill_pattern(out, 0, BIG, 7);
	for (uint32_t room; (room = gc_peer_free(&c)) > 0;) {
		struct vsock_pkt pkt = {0};
		uint32_t len = room < 16384 ? room : 16384;
		gc_send(f, &c, VIRTIO_VSOCK_OP_RW, 0, out + c.tx_cnt, len);
		while (recv_pkt_within(f, &pkt, NULL, 0))
			gc_note(&c, &pkt);
	}
	uint32_t total = c.tx_cnt;
	gc_send(f, &c, VIRTIO_VSOCK_OP_SHUTDOWN, VSOCK_SHUTDOWN_BOTH, NULL, 0);
	assert_false(recv_pkt_within(f, &(struct vsock_pkt){0}, NULL, 0));
	host_read(f, fd, in, total);
	assert_memory_equal(in, out, total);
	/* Credit updates for what the host took, then the RST that ends the close. */
	struct vsock_pkt pkt = {0};
	do
		gc_recv(f, &c, &pkt, NULL);
	while (pkt.op == VIRTIO_VSOCK_OP_CREDIT_UPDATE);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_RST);
	host_expect_eof(f, fd);
	free(out);
	free(in);
	close(fd);
	close(listener);
}

static void host_close_delivers_its_last_bytes_then_shutdown_both(void **state)
{
	struct vsock_fixture *f = *state;
	struct gconn c;
	struct vsock_pkt pkt = {0};
	uint8_t out[10000], in[10000];
	size_t got = 0;
	int fd = connect_from_host(f, 52, &c);

	fill_pattern(out, 0, sizeof(out), 8);
	host_write(fd, out, sizeof(out));
	close(fd);
	while (got < sizeof(out)) {
		gc_recv(f, &c, &pkt, in + got);
		assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_RW);
		got += pkt.len;
	}
	assert_memory_equal(in, out, sizeof(out));
	gc_expect(f, &c, VIRTIO_VSOCK_OP_SHUTDOWN, VSOCK_SHUTDOWN_BOTH);
	gc_send(f, &c, VIRTIO_VSOCK_OP_RST, 0, NULL, 0);
	assert_no_pkt(f, 2 * TEST_TIMEOUT_MS);
}

static void host_close_waits_for_guest_credit_to_deliver_the_rest(void **state)
{
	struct vsock_fixture *f = *state;
	struct gconn c;
	struct vsock_pkt pkt = {0};
	static uint8_t out[100000], in[100000];
	size_t got = 0;
	int fd = connect_from_host(f, 52, &c);

	fill_pattern(out, 0, sizeof(out), 9);
	host_write(fd, out, sizeof(out));
	close(fd);
	while (got < sizeof(out)) {
		gc_recv(f, &c, &pkt, in + got);
		if (pkt.op == VIRTIO_VSOCK_OP_CREDIT_REQUEST) {
			guest_consumes(f, &c);
			continue;
		}
		assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_RW);
		got += pkt.len;
	}
	assert_memory_equal(in, out, sizeof(out));
	gc_expect(f, &c, VIRTIO_VSOCK_OP_SHUTDOWN, VSOCK_SHUTDOWN_BOTH);
}

static void host_close_without_the_guest_rst_ends_in_rst_after_the_timeout(void **state)
{
	struct vsock_fixture *f = *state;
	struct gconn c;
	int fd = connect_from_host(f, 52, &c);

	close(fd);
	gc_expect(f, &c, VIRTIO_VSOCK_OP_SHUTDOWN, VSOCK_SHUTDOWN_BOTH);
	expect_rst(f, c.guest_port, c.host_port);
	/* Gone: the next packet of it is unknown. */
	gc_send(f, &c, VIRTIO_VSOCK_OP_CREDIT_REQUEST, 0, NULL, 0);
	expect_rst(f, c.guest_port, c.host_port);
}

static void guest_data_after_the_host_closed_is_dropped_but_credited(void **state)
{
	struct vsock_fixture *f = *state;
	struct gconn c;
	uint8_t data[4096] = {0};
	int fd = connect_from_host(f, 52, &c);

	close(fd);
	run_loop(f, 20); /* the device sees the hang-up and tells the guest */
	/* Sent before the guest read that SHUTDOWN: no reset, and no credit lost. */
	gc_send(f, &c, VIRTIO_VSOCK_OP_RW, 0, data, sizeof(data));
	gc_expect(f, &c, VIRTIO_VSOCK_OP_SHUTDOWN, VSOCK_SHUTDOWN_BOTH);
	gc_send(f, &c, VIRTIO_VSOCK_OP_CREDIT_REQUEST, 0, NULL, 0);
	gc_expect(f, &c, VIRTIO_VSOCK_OP_CREDIT_UPDATE, 0);
	assert_int_equal(c.peer_fwd_cnt, sizeof(data));
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, vsock_setup, vsock_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(host_bytes_reach_the_guest_in_order),
	    TEST(guest_bytes_reach_the_host_in_order),
	    TEST(host_transfer_beyond_the_guest_credit_waits_for_credit_updates),
	    TEST(device_asks_for_credit_when_the_guest_has_none),
	    TEST(guest_transfer_beyond_the_device_credit_follows_credit_updates),
	    TEST(rx_buffers_are_used_in_order_and_none_is_swallowed),
	    TEST(header_only_rx_buffer_waits_for_a_control_packet),
	    TEST(credit_request_is_answered_with_what_was_forwarded),
	    TEST(host_shutdown_write_becomes_shutdown_send_after_the_data),
	    TEST(guest_shutdown_send_gives_the_host_eof_and_the_host_still_sends),
	    TEST(guest_shutdown_rcv_makes_host_writes_fail),
	    TEST(guest_close_is_answered_with_rst_and_the_host_sees_eof),
	    TEST(guest_close_delivers_what_the_host_has_not_read_yet),
	    TEST(host_close_delivers_its_last_bytes_then_shutdown_both),
	    TEST(host_close_waits_for_guest_credit_to_deliver_the_rest),
	    TEST(host_close_without_the_guest_rst_ends_in_rst_after_the_timeout),
	    TEST(guest_data_after_the_host_closed_is_dropped_but_credited),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
