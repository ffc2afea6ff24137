/* virtio-net (virtio 1.2 §5.1) on a packet fd (net.h). One event-loop handler serves
 * the fd both ways: it reads frames into the receive queue while the driver has buffers
 * there, and sends what the transmit queue holds when the fd, full a moment ago, takes
 * frames again. What the loop watches the fd for follows from two flags:
 * rx_waiting (no receive buffers: not read until the driver notifies the receive
 * queue) and tx_waiting (transmit stopped on EAGAIN or its budget: go on once the fd is
 * writable).
 *
 * Receive buffers are popped ahead into a stash, in order, and used from its front: a
 * frame is read with one readv() across every stashed buffer (with MRG_RXBUF, enough for
 * the largest frame; without, the one buffer that must hold it), then the buffers it
 * filled are pushed together and the rest wait for the next frame. A spare byte after
 * the buffers shows a frame that did not fit: a TAP reports a frame's whole length
 * however little it could copy, a socket fills the byte; either way it is dropped.
 * After a reset the stash is simply forgotten, like everything the driver had
 * offered. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <linux/if_ether.h>
#include <linux/virtio_net.h>

#include "../vmm/snapshot_stream.h"
#include "net.h"

#define NET_RX_QUEUE 0
#define NET_TX_QUEUE 1
#define NET_QUEUE_SIZE 256
#define NET_HDR_LEN sizeof(struct virtio_net_hdr_mrg_rxbuf)
#define NET_MAX_PACKET (NET_HDR_LEN + VIRTIO_NET_MAX_FRAME)
/* The most iovecs readv() and writev() take (UIO_MAXIOV). */
#define NET_MAX_IOV 1024
/* §5.1.4: mac, status and max_virtqueue_pairs; the fields after need features not
 * offered. */
#define NET_CONFIG_SIZE offsetof(struct virtio_net_config, mtu)

/* A receive buffer in the stash: its segments are the next iov_count entries of the
 * stash's iovecs. */
struct net_rx_buffer {
	uint16_t head;
	uint16_t iov_count;
	uint64_t len;
};

struct net_rx_stash {
	unsigned count;
	unsigned iov_count; /* at most NET_MAX_IOV - 1: one more for the spare byte */
	uint64_t capacity;  /* bytes of all the buffers */
	struct net_rx_buffer buf[NET_MAX_IOV];
	struct iovec iov[NET_MAX_IOV];
	struct virtq_used_buf used[NET_MAX_IOV];
	bool held[NET_QUEUE_SIZE]; /* by head: in the stash */
	uint8_t spare;
};

struct virtio_net {
	struct vdev dev;
	char *name; /* "virtio-net NAME", for messages */
	struct mote_log log;
	struct event_loop *loop;
	int fd;
	int (*set_offloads)(int tap_fd, uint64_t driver_features);
	bool has_mac;
	struct virtio_net_config config;
	bool broken; /* the driver broke a queue: nothing more is taken until a reset */
	bool rx_waiting;
	bool tx_waiting;
	unsigned watching; /* what the loop watches fd for, EVENT_* */
	bool rx_error_logged;
	/* The backend failed for good (end of file, a TAP deleted under us): its fd is
	 * no longer watched, or its errors would wake the loop forever. */
	bool backend_failed;
	bool tx_error_logged;
	struct virtio_net_stats stats;
	struct net_rx_stash rx;
	struct iovec tx_iov[NET_MAX_IOV];
	struct virtq_chain chain; /* virtq_pop() scratch */
};

static struct virtq *net_rxq(struct virtio_net *net)
{
	return &net->dev.queues[NET_RX_QUEUE];
}

static struct virtq *net_txq(struct virtio_net *net)
{
	return &net->dev.queues[NET_TX_QUEUE];
}

static bool net_has(const struct virtio_net *net, unsigned feature)
{
	return net->dev.driver_features & (1ULL << feature);
}

static bool net_live(const struct virtio_net *net)
{
	return net->dev.activated && !net->broken;
}

static void net_break(struct virtio_net *net, const char *what)
{
	log_warn(&net->log, "%s: %s; the device needs a reset", net->name, what);
	net->broken = true;
	vdev_needs_reset(&net->dev);
}

