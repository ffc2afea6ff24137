/* virtio-net (virtio 1.2 §5.1) over a fake TAP: an AF_UNIX SOCK_SEQPACKET pair keeps
 * packet boundaries as a TAP fd does, one frame (header first) per read and per write.
 * What a driver sees through the queues and the config space, what the host side of the
 * pair receives, and that packets and buffers breaking the rules are dropped one by one
 * while the device carries on. An in-memory guest, a fake transport, no KVM, no TAP. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include <linux/if_tun.h>
#include <linux/virtio_net.h>
#include <linux/virtio_ring.h>

#include "fake_transport.h"
#include "virtio/net.h"
#include "virtio/net_tap.h"
#include "vmm/event_loop.h"
#include "vmm/guest_memory.h"
#include "vmm/snapshot_stream.h"

#define MIB (1024ULL * 1024ULL)
#define RAM_SIZE (16 * MIB)
#define QSIZE 128
#define RX 0
#define TX 1
#define HEAP_ADDR 0x100000ULL
#define HDR_LEN 12
#define MAX_PACKET (HDR_LEN + VIRTIO_NET_MAX_FRAME)
#define ALL_FEATURES UINT64_MAX /* whatever the device offers */
#define BIT(feature) (1ULL << (feature))

struct queue_layout {
	uint64_t desc, avail, used;
};

static const struct queue_layout layouts[2] = {
    {0x10000, 0x11000, 0x12000},
    {0x14000, 0x15000, 0x16000},
};

struct fixture {
	struct guest_memory mem;
	struct event_loop loop;
	struct virtio_net *net;
	struct vdev *dev;
	struct fake_transport transport;
	struct mote_log log;
	char log_text[FAKE_LOG_TEXT];
	int fd;	  /* the device's end of the pair */
	int peer; /* the host network's end */
	uint16_t next_desc[2];
	uint64_t next_buf;
	uint8_t packet[MAX_PACKET + 64];
};

struct seg {
	uint64_t addr;
	uint32_t len;
	bool writable;
};

/* The offloads the device last asked the backend for, -1 when never. */
static int64_t offloads_set;
static int offloads_error;

static int record_offloads(int tap_fd, uint64_t driver_features)
{
	(void)tap_fd;
	offloads_set = (int64_t)driver_features;
	return offloads_error;
}

static void *guest(struct fixture *f, uint64_t addr, uint64_t len)
{
	void *p = guest_memory_ptr(&f->mem, addr, len);

	assert_non_null(p);
	return p;
}

static struct vring_avail *avail(struct fixture *f, int q)
{
	return guest(f, layouts[q].avail, 6 + 2 * QSIZE);
}

static struct vring_used *used(struct fixture *f, int q)
{
	return guest(f, layouts[q].used, 6 + 8 * QSIZE);
}

static const uint8_t test_mac[6] = {0x52, 0x54, 0x00, 0x12, 0x34, 0x56};

static int create(struct fixture *f, const uint8_t *mac, struct virtio_net **net)
{
	struct virtio_net_options options = {
	    .tap_fd = f->fd, .set_offloads = record_offloads, .name = "test"};

	if (mac) {
		memcpy(options.mac, mac, 6);
		options.has_mac = true;
	}
	return virtio_net_create(&options, &f->mem, &f->loop, &f->log, net);
}

/* What the transport does once the driver set DRIVER_OK: both queues laid out afresh
 * in guest RAM, the features the driver accepted (of those offered). */
static void activate(struct fixture *f, uint64_t features, bool event_idx)
{
	struct vdev *dev = f->dev;

	for (int q = 0; q < 2; q++) {
		memset(guest(f, layouts[q].avail, 0x1000), 0, 0x1000);
		memset(guest(f, layouts[q].used, 0x1000), 0, 0x1000);
		f->next_desc[q] = 0;
	}
	fake_transport_attach(dev, &f->transport);
	dev->driver_features = dev->ops->features(dev) & features;
	for (int q = 0; q < 2; q++)
		assert_int_equal(virtq_configure(&dev->queues[q], &f->mem, QSIZE, layouts[q].desc,
						 layouts[q].avail, layouts[q].used, event_idx),
				 0);
	pthread_mutex_lock(&dev->lock);
	assert_int_equal(dev->ops->activate(dev), 0);
	dev->activated = true;
	pthread_mutex_unlock(&dev->lock);
}

/* The driver resets the device (status 0), as the transport does it. */
static void reset(struct fixture *f)
{
	struct vdev *dev = f->dev;

	pthread_mutex_lock(&dev->lock);
	dev->ops->reset(dev);
	for (int q = 0; q < 2; q++)
		virtq_reset(&dev->queues[q]);
	dev->activated = false;
	dev->needs_reset = false;
	dev->driver_features = 0;
	pthread_mutex_unlock(&dev->lock);
}

static void attach(struct fixture *f)
{
	assert_int_equal(event_loop_init(&f->loop), 0);
	assert_int_equal(create(f, test_mac, &f->net), 0);
	f->dev = virtio_net_vdev(f->net);
}

static void detach(struct fixture *f)
{
	virtio_net_destroy(f->net);
	event_loop_destroy(&f->loop);
	f->net = NULL;
}

static int setup_inactive(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	int sv[2];

	if (!f || guest_memory_create(&f->mem, RAM_SIZE, NULL) != 0)
		return -1;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
		return -1;
	f->fd = sv[0];
	f->peer = sv[1];
	f->log = fake_log(&f->log_text);
	f->next_buf = HEAP_ADDR;
	offloads_set = -1;
	offloads_error = 0;
	attach(f);
	*state = f;
	return 0;
}

/* A device whose driver accepted every feature offered but EVENT_IDX. */
static int setup(void **state)
{
	int err = setup_inactive(state);

	if (!err)
		activate(*state, ALL_FEATURES, false);
	return err;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	if (f->net)
		detach(f);
	close(f->fd);
	if (f->peer >= 0)
		close(f->peer);
	guest_memory_destroy(&f->mem);
	free(f);
	return 0;
}

/* Guest buffers come from a bump allocator above the rings; each is zeroed. */
static uint64_t galloc(struct fixture *f, uint64_t len)
{
	uint64_t addr = f->next_buf;

	f->next_buf = (f->next_buf + len + 15) & ~15ULL;
	memset(guest(f, addr, len ? len : 1), 0, len);
	return addr;
}

/* Chains segs through consecutive descriptors of queue q and makes the chain available. */
static uint16_t offer(struct fixture *f, int q, const struct seg *segs, unsigned n)
{
	uint16_t head = f->next_desc[q];

	for (unsigned i = 0; i < n; i++) {
		struct vring_desc *d =
		    guest(f, layouts[q].desc + (head + i) * sizeof(*d), sizeof(*d));
		*d = (struct vring_desc){
		    .addr = segs[i].addr,
		    .len = segs[i].len,
		    .flags = (segs[i].writable ? VRING_DESC_F_WRITE : 0) |
			     (i + 1 < n ? VRING_DESC_F_NEXT : 0),
		    .next = head + i + 1,
		};
	}
	f->next_desc[q] += n;
	avail(f, q)->ring[avail(f, q)->idx % QSIZE] = head;
	avail(f, q)->idx++;
	return head;
}

static void notify(struct fixture *f, int q)
{
	pthread_mutex_lock(&f->dev->lock);
	f->dev->ops->queue_notify(f->dev, q);
	pthread_mutex_unlock(&f->dev->lock);
}

/* Runs the event loop until no handler is ready (bounded). */
static void pump(struct fixture *f)
{
	for (int i = 0; i < 100 && event_loop_run_once(&f->loop, 0) > 0; i++) {
	}
}

static uint8_t pattern(size_t i, uint8_t seed)
{
	return (uint8_t)(seed + i * 7 + (i >> 8));
}

static void fill_pattern(uint8_t *p, size_t len, uint8_t seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = pattern(i, seed);
}

static void assert_pattern(const uint8_t *p, size_t len, uint8_t seed, size_t start)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != pattern(start + i, seed))
			fail_msg("byte %zu is %#x, not %#x", start + i, p[i],
				 pattern(start + i, seed));
}

