/* virtio-net's receive path (virtio 1.2 §5.1.6.3, §5.1.6.4; net_device.h).
 *
 * Receive buffers are popped ahead into a stash, in order, and used from its front.
 * While the stash could hold the largest frame (with MRG_RXBUF; without, while it holds
 * the one buffer that must), a frame is read with one readv() across every stashed
 * buffer, then the buffers it filled are pushed together and the rest wait for the
 * next frame. A spare byte after the buffers shows a frame that did not fit: a TAP
 * reports a frame's whole length however little it could copy, a socket fills the
 * byte; either way it is dropped.
 *
 * While the driver is still refilling and the stash is smaller than that, the next
 * frame is read aside and copied in if it fits. If it does not, it waits for the
 * buffers it needs, and the backend is not read meanwhile: dropping a 64 KiB segment
 * for want of buffers the driver is about to give would cost TCP a retransmission and
 * its window. QEMU and vhost-net wait the same way for room for the frame at the head.
 * Only a frame bigger than all the queue can hold at once is dropped.
 *
 * After a reset the stash and a waiting frame are simply forgotten, like everything
 * the driver had offered. */
#include <endian.h>
#include <errno.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <linux/if_ether.h>

#include "net_device.h"

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
	buf->ring_descs = chain->ring_descs;
	rx->count++;
	rx->iov_count += buf->iov_count;
	rx->capacity += buf->len;
	rx->ring_descs += buf->ring_descs;
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

/* Tops the stash up from the receive queue until it is full. If it then holds fewer
 * than need bytes, with EVENT_IDX the driver has been asked to notify its next buffer
 * (§2.7.10). At most a ring's worth of chains a call: buffers too small to take are
 * given straight back, and a driver offering them again as fast as they come back
 * would otherwise keep the event thread here; the rest waits for the next turn. */
static void rx_fill(struct virtio_net *net, uint64_t need)
{
	struct virtq *vq = net_rxq(net);
	bool rearmed = false;

	for (unsigned popped = 0; !rx_stash_full(net); popped++) {
		if (popped == vq->size) {
			vdev_serve_again(&net->dev, NET_RX_QUEUE);
			return;
		}
		int got = virtq_pop(vq, &net->chain);
		if (got < 0) {
			net_break(net, "broken receive chain");
			return;
		}
		if (got > 0) {
			rearmed = false;
			if (net->chain.head >= NET_QUEUE_SIZE || net->rx.held[net->chain.head]) {
				net_break(net,
					  "the driver offered a receive buffer the device holds");
				return;
			}
			rx_stash_add(net, &net->chain);
			continue;
		}
		if (net->rx.capacity >= need || rearmed || !vq->event_idx)
			return;
		virtq_set_avail_event(vq);
		rearmed = true;
	}
}

/* Whether the driver may still add buffers: not once the stash takes no more, or holds
 * every descriptor of the queue's table. */
static bool rx_stash_can_grow(const struct virtio_net *net)
{
	return !rx_stash_full(net) && net->rx.ring_descs < net->dev.queues[NET_RX_QUEUE].size;
}

