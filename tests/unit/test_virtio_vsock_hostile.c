/* virtio-vsock against a hostile guest: every packet shape the spec does not allow is
 * dropped (when it has no address to answer) or answered with an RST that resets its
 * connection; broken queues ask for a reset; nothing reaches a host socket that should
 * not, and the device carries on serving well-formed traffic afterwards. A guest that
 * keeps tx full is served a turn's budget at a time. */
#include "vsock_host.h"

/* The device still works: a fresh guest connection to a listener gets its RESPONSE. */
static void assert_device_serves(struct vsock_fixture *f, int listener, uint32_t guest_port)
{
	struct gconn c;

	close(connect_from_guest(f, listener, 8000, guest_port, &c));
}

static void packet_from_another_cid_is_dropped(void **state)
{
	struct vsock_fixture *f = *state;
	int listener = host_listen(f, 8000);
	struct vsock_pkt request = guest_pkt(1000, 8000, VIRTIO_VSOCK_OP_REQUEST);

	request.src_cid = TEST_CID + 1;
	send_pkt(f, &request, NULL, 0);
	request.src_cid = TEST_CID | (1ULL << 32); /* the reserved upper half */
	send_pkt(f, &request, NULL, 0);
	assert_no_pkt(f, 20);
	assert_int_equal(accept(listener, NULL, NULL), -1); /* nobody connected */
	assert_non_null(strstr(f->log_text, "CID"));
	assert_device_serves(f, listener, 1000);
	close(listener);
}

static void request_to_another_cid_is_answered_with_rst_in_its_name(void **state)
{
	struct vsock_fixture *f = *state;
	int listener = host_listen(f, 8000);
	struct vsock_pkt request = guest_pkt(1000, 8000, VIRTIO_VSOCK_OP_REQUEST);
	struct vsock_pkt pkt = {0};

	request.dst_cid = 7;
	send_pkt(f, &request, NULL, 0);
	recv_pkt(f, &pkt, NULL);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_RST);
	assert_int_equal(pkt.src_cid, 7);
	assert_int_equal(pkt.src_port, 8000);
	assert_int_equal(pkt.dst_port, 1000);
	assert_int_equal(accept(listener, NULL, NULL), -1);
	/* An RST to another CID is not answered. */
	request.op = VIRTIO_VSOCK_OP_RST;
	send_pkt(f, &request, NULL, 0);
	assert_no_pkt(f, 20);
	close(listener);
}

static void unknown_op_resets_the_connection(void **state)
{
	struct vsock_fixture *f = *state;
	const uint16_t ops[] = {VIRTIO_VSOCK_OP_INVALID, 8, 42, 0xffff};

	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		struct gconn c;
		int fd = connect_from_host(f, 52, &c);
		gc_send(f, &c, ops[i], 0, NULL, 0);
		expect_rst(f, c.guest_port, c.host_port);
		host_expect_eof(f, fd);
		close(fd);
	}
}

static void unknown_op_for_no_connection_gets_rst(void **state)
{
	struct vsock_fixture *f = *state;
	struct vsock_pkt pkt = guest_pkt(1000, 8000, 42);

	send_pkt(f, &pkt, NULL, 0);
	expect_rst(f, 1000, 8000);
}

static void seqpacket_or_unknown_type_is_reset(void **state)
{
	struct vsock_fixture *f = *state;
	int listener = host_listen(f, 8000);
	struct vsock_pkt request = guest_pkt(1000, 8000, VIRTIO_VSOCK_OP_REQUEST);

	request.type = VIRTIO_VSOCK_TYPE_SEQPACKET;
	send_pkt(f, &request, NULL, 0);
	expect_rst(f, 1000, 8000);
	request.type = 99;
	send_pkt(f, &request, NULL, 0);
	expect_rst(f, 1000, 8000);
	assert_int_equal(accept(listener, NULL, NULL), -1);

	/* On a live connection it resets that connection. */
	struct gconn c;
	int fd = connect_from_guest(f, listener, 8000, 1001, &c);
	struct vsock_pkt rw = guest_pkt(1001, 8000, VIRTIO_VSOCK_OP_RW);
	rw.type = VIRTIO_VSOCK_TYPE_SEQPACKET;
	rw.len = 3;
	send_pkt(f, &rw, "abc", 3);
	expect_rst(f, 1001, 8000);
	host_expect_eof(f, fd); /* and none of its bytes got through */
	close(fd);
	close(listener);
}