static struct virtio_net_hdr_mrg_rxbuf plain_header(void)
{
	return (struct virtio_net_hdr_mrg_rxbuf){0};
}

/* A partial-checksum TCPv4 header for a frame of at least 54 bytes (§5.1.6.2 example). */
static struct virtio_net_hdr_mrg_rxbuf tso4_header(void)
{
	struct virtio_net_hdr_mrg_rxbuf h = {0};

	h.hdr.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM;
	h.hdr.gso_type = VIRTIO_NET_HDR_GSO_TCPV4;
	h.hdr.hdr_len = htole16(54);
	h.hdr.gso_size = htole16(1448);
	h.hdr.csum_start = htole16(34);
	h.hdr.csum_offset = htole16(16);
	return h;
}

/* A transmit chain of one readable descriptor: header, then frame_len pattern bytes. */
static uint16_t offer_packet(struct fixture *f, const struct virtio_net_hdr_mrg_rxbuf *h,
			     uint32_t frame_len, uint8_t seed)
{
	uint64_t addr = galloc(f, HDR_LEN + frame_len);
	uint8_t *p = guest(f, addr, HDR_LEN + frame_len);

	memcpy(p, h, HDR_LEN);
	fill_pattern(p + HDR_LEN, frame_len, seed);
	struct seg s = {addr, HDR_LEN + frame_len, false};
	return offer(f, TX, &s, 1);
}

/* Receives what the device wrote to the TAP: its length, or -1 when nothing is there. */
static ssize_t peer_recv(struct fixture *f)
{
	return recv(f->peer, f->packet, sizeof(f->packet), MSG_DONTWAIT);
}

static void assert_peer_got(struct fixture *f, const struct virtio_net_hdr_mrg_rxbuf *h,
			    uint32_t frame_len, uint8_t seed)
{
	assert_int_equal(peer_recv(f), HDR_LEN + frame_len);
	assert_memory_equal(f->packet, h, HDR_LEN);
	assert_pattern(f->packet + HDR_LEN, frame_len, seed, 0);
}

static void assert_peer_empty(struct fixture *f)
{
	assert_int_equal(peer_recv(f), -1);
	assert_int_equal(errno, EAGAIN);
}

/* The host network sends a frame of frame_len pattern bytes behind header h. */
static void peer_send(struct fixture *f, const struct virtio_net_hdr_mrg_rxbuf *h,
		      uint32_t frame_len, uint8_t seed)
{
	memcpy(f->packet, h, HDR_LEN);
	fill_pattern(f->packet + HDR_LEN, frame_len, seed);
	assert_int_equal(send(f->peer, f->packet, HDR_LEN + frame_len, MSG_DONTWAIT),
			 HDR_LEN + frame_len);
}

/* A receive buffer of len bytes, in one writable descriptor. */
static uint64_t offer_rx_buffer(struct fixture *f, uint32_t len, uint16_t *head)
{
	uint64_t addr = galloc(f, len);
	struct seg s = {addr, len, true};
	uint16_t h = offer(f, RX, &s, 1);

	if (head)
		*head = h;
	return addr;
}

static struct vring_used_elem used_elem(struct fixture *f, int q, uint16_t i)
{
	return used(f, q)->ring[i % QSIZE];
}

static struct virtio_net_stats stats(struct fixture *f)
{
	struct virtio_net_stats s;

	virtio_net_get_stats(f->net, &s);
	return s;
}

static uint64_t config_field(struct vdev *dev, uint32_t offset, uint32_t len)
{
	uint64_t value = 0;

	dev->ops->config_read(dev, offset, (uint8_t *)&value, len);
	return le64toh(value);
}

/* Features and config space. */

static void features_offer_offloads_mergeable_buffers_status_and_ring_features(void **state)
{
	struct fixture *f = *state;
	uint64_t features = f->dev->ops->features(f->dev);
	const unsigned offered[] = {
	    VIRTIO_NET_F_CSUM,	     VIRTIO_NET_F_GUEST_CSUM, VIRTIO_NET_F_MAC,
	    VIRTIO_NET_F_GUEST_TSO4, VIRTIO_NET_F_GUEST_TSO6, VIRTIO_NET_F_GUEST_ECN,
	    VIRTIO_NET_F_HOST_TSO4,  VIRTIO_NET_F_HOST_TSO6,  VIRTIO_NET_F_HOST_ECN,
	    VIRTIO_NET_F_MRG_RXBUF,  VIRTIO_NET_F_STATUS,
	};
	const unsigned not_offered[] = {
	    VIRTIO_NET_F_GUEST_UFO, VIRTIO_NET_F_HOST_UFO, VIRTIO_NET_F_CTRL_VQ,
	    VIRTIO_NET_F_MQ,	    VIRTIO_NET_F_MTU,	   VIRTIO_NET_F_CTRL_GUEST_OFFLOADS,
	};

	for (size_t i = 0; i < sizeof(offered) / sizeof(offered[0]); i++)
		assert_true(features & BIT(offered[i]));
	for (size_t i = 0; i < sizeof(not_offered) / sizeof(not_offered[0]); i++)
		assert_false(features & BIT(not_offered[i]));
	assert_true(features & VIRTIO_FEATURE_EVENT_IDX);
	assert_true(features & VIRTIO_FEATURE_INDIRECT_DESC);
	assert_int_equal(f->dev->device_id, VIRTIO_ID_NET);
	assert_int_equal(f->dev->queue_count, 2);
}

static void mac_is_offered_only_when_given(void **state)
{
	struct fixture *f = *state;
	struct virtio_net *other = NULL;
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	int fd = f->fd;
	f->fd = sv[0];
	assert_int_equal(create(f, NULL, &other), 0);
	f->fd = fd;
	struct vdev *dev = virtio_net_vdev(other);
	assert_false(dev->ops->features(dev) & BIT(VIRTIO_NET_F_MAC));
	assert_int_equal(config_field(dev, 0, 6), 0);
	virtio_net_destroy(other);
	close(sv[0]);
	close(sv[1]);
}

static void config_space_holds_the_mac_link_up_and_one_queue_pair(void **state)
{
	struct fixture *f = *state;
	uint8_t mac[6];

	assert_int_equal(f->dev->config_size, offsetof(struct virtio_net_config, mtu));
	f->dev->ops->config_read(f->dev, 0, mac, 6);
	assert_memory_equal(mac, test_mac, 6);
	assert_int_equal(config_field(f->dev, offsetof(struct virtio_net_config, status), 2),
			 VIRTIO_NET_S_LINK_UP);
	assert_int_equal(
	    config_field(f->dev, offsetof(struct virtio_net_config, max_virtqueue_pairs), 2), 1);
	/* Byte by byte, as a driver may read. */
	for (uint32_t i = 0; i < 6; i++)
		assert_int_equal(config_field(f->dev, i, 1), test_mac[i]);
}

static void config_writes_are_ignored(void **state)
{
	struct fixture *f = *state;
	uint8_t ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	uint8_t mac[6];

	f->dev->ops->config_write(f->dev, 0, ones, 8);
	f->dev->ops->config_read(f->dev, 0, mac, 6);
	assert_memory_equal(mac, test_mac, 6);
	assert_int_equal(config_field(f->dev, 6, 2), VIRTIO_NET_S_LINK_UP);
}

static void multicast_or_zero_mac_and_bad_fd_are_refused(void **state)
{
	struct fixture *f = *state;
	struct virtio_net *other = NULL;
	const uint8_t multicast[6] = {0x01, 0x00, 0x5e, 0x00, 0x00, 0x01};
	const uint8_t zero[6] = {0};

	assert_int_equal(create(f, multicast, &other), -EINVAL);
	assert_non_null(strstr(f->log_text, "01:00:5e:00:00:01"));
	assert_int_equal(create(f, zero, &other), -EINVAL);
	int fd = f->fd;
	f->fd = -1;
	assert_int_equal(create(f, test_mac, &other), -EINVAL);
	f->fd = fd;
	assert_null(other);
}

