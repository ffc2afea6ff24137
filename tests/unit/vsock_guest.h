/* A test guest for the virtio-vsock tests: an in-memory guest with the three queues
 * laid out as a driver would, a fake transport, a temporary directory for the host
 * sockets, and helpers that play the guest's driver (packets on tx, buffers on rx,
 * credit bookkeeping); vsock_host.h plays the host's programs. The event loop runs on
 * the test's own thread through event_loop_run_once(), so every wait here is bounded
 * and a test that waits in vain fails instead of hanging.
 *
 * Every function is static inline: each test program uses a different part. */
#ifndef MOTE_TEST_VSOCK_GUEST_H
#define MOTE_TEST_VSOCK_GUEST_H

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <linux/virtio_ring.h>

#include "fake_transport.h"
#include "virtio/vsock.h"
#include "virtio/vsock_packet.h"
#include "vmm/event_loop.h"
#include "vmm/guest_memory.h"

#define TEST_CID 3
#define TEST_TIMEOUT_MS 150 /* the device's timeouts, short for the tests */
#define WAIT_MS 3000	    /* how long a test waits for something that must happen */
#define QSIZE 64
#define RX_QUEUE 0
#define TX_QUEUE 1
#define EVENT_QUEUE 2
#define RING_BASE(q) (0x10000ULL + (uint64_t)(q)*0x4000ULL)
#define RX_BUFFERS (QSIZE / 2) /* each a header descriptor and a data descriptor */
#define RX_BUF_BASE 0x100000ULL
#define RX_DATA 4096
#define TX_SLOTS (QSIZE / 2)
#define TX_BUF_BASE 0x200000ULL
#define TX_SLOT_SIZE 0x20000ULL
#define EVENT_BUF_BASE 0x700000ULL
#define EVENT_BUFFERS 4
#define GUEST_BUF_ALLOC (64u * 1024u)
#define DEVICE_BUF_ALLOC (256u * 1024u)
#define DEVICE_BUF_ALLOC_SMALL (16u * 1024u) /* once the device's budget is granted */
#define DEVICE_FULL_CREDIT_CONNECTIONS 64    /* at a time with DEVICE_BUF_ALLOC */
#define MAX_LISTENERS 8

struct vsock_fixture {
	struct guest_memory mem;
	struct event_loop loop;
	struct virtio_vsock *vsock;
	struct vdev *dev;
	struct fake_transport transport;
	struct mote_log log;
	char log_text[FAKE_LOG_TEXT];
	char dir[64];
	char uds_path[128];
	char listeners[MAX_LISTENERS][160];
	unsigned listener_count;
	uint16_t rx_seen;    /* rx used entries the test guest has taken */
	uint16_t rx_last_id; /* the head of the last rx buffer taken */
	uint16_t tx_next;    /* tx chains offered */
	uint16_t event_seen; /* event used entries taken */
	bool rx_hold;	     /* keep taken rx buffers instead of offering them again */
	uint16_t rx_held[QSIZE];
	unsigned rx_held_count;
};

/* The guest's side of one stream. */
struct gconn {
	uint32_t guest_port;
	uint32_t host_port;
	uint32_t buf_alloc; /* the guest's receive buffer, as advertised */
	uint32_t fwd_cnt;   /* bytes the guest application took */
	uint32_t rx_cnt;    /* bytes received */
	uint32_t tx_cnt;    /* bytes sent */
	uint32_t peer_buf_alloc;
	uint32_t peer_fwd_cnt;
};

static inline void *guest(struct vsock_fixture *f, uint64_t addr, uint64_t len)
{
	void *p = guest_memory_ptr(&f->mem, addr, len);

	assert_non_null(p);
	return p;
}

static inline struct vring_desc *desc(struct vsock_fixture *f, uint16_t q, uint16_t i)
{
	return guest(f, RING_BASE(q) + i * sizeof(struct vring_desc), sizeof(struct vring_desc));
}

static inline struct vring_avail *avail(struct vsock_fixture *f, uint16_t q)
{
	return guest(f, RING_BASE(q) + 0x1000, 6 + 2 * QSIZE);
}

static inline struct vring_used *used(struct vsock_fixture *f, uint16_t q)
{
	return guest(f, RING_BASE(q) + 0x2000, 6 + 8 * QSIZE);
}

static inline uint16_t used_idx(struct vsock_fixture *f, uint16_t q)
{
	return __atomic_load_n(&used(f, q)->idx, __ATOMIC_ACQUIRE);
}