static void len_beyond_the_chain_resets_the_connection(void **state)
{
	struct vsock_fixture *f = *state;
	struct gconn c;
	int fd = connect_from_host(f, 52, &c);
	struct vsock_pkt rw = guest_pkt(c.guest_port, c.host_port, VIRTIO_VSOCK_OP_RW);
	uint64_t base = tx_slot_addr(f);

	rw.len = 100; /* with 10 bytes behind the header */
	vsock_pkt_encode(&rw, guest(f, base, VSOCK_HDR_SIZE));
	memcpy(guest(f, base + VSOCK_HDR_SIZE, 10), "0123456789", 10);
	struct seg segs[1] = {{base, VSOCK_HDR_SIZE + 10, 0}};
	offer_tx_chain(f, segs, 1);
	notify(f, TX_QUEUE);
	assert_int_equal(used_idx(f, TX_QUEUE), f->tx_next);
	expect_rst(f, c.guest_port, c.host_port);
	host_expect_eof(f, fd);
	close(fd);
}

static void len_over_64k_resets_the_connection(void **state)
{
	struct vsock_fixture *f = *state;
	static uint8_t data[VSOCK_MAX_PAYLOAD + 1];
	struct gconn c;
	int fd = connect_from_host(f, 52, &c);

	gc_send(f, &c, VIRTIO_VSOCK_OP_RW, 0, data, sizeof(data));
	expect_rst(f, c.guest_port, c.host_port);
	host_expect_eof(f, fd);
	close(fd);
}

static void data_for_an_unknown_connection_gets_rst(void **state)
{
	struct vsock_fixture *f = *state;
	const uint16_t ops[] = {VIRTIO_VSOCK_OP_RW, VIRTIO_VSOCK_OP_RESPONSE,
				VIRTIO_VSOCK_OP_SHUTDOWN, VIRTIO_VSOCK_OP_CREDIT_UPDATE,
				VIRTIO_VSOCK_OP_CREDIT_REQUEST};
	struct gconn c;
	int fd = connect_from_host(f, 52, &c);

	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
		/* One port off either way is another connection. */
		struct vsock_pkt pkt = guest_pkt(c.guest_port + 1, c.host_port, ops[i]);
		pkt.len = ops[i] == VIRTIO_VSOCK_OP_RW ? 4 : 0;
		send_pkt(f, &pkt, "data", pkt.len);
		expect_rst(f, c.guest_port + 1, c.host_port);
		pkt = guest_pkt(c.guest_port, c.host_port + 1, ops[i]);
		send_pkt(f, &pkt, NULL, 0);
		expect_rst(f, c.guest_port, c.host_port + 1);
	}
	/* The real connection is untouched. */
	host_expect_nothing(f, fd);
	gc_send(f, &c, VIRTIO_VSOCK_OP_RW, 0, "ok", 2);
	char buf[2];
	host_read(f, fd, buf, 2);
	close(fd);
}

static void rst_for_an_unknown_connection_gets_no_answer(void **state)
{
	struct vsock_fixture *f = *state;
	struct vsock_pkt rst = guest_pkt(1000, 8000, VIRTIO_VSOCK_OP_RST);

	send_pkt(f, &rst, NULL, 0);
	assert_no_pkt(f, 20);
}