static void backend_fd_is_made_nonblocking(void **state)
{
	struct fixture *f = *state;

	assert_true(fcntl(f->fd, F_GETFL) & O_NONBLOCK);
}

static void activation_sets_the_offloads_the_driver_accepted_and_reset_clears_them(void **state)
{
	struct fixture *f = *state;
	uint64_t accepted = BIT(VIRTIO_NET_F_GUEST_CSUM) | BIT(VIRTIO_NET_F_GUEST_TSO4);

	assert_int_equal(offloads_set, (int64_t)f->dev->ops->features(f->dev));
	reset(f);
	assert_int_equal(offloads_set, 0);
	activate(f, accepted, false);
	assert_int_equal(offloads_set, (int64_t)accepted);
}

static void activation_fails_when_the_offloads_cannot_be_set(void **state)
{
	struct fixture *f = *state;

	reset(f);
	offloads_error = -ENOTTY;
	pthread_mutex_lock(&f->dev->lock);
	assert_int_equal(f->dev->ops->activate(f->dev), -ENOTTY);
	pthread_mutex_unlock(&f->dev->lock);
	assert_non_null(strstr(f->log_text, "offloads"));
}

/* Transmit. */

static void transmitted_frame_reaches_the_tap_byte_identical_with_its_header(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = tso4_header();
	uint16_t head = offer_packet(f, &h, 3000, 1);

	notify(f, TX);
	assert_peer_got(f, &h, 3000, 1);
	assert_peer_empty(f);
	assert_int_equal(used(f, TX)->idx, 1);
	assert_int_equal(used_elem(f, TX, 0).id, head);
	assert_int_equal(used_elem(f, TX, 0).len, 0);
	assert_int_equal(f->transport.interrupts[TX], 1);
	assert_int_equal(stats(f).tx_frames, 1);
	assert_int_equal(stats(f).tx_bytes, 3000);
}

static void frame_spread_over_segments_and_an_indirect_table_is_sent_whole(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();
	uint8_t frame[1000];
	/* The header split 5 + 7, the frame 300 + 1 + 699 bytes, all in an indirect table. */
	uint64_t a = galloc(f, 5), b = galloc(f, 7), c = galloc(f, 300), d = galloc(f, 1),
		 e = galloc(f, 699), table = galloc(f, 5 * sizeof(struct vring_desc));
	const struct seg segs[] = {
	    {a, 5, false}, {b, 7, false}, {c, 300, false}, {d, 1, false}, {e, 699, false}};

	h.hdr.hdr_len = htole16(14);
	fill_pattern(frame, sizeof(frame), 9);
	memcpy(guest(f, a, 5), &h, 5);
	memcpy(guest(f, b, 7), (uint8_t *)&h + 5, 7);
	memcpy(guest(f, c, 300), frame, 300);
	memcpy(guest(f, d, 1), frame + 300, 1);
	memcpy(guest(f, e, 699), frame + 301, 699);
	struct vring_desc *t = guest(f, table, 5 * sizeof(*t));
	for (uint16_t i = 0; i < 5; i++)
		t[i] = (struct vring_desc){.addr = segs[i].addr,
					   .len = segs[i].len,
					   .flags = i < 4 ? VRING_DESC_F_NEXT : 0,
					   .next = i + 1};
	struct vring_desc *desc = guest(f, layouts[TX].desc, sizeof(*desc));
	*desc = (struct vring_desc){
	    .addr = table, .len = 5 * sizeof(*t), .flags = VRING_DESC_F_INDIRECT};
	avail(f, TX)->ring[0] = 0;
	avail(f, TX)->idx = 1;

	notify(f, TX);
	assert_peer_got(f, &h, 1000, 9);
	assert_int_equal(used(f, TX)->idx, 1);
}

static void writable_descriptors_in_a_transmit_chain_are_ignored(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();
	uint64_t addr = galloc(f, HDR_LEN + 60), extra = galloc(f, 100);

	memcpy(guest(f, addr, HDR_LEN), &h, HDR_LEN);
	fill_pattern(guest(f, addr + HDR_LEN, 60), 60, 4);
	struct seg segs[] = {{addr, HDR_LEN + 60, false}, {extra, 100, true}};
	offer(f, TX, segs, 2);
	notify(f, TX);
	assert_peer_got(f, &h, 60, 4);
	assert_int_equal(used_elem(f, TX, 0).len, 0);
}

static void a_batch_of_frames_is_sent_in_order_with_one_interrupt(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();

	for (uint8_t i = 0; i < 5; i++)
		offer_packet(f, &h, 100 + i, i);
	notify(f, TX);
	for (uint8_t i = 0; i < 5; i++)
		assert_peer_got(f, &h, 100 + i, i);
	assert_int_equal(used(f, TX)->idx, 5);
	assert_int_equal(f->transport.interrupts[TX], 1);
}

static void short_and_oversized_packets_are_dropped_and_the_next_one_is_sent(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();
	uint64_t tiny = galloc(f, 8);
	struct seg header_only = {tiny, 8, false};

	offer(f, TX, &header_only, 1);			  /* shorter than the header */
	offer_packet(f, &h, 13, 1);			  /* shorter than an Ethernet header */
	offer_packet(f, &h, VIRTIO_NET_MAX_FRAME + 1, 2); /* longer than the largest frame */
	offer_packet(f, &h, 14, 3);
	offer_packet(f, &h, VIRTIO_NET_MAX_FRAME, 4);
	notify(f, TX);
	assert_peer_got(f, &h, 14, 3);
	assert_peer_got(f, &h, VIRTIO_NET_MAX_FRAME, 4);
	assert_peer_empty(f);
	assert_int_equal(used(f, TX)->idx, 5);
	for (uint16_t i = 0; i < 5; i++)
		assert_int_equal(used_elem(f, TX, i).len, 0);
	assert_int_equal(stats(f).tx_malformed, 3);
	assert_int_equal(f->transport.needs_reset, 0);
}

static void packets_with_bad_headers_are_dropped_and_the_next_one_is_sent(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf bad[10];
	struct virtio_net_hdr_mrg_rxbuf good = tso4_header();
	unsigned n = 0;

	bad[n] = tso4_header(); /* the checksum field beyond the frame */
	bad[n++].hdr.csum_start = htole16(100 - 17);
	bad[n] = tso4_header(); /* csum_start + csum_offset overflowing 16 bits */
	bad[n].hdr.csum_start = htole16(0xffff);
	bad[n++].hdr.csum_offset = htole16(0xffff);
	bad[n] = tso4_header(); /* hdr_len beyond the frame */
	bad[n++].hdr.hdr_len = htole16(101);
	bad[n] = tso4_header(); /* segmentation without NEEDS_CSUM */
	bad[n++].hdr.flags = 0;
	bad[n] = tso4_header(); /* segmentation with no segment size */
	bad[n++].hdr.gso_size = 0;
	bad[n] = tso4_header(); /* segments under Linux's floor (TCP_MIN_GSO_SIZE, 8) */
	bad[n++].hdr.gso_size = htole16(7);
	bad[n] = tso4_header(); /* UDP fragmentation: HOST_UFO not offered */
	bad[n++].hdr.gso_type = VIRTIO_NET_HDR_GSO_UDP;
	bad[n] = tso4_header();	   /* UDP segmentation: HOST_USO not offered */
	bad[n++].hdr.gso_type = 5; /* VIRTIO_NET_HDR_GSO_UDP_L4 */
	bad[n] = tso4_header();	   /* no such type */
	bad[n++].hdr.gso_type = 2;
	bad[n] = plain_header(); /* ECN without segmentation */
	bad[n++].hdr.gso_type = VIRTIO_NET_HDR_GSO_ECN;

	for (unsigned i = 0; i < n; i++) {
		offer_packet(f, &bad[i], 100, (uint8_t)i);
		offer_packet(f, &good, 100, (uint8_t)(0x80 + i));
	}
	notify(f, TX);
	for (unsigned i = 0; i < n; i++)
		assert_peer_got(f, &good, 100, (uint8_t)(0x80 + i));
	assert_peer_empty(f);
	assert_int_equal(used(f, TX)->idx, 2 * n);
	assert_int_equal(stats(f).tx_malformed, n);
	assert_int_equal(stats(f).tx_frames, n);
}

