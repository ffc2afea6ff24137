/* virtio-net (virtio 1.2 §5.1) on a packet fd: a TAP (net_tap.h), or anything else that
 * keeps packet boundaries and puts the 12-byte header of §5.1.6 (struct
 * virtio_net_hdr_mrg_rxbuf) ahead of every frame, one frame per read and per write —
 * the unit tests use an AF_UNIX SOCK_SEQPACKET pair. One receive queue (0) and one
 * transmit queue (1); no control queue, no multiqueue.
 *
 * Offered: MAC (when one is given), STATUS (the link is always up), CSUM, HOST_TSO4,
 * HOST_TSO6, HOST_ECN (the TAP takes partial checksums and segments itself), GUEST_CSUM,
 * GUEST_TSO4, GUEST_TSO6, GUEST_ECN (set on the TAP on activation as the driver
 * accepted them), MRG_RXBUF, EVENT_IDX and INDIRECT_DESC. Not offered: the UFO and USO
 * bits (a 6.1 TAP hands out no UFO frames), CTRL_VQ and all that needs it, MTU.
 *
 * Frames go between guest memory and the fd without a copy: a transmitted chain is
 * written with one writev() (the header from the device's checked copy, the frame from
 * guest memory), a received frame is read with one readv() straight into the guest's
 * receive buffers.
 *
 * The driver is not trusted. A transmitted packet that breaks a rule (shorter than the
 * header and an Ethernet header, longer than VIRTIO_NET_MAX_FRAME, a gso_type or flag
 * the driver did not negotiate, a checksum or header length outside the frame) is
 * dropped alone: it goes back with used length 0 and is counted. Receive buffers too
 * small for the header go back unused (length 0). Only a chain virtq_pop() refuses
 * stops the device until a reset (DEVICE_NEEDS_RESET).
 *
 * Threads: the transport calls vdev_ops with dev->lock held; queue notifications and
 * the device's own fd handler run on the event thread and change what the loop watches
 * (event_loop_watch()); activate and reset (vCPU threads) only change state, which the
 * event thread applies at its next call. */
#ifndef MOTE_VIRTIO_NET_H
#define MOTE_VIRTIO_NET_H

#include <stdbool.h>
#include <stdint.h>

#include "../vmm/event_loop.h"
#include "../vmm/guest_memory.h"
#include "../vmm/log.h"
#include "vdev.h"

/* The largest frame either way, without the header: a GSO frame of 14 bytes of Ethernet
 * header, 40 of IPv6 header and 65535 of payload (§5.1.6.3). */
#define VIRTIO_NET_MAX_FRAME 65589

/* Frames a call of the fd handler takes at most before the loop serves others. */
#define VIRTIO_NET_RX_BUDGET 64
/* Chains a transmit run sends at most; it goes on at the next turn of the loop. */
#define VIRTIO_NET_TX_BUDGET 256

struct virtio_net_options {
	/* The backend's packet fd. The device makes it nonblocking and watches it on the
	 * event loop, but never closes it: it stays the caller's. */
	int tap_fd;
	/* The address offered with VIRTIO_NET_F_MAC (a unicast, non-zero one). Without it
	 * MAC is not offered and the driver picks a random address (§5.1.5). */
	uint8_t mac[6];
	bool has_mac;
	/* Called on activation with what the driver accepted, and on reset with 0, so that
	 * the backend hands the guest only frames it can take (§5.1.6.4):
	 * net_tap_set_offloads() for a TAP. 0 or a negative errno, which fails the
	 * activation. NULL: the backend needs no telling (a test double). */
	int (*set_offloads)(int tap_fd, uint64_t driver_features);
	const char *name; /* for messages, e.g. the TAP's name; NULL: "virtio-net" */
};

/* What the device counted since it was created. */
struct virtio_net_stats {
	uint64_t tx_frames, tx_bytes; /* handed to the backend, headers not counted */
	uint64_t tx_malformed;	      /* dropped: bad length or header */
	uint64_t tx_errors;	      /* the backend refused them (not EAGAIN) */
	uint64_t rx_frames, rx_bytes; /* given to the driver, headers not counted */
	uint64_t rx_dropped;	      /* too big for the buffers, a header the driver cannot
				       * take, or no driver running */
	uint64_t rx_bad_buffers;      /* receive buffers too small for a header */
};

struct virtio_net;

/* Checks the options, makes tap_fd nonblocking and watches it on loop. -EINVAL, with a
 * message on log, for a negative fd or a multicast or zero MAC; -ENOSPC when the loop
 * is full; others from the host. */
int virtio_net_create(const struct virtio_net_options *options, struct guest_memory *mem,
		      struct event_loop *loop, const struct mote_log *log,
		      struct virtio_net **net_out);

/* The device model the transport carries. */
struct vdev *virtio_net_vdev(struct virtio_net *net);

/* A copy of the counters (takes dev->lock). */
void virtio_net_get_stats(struct virtio_net *net, struct virtio_net_stats *stats);

/* Frees the device; net may be NULL. The event loop must no longer run (or no longer
 * watch tap_fd); the fd stays open. */
void virtio_net_destroy(struct virtio_net *net);

#endif