static void a_turn_takes_at_most_the_budget_and_asks_to_be_served_again(void **state)
{
	struct vsock_fixture *f = *state;
	const uint16_t offered = VIRTIO_VSOCK_TAKE_BUDGET + 8;
	struct vsock_pkt rst = guest_pkt(1000, 8000, VIRTIO_VSOCK_OP_RST);

	/* One-descriptor chains, each an RST for no connection: nothing is owed back. */
	assert_true(offered <= QSIZE);
	for (uint16_t i = 0; i < offered; i++) {
		uint64_t addr = TX_BUF_BASE + i * 0x100ULL;
		vsock_pkt_encode(&rst, guest(f, addr, VSOCK_HDR_SIZE));
		*desc(f, TX_QUEUE, i) = (struct vring_desc){.addr = addr, .len = VSOCK_HDR_SIZE};
		offer(f, TX_QUEUE, i);
	}
	notify(f, TX_QUEUE);
	assert_int_equal(used_idx(f, TX_QUEUE), VIRTIO_VSOCK_TAKE_BUDGET);
	assert_int_equal(f->transport.serve_again[TX_QUEUE], 1);

	/* The transport serves the queue again: the rest goes. */
	notify(f, TX_QUEUE);
	assert_int_equal(used_idx(f, TX_QUEUE), offered);
	assert_int_equal(f->transport.serve_again[TX_QUEUE], 1);
	assert_no_pkt(f, 20);
}

/* Host programs writing without pause to a guest that has buffers for all of it: one
 * fill writes at most its budget of rx buffers and asks to be served again, so the
 * event thread goes on to the VM's other devices in between. */
static void a_fill_writes_at_most_its_budget_and_asks_to_be_served_again(void **state)
{
	struct vsock_fixture *f = *state;
	static uint8_t data[GUEST_BUF_ALLOC];
	struct gconn c[3];
	int fd[3];

	/* Three streams of a full window each: more packets than the budget. */
	assert_true(3 * GUEST_BUF_ALLOC / RX_DATA > VIRTIO_VSOCK_FILL_BUDGET);
	for (int i = 0; i < 3; i++)
		fd[i] = connect_from_host(f, 7000 + (uint32_t)i, &c[i]);
	assert_int_equal(f->transport.serve_again[RX_QUEUE], 0);
	fill_pattern(data, 0, sizeof(data), 5);
	for (int i = 0; i < 3; i++)
		host_write(fd[i], data, sizeof(data));
	uint16_t before = used_idx(f, RX_QUEUE);
	run_loop(f, 100);
	assert_int_equal((uint16_t)(used_idx(f, RX_QUEUE) - before), VIRTIO_VSOCK_FILL_BUDGET);
	assert_int_equal(f->transport.serve_again[RX_QUEUE], 1);
	for (int i = 0; i < 3; i++)
		close(fd[i]);
}

static void short_header_is_dropped_and_the_device_carries_on(void **state)
{
	struct vsock_fixture *f = *state;
	int listener = host_listen(f, 8000);
	struct vsock_pkt request = guest_pkt(1000, 8000, VIRTIO_VSOCK_OP_REQUEST);
	uint64_t base = tx_slot_addr(f);

	vsock_pkt_encode(&request, guest(f, base, VSOCK_HDR_SIZE));
	struct seg segs[1] = {{base, VSOCK_HDR_SIZE - 1, 0}};
	offer_tx_chain(f, segs, 1);
	notify(f, TX_QUEUE);
	assert_int_equal(used_idx(f, TX_QUEUE), f->tx_next);
	assert_int_equal(used(f, TX_QUEUE)->ring[0].len, 0);
	assert_no_pkt(f, 20);
	assert_int_equal(f->transport.needs_reset, 0);
	/* A device-writable tx chain carries nothing either. */
	struct seg writable[1] = {{base, VSOCK_HDR_SIZE, VRING_DESC_F_WRITE}};
	offer_tx_chain(f, writable, 1);
	notify(f, TX_QUEUE);
	assert_no_pkt(f, 20);
	assert_device_serves(f, listener, 1000);
	close(listener);
}

static void broken_tx_chain_sets_needs_reset(void **state)
{
	struct vsock_fixture *f = *state;

	offer(f, TX_QUEUE, QSIZE); /* no such descriptor */
	notify(f, TX_QUEUE);
	assert_int_equal(f->transport.needs_reset, 1);
	assert_int_equal(used_idx(f, TX_QUEUE), 0);
	/* Nothing more is taken until a reset. */
	struct vsock_pkt request = guest_pkt(1000, 8000, VIRTIO_VSOCK_OP_REQUEST);
	uint64_t base = tx_slot_addr(f);
	vsock_pkt_encode(&request, guest(f, base, VSOCK_HDR_SIZE));
	struct seg segs[1] = {{base, VSOCK_HDR_SIZE, 0}};
	offer_tx_chain(f, segs, 1);
	notify(f, TX_QUEUE);
	assert_int_equal(used_idx(f, TX_QUEUE), 0);
	assert_int_equal(used_idx(f, RX_QUEUE), 0);
}