static void offloads_the_driver_did_not_negotiate_are_dropped(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf tso4 = tso4_header(), tso6 = tso4_header();
	struct virtio_net_hdr_mrg_rxbuf ecn = tso4_header(), csum = plain_header();

	tso6.hdr.gso_type = VIRTIO_NET_HDR_GSO_TCPV6;
	ecn.hdr.gso_type |= VIRTIO_NET_HDR_GSO_ECN;
	csum.hdr.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM;
	csum.hdr.csum_start = htole16(34);
	csum.hdr.csum_offset = htole16(16);

	/* Checksums and TSOv4, but neither TSOv6 nor ECN. */
	reset(f);
	activate(f, BIT(VIRTIO_NET_F_CSUM) | BIT(VIRTIO_NET_F_HOST_TSO4), false);
	offer_packet(f, &tso6, 100, 1);
	offer_packet(f, &ecn, 100, 2);
	offer_packet(f, &tso4, 100, 3);
	notify(f, TX);
	assert_peer_got(f, &tso4, 100, 3);
	assert_peer_empty(f);

	/* No offload at all: not even a partial checksum. */
	struct virtio_net_hdr_mrg_rxbuf plain = plain_header();
	reset(f);
	activate(f, 0, false);
	offer_packet(f, &csum, 100, 4);
	offer_packet(f, &tso4, 100, 5);
	offer_packet(f, &plain, 100, 6);
	notify(f, TX);
	assert_peer_got(f, &plain, 100, 6);
	assert_peer_empty(f);
	assert_int_equal(stats(f).tx_malformed, 4);
}

static void flags_the_driver_must_not_set_do_not_reach_the_tap(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = tso4_header(), expect = tso4_header();

	h.hdr.flags |= VIRTIO_NET_HDR_F_DATA_VALID | VIRTIO_NET_HDR_F_RSC_INFO | 0x80;
	offer_packet(f, &h, 100, 1);
	notify(f, TX);
	assert_peer_got(f, &expect, 100, 1);
}

/* Fills the pair from the device's end until it would block; returns how many frames. */
static int fill_backend(struct fixture *f)
{
	uint8_t filler[HDR_LEN + 1000] = {0};
	int n = 0;

	while (send(f->fd, filler, sizeof(filler), MSG_DONTWAIT) == (ssize_t)sizeof(filler))
		n++;
	assert_int_equal(errno, EAGAIN);
	return n;
}

static void drain_filler(struct fixture *f, int n)
{
	for (int i = 0; i < n; i++)
		assert_int_equal(peer_recv(f), HDR_LEN + 1000);
}

static void full_tap_keeps_transmit_chains_until_it_is_writable_again(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();
	int filler = fill_backend(f);

	assert_true(filler > 0);
	for (uint8_t i = 0; i < 3; i++)
		offer_packet(f, &h, 200, i);
	notify(f, TX);
	notify(f, TX);
	pump(f);
	assert_int_equal(used(f, TX)->idx, 0);
	assert_int_equal(f->transport.interrupts[TX], 0);

	drain_filler(f, filler);
	pump(f);
	assert_int_equal(used(f, TX)->idx, 3);
	for (uint8_t i = 0; i < 3; i++)
		assert_peer_got(f, &h, 200, i);
	assert_peer_empty(f);
	assert_int_equal(f->transport.interrupts[TX], 1);
	assert_int_equal(stats(f).tx_frames, 3);
	assert_int_equal(stats(f).tx_errors, 0);
}

static void event_idx_avail_event_follows_the_last_transmit_chain_taken(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();
	uint16_t *avail_event = guest(f, layouts[TX].used + 4 + 8 * QSIZE, 2);

	reset(f);
	activate(f, ALL_FEATURES, true);
	avail(f, TX)->ring[QSIZE] = 0; /* used_event: interrupt after the first */
	for (uint8_t i = 0; i < 3; i++)
		offer_packet(f, &h, 60, i);
	notify(f, TX);
	assert_int_equal(*avail_event, 3);
	assert_int_equal(used(f, TX)->idx, 3);
	assert_int_equal(f->transport.interrupts[TX], 1);
}

static void broken_transmit_chain_needs_a_reset(void **state)
{
	struct fixture *f = *state;

	avail(f, TX)->ring[0] = QSIZE; /* no such descriptor */
	avail(f, TX)->idx = 1;
	notify(f, TX);
	assert_int_equal(f->transport.needs_reset, 1);
	assert_int_equal(used(f, TX)->idx, 0);
	assert_peer_empty(f);
}

/* Receive. */

static struct virtio_net_hdr_mrg_rxbuf received_header(struct fixture *f, uint64_t buffer)
{
	struct virtio_net_hdr_mrg_rxbuf h;

	memcpy(&h, guest(f, buffer, HDR_LEN), HDR_LEN);
	return h;
}

static void received_frame_fills_one_big_buffer(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();
	uint16_t head;

	reset(f);
	activate(f, ALL_FEATURES & ~BIT(VIRTIO_NET_F_MRG_RXBUF), false);
	uint64_t buf = offer_rx_buffer(f, MAX_PACKET, &head);
	notify(f, RX);
	peer_send(f, &h, 1500, 7);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 1);
	assert_int_equal(used_elem(f, RX, 0).id, head);
	assert_int_equal(used_elem(f, RX, 0).len, HDR_LEN + 1500);
	h.num_buffers = htole16(1); /* §5.1.6.4.1, even without MRG_RXBUF */
	struct virtio_net_hdr_mrg_rxbuf got = received_header(f, buf);
	assert_memory_equal(&got, &h, HDR_LEN);
	assert_pattern(guest(f, buf + HDR_LEN, 1500), 1500, 7, 0);
	assert_int_equal(f->transport.interrupts[RX], 1);
	assert_int_equal(stats(f).rx_frames, 1);
	assert_int_equal(stats(f).rx_bytes, 1500);
}

static bool page_is_set(const uint64_t *bitmap, uint64_t addr)
{
	uint64_t page = addr / GUEST_PAGE_SIZE;

	return bitmap[page / 64] & (1ULL << (page % 64));
}

/* Diff snapshots: with mergeable buffers the device takes enough for the largest frame
 * and keeps those a frame did not use. One it took before a snapshot and filled after
 * must count as written since that snapshot, or the next diff misses the frame. */
static void frame_received_into_a_buffer_held_across_a_snapshot_is_marked_dirty(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();
	uint64_t dirty[RAM_SIZE / GUEST_PAGE_SIZE / 64];
	uint64_t buf[40];

	reset(f);
	activate(f, ALL_FEATURES, false);
	assert_int_equal(guest_memory_track_dirty(&f->mem), 0);
	for (unsigned i = 0; i < 40; i++)
		buf[i] = offer_rx_buffer(f, 2048, NULL);
	notify(f, RX);
	peer_send(f, &h, 100, 3);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 1);
	/* The snapshot: what was written so far is collected, and the marks start over. */
	memset(dirty, 0, sizeof(dirty));
	guest_memory_collect_dirty(&f->mem, dirty);
	assert_true(page_is_set(dirty, buf[1])); /* taken and held: the device may write it */

	memset(dirty, 0, sizeof(dirty));
	peer_send(f, &h, 100, 9);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 2);
	assert_int_equal(used_elem(f, RX, 1).len, HDR_LEN + 100);
	assert_pattern(guest(f, buf[1] + HDR_LEN, 100), 100, 9, 0);
	guest_memory_collect_dirty(&f->mem, dirty);
	assert_true(page_is_set(dirty, buf[1]));
	assert_true(page_is_set(dirty, layouts[RX].used));
}