/* Makes the loop watch the fd for what the flags ask. On the event thread only. */
static void net_update_watch(struct virtio_net *net)
{
	unsigned events =
	    (net->rx_waiting ? 0 : EVENT_READABLE) | (net->tx_waiting ? EVENT_WRITABLE : 0);

	if (events == net->watching || net->backend_failed)
		return;
	int err = event_loop_watch(net->loop, net->fd, events);
	if (err)
		log_error(&net->log, "%s: watching the backend: %s", net->name, strerror(-err));
	else
		net->watching = events;
}

/* Copies between buf and bytes [offset, offset + len) of iov[0, n), which hold them. */
static void iov_copy(const struct iovec *iov, unsigned n, size_t offset, void *buf, size_t len,
		     bool to_iov)
{
	uint8_t *p = buf;

	for (unsigned i = 0; i < n && len > 0; i++) {
		if (offset >= iov[i].iov_len) {
			offset -= iov[i].iov_len;
			continue;
		}
		size_t step = iov[i].iov_len - offset;
		if (step > len)
			step = len;
		uint8_t *base = (uint8_t *)iov[i].iov_base + offset;
		if (to_iov)
			memcpy(base, p, step);
		else
			memcpy(p, base, step);
		p += step;
		len -= step;
		offset = 0;
	}
}

/* Transmit (§5.1.6.2). */

enum net_tx_result { NET_TX_DONE, NET_TX_AGAIN };

/* The driver's rules for a header it sends (§5.1.6.2.1), on the device's own copy.
 * Flags other than NEEDS_CSUM are cleared: the device ignores those it does not know
 * (§5.1.6.2.2) and DATA_VALID and RSC_INFO are the driver's to leave unset, so none of
 * them reaches the host. */
static bool tx_header_valid(const struct virtio_net *net, struct virtio_net_hdr *hdr,
			    uint32_t frame_len)
{
	uint8_t gso = hdr->gso_type & ~VIRTIO_NET_HDR_GSO_ECN;
	bool ecn = hdr->gso_type & VIRTIO_NET_HDR_GSO_ECN;
	bool needs_csum = hdr->flags & VIRTIO_NET_HDR_F_NEEDS_CSUM;

	hdr->flags &= VIRTIO_NET_HDR_F_NEEDS_CSUM;
	if (le16toh(hdr->hdr_len) > frame_len)
		return false;
	if (needs_csum) {
		uint32_t end = (uint32_t)le16toh(hdr->csum_start) + le16toh(hdr->csum_offset) + 2;
		if (!net_has(net, VIRTIO_NET_F_CSUM) || end > frame_len)
			return false;
	}
	switch (gso) {
	case VIRTIO_NET_HDR_GSO_NONE:
		return !ecn;
	case VIRTIO_NET_HDR_GSO_TCPV4:
		if (!net_has(net, VIRTIO_NET_F_HOST_TSO4))
			return false;
		break;
	case VIRTIO_NET_HDR_GSO_TCPV6:
		if (!net_has(net, VIRTIO_NET_F_HOST_TSO6))
			return false;
		break;
	default:
		return false; /* UDP and UDP_L4: HOST_UFO and HOST_USO are not offered */
	}
	if (ecn && !net_has(net, VIRTIO_NET_F_HOST_ECN))
		return false;
	return needs_csum && hdr->gso_size != 0;
}

static enum net_tx_result tx_malformed(struct virtio_net *net)
{
	net->stats.tx_malformed++;
	return NET_TX_DONE;
}

/* Sends one chain: the checked header, then the frame straight from guest memory. */
static enum net_tx_result tx_send(struct virtio_net *net, const struct virtq_chain *chain)
{
	struct virtio_net_hdr_mrg_rxbuf hdr;
	uint64_t len = chain->readable_len;

	/* A writable part is not needed and ignored. */
	if (len < NET_HDR_LEN + ETH_HLEN || len > NET_MAX_PACKET)
		return tx_malformed(net);
	uint32_t frame_len = (uint32_t)(len - NET_HDR_LEN);
	if (virtq_chain_read(chain, 0, &hdr, sizeof(hdr)) != 0 ||
	    !tx_header_valid(net, &hdr.hdr, frame_len))
		return tx_malformed(net);