static void broken_rx_chain_sets_needs_reset(void **state)
{
	struct vsock_fixture *f = *state;
	struct vsock_pkt request = guest_pkt(1000, 8000, VIRTIO_VSOCK_OP_REQUEST);

	/* A descriptor loop in the first rx buffer. */
	desc(f, RX_QUEUE, 1)->flags |= VRING_DESC_F_NEXT;
	desc(f, RX_QUEUE, 1)->next = 0;
	send_pkt(f, &request, NULL, 0); /* no listener: an RST is owed */
	assert_int_equal(f->transport.needs_reset, 1);
	assert_int_equal(used_idx(f, RX_QUEUE), 0);
}

static void unusable_rx_buffers_are_returned_empty_and_skipped(void **state)
{
	struct vsock_fixture *f = *state;
	struct vsock_pkt request = guest_pkt(1000, 8000, VIRTIO_VSOCK_OP_REQUEST);

	/* Buffer 0 device-readable, buffer 1 too small for a header. */
	desc(f, RX_QUEUE, 0)->flags &= (uint16_t)~VRING_DESC_F_WRITE;
	desc(f, RX_QUEUE, 1)->flags &= (uint16_t)~VRING_DESC_F_WRITE;
	*desc(f, RX_QUEUE, 2) =
	    (struct vring_desc){.addr = rx_header_addr(1), .len = 16, .flags = VRING_DESC_F_WRITE};
	send_pkt(f, &request, NULL, 0);
	assert_int_equal(used_idx(f, RX_QUEUE), 3);
	assert_int_equal(used(f, RX_QUEUE)->ring[0].len, 0);
	assert_int_equal(used(f, RX_QUEUE)->ring[1].len, 0);
	f->rx_seen = 2;
	expect_rst(f, 1000, 8000); /* in buffer 2 */
	assert_int_equal(f->transport.needs_reset, 0);
}

static void second_request_for_a_live_connection_resets_it(void **state)
{
	struct vsock_fixture *f = *state;
	int listener = host_listen(f, 8000);
	struct gconn c;
	int fd = connect_from_guest(f, listener, 8000, 1000, &c);

	gc_send(f, &c, VIRTIO_VSOCK_OP_REQUEST, 0, NULL, 0);
	expect_rst(f, 1000, 8000);
	host_expect_eof(f, fd);
	assert_int_equal(accept(listener, NULL, NULL), -1);
	close(fd);
	close(listener);
}

static void data_before_the_response_resets_the_connection(void **state)
{
	struct vsock_fixture *f = *state;
	struct vsock_pkt pkt = {0};
	int fd = host_client(f);

	host_write(fd, "CONNECT 52\n", 11);
	recv_pkt(f, &pkt, NULL);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_REQUEST);
	struct vsock_pkt rw = guest_pkt(52, pkt.src_port, VIRTIO_VSOCK_OP_RW);
	rw.len = 5;
	send_pkt(f, &rw, "early", 5);
	expect_rst(f, 52, pkt.src_port);
	host_expect_eof(f, fd); /* without "OK", and without the bytes */
	close(fd);
}

static void response_on_an_established_connection_resets_it(void **state)
{
	struct vsock_fixture *f = *state;
	struct gconn c;
	int fd = connect_from_host(f, 52, &c);

	gc_send(f, &c, VIRTIO_VSOCK_OP_RESPONSE, 0, NULL, 0);
	expect_rst(f, c.guest_port, c.host_port);
	host_expect_eof(f, fd);
	close(fd);
}

/* The guest sends len bytes of data at a time, at most packets times, taking the
 * device's answers as they come, until the device resets the connection: true if it
 * did. The RST carries no credit: c keeps the last the guest had. */