static void mergeable_frame_spans_several_buffers_and_the_rest_wait(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();
	/* The first buffer in two descriptors: num_buffers lands in the second. */
	uint64_t a = galloc(f, 5), b = galloc(f, 995);
	struct seg first[] = {{a, 5, true}, {b, 995, true}};
	uint16_t heads[4];
	uint64_t bufs[4];

	heads[0] = offer(f, RX, first, 2);
	for (int i = 1; i < 4; i++)
		bufs[i] = offer_rx_buffer(f, 1000, &heads[i]);
	notify(f, RX);
	peer_send(f, &h, 2500, 3);
	pump(f);

	assert_int_equal(used(f, RX)->idx, 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(used_elem(f, RX, i).id, heads[i]);
	assert_int_equal(used_elem(f, RX, 0).len, 1000);
	assert_int_equal(used_elem(f, RX, 1).len, 1000);
	assert_int_equal(used_elem(f, RX, 2).len, 2512 - 2000);
	uint8_t hdr[HDR_LEN];
	memcpy(hdr, guest(f, a, 5), 5);
	memcpy(hdr + 5, guest(f, b, 7), 7);
	h.num_buffers = htole16(3);
	assert_memory_equal(hdr, &h, HDR_LEN);
	assert_pattern(guest(f, b + 7, 988), 988, 3, 0);
	assert_pattern(guest(f, bufs[1], 1000), 1000, 3, 988);
	assert_pattern(guest(f, bufs[2], 512), 512, 3, 1988);
	assert_int_equal(f->transport.interrupts[RX], 1);

	/* The fourth buffer takes the next frame. */
	peer_send(f, &h, 100, 4);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 4);
	assert_int_equal(used_elem(f, RX, 3).id, heads[3]);
	assert_int_equal(used_elem(f, RX, 3).len, HDR_LEN + 100);
	assert_int_equal(le16toh(received_header(f, bufs[3]).num_buffers), 1);
	assert_pattern(guest(f, bufs[3] + HDR_LEN, 100), 100, 4, 0);
}

static void largest_segmented_frame_is_received_across_mergeable_buffers(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = tso4_header();
	uint64_t bufs[17];

	for (int i = 0; i < 17; i++)
		bufs[i] = offer_rx_buffer(f, 4096, NULL);
	notify(f, RX);
	peer_send(f, &h, VIRTIO_NET_MAX_FRAME, 5);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 17);
	assert_int_equal(used_elem(f, RX, 16).len, MAX_PACKET - 16 * 4096);
	h.num_buffers = htole16(17);
	struct virtio_net_hdr_mrg_rxbuf got = received_header(f, bufs[0]);
	assert_memory_equal(&got, &h, HDR_LEN);
	assert_pattern(guest(f, bufs[16], MAX_PACKET - 16 * 4096), MAX_PACKET - 16 * 4096, 5,
		       16 * 4096 - HDR_LEN);
}

static void receive_without_buffers_pauses_the_tap_until_the_driver_notifies(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();

	peer_send(f, &h, 80, 1);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 0);
	/* The frame waits in the TAP, and the loop no longer wakes for it. */
	assert_int_equal(event_loop_run_once(&f->loop, 0), 0);

	uint64_t buf = offer_rx_buffer(f, 2048, NULL);
	assert_int_equal(event_loop_run_once(&f->loop, 0), 0);
	notify(f, RX);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 1);
	assert_pattern(guest(f, buf + HDR_LEN, 80), 80, 1, 0);
	assert_int_equal(stats(f).rx_dropped, 0);
}

static void receive_without_buffers_asks_for_a_notification_with_event_idx(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();
	uint16_t *avail_event = guest(f, layouts[RX].used + 4 + 8 * QSIZE, 2);

	reset(f);
	activate(f, ALL_FEATURES, true);
	offer_rx_buffer(f, 2048, NULL);
	offer_rx_buffer(f, 2048, NULL);
	notify(f, RX);
	for (uint8_t i = 0; i < 3; i++)
		peer_send(f, &h, 80, i);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 2);
	assert_int_equal(*avail_event, 2);
	assert_int_equal(event_loop_run_once(&f->loop, 0), 0);

	uint64_t buf = offer_rx_buffer(f, 2048, NULL);
	notify(f, RX);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 3);
	assert_pattern(guest(f, buf + HDR_LEN, 80), 80, 2, 0);
}

static void backend_at_end_of_file_is_no_longer_watched(void **state)
{
	struct fixture *f = *state;
	uint16_t head;

	offer_rx_buffer(f, MAX_PACKET, &head);
	notify(f, RX);
	/* The TAP went away: reads see the end, and epoll would report it forever. */
	close(f->peer);
	f->peer = -1;
	assert_true(event_loop_run_once(&f->loop, 0) >= 1);
	assert_int_equal(event_loop_run_once(&f->loop, 0), 0);
	assert_non_null(strstr(f->log_text, "no longer watched"));
	/* The driver goes on: new buffers and transmits change nothing, nothing spins. */
	notify(f, RX);
	assert_int_equal(event_loop_run_once(&f->loop, 0), 0);
	assert_int_equal(used(f, RX)->idx, 0);
}

static void frame_too_big_for_the_buffer_is_dropped_and_the_next_fits(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();
	uint16_t head;

	reset(f);
	activate(f, ALL_FEATURES & ~BIT(VIRTIO_NET_F_MRG_RXBUF), false);
	uint64_t buf = offer_rx_buffer(f, 600, &head);
	notify(f, RX);
	peer_send(f, &h, 600 - HDR_LEN + 1, 1);
	peer_send(f, &h, 600 - HDR_LEN, 2);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 1);
	assert_int_equal(used_elem(f, RX, 0).id, head);
	assert_int_equal(used_elem(f, RX, 0).len, 600);
	assert_pattern(guest(f, buf + HDR_LEN, 600 - HDR_LEN), 600 - HDR_LEN, 2, 0);
	assert_int_equal(stats(f).rx_dropped, 1);
}

/* A driver still refilling: a frame bigger than the buffers it has given waits for
 * more (a dropped 64 KiB TCP segment costs a retransmission), and the frames behind it
 * keep their order. */
static void mergeable_frame_bigger_than_the_buffers_given_waits_for_more(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();
	uint64_t bufs[4];
	uint16_t heads[4];

	bufs[0] = offer_rx_buffer(f, 1000, &heads[0]);
	bufs[1] = offer_rx_buffer(f, 1000, &heads[1]);
	notify(f, RX);
	peer_send(f, &h, 2500, 1);
	peer_send(f, &h, 100, 2);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 0);
	assert_int_equal(stats(f).rx_dropped, 0);
	/* The TAP is not read meanwhile: the second frame waits there. */
	assert_int_equal(event_loop_run_once(&f->loop, 0), 0);

	bufs[2] = offer_rx_buffer(f, 1000, &heads[2]);
	notify(f, RX);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(used_elem(f, RX, i).id, heads[i]);
	assert_int_equal(used_elem(f, RX, 2).len, HDR_LEN + 2500 - 2000);
	assert_int_equal(le16toh(received_header(f, bufs[0]).num_buffers), 3);
	assert_pattern(guest(f, bufs[0] + HDR_LEN, 1000 - HDR_LEN), 1000 - HDR_LEN, 1, 0);
	assert_pattern(guest(f, bufs[2], 500 + HDR_LEN), 500 + HDR_LEN, 1, 2000 - HDR_LEN);
	assert_int_equal(f->transport.interrupts[RX], 1);

	bufs[3] = offer_rx_buffer(f, 1000, &heads[3]);
	notify(f, RX);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 4);
	assert_int_equal(used_elem(f, RX, 3).id, heads[3]);
	assert_int_equal(used_elem(f, RX, 3).len, HDR_LEN + 100);
	assert_pattern(guest(f, bufs[3] + HDR_LEN, 100), 100, 2, 0);
	assert_int_equal(stats(f).rx_dropped, 0);
	assert_int_equal(stats(f).rx_frames, 2);
}

/* Once the stash holds every descriptor of the queue (here in chains of two), the
 * driver can give no more: a frame bigger than all of them is dropped, and the next
 * one that fits is received. */