	/* The header from the copy that was checked: the guest may rewrite its own. */
	unsigned n = 0;
	size_t skip = NET_HDR_LEN;
	net->tx_iov[n++] = (struct iovec){&hdr, sizeof(hdr)};
	for (uint32_t i = 0; i < chain->readable_count; i++) {
		const struct virtq_segment *seg = &chain->seg[i];
		if (skip >= seg->len) {
			skip -= seg->len;
			continue;
		}
		if (n == NET_MAX_IOV)
			return tx_malformed(net);
		net->tx_iov[n++] = (struct iovec){(uint8_t *)seg->host + skip, seg->len - skip};
		skip = 0;
	}

	for (;;) {
		if (writev(net->fd, net->tx_iov, (int)n) >= 0) {
			net->stats.tx_frames++;
			net->stats.tx_bytes += frame_len;
			return NET_TX_DONE;
		}
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return NET_TX_AGAIN;
		if (errno != EINTR)
			break;
	}
	if (!net->tx_error_logged)
		log_warn(&net->log, "%s: the backend refused a frame: %s", net->name,
			 strerror(errno));
	net->tx_error_logged = true;
	net->stats.tx_errors++;
	return NET_TX_DONE;
}

/* Sends what the transmit queue holds, up to the budget. A chain the fd cannot take yet
 * goes back to the ring (virtq_unpop) until the fd is writable; every other chain is
 * used with length 0, sent or dropped. With EVENT_IDX, once the ring looks empty the
 * device tells the driver how far it has read and looks again (§2.7.10). */
static void net_tx_run(struct virtio_net *net)
{
	struct virtq *vq = net_txq(net);
	uint16_t old_used_idx = vq->used_idx;
	bool rearmed = false;

	net->tx_waiting = false;
	for (unsigned taken = 0; !net->broken; taken++) {
		if (taken == VIRTIO_NET_TX_BUDGET) {
			net->tx_waiting = true; /* the fd is almost always writable */
			break;
		}
		int got = virtq_pop(vq, &net->chain);
		if (got < 0) {
			net_break(net, "broken transmit chain");
			break;
		}
		if (got == 0) {
			if (rearmed || !vq->event_idx)
				break;
			virtq_set_avail_event(vq);
			rearmed = true;
			continue;
		}
		rearmed = false;
		if (tx_send(net, &net->chain) == NET_TX_AGAIN) {
			(void)virtq_unpop(vq, 1);
			net->tx_waiting = true;
			break;
		}
		(void)virtq_push(vq, net->chain.head, 0);
	}
	if (vq->used_idx != old_used_idx)
		vdev_notify_used(&net->dev, NET_TX_QUEUE, old_used_idx);
}

/* Receive (§5.1.6.3, §5.1.6.4). */

static bool rx_stash_full(const struct virtio_net *net)
{
	const struct net_rx_stash *rx = &net->rx;

	if (rx->iov_count >= NET_MAX_IOV - 1)
		return true;
	if (!net_has(net, VIRTIO_NET_F_MRG_RXBUF))
		return rx->count >= 1;
	return rx->capacity >= NET_MAX_PACKET;
}

/* Adds a chain's writable part to the stash; false, adding nothing, for a buffer too
 * small for the header (with MRG_RXBUF every buffer must hold one, §5.1.6.3.1; without,
 * it must hold the whole packet). rx_stash_add gives such a buffer back unused. */
static bool rx_stash_take(struct virtio_net *net, const struct virtq_chain *chain)
{
	struct net_rx_stash *rx = &net->rx;
	struct net_rx_buffer *buf = &rx->buf[rx->count];

	*buf = (struct net_rx_buffer){.head = chain->head};
	for (uint32_t i = chain->readable_count;
	     i < chain->count && rx->iov_count + buf->iov_count < NET_MAX_IOV - 1; i++) {
		rx->iov[rx->iov_count + buf->iov_count++] =
		    (struct iovec){chain->seg[i].host, chain->seg[i].len};
		buf->len += chain->seg[i].len;
	}
	if (buf->len < NET_HDR_LEN)
		return false;
	rx->count++;
	rx->iov_count += buf->iov_count;
	rx->capacity += buf->len;
	rx->held[chain->head] = true;
	return true;
}

static void rx_stash_add(struct virtio_net *net, const struct virtq_chain *chain)
{
	if (!rx_stash_take(net, chain)) {
		(void)virtq_push(net_rxq(net), chain->head, 0);
		net->stats.rx_bad_buffers++;
	}
}

