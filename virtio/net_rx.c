/* virtio-net's receive path (virtio 1.2 §5.1.6.3, §5.1.6.4; net_device.h).
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
bool net_rx_receive_one(struct virtio_net *net)
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