static void mergeable_frame_bigger_than_the_whole_queue_is_dropped(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();
	uint16_t first = 0;

	for (int i = 0; i < QSIZE / 2; i++) {
		uint64_t a = galloc(f, 50), b = galloc(f, 50);
		struct seg buffer[] = {{a, 50, true}, {b, 50, true}};
		uint16_t head = offer(f, RX, buffer, 2);
		if (i == 0)
			first = head;
	}
	notify(f, RX);
	peer_send(f, &h, QSIZE / 2 * 100 - HDR_LEN + 1, 1);
	peer_send(f, &h, 100 - HDR_LEN, 2);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 1);
	assert_int_equal(used_elem(f, RX, 0).id, first);
	assert_int_equal(used_elem(f, RX, 0).len, 100);
	assert_int_equal(le16toh(received_header(f, HEAP_ADDR).num_buffers), 1);
	assert_int_equal(stats(f).rx_dropped, 1);
	assert_int_equal(stats(f).rx_frames, 1);
}

static void receive_buffers_too_small_for_a_header_are_returned_unused(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();
	uint64_t small = galloc(f, 11), readable = galloc(f, 2048);
	struct seg s1 = {small, 11, true}, s2 = {readable, 2048, false};
	uint16_t bad1 = offer(f, RX, &s1, 1), bad2 = offer(f, RX, &s2, 1), good;
	uint64_t buf = offer_rx_buffer(f, 2048, &good);

	notify(f, RX);
	peer_send(f, &h, 60, 1);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 3);
	assert_int_equal(used_elem(f, RX, 0).id, bad1);
	assert_int_equal(used_elem(f, RX, 0).len, 0);
	assert_int_equal(used_elem(f, RX, 1).id, bad2);
	assert_int_equal(used_elem(f, RX, 1).len, 0);
	assert_int_equal(used_elem(f, RX, 2).id, good);
	assert_int_equal(used_elem(f, RX, 2).len, HDR_LEN + 60);
	assert_pattern(guest(f, buf + HDR_LEN, 60), 60, 1, 0);
	assert_int_equal(stats(f).rx_bad_buffers, 2);
}

/* Buffers too small are given straight back, so a driver could offer them again as
 * fast as they come back: one fill takes at most a ring's worth of chains, then asks to
 * be served again, and the event thread goes on to the VM's other devices. */
static void a_fill_takes_at_most_a_ring_of_buffers_too_small(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();
	uint64_t small = galloc(f, 11);
	struct seg s = {small, 11, true};

	for (int i = 0; i < QSIZE; i++)
		(void)offer(f, RX, &s, 1);
	notify(f, RX);
	peer_send(f, &h, 60, 1);
	pump(f);
	assert_int_equal(used(f, RX)->idx, QSIZE);
	assert_int_equal(stats(f).rx_bad_buffers, QSIZE);
	assert_int_equal(f->transport.serve_again[RX], 1);
}

static void runt_frame_is_dropped(void **state)
{
	struct fixture *f = *state;
	uint8_t runt[HDR_LEN + 13] = {0};
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();

	offer_rx_buffer(f, 2048, NULL);
	notify(f, RX);
	assert_int_equal(send(f->peer, runt, 5, 0), 5);
	assert_int_equal(send(f->peer, runt, sizeof(runt), 0), sizeof(runt));
	peer_send(f, &h, 14, 1);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 1);
	assert_int_equal(used_elem(f, RX, 0).len, HDR_LEN + 14);
	assert_int_equal(stats(f).rx_dropped, 2);
}

static void segmented_frame_is_dropped_for_a_driver_without_guest_tso(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf tso4 = tso4_header(), tso6 = tso4_header();
	struct virtio_net_hdr_mrg_rxbuf ecn = tso4_header(), udp = tso4_header();
	struct virtio_net_hdr_mrg_rxbuf plain = plain_header();

	tso6.hdr.gso_type = VIRTIO_NET_HDR_GSO_TCPV6;
	ecn.hdr.gso_type |= VIRTIO_NET_HDR_GSO_ECN;
	udp.hdr.gso_type = VIRTIO_NET_HDR_GSO_UDP;
	reset(f);
	activate(f, BIT(VIRTIO_NET_F_GUEST_CSUM) | BIT(VIRTIO_NET_F_GUEST_TSO4), false);
	uint64_t buf = offer_rx_buffer(f, MAX_PACKET, NULL);
	notify(f, RX);
	peer_send(f, &tso6, 3000, 1);
	peer_send(f, &ecn, 3000, 2);
	peer_send(f, &udp, 3000, 3);
	peer_send(f, &tso4, 3000, 4);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 1);
	assert_int_equal(stats(f).rx_dropped, 3);
	tso4.num_buffers = htole16(1);
	struct virtio_net_hdr_mrg_rxbuf got = received_header(f, buf);
	assert_memory_equal(&got, &tso4, HDR_LEN);
	assert_pattern(guest(f, buf + HDR_LEN, 3000), 3000, 4, 0);

	offer_rx_buffer(f, 2048, NULL);
	notify(f, RX);
	peer_send(f, &plain, 100, 5);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 2);
}

static void checksum_flags_are_cleared_for_a_driver_without_guest_csum(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf valid = plain_header(), partial = tso4_header();

	valid.hdr.flags = VIRTIO_NET_HDR_F_DATA_VALID | VIRTIO_NET_HDR_F_RSC_INFO;
	partial.hdr.gso_type = VIRTIO_NET_HDR_GSO_NONE;
	reset(f);
	activate(f, 0, false);
	uint64_t buf = offer_rx_buffer(f, 2048, NULL);
	notify(f, RX);
	peer_send(f, &partial, 100, 1);
	peer_send(f, &valid, 100, 2);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 1);
	assert_int_equal(received_header(f, buf).hdr.flags, 0);
	assert_pattern(guest(f, buf + HDR_LEN, 100), 100, 2, 0);
	assert_int_equal(stats(f).rx_dropped, 1);

	/* With GUEST_CSUM, DATA_VALID stays and RSC_INFO (no RSC_EXT) goes. */
	reset(f);
	activate(f, BIT(VIRTIO_NET_F_GUEST_CSUM), false);
	buf = offer_rx_buffer(f, 2048, NULL);
	notify(f, RX);
	peer_send(f, &valid, 100, 3);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 1);
	assert_int_equal(received_header(f, buf).hdr.flags, VIRTIO_NET_HDR_F_DATA_VALID);
}

static void one_call_receives_at_most_the_budget(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();
	const int frames = VIRTIO_NET_RX_BUDGET + 36;

	for (int i = 0; i < frames; i++) {
		offer_rx_buffer(f, 256, NULL);
		peer_send(f, &h, 60, (uint8_t)i);
	}
	notify(f, RX);
	assert_int_equal(event_loop_run_once(&f->loop, 0), 1);
	assert_int_equal(used(f, RX)->idx, VIRTIO_NET_RX_BUDGET);
	assert_int_equal(f->transport.interrupts[RX], 1);
	pump(f);
	assert_int_equal(used(f, RX)->idx, frames);
	assert_int_equal(f->transport.interrupts[RX], 2);
}

/* The peer sends a 100-byte frame, seeded seed, into a fresh 2048-byte buffer: it
 * arrives whole, and the used ring then holds used_after entries. */
static void receive_one_frame(struct fixture *f, uint8_t seed, uint16_t used_after)
{
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();
	uint64_t buf = offer_rx_buffer(f, 2048, NULL);

	notify(f, RX);
	peer_send(f, &h, 100, seed);
	pump(f);
	assert_int_equal(used(f, RX)->idx, used_after);
	assert_pattern(guest(f, buf + HDR_LEN, 100), 100, seed, 0);
}

static void frames_arriving_before_activation_are_dropped(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();

	for (uint8_t i = 0; i < 3; i++)
		peer_send(f, &h, 100, i);
	pump(f);
	assert_int_equal(stats(f).rx_dropped, 3);
	assert_int_equal(recv(f->fd, f->packet, sizeof(f->packet), MSG_DONTWAIT), -1);

	activate(f, ALL_FEATURES, false);
	receive_one_frame(f, 9, 1);
}