/* Tops the stash up from the receive queue. False when it stays empty: then, with
 * EVENT_IDX, the driver has been asked to notify its next buffer (§2.7.10). */
static bool rx_fill(struct virtio_net *net)
{
	struct virtq *vq = net_rxq(net);
	bool rearmed = false;

	while (!rx_stash_full(net)) {
		int got = virtq_pop(vq, &net->chain);
		if (got < 0) {
			net_break(net, "broken receive chain");
			return false;
		}
		if (got > 0) {
			rearmed = false;
			if (net->chain.head >= NET_QUEUE_SIZE || net->rx.held[net->chain.head]) {
				net_break(net,
					  "the driver offered a receive buffer the device holds");
				return false;
			}
			rx_stash_add(net, &net->chain);
			continue;
		}
		/* Only an empty stash waits for the driver. */
		if (net->rx.count > 0 || rearmed || !vq->event_idx)
			break;
		virtq_set_avail_event(vq);
		rearmed = true;
	}
	return net->rx.count > 0;
}

/* Drops the first count buffers, which hold iov_count iovecs, from the stash. */
static void rx_stash_consume(struct net_rx_stash *rx, unsigned count, unsigned iov_count)
{
	for (unsigned i = 0; i < count; i++) {
		rx->capacity -= rx->buf[i].len;
		rx->held[rx->buf[i].head] = false;
	}
	memmove(rx->buf, rx->buf + count, (rx->count - count) * sizeof(rx->buf[0]));
	memmove(rx->iov, rx->iov + iov_count, (rx->iov_count - iov_count) * sizeof(rx->iov[0]));
	rx->count -= count;
	rx->iov_count -= iov_count;
}

/* The header the backend wrote ahead of the frame, made right for this driver
 * (§5.1.6.4.1): num_buffers set, flags it cannot take cleared. False for a frame it did
 * not negotiate (segmented, or with a partial checksum, without the GUEST_ features),
 * which a TAP sends only if it still has a previous driver's offloads. */
static bool rx_fix_header(struct virtio_net *net, uint16_t num_buffers)
{
	struct net_rx_stash *rx = &net->rx;
	struct virtio_net_hdr_mrg_rxbuf h;

	iov_copy(rx->iov, rx->iov_count, 0, &h, sizeof(h), false);
	uint8_t gso = h.hdr.gso_type & ~VIRTIO_NET_HDR_GSO_ECN;
	bool ecn = h.hdr.gso_type & VIRTIO_NET_HDR_GSO_ECN;

	/* No RSC_INFO without RSC_EXT, and no flags at all without GUEST_CSUM. */
	h.hdr.flags &= VIRTIO_NET_HDR_F_NEEDS_CSUM | VIRTIO_NET_HDR_F_DATA_VALID;
	if (!net_has(net, VIRTIO_NET_F_GUEST_CSUM)) {
		if (h.hdr.flags & VIRTIO_NET_HDR_F_NEEDS_CSUM)
			return false;
		h.hdr.flags = 0;
	}
	if ((gso == VIRTIO_NET_HDR_GSO_TCPV4 && !net_has(net, VIRTIO_NET_F_GUEST_TSO4)) ||
	    (gso == VIRTIO_NET_HDR_GSO_TCPV6 && !net_has(net, VIRTIO_NET_F_GUEST_TSO6)) ||
	    (gso != VIRTIO_NET_HDR_GSO_NONE && gso != VIRTIO_NET_HDR_GSO_TCPV4 &&
	     gso != VIRTIO_NET_HDR_GSO_TCPV6))
		return false;
	if (ecn && (gso == VIRTIO_NET_HDR_GSO_NONE || !net_has(net, VIRTIO_NET_F_GUEST_ECN)))
		return false;
	h.num_buffers = htole16(num_buffers);
	iov_copy(rx->iov, rx->iov_count, 0, &h, sizeof(h), true);
	return true;
}

/* Gives the frame of n bytes (header included) in the front of the stash to the
 * driver: every buffer but the last one full (§5.1.6.4.1), all published at once. */