static inline void offer(struct vsock_fixture *f, uint16_t q, uint16_t head)
{
	struct vring_avail *a = avail(f, q);

	a->ring[a->idx % QSIZE] = head;
	__atomic_store_n(&a->idx, (uint16_t)(a->idx + 1), __ATOMIC_RELEASE);
}

static inline void notify(struct vsock_fixture *f, uint16_t q)
{
	pthread_mutex_lock(&f->dev->lock);
	f->dev->ops->queue_notify(f->dev, q);
	pthread_mutex_unlock(&f->dev->lock);
}

static inline uint64_t rx_header_addr(uint16_t buffer)
{
	return RX_BUF_BASE + buffer * 0x2000ULL;
}

/* Every rx buffer: a 44-byte header descriptor chained to a 4 KiB data descriptor. */
static inline void offer_rx_buffers(struct vsock_fixture *f)
{
	for (uint16_t i = 0; i < RX_BUFFERS; i++) {
		*desc(f, RX_QUEUE, 2 * i) = (struct vring_desc){
		    .addr = rx_header_addr(i),
		    .len = VSOCK_HDR_SIZE,
		    .flags = VRING_DESC_F_WRITE | VRING_DESC_F_NEXT,
		    .next = 2 * i + 1,
		};
		*desc(f, RX_QUEUE, 2 * i + 1) = (struct vring_desc){
		    .addr = rx_header_addr(i) + 0x100, .len = RX_DATA, .flags = VRING_DESC_F_WRITE};
		offer(f, RX_QUEUE, 2 * i);
	}
}

static inline void offer_event_buffers(struct vsock_fixture *f)
{
	for (uint16_t i = 0; i < EVENT_BUFFERS; i++) {
		*desc(f, EVENT_QUEUE, i) = (struct vring_desc){
		    .addr = EVENT_BUF_BASE + i * 16, .len = 8, .flags = VRING_DESC_F_WRITE};
		memset(guest(f, EVENT_BUF_BASE + i * 16, 8), 0xff, 8);
		offer(f, EVENT_QUEUE, i);
	}
}

/* What the transport does at DRIVER_OK, with every offered feature accepted (but
 * EVENT_IDX only when event_idx). */
static inline void activate_with(struct vsock_fixture *f, bool with_buffers, bool event_idx)
{
	struct vdev *dev = f->dev;

	fake_transport_attach(dev, &f->transport);
	dev->driver_features = dev->ops->features(dev) | VIRTIO_FEATURE_VERSION_1;
	if (!event_idx)
		dev->driver_features &= ~VIRTIO_FEATURE_EVENT_IDX;
	for (uint16_t q = 0; q < 3; q++) {
		memset(guest(f, RING_BASE(q), 0x3000), 0, 0x3000);
		assert_int_equal(virtq_configure(&dev->queues[q], &f->mem, QSIZE, RING_BASE(q),
						 RING_BASE(q) + 0x1000, RING_BASE(q) + 0x2000,
						 event_idx),
				 0);
	}
	f->rx_seen = f->tx_next = f->event_seen = 0;
	if (with_buffers) {
		offer_rx_buffers(f);
		offer_event_buffers(f);
	}
	pthread_mutex_lock(&dev->lock);
	assert_int_equal(dev->ops->activate(dev), 0);
	dev->activated = true;
	pthread_mutex_unlock(&dev->lock);
}

static inline void activate(struct vsock_fixture *f, bool with_buffers)
{
	activate_with(f, with_buffers, false);
}

/* The driver resets the device (status 0), as the transport does it. */
static inline void reset_device(struct vsock_fixture *f)
{
	pthread_mutex_lock(&f->dev->lock);
	f->dev->ops->reset(f->dev);
	f->dev->activated = false;
	f->dev->needs_reset = false;
	pthread_mutex_unlock(&f->dev->lock);
}

static inline int create_vsock(struct vsock_fixture *f, uint64_t cid, const char *path,
			       struct virtio_vsock **out)
{
	struct virtio_vsock_options options = {
	    .guest_cid = cid, .uds_path = path, .timeout_ms = TEST_TIMEOUT_MS};

	return virtio_vsock_create(&options, &f->mem, &f->loop, &f->log, out);
}