static void broken_receive_chain_needs_a_reset_and_frames_are_dropped(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();

	avail(f, RX)->ring[0] = QSIZE;
	avail(f, RX)->idx = 1;
	notify(f, RX);
	peer_send(f, &h, 100, 1);
	pump(f);
	assert_int_equal(f->transport.needs_reset, 1);
	assert_int_equal(used(f, RX)->idx, 0);
	peer_send(f, &h, 100, 2);
	pump(f);
	assert_int_equal(stats(f).rx_dropped, 2);
	assert_int_equal(f->transport.needs_reset, 1);
}

/* The transport set DEVICE_NEEDS_RESET (a driver that disabled a queue of the running
 * device, say): frames from the TAP, which no notification gates, no longer reach the
 * receive queue until a reset. */
static void frames_are_dropped_while_the_transport_waits_for_a_reset(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();

	receive_one_frame(f, 1, 1);

	offer_rx_buffer(f, 2048, NULL);
	notify(f, RX);
	f->dev->needs_reset = true; /* what virtio-mmio does, under the device's lock */
	peer_send(f, &h, 100, 2);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 1);
	assert_int_equal(stats(f).rx_dropped, 1);

	reset(f);
	activate(f, ALL_FEATURES, false);
	receive_one_frame(f, 3, 1);
}

static void receive_buffer_offered_again_while_held_needs_a_reset(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();
	uint16_t head;

	offer_rx_buffer(f, 1000, &head);
	avail(f, RX)->ring[1] = head;
	avail(f, RX)->idx = 2;
	notify(f, RX);
	peer_send(f, &h, 100, 1);
	pump(f);
	assert_int_equal(f->transport.needs_reset, 1);
}

/* Reset. */

static void reset_drops_what_waits_and_the_device_works_again(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();

	/* A transmit chain held by a full TAP, a receive buffer in the stash and a frame
	 * too big for it waiting for more. */
	offer_rx_buffer(f, 4096, NULL);
	offer_rx_buffer(f, 4096, NULL);
	notify(f, RX);
	peer_send(f, &h, 100, 1);
	peer_send(f, &h, 5000, 9);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 1);
	int filler = fill_backend(f);
	offer_packet(f, &h, 100, 2);
	notify(f, TX);

	reset(f);
	drain_filler(f, filler);
	peer_send(f, &h, 100, 3); /* no driver: dropped */
	pump(f);
	assert_peer_empty(f);
	assert_int_equal(used(f, TX)->idx, 0);
	assert_int_equal(used(f, RX)->idx, 1);
	assert_int_equal(stats(f).rx_dropped, 1);

	activate(f, ALL_FEATURES, false);
	f->transport = (struct fake_transport){0};
	uint64_t buf = offer_rx_buffer(f, 4096, NULL);
	notify(f, RX);
	peer_send(f, &h, 200, 4);
	offer_packet(f, &h, 300, 5);
	notify(f, TX);
	pump(f);
	assert_peer_got(f, &h, 300, 5);
	assert_int_equal(used(f, TX)->idx, 1);
	assert_int_equal(used(f, RX)->idx, 1);
	assert_int_equal(used_elem(f, RX, 0).len, HDR_LEN + 200);
	assert_pattern(guest(f, buf + HDR_LEN, 200), 200, 4, 0);
	assert_int_equal(f->transport.needs_reset, 0);
}

static void broken_device_works_again_after_a_reset(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();

	avail(f, TX)->ring[0] = QSIZE;
	avail(f, TX)->idx = 1;
	notify(f, TX);
	assert_int_equal(f->transport.needs_reset, 1);
	reset(f);
	activate(f, ALL_FEATURES, false);
	offer_packet(f, &h, 100, 1);
	notify(f, TX);
	assert_peer_got(f, &h, 100, 1);
}

/* The TAP side (net_tap.h). */

static void offload_flags_follow_the_negotiated_guest_features(void **state)
{
	const uint64_t csum = BIT(VIRTIO_NET_F_GUEST_CSUM), tso4 = BIT(VIRTIO_NET_F_GUEST_TSO4),
		       tso6 = BIT(VIRTIO_NET_F_GUEST_TSO6), ecn = BIT(VIRTIO_NET_F_GUEST_ECN);
	const uint64_t host = BIT(VIRTIO_NET_F_CSUM) | BIT(VIRTIO_NET_F_HOST_TSO4) |
			      BIT(VIRTIO_NET_F_HOST_TSO6) | BIT(VIRTIO_NET_F_HOST_ECN);
	(void)state;

	assert_int_equal(net_tap_offload_flags(0), 0);
	assert_int_equal(net_tap_offload_flags(host), 0);
	assert_int_equal(net_tap_offload_flags(csum), TUN_F_CSUM);
	assert_int_equal(net_tap_offload_flags(csum | tso4), TUN_F_CSUM | TUN_F_TSO4);
	assert_int_equal(net_tap_offload_flags(csum | tso6 | ecn),
			 TUN_F_CSUM | TUN_F_TSO6 | TUN_F_TSO_ECN);
	assert_int_equal(net_tap_offload_flags(csum | tso4 | tso6 | ecn | host),
			 TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN);
	/* What the kernel would refuse: segmentation without checksums, ECN without
	 * segmentation. */
	assert_int_equal(net_tap_offload_flags(tso4 | tso6 | ecn), 0);
	assert_int_equal(net_tap_offload_flags(csum | ecn), TUN_F_CSUM);
	assert_int_equal(net_tap_offload_flags(BIT(VIRTIO_NET_F_GUEST_UFO) | csum), TUN_F_CSUM);
}

static void set_offloads_on_a_fd_that_is_no_tap_fails(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(net_tap_set_offloads(f->peer, BIT(VIRTIO_NET_F_GUEST_CSUM)), -ENOTTY);
}

/* What opening /dev/net/tun itself gives here: 0, or the error every open reports first. */
static int tun_device_error(void)
{
	int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

static void tap_names_empty_or_too_long_are_refused(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(net_tap_open("", &f->log), -EINVAL);
	assert_int_equal(net_tap_open(NULL, &f->log), -EINVAL);
	assert_int_equal(net_tap_open("a-name-of-16-chr", &f->log), -EINVAL);
	assert_non_null(strstr(f->log_text, "a-name-of-16-chr"));
}

static void tap_that_does_not_exist_is_enodev(void **state)
{
	struct fixture *f = *state;
	int expect = tun_device_error();

	assert_int_equal(net_tap_open("mote-no-such0", &f->log), expect ? expect : -ENODEV);
	assert_non_null(strstr(f->log_text, "mote-no-such0"));
}

static void interface_that_is_no_tap_is_emediumtype(void **state)
{
	struct fixture *f = *state;
	int expect = tun_device_error();

	assert_int_equal(net_tap_open("lo", &f->log), expect ? expect : -EMEDIUMTYPE);
	if (!expect)
		assert_non_null(strstr(f->log_text, "lo is not a single-queue TAP"));
}

/* Snapshots. */

static int save_state(struct fixture *f, struct snap_writer *w)
{
	snap_writer_init(w);
	pthread_mutex_lock(&f->dev->lock);
	int ret = f->dev->ops->save(f->dev, w);
	pthread_mutex_unlock(&f->dev->lock);
	return ret;
}

/* The device status of a started device, as the transport loads it. */
#define STARTED                                                                                    \
	(VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_FEATURES_OK |            \
	 VIRTIO_STATUS_DRIVER_OK)

/* What the transport's load does before the device's own: the device back at power-on,
 * then the negotiated features and the queues as they were saved (with status). */
static int load_state_with_status(struct fixture *f, const struct virtq queues[2],
				  uint64_t features, const uint8_t *data, size_t len,
				  uint32_t status)
{
	struct snap_reader r = {.data = data, .len = len};

	reset(f);
	f->dev->driver_features = features;
	memcpy(f->dev->queues, queues, 2 * sizeof(queues[0]));
	pthread_mutex_lock(&f->dev->lock);
	int ret = f->dev->ops->load(f->dev, &r, status);
	pthread_mutex_unlock(&f->dev->lock);
	return ret ? ret : snap_reader_finish(&r);
}

static int load_state(struct fixture *f, const struct virtq queues[2], uint64_t features,
		      const uint8_t *data, size_t len)
{
	return load_state_with_status(f, queues, features, data, len, STARTED);
}

/* Four mergeable buffers offered, a frame received into the first: the device holds the
 * other three, popped and not used, when the snapshot is taken. */
static void hold_three_receive_buffers(struct fixture *f, uint16_t heads[4], uint64_t bufs[4])
{
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();

	for (int i = 0; i < 4; i++)
		bufs[i] = offer_rx_buffer(f, 1000, &heads[i]);
	notify(f, RX);
	peer_send(f, &h, 100, 1);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 1);
	assert_int_equal(f->dev->queues[RX].last_avail_idx, 4);
}