static bool send_until_reset(struct vsock_fixture *f, struct gconn *c, const uint8_t *data,
			     uint32_t len, int packets)
{
	struct vsock_pkt pkt = {0};
	bool reset = false;

	for (int i = 0; i < packets && !reset; i++) {
		gc_send(f, c, VIRTIO_VSOCK_OP_RW, 0, data, len);
		while (!reset && recv_pkt_within(f, &pkt, NULL, 0)) {
			reset = pkt.op == VIRTIO_VSOCK_OP_RST;
			if (!reset)
				gc_note(c, &pkt);
		}
	}
	return reset;
}

static void guest_overrunning_the_credit_is_reset(void **state)
{
	struct vsock_fixture *f = *state;
	static uint8_t data[VSOCK_MAX_PAYLOAD];
	int listener = host_listen(f, 8000);
	struct gconn c;
	int fd = connect_from_guest(f, listener, 8000, 1000, &c);

	/* The host reads nothing, and the guest ignores the credit it was given. */
	assert_true(send_until_reset(f, &c, data, sizeof(data), 32));
	/* Only once it went beyond what it was told it may send. */
	assert_true(c.tx_cnt - c.peer_fwd_cnt > c.peer_buf_alloc);
	host_expect_eof(f, fd);
	close(fd);
	close(listener);
}

/* A guest that keeps many connections to a host program that reads slowly can make the
 * device hold what each connection's credit allows: only 64 connections at a time get
 * the full 256 KiB, the others 16 KiB. */
static void connections_beyond_the_credit_budget_get_a_small_credit(void **state)
{
	struct vsock_fixture *f = *state;
	static uint8_t data[4096];
	static int fd[DEVICE_FULL_CREDIT_CONNECTIONS];
	int small[3];
	int listener = host_listen(f, 8000);
	struct gconn c;

	for (uint32_t i = 0; i < DEVICE_FULL_CREDIT_CONNECTIONS; i++) {
		fd[i] = connect_from_guest(f, listener, 8000, 1000 + i, &c);
		assert_int_equal(c.peer_buf_alloc, DEVICE_BUF_ALLOC);
	}
	for (uint32_t i = 0; i < 3; i++) {
		small[i] = connect_from_guest(f, listener, 8000, 2000 + i, &c);
		assert_int_equal(c.peer_buf_alloc, DEVICE_BUF_ALLOC_SMALL);
	}

	/* The host reads nothing, and the guest ignores the credit: once its socket is
	 * full, the device holds no more than the small credit before it resets. */
	assert_true(send_until_reset(f, &c, data, sizeof(data), 1024));
	/* The guest's view lags the device's by less than the quarter of the credit after
	 * which the device sends a CREDIT_UPDATE. */
	assert_true(c.tx_cnt - c.peer_fwd_cnt > DEVICE_BUF_ALLOC_SMALL);
	assert_true(c.tx_cnt - c.peer_fwd_cnt <=
		    DEVICE_BUF_ALLOC_SMALL + sizeof(data) + DEVICE_BUF_ALLOC_SMALL / 4);
	host_expect_eof(f, small[2]);
	close(small[2]);

	/* One with the full credit closes while two with the small one stay: the next
	 * connection has the full credit, and the one after it the small one again. */
	struct vsock_pkt rst = guest_pkt(1000, 8000, VIRTIO_VSOCK_OP_RST);
	send_pkt(f, &rst, NULL, 0);
	host_expect_eof(f, fd[0]);
	close(fd[0]);
	fd[0] = connect_from_guest(f, listener, 8000, 3000, &c);
	assert_int_equal(c.peer_buf_alloc, DEVICE_BUF_ALLOC);
	small[2] = connect_from_guest(f, listener, 8000, 3001, &c);
	assert_int_equal(c.peer_buf_alloc, DEVICE_BUF_ALLOC_SMALL);
	for (int i = 0; i < DEVICE_FULL_CREDIT_CONNECTIONS; i++)
		close(fd[i]);
	for (int i = 0; i < 3; i++)
		close(small[i]);
	close(listener);
}