static inline int vsock_setup(void **state)
{
	struct vsock_fixture *f = calloc(1, sizeof(*f));

	if (!f || guest_memory_create(&f->mem, 16ULL << 20, NULL) != 0)
		return -1;
	f->log = fake_log(&f->log_text);
	snprintf(f->dir, sizeof(f->dir), "/tmp/mote-vsock-XXXXXX");
	if (!mkdtemp(f->dir) || event_loop_init(&f->loop) != 0)
		return -1;
	snprintf(f->uds_path, sizeof(f->uds_path), "%s/v.sock", f->dir);
	if (create_vsock(f, TEST_CID, f->uds_path, &f->vsock) != 0)
		return -1;
	f->dev = virtio_vsock_vdev(f->vsock);
	activate(f, true);
	*state = f;
	return 0;
}

static inline int vsock_teardown(void **state)
{
	struct vsock_fixture *f = *state;

	virtio_vsock_destroy(f->vsock);
	event_loop_destroy(&f->loop);
	for (unsigned i = 0; i < f->listener_count; i++)
		unlink(f->listeners[i]);
	unlink(f->uds_path);
	rmdir(f->dir);
	guest_memory_destroy(&f->mem);
	free(f);
	return 0;
}

static inline void run_loop(struct vsock_fixture *f, int timeout_ms)
{
	assert_true(event_loop_run_once(&f->loop, timeout_ms) >= 0);
}

/* The guest's tx side. */

/* Offers a chain of raw segments on tx and kicks; returns its head. */
struct seg {
	uint64_t addr;
	uint32_t len;
	uint16_t flags;
};

static inline uint16_t offer_tx_chain(struct vsock_fixture *f, const struct seg *segs, unsigned n)
{
	uint16_t slot = f->tx_next % TX_SLOTS;
	uint16_t head = 2 * slot;

	assert_true(n >= 1 && n <= 2);
	for (unsigned i = 0; i < n; i++)
		*desc(f, TX_QUEUE, head + i) = (struct vring_desc){
		    .addr = segs[i].addr,
		    .len = segs[i].len,
		    .flags = segs[i].flags | (i + 1 < n ? VRING_DESC_F_NEXT : 0),
		    .next = head + i + 1,
		};
	offer(f, TX_QUEUE, head);
	f->tx_next++;
	return head;
}

static inline uint64_t tx_slot_addr(struct vsock_fixture *f)
{
	return TX_BUF_BASE + (f->tx_next % TX_SLOTS) * TX_SLOT_SIZE;
}

/* Sends one packet: the header in one descriptor, the payload (if any) in a second. The
 * device takes tx chains at once. */
static inline void send_pkt(struct vsock_fixture *f, const struct vsock_pkt *pkt, const void *data,
			    uint32_t len)
{
	uint64_t base = tx_slot_addr(f);
	struct seg segs[2] = {{base, VSOCK_HDR_SIZE, 0}, {base + 0x100, len, 0}};

	assert_true(len + 0x100 <= TX_SLOT_SIZE);
	vsock_pkt_encode(pkt, guest(f, base, VSOCK_HDR_SIZE));
	if (len)
		memcpy(guest(f, base + 0x100, len), data, len);
	offer_tx_chain(f, segs, len ? 2 : 1);
	notify(f, TX_QUEUE);
	assert_int_equal(used_idx(f, TX_QUEUE), f->tx_next);
}

static inline struct vsock_pkt guest_pkt(uint32_t guest_port, uint32_t host_port, uint16_t op)
{
	return (struct vsock_pkt){
	    .src_cid = TEST_CID,
	    .dst_cid = VSOCK_HOST_CID,
	    .src_port = guest_port,
	    .dst_port = host_port,
	    .type = VIRTIO_VSOCK_TYPE_STREAM,
	    .op = op,
	    .buf_alloc = GUEST_BUF_ALLOC,
	};
}

/* The guest's rx side. */

/* Takes the next packet the device put on rx, waiting up to wait_ms for it (0: only what
 * is there now). The buffer goes back to the device at once unless rx_hold is set. */
static inline bool recv_pkt_within(struct vsock_fixture *f, struct vsock_pkt *pkt, void *data,
				   int wait_ms)
{
	/* Set even when nothing came: cmocka's failed asserts return as far as gcc knows,
	 * and an optimised build would warn of the packet used unset. */
	*pkt = (struct vsock_pkt){0};
	for (int waited = 0; used_idx(f, RX_QUEUE) == f->rx_seen; waited += 5) {
		if (waited >= wait_ms)
			return false;
		run_loop(f, 5);
	}
	struct vring_used_elem elem = used(f, RX_QUEUE)->ring[f->rx_seen % QSIZE];
	uint16_t buffer = (uint16_t)(elem.id / 2);
	f->rx_seen++;
	f->rx_last_id = (uint16_t)elem.id;
	assert_true(elem.len >= VSOCK_HDR_SIZE);
	vsock_pkt_decode(guest(f, rx_header_addr(buffer), VSOCK_HDR_SIZE), pkt);
	assert_int_equal(elem.len, VSOCK_HDR_SIZE + pkt->len);
	assert_true(pkt->len <= RX_DATA);
	if (data)
		memcpy(data, guest(f, rx_header_addr(buffer) + 0x100, RX_DATA), pkt->len);
	if (f->rx_hold) {
		f->rx_held[f->rx_held_count++] = (uint16_t)elem.id;
	} else {
		offer(f, RX_QUEUE, (uint16_t)elem.id);
		notify(f, RX_QUEUE);
	}
	return true;
}