static void held_receive_buffers_are_taken_again_after_a_load(void **state)
{
	struct fixture *f = *state;
	struct virtio_net_hdr_mrg_rxbuf h = plain_header();
	struct virtq queues[2];
	struct snap_writer w;
	uint16_t heads[4];
	uint64_t bufs[4];

	hold_three_receive_buffers(f, heads, bufs);
	assert_int_equal(save_state(f, &w), 0);
	memcpy(queues, f->dev->queues, sizeof(queues));
	uint64_t features = f->dev->driver_features;
	assert_int_equal(load_state(f, queues, features, w.buf, w.len), 0);
	f->dev->activated = true;

	/* The next frame fills the three buffers the device held, in the order it took
	 * them: nothing pops them a second time. */
	peer_send(f, &h, 2500, 9);
	pump(f);
	assert_int_equal(used(f, RX)->idx, 4);
	for (int i = 1; i < 4; i++)
		assert_int_equal(used_elem(f, RX, i).id, heads[i]);
	assert_int_equal(used_elem(f, RX, 3).len, 2512 - 2000);
	assert_int_equal(le16toh(received_header(f, bufs[1]).num_buffers), 3);
	assert_pattern(guest(f, bufs[2], 1000), 1000, 9, 988);
	snap_writer_free(&w);
}

static void held_receive_buffers_that_do_not_match_the_queue_are_refused(void **state)
{
	struct fixture *f = *state;
	struct virtq queues[2];
	struct snap_writer w;
	uint16_t heads[4];
	uint64_t bufs[4];

	hold_three_receive_buffers(f, heads, bufs);
	assert_int_equal(save_state(f, &w), 0);
	memcpy(queues, f->dev->queues, sizeof(queues));
	uint64_t features = f->dev->driver_features;
	/* Offsets in net_save()'s layout: broken, the count, then each head (u16). */
	const struct {
		size_t offset;
		uint8_t value;
	} bad[] = {
	    {0, 2},		    /* not a boolean */
	    {1, 2},		    /* two held where the queue says three */
	    {1, 4},		    /* four */
	    {3, 200},		    /* a head past the queue */
	    {5, (uint8_t)heads[1]}, /* the first head held twice */
	};
	uint8_t *copy = malloc(w.len);
	assert_non_null(copy);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memcpy(copy, w.buf, w.len);
		copy[bad[i].offset] = bad[i].value;
		assert_int_equal(load_state(f, queues, features, copy, w.len), -EINVAL);
	}
	/* Buffers held by a device whose driver never started it. */
	assert_int_equal(load_state_with_status(f, queues, features, w.buf, w.len,
						STARTED & ~VIRTIO_STATUS_DRIVER_OK),
			 -EINVAL);
	/* A broken device whose driver was never asked to reset it; with the request, the
	 * state is one the device could have been in. */
	memcpy(copy, w.buf, w.len);
	copy[0] = 1;
	assert_int_equal(load_state(f, queues, features, copy, w.len), -EINVAL);
	assert_int_equal(load_state_with_status(f, queues, features, copy, w.len,
						STARTED | VIRTIO_STATUS_DEVICE_NEEDS_RESET),
			 0);
	free(copy);
	for (size_t len = 0; len < w.len; len++)
		assert_int_equal(load_state(f, queues, features, w.buf, len), -EINVAL);
	assert_int_equal(load_state(f, queues, features, w.buf, w.len), 0);
	snap_writer_free(&w);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
#define TEST_INACTIVE(name) cmocka_unit_test_setup_teardown(name, setup_inactive, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(features_offer_offloads_mergeable_buffers_status_and_ring_features),
	    TEST(mac_is_offered_only_when_given),
	    TEST(config_space_holds_the_mac_link_up_and_one_queue_pair),
	    TEST(config_writes_are_ignored),
	    TEST(multicast_or_zero_mac_and_bad_fd_are_refused),
	    TEST(backend_fd_is_made_nonblocking),
	    TEST(activation_sets_the_offloads_the_driver_accepted_and_reset_clears_them),
	    TEST(activation_fails_when_the_offloads_cannot_be_set),
	    TEST(transmitted_frame_reaches_the_tap_byte_identical_with_its_header),
	    TEST(frame_spread_over_segments_and_an_indirect_table_is_sent_whole),
	    TEST(writable_descriptors_in_a_transmit_chain_are_ignored),
	    TEST(a_batch_of_frames_is_sent_in_order_with_one_interrupt),
	    TEST(short_and_oversized_packets_are_dropped_and_the_next_one_is_sent),
	    TEST(packets_with_bad_headers_are_dropped_and_the_next_one_is_sent),
	    TEST(offloads_the_driver_did_not_negotiate_are_dropped),
	    TEST(flags_the_driver_must_not_set_do_not_reach_the_tap),
	    TEST(full_tap_keeps_transmit_chains_until_it_is_writable_again),
	    TEST(event_idx_avail_event_follows_the_last_transmit_chain_taken),
	    TEST(broken_transmit_chain_needs_a_reset),
	    TEST(received_frame_fills_one_big_buffer),
	    TEST(frame_received_into_a_buffer_held_across_a_snapshot_is_marked_dirty),
	    TEST(mergeable_frame_spans_several_buffers_and_the_rest_wait),
	    TEST(largest_segmented_frame_is_received_across_mergeable_buffers),
	    TEST(receive_without_buffers_pauses_the_tap_until_the_driver_notifies),
	    TEST(receive_without_buffers_asks_for_a_notification_with_event_idx),
	    TEST(backend_at_end_of_file_is_no_longer_watched),
	    TEST(frame_too_big_for_the_buffer_is_dropped_and_the_next_fits),
	    TEST(mergeable_frame_bigger_than_the_buffers_given_waits_for_more),
	    TEST(mergeable_frame_bigger_than_the_whole_queue_is_dropped),
	    TEST(receive_buffers_too_small_for_a_header_are_returned_unused),
	    TEST(a_fill_takes_at_most_a_ring_of_buffers_too_small),
	    TEST(runt_frame_is_dropped),
	    TEST(segmented_frame_is_dropped_for_a_driver_without_guest_tso),
	    TEST(checksum_flags_are_cleared_for_a_driver_without_guest_csum),
	    TEST(one_call_receives_at_most_the_budget),
	    TEST_INACTIVE(frames_arriving_before_activation_are_dropped),
	    TEST(broken_receive_chain_needs_a_reset_and_frames_are_dropped),
	    TEST(frames_are_dropped_while_the_transport_waits_for_a_reset),
	    TEST(receive_buffer_offered_again_while_held_needs_a_reset),
	    TEST(reset_drops_what_waits_and_the_device_works_again),
	    TEST(broken_device_works_again_after_a_reset),
	    TEST(offload_flags_follow_the_negotiated_guest_features),
	    TEST(set_offloads_on_a_fd_that_is_no_tap_fails),
	    TEST(tap_names_empty_or_too_long_are_refused),
	    TEST(tap_that_does_not_exist_is_enodev),
	    TEST(interface_that_is_no_tap_is_emediumtype),
	    TEST(held_receive_buffers_are_taken_again_after_a_load),
	    TEST(held_receive_buffers_that_do_not_match_the_queue_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
