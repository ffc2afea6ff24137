/* virtio-net (virtio 1.2 §5.1) on a packet fd (net.h). One event-loop handler serves
 * the fd both ways: it reads frames into the receive queue while the driver has buffers
 * there, and sends what the transmit queue holds when the fd, full a moment ago, takes
 * frames again. What the loop watches the fd for follows from two flags:
 * rx_waiting (no receive buffers: not read until the driver notifies the receive
 * queue) and tx_waiting (transmit stopped on EAGAIN or its budget: go on once the fd is
 * writable). The receive path is in net_rx.c. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <linux/virtio_net.h>

#include "../vmm/snapshot_stream.h"
#include "net_device.h"

void net_break(struct virtio_net *net, const char *what)
{
	net->broken = true;
	vdev_needs_reset(&net->dev, &net->log, what);
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

/* Transmit (§5.1.6.2). */

enum net_tx_result { NET_TX_DONE, NET_TX_AGAIN };

#define NET_MIN_GSO_SIZE 8

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
	/* Linux's own floor (TCP_MIN_GSO_SIZE): a guest's send MSS can go well below
	 * TCP_MIN_MSS (down to 36 with a peer that asks for tiny segments), but a size of
	 * one would make the host cut a 64 KiB frame into 64 Ki packets. */
	return needs_csum && le16toh(hdr->gso_size) >= NET_MIN_GSO_SIZE;
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
		/* A backend no longer watched would never say it has room again. */
		if ((errno == EAGAIN || errno == EWOULDBLOCK) && !net->backend_failed)
			return NET_TX_AGAIN;
		if (errno != EINTR)
			break;
	}
	/* What the guest's frame caused counts among its driver's warnings; the host's
	 * own failures (a TAP gone down) are always told once after a reset. */
	if (!net->tx_error_logged) {
		if (net_frame_error(errno))
			vdev_complain(&net->dev, &net->log, "%s: the backend refused a frame: %s",
				      net->name, strerror(errno));
		else
			log_warn(&net->log, "%s: the backend refused a frame: %s", net->name,
				 strerror(errno));
	}
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
			/* Go on in the next turn: when the fd is writable (it almost always is),
			 * or, with a backend no longer watched, through the queue. */
			if (net->backend_failed)
				vdev_serve_again(&net->dev, NET_TX_QUEUE);
			else
				net->tx_waiting = true;
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

/* Receives at most VIRTIO_NET_RX_BUDGET frames, interrupting once. */
static void net_rx_run(struct virtio_net *net)
{
	struct virtq *rxq = net_rxq(net);
	uint16_t old_used_idx = rxq->used_idx;

	for (unsigned i = 0; i < VIRTIO_NET_RX_BUDGET && !net->rx_waiting && !net->broken; i++)
		if (!net_rx_receive_one(net))
			break;
	if (rxq->used_idx != old_used_idx)
		vdev_notify_used(&net->dev, NET_RX_QUEUE, old_used_idx);
}

/* The event-loop handler of the fd: readable (frames for the guest) or writable
 * (transmit waiting). */
static void net_on_backend(void *opaque)
{
	struct virtio_net *net = opaque;

	pthread_mutex_lock(&net->dev.lock);
	if (!net_live(net)) {
		net->tx_waiting = false;
		if (!net->rx_waiting)
			net_rx_discard(net);
	} else {
		if (net->tx_waiting)
			net_tx_run(net);
		net_rx_run(net);
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
	if (q == NET_RX_QUEUE) {
		net->rx_waiting = false; /* the handler reads once the fd is readable */
		/* A frame read already waits for these buffers: the fd may stay quiet. */
		if (net->rx.waiting_len > 0)
			net_rx_run(net);
	} else if (q == NET_TX_QUEUE && !net->tx_waiting)
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
	net->rx.ring_descs = 0;
	net->rx.waiting_len = 0;
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
 * the same chains again from the restored ring, where guest memory still holds them.
 * A frame read aside and waiting for buffers is host state: a restored VM goes without
 * it, as if the NIC had dropped it, and TCP sends it again. */
static int net_save(struct vdev *dev, struct snap_writer *w)
{
	struct virtio_net *net = dev->impl;

	snap_put_bool(w, net->broken);
	snap_put_u16(w, (uint16_t)net->rx.count);
	for (unsigned i = 0; i < net->rx.count; i++)
		snap_put_u16(w, net->rx.buf[i].head);
	return 0;
}

static int net_load(struct vdev *dev, struct snap_reader *r, uint32_t status)
{
	struct virtio_net *net = dev->impl;
	struct virtq *rxq = net_rxq(net), *txq = net_txq(net);

	net->broken = vdev_load_broken(r, status);
	uint16_t count = snap_get_u16(r);
	if (r->error)
		return -EINVAL;
	/* Buffers are taken only from a started device's queue (net_live). */
	if (count && !(status & VIRTIO_STATUS_DRIVER_OK))
		return snap_fail(r, "virtio-net: receive buffers held by a device never started");
	/* Exactly the chains the device owns: on rx those of the stash, on tx none. */
	if (count != (uint16_t)(rxq->last_avail_idx - rxq->used_idx) ||
	    txq->last_avail_idx != txq->used_idx)
		return snap_fail(r, "virtio-net: the receive buffers held differ from the queue's");
	for (unsigned i = 0; i < count; i++) {
		uint16_t head = snap_get_u16(r);
		if (r->error)
			return -EINVAL;
		if (!net_rx_stash_reload(net, head))
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