static inline void recv_pkt(struct vsock_fixture *f, struct vsock_pkt *pkt, void *data)
{
	assert_true(recv_pkt_within(f, pkt, data, WAIT_MS));
}

static inline void release_rx(struct vsock_fixture *f)
{
	for (unsigned i = 0; i < f->rx_held_count; i++)
		offer(f, RX_QUEUE, f->rx_held[i]);
	f->rx_held_count = 0;
	f->rx_hold = false;
	notify(f, RX_QUEUE);
}

/* Asserts the device has nothing for the guest, after letting it run for a while. */
static inline void assert_no_pkt(struct vsock_fixture *f, int wait_ms)
{
	struct vsock_pkt pkt = {0};

	if (recv_pkt_within(f, &pkt, NULL, wait_ms))
		fail_msg("unexpected packet op %u from port %u to %u", pkt.op, pkt.src_port,
			 pkt.dst_port);
}

/* An RST from the host to guest_port, and nothing else, is what the device sent. */
static inline void expect_rst(struct vsock_fixture *f, uint32_t guest_port, uint32_t host_port)
{
	struct vsock_pkt pkt = {0};

	recv_pkt(f, &pkt, NULL);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_RST);
	assert_int_equal(pkt.src_cid, VSOCK_HOST_CID);
	assert_int_equal(pkt.dst_cid, TEST_CID);
	assert_int_equal(pkt.src_port, host_port);
	assert_int_equal(pkt.dst_port, guest_port);
	assert_int_equal(pkt.type, VIRTIO_VSOCK_TYPE_STREAM);
	assert_int_equal(pkt.len, 0);
}

/* One stream, seen from the guest. */

static inline void gc_send(struct vsock_fixture *f, struct gconn *c, uint16_t op, uint32_t flags,
			   const void *data, uint32_t len)
{
	struct vsock_pkt pkt = guest_pkt(c->guest_port, c->host_port, op);

	pkt.flags = flags;
	pkt.len = len;
	pkt.buf_alloc = c->buf_alloc;
	pkt.fwd_cnt = c->fwd_cnt;
	if (op == VIRTIO_VSOCK_OP_RW)
		c->tx_cnt += len;
	send_pkt(f, &pkt, data, len);
}

static inline uint32_t gc_peer_free(const struct gconn *c)
{
	return c->peer_buf_alloc - (c->tx_cnt - c->peer_fwd_cnt);
}

/* Takes a packet of c's stream and checks the device kept to the guest's credit. */
static inline void gc_note(struct gconn *c, const struct vsock_pkt *pkt)
{
	assert_int_equal(pkt->src_cid, VSOCK_HOST_CID);
	assert_int_equal(pkt->dst_cid, TEST_CID);
	assert_int_equal(pkt->src_port, c->host_port);
	assert_int_equal(pkt->dst_port, c->guest_port);
	assert_int_equal(pkt->type, VIRTIO_VSOCK_TYPE_STREAM);
	c->peer_buf_alloc = pkt->buf_alloc;
	c->peer_fwd_cnt = pkt->fwd_cnt;
	if (pkt->op == VIRTIO_VSOCK_OP_RW) {
		c->rx_cnt += pkt->len;
		assert_true(c->rx_cnt - c->fwd_cnt <= c->buf_alloc);
	} else {
		assert_int_equal(pkt->len, 0);
	}
}

static inline void gc_recv(struct vsock_fixture *f, struct gconn *c, struct vsock_pkt *pkt,
			   void *data)
{
	recv_pkt(f, pkt, data);
	gc_note(c, pkt);
}

static inline void gc_expect(struct vsock_fixture *f, struct gconn *c, uint16_t op, uint32_t flags)
{
	struct vsock_pkt pkt = {0};

	gc_recv(f, c, &pkt, NULL);
	assert_int_equal(pkt.op, op);
	assert_int_equal(pkt.flags, flags);
}

#endif