static void data_after_shutdown_send_resets_the_connection(void **state)
{
	struct vsock_fixture *f = *state;
	struct gconn c;
	int fd = connect_from_host(f, 52, &c);

	gc_send(f, &c, VIRTIO_VSOCK_OP_SHUTDOWN, VIRTIO_VSOCK_SHUTDOWN_SEND, NULL, 0);
	host_expect_eof(f, fd);
	gc_send(f, &c, VIRTIO_VSOCK_OP_RW, 0, "more", 4);
	expect_rst(f, c.guest_port, c.host_port);
	close(fd);
}

static void forged_fwd_cnt_gives_no_extra_credit(void **state)
{
	struct vsock_fixture *f = *state;
	int listener = host_listen(f, 8000);
	struct vsock_pkt request = guest_pkt(1000, 8000, VIRTIO_VSOCK_OP_REQUEST);
	struct vsock_pkt pkt = {0};
	uint8_t data[8192] = {0};

	/* A guest claiming to have consumed bytes it was never sent. */
	request.buf_alloc = 4096;
	request.fwd_cnt = 0xffff0000u;
	send_pkt(f, &request, NULL, 0);
	recv_pkt(f, &pkt, NULL);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_RESPONSE);
	int fd = host_accept(listener);
	host_write(fd, data, sizeof(data));
	while (recv_pkt_within(f, &pkt, NULL, 50))
		assert_int_not_equal(pkt.op, VIRTIO_VSOCK_OP_RW);
	close(fd);
	close(listener);
}

/* §5.10.6.1: a guest that takes no replies stalls its own tx queue once the replies
 * the device holds for it are at their bound; nothing is lost, and tx moves on when rx
 * does. */
static void guest_taking_no_replies_stalls_tx_without_losing_them(void **state)
{
	struct vsock_fixture *f = *state;
	const unsigned held = RX_BUFFERS + 1024; /* rx buffers, and the reply queue */
	const unsigned sent = held + 5;

	for (unsigned i = 0; i < sent; i++) {
		struct vsock_pkt rw = guest_pkt(10000 + i, 8000, VIRTIO_VSOCK_OP_RW);
		uint64_t base = tx_slot_addr(f);
		vsock_pkt_encode(&rw, guest(f, base, VSOCK_HDR_SIZE));
		struct seg segs[1] = {{base, VSOCK_HDR_SIZE, 0}};
		offer_tx_chain(f, segs, 1);
		notify(f, TX_QUEUE);
	}
	assert_int_equal(used_idx(f, TX_QUEUE), held);
	for (unsigned i = 0; i < sent; i++)
		expect_rst(f, 10000 + i, 8000);
	assert_int_equal(used_idx(f, TX_QUEUE), sent);
	assert_no_pkt(f, 20);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, vsock_setup, vsock_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(packet_from_another_cid_is_dropped),
	    TEST(request_to_another_cid_is_answered_with_rst_in_its_name),
	    TEST(unknown_op_resets_the_connection),
	    TEST(unknown_op_for_no_connection_gets_rst),
	    TEST(seqpacket_or_unknown_type_is_reset),
	    TEST(len_beyond_the_chain_resets_the_connection),
	    TEST(len_over_64k_resets_the_connection),
	    TEST(data_for_an_unknown_connection_gets_rst),
	    TEST(rst_for_an_unknown_connection_gets_no_answer),
	    TEST(short_header_is_dropped_and_the_device_carries_on),
	    TEST(broken_tx_chain_sets_needs_reset),
	    TEST(broken_rx_chain_sets_needs_reset),
	    TEST(unusable_rx_buffers_are_returned_empty_and_skipped),
	    TEST(second_request_for_a_live_connection_resets_it),
	    TEST(data_before_the_response_resets_the_connection),
	    TEST(response_on_an_established_connection_resets_it),
	    TEST(guest_overrunning_the_credit_is_reset),
	    TEST(connections_beyond_the_credit_budget_get_a_small_credit),
	    TEST(data_after_shutdown_send_resets_the_connection),
	    TEST(forged_fwd_cnt_gives_no_extra_credit),
	    TEST(guest_taking_no_replies_stalls_tx_without_losing_them),
	    TEST(a_turn_takes_at_most_the_budget_and_asks_to_be_served_again),
	    TEST(a_fill_writes_at_most_its_budget_and_asks_to_be_served_again),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