static bool rx_deliver(struct virtio_net *net, uint64_t n)
{
	struct net_rx_stash *rx = &net->rx;
	unsigned count = 0, iov_count = 0;

	for (uint64_t left = n; left > 0; count++) {
		uint64_t len = rx->buf[count].len < left ? rx->buf[count].len : left;
		rx->used[count] = (struct virtq_used_buf){rx->buf[count].head, (uint32_t)len};
		iov_count += rx->buf[count].iov_count;
		left -= len;
	}
	if (!rx_fix_header(net, (uint16_t)count))
		return false;
	(void)virtq_push_batch(net_rxq(net), rx->used, count);
	rx_stash_consume(rx, count, iov_count);
	net->stats.rx_frames++;
	net->stats.rx_bytes += n - NET_HDR_LEN;
	return true;
}

/* The backend will not give frames for now (an error, or the end of a socket):
 * reading waits for the driver's next receive notification rather than spinning. */
static void rx_backend_failed(struct virtio_net *net, const char *why)
{
	if (!net->rx_error_logged)
		log_warn(&net->log, "%s: reading the backend: %s; it is no longer watched",
			 net->name, why);
	net->rx_error_logged = true;
	net->rx_waiting = true;
	if (!net->backend_failed) {
		net->backend_failed = true;
		(void)event_loop_remove(net->loop, net->fd);
	}
}

/* Reads one frame into the stash's buffers. False when there is nothing more to do in
 * this turn: no frame, no buffer (rx_waiting is set), or a broken queue. */
static bool rx_receive_one(struct virtio_net *net)
{
	struct net_rx_stash *rx = &net->rx;

	if (!rx_fill(net)) {
		net->rx_waiting = !net->broken;
		return false;
	}
	rx->iov[rx->iov_count] = (struct iovec){&rx->spare, 1};
	ssize_t n = readv(net->fd, rx->iov, (int)rx->iov_count + 1);
	if (n < 0) {
		if (errno == EINTR)
			return true;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			rx_backend_failed(net, strerror(errno));
		return false;
	}
	if (n == 0) {
		rx_backend_failed(net, "end of file");
		return false;
	}
	/* Too big for the buffers, shorter than the headers, or not for this driver. */
	if ((uint64_t)n > rx->capacity || (size_t)n < NET_HDR_LEN + ETH_HLEN ||
	    !rx_deliver(net, (uint64_t)n))
		net->stats.rx_dropped++;
	return true;
}

/* No driver running (or a broken one): frames are dropped, as by a NIC whose link is
 * down. A short read consumes a whole frame. */
static void rx_discard(struct virtio_net *net)
{
	uint8_t frame[64];

	for (unsigned i = 0; i < VIRTIO_NET_RX_BUDGET; i++) {
		ssize_t n = read(net->fd, frame, sizeof(frame));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			rx_backend_failed(net, n == 0 ? "end of file" : strerror(errno));
			return;
		}
		net->stats.rx_dropped++;
	}
}

/* The event-loop handler of the fd: readable (frames for the guest) or writable
 * (transmit waiting). Receives at most VIRTIO_NET_RX_BUDGET frames, interrupting once. */
static void net_on_backend(void *opaque)
{
	struct virtio_net *net = opaque;
	struct virtq *rxq = net_rxq(net);

	pthread_mutex_lock(&net->dev.lock);
	if (!net_live(net)) {
		net->tx_waiting = false;
		if (!net->rx_waiting)
			rx_discard(net);
	} else {
		uint16_t old_used_idx = rxq->used_idx;
		if (net->tx_waiting)
			net_tx_run(net);
		for (unsigned i = 0; i < VIRTIO_NET_RX_BUDGET && !net->rx_waiting && !net->broken;
		     i++)
			if (!rx_receive_one(net))
				break;
		if (rxq->used_idx != old_used_idx)
			vdev_notify_used(&net->dev, NET_RX_QUEUE, old_used_idx);
	}
	net_update_watch(net);
	pthread_mutex_unlock(&net->dev.lock);
}

/* vdev_ops. */