/* Drops the first count buffers, which hold iov_count iovecs, from the stash. */
static void rx_stash_consume(struct net_rx_stash *rx, unsigned count, unsigned iov_count)
{
	for (unsigned i = 0; i < count; i++) {
		rx->capacity -= rx->buf[i].len;
		rx->ring_descs -= rx->buf[i].ring_descs;
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
	/* The buffers were marked dirty when taken (virtqueue.c), but the stash keeps them
	 * across snapshots: a frame written after one must be in the next diff too. */
	for (unsigned i = 0; i < iov_count; i++)
		guest_memory_mark_dirty_host(net_rxq(net)->mem, rx->iov[i].iov_base,
					     rx->iov[i].iov_len);
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
	/* Transmit waited for the fd, which is no longer watched: it goes on through the
	 * queue (and drops what the backend refuses). */
	if (net->tx_waiting) {
		net->tx_waiting = false;
		vdev_serve_again(&net->dev, NET_TX_QUEUE);
	}
}

/* One read of the backend into iov[0, n): the frame's length; 0 when there is no frame
 * now, or the backend failed (it is then no longer read); -EINTR when a signal came
 * first. */
static ssize_t rx_read(struct virtio_net *net, const struct iovec *iov, unsigned n)
{
	ssize_t got = readv(net->fd, iov, (int)n);

	if (got > 0)
		return got;
	if (got < 0 && errno == EINTR)
		return -EINTR;
	if (got == 0) {
		rx_backend_failed(net, "end of file");
	} else if (net_frame_error(errno)) {
		/* That frame could not be given (a TAP refuses to express its offloads, say)
		 * and is gone; the next may be. */
		net->stats.rx_dropped++;
	} else if (errno != EAGAIN && errno != EWOULDBLOCK) {
		rx_backend_failed(net, strerror(errno));
	}
	return 0;
}

/* Whether a frame of n bytes read from the backend is one to give: no longer than the
 * buffers it was read into (the spare byte), no shorter than the headers. */
static bool rx_frame_sane(ssize_t n, uint64_t room)
{
	return (uint64_t)n <= room && (size_t)n >= NET_HDR_LEN + ETH_HLEN;
}

/* Gives the waiting frame to the driver once the stash holds it; drops it if the
 * queue can never hold it at once. False while it waits for buffers (rx_waiting). */
static bool rx_give_waiting_frame(struct virtio_net *net)
{
	struct net_rx_stash *rx = &net->rx;
	uint32_t n = rx->waiting_len;

	rx_fill(net, n);
	if (net->broken)
		return false;
	if (rx->capacity < n && rx_stash_can_grow(net)) {
		net->rx_waiting = true;
		return false;
	}
	rx->waiting_len = 0;
	if (rx->capacity < n) {
		net->stats.rx_dropped++;
		return true;
	}
	iov_copy(rx->iov, rx->iov_count, 0, rx->waiting_frame, n, true);
	if (!rx_deliver(net, n))
		net->stats.rx_dropped++;
	return true;
}

bool net_rx_receive_one(struct virtio_net *net)
{
	struct net_rx_stash *rx = &net->rx;

	if (rx->waiting_len > 0)
		return rx_give_waiting_frame(net);
	rx_fill(net, NET_HDR_LEN);
	if (net->broken)
		return false;
	if (rx->count == 0) {
		net->rx_waiting = true;
		return false;
	}
	if (!rx_stash_full(net)) {
		struct iovec aside = {rx->waiting_frame, sizeof(rx->waiting_frame)};
		ssize_t n = rx_read(net, &aside, 1);
		if (n <= 0)
			return n == -EINTR;
		if (!rx_frame_sane(n, NET_MAX_PACKET)) {
			net->stats.rx_dropped++;
			return true;
		}
		rx->waiting_len = (uint32_t)n;
		return rx_give_waiting_frame(net);
	}
	rx->iov[rx->iov_count] = (struct iovec){&rx->spare, 1};
	ssize_t n = rx_read(net, rx->iov, rx->iov_count + 1);
	if (n <= 0)
		return n == -EINTR;
	/* Too big for the buffers, shorter than the headers, or not for this driver. */
	if (!rx_frame_sane(n, rx->capacity) || !rx_deliver(net, (uint64_t)n))
		net->stats.rx_dropped++;
	return true;
}

/* No driver running (or a broken one): frames are dropped, as by a NIC whose link is
 * down. A short read consumes a whole frame. */
void net_rx_discard(struct virtio_net *net)
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

bool net_rx_stash_reload(struct virtio_net *net, uint16_t head)
{
	return head < NET_QUEUE_SIZE && !net->rx.held[head] && !rx_stash_full(net) &&
	       virtq_chain_at(net_rxq(net), head, &net->chain) == 0 &&
	       rx_stash_take(net, &net->chain);
}