static uint64_t net_features(struct vdev *dev)
{
	struct virtio_net *net = dev->impl;
	const unsigned bits[] = {
	    VIRTIO_NET_F_CSUM,	     VIRTIO_NET_F_GUEST_CSUM, VIRTIO_NET_F_GUEST_TSO4,
	    VIRTIO_NET_F_GUEST_TSO6, VIRTIO_NET_F_GUEST_ECN,  VIRTIO_NET_F_HOST_TSO4,
	    VIRTIO_NET_F_HOST_TSO6,  VIRTIO_NET_F_HOST_ECN,   VIRTIO_NET_F_MRG_RXBUF,
	    VIRTIO_NET_F_STATUS,
	};
	uint64_t features = VIRTIO_FEATURE_INDIRECT_DESC | VIRTIO_FEATURE_EVENT_IDX;

	for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
		features |= 1ULL << bits[i];
	if (net->has_mac)
		features |= 1ULL << VIRTIO_NET_F_MAC;
	return features;
}

static void net_config_read(struct vdev *dev, uint32_t offset, uint8_t *data, uint32_t len)
{
	struct virtio_net *net = dev->impl;

	/* The transport checked the range against config_size; this keeps the copy
	 * inside the struct whatever it did. */
	memset(data, 0, len);
	if (offset <= sizeof(net->config) && len <= sizeof(net->config) - offset)
		memcpy(data, (const uint8_t *)&net->config + offset, len);
}

static void net_config_write(struct vdev *dev, uint32_t offset, const uint8_t *data, uint32_t len)
{
	/* §5.1.4: every field is read-only for the driver. */
	(void)dev;
	(void)offset;
	(void)data;
	(void)len;
}

static int net_activate(struct vdev *dev)
{
	struct virtio_net *net = dev->impl;

	if (!net->set_offloads)
		return 0;
	int err = net->set_offloads(net->fd, dev->driver_features);
	if (err)
		log_error(&net->log, "%s: setting the backend's offloads: %s", net->name,
			  strerror(-err));
	return err;
}

static void net_queue_notify(struct vdev *dev, uint16_t q)
{
	struct virtio_net *net = dev->impl;

	if (net->broken)
		return;
	if (q == NET_RX_QUEUE)
		net->rx_waiting = false; /* the handler reads once the fd is readable */
	else if (q == NET_TX_QUEUE && !net->tx_waiting)
		net_tx_run(net);
	net_update_watch(net);
}

/* Forgets the stash and what waits: the driver takes every buffer back (§2.4). What the
 * loop watches is brought in line by the event thread's next call. */
static void net_reset(struct vdev *dev)
{
	struct virtio_net *net = dev->impl;

	net->rx.count = 0;
	net->rx.iov_count = 0;
	net->rx.capacity = 0;
	memset(net->rx.held, 0, sizeof(net->rx.held));
	net->broken = false;
	net->rx_waiting = false;
	net->tx_waiting = false;
	net->rx_error_logged = false;
	net->tx_error_logged = false;
	virtq_reset(net_rxq(net));
	virtq_reset(net_txq(net));
	if (net->set_offloads && net->set_offloads(net->fd, 0) != 0)
		log_warn(&net->log, "%s: clearing the backend's offloads failed", net->name);
}

/* Snapshots. Nothing is in flight between two calls: a transmitted chain is sent and
 * used, or given back to its ring (tx_waiting). The receive buffers in the stash,
 * though, are popped and not used: the snapshot names them, in order, and a load takes
 * the same chains again from the restored ring, where guest memory still holds them. */
static int net_save(struct vdev *dev, struct snap_writer *w)
{
	struct virtio_net *net = dev->impl;

	snap_put_bool(w, net->broken);
	snap_put_u16(w, (uint16_t)net->rx.count);
	for (unsigned i = 0; i < net->rx.count; i++)
		snap_put_u16(w, net->rx.buf[i].head);
	return 0;
}

static int net_load(struct vdev *dev, struct snap_reader *r)
{
	struct virtio_net *net = dev->impl;
	struct virtq *rxq = net_rxq(net), *txq = net_txq(net);

	net->broken = snap_get_bool(r);
	uint16_t count = snap_get_u16(r);
	if (r->error)
		return -EINVAL;
	/* Exactly the chains the device owns: on rx those of the stash, on tx none. */
	if (count != (uint16_t)(rxq->last_avail_idx - rxq->used_idx) ||
	    txq->last_avail_idx != txq->used_idx)
		return snap_fail(r, "virtio-net: the receive buffers held differ from the queue's");
	for (unsigned i = 0; i < count; i++) {
		uint16_t head = snap_get_u16(r);
		if (r->error)
			return -EINVAL;
		if (head >= NET_QUEUE_SIZE || net->rx.held[head] || rx_stash_full(net) ||
		    virtq_chain_at(rxq, head, &net->chain) != 0 || !rx_stash_take(net, &net->chain))
			return snap_fail(r, "virtio-net: a receive buffer held is not one the "
					    "device could have taken");
	}
	return 0;
}

static const struct vdev_ops net_ops = {
    .features = net_features,
    .config_read = net_config_read,
    .config_write = net_config_write,
    .activate = net_activate,
    .queue_notify = net_queue_notify,
    .reset = net_reset,
    .save = net_save,
    .load = net_load,
};

static bool mac_usable(const uint8_t mac[6])
{
	static const uint8_t zero[6];

	/* The group bit makes it a multicast address (IEEE 802). */
	return !(mac[0] & 1) && memcmp(mac, zero, sizeof(zero)) != 0;
}

/* Everything but the event loop: options checked, the fd nonblocking, the device
 * model and its config space. */
static int net_setup(struct virtio_net *net, const struct virtio_net_options *options,
		     const struct mote_log *log)
{
	const uint8_t *mac = options->mac;

	if (log)
		net->log = *log;
	if (options->has_mac && !mac_usable(mac)) {
		log_error(log, "%s: %02x:%02x:%02x:%02x:%02x:%02x is not a unicast address",
			  net->name, mac[0], mac[1], mac[2], mac[3], mac[4], mac[5]);
		return -EINVAL;
	}
	int flags = fcntl(options->tap_fd, F_GETFL);
	if (flags < 0 || fcntl(options->tap_fd, F_SETFL, flags | O_NONBLOCK) != 0) {
		int err = errno;
		log_error(log, "%s: backend fd %d: %s", net->name, options->tap_fd, strerror(err));
		return -err;
	}
	net->fd = options->tap_fd;
	net->set_offloads = options->set_offloads;
	net->has_mac = options->has_mac;
	if (options->has_mac)
		memcpy(net->config.mac, mac, sizeof(net->config.mac));
	/* §5.1.4, little-endian: the link is always up, one queue pair. */
	net->config.status = htole16(VIRTIO_NET_S_LINK_UP);
	net->config.max_virtqueue_pairs = htole16(1);
	net->dev.name = net->name;
	net->dev.device_id = VIRTIO_ID_NET;
	net->dev.queue_count = 2;
	net->dev.queue_max_size = NET_QUEUE_SIZE;
	net->dev.config_size = NET_CONFIG_SIZE;
	net->dev.ops = &net_ops;
	net->dev.impl = net;
	return 0;
}

int virtio_net_create(const struct virtio_net_options *options, struct guest_memory *mem,
		      struct event_loop *loop, const struct mote_log *log,
		      struct virtio_net **net_out)
{
	if (!options || options->tap_fd < 0 || !mem || !loop) {
		log_error(log, "virtio-net: no backend fd, guest memory or event loop");
		return -EINVAL;
	}
	struct virtio_net *net = calloc(1, sizeof(*net));
	if (!net)
		return -ENOMEM;
	if (asprintf(&net->name, "virtio-net%s%s", options->name ? " " : "",
		     options->name ? options->name : "") < 0) {
		free(net);
		return -ENOMEM;
	}
	pthread_mutex_init(&net->dev.lock, NULL);
	int err = net_setup(net, options, log);
	if (!err) {
		net->dev.mem = mem;
		net->loop = loop;
		/* Last: the handler may run from here on (and drops frames until
		 * activation). */
		err = event_loop_add(loop, net->fd, net_on_backend, net);
		if (err)
			log_error(log, "%s: watching the backend: %s", net->name, strerror(-err));
	}
	if (err) {
		virtio_net_destroy(net);
		return err;
	}
	net->watching = EVENT_READABLE;
	*net_out = net;
	return 0;
}

struct vdev *virtio_net_vdev(struct virtio_net *net)
{
	return &net->dev;
}

void virtio_net_get_stats(struct virtio_net *net, struct virtio_net_stats *stats)
{
	pthread_mutex_lock(&net->dev.lock);
	*stats = net->stats;
	pthread_mutex_unlock(&net->dev.lock);
}

void virtio_net_destroy(struct virtio_net *net)
{
	if (!net)
		return;
	pthread_mutex_destroy(&net->dev.lock);
	free(net->name);
	free(net);
}
