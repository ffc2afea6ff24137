/* What the virtio-net device's files share (net.c: the device, its transmit path and
 * its vdev_ops; net_rx.c: its receive path): the device's state and small helpers.
 * Internal to virtio/; users include net.h. */
#ifndef MOTE_VIRTIO_NET_DEVICE_H
#define MOTE_VIRTIO_NET_DEVICE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <linux/virtio_net.h>

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
	uint32_t ring_descs; /* virtq_chain.ring_descs */
	uint64_t len;
};

struct net_rx_stash {
	unsigned count;
	unsigned iov_count;  /* at most NET_MAX_IOV - 1: one more for the spare byte */
	uint64_t capacity;   /* bytes of all the buffers */
	uint32_t ring_descs; /* of the receive queue's table, held by the buffers */
	struct net_rx_buffer buf[NET_MAX_IOV];
	struct iovec iov[NET_MAX_IOV];
	struct virtq_used_buf used[NET_MAX_IOV];
	bool held[NET_QUEUE_SIZE]; /* by head: in the stash */
	uint8_t spare;
	/* A frame read while the stash was too small for the largest one, which did not
	 * fit: it waits here (header included) for buffers enough to hold it (net_rx.c). */
	uint32_t waiting_len;
	uint8_t waiting_frame[NET_MAX_PACKET + 1]; /* one more to see a frame too long */
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

static inline struct virtq *net_rxq(struct virtio_net *net)
{
	return &net->dev.queues[NET_RX_QUEUE];
}

static inline struct virtq *net_txq(struct virtio_net *net)
{
	return &net->dev.queues[NET_TX_QUEUE];
}

static inline bool net_has(const struct virtio_net *net, unsigned feature)
{
	return net->dev.driver_features & (1ULL << feature);
}

/* Whether a read or write error of the backend concerns that one frame (one the TAP
 * cannot express, or a guest's malformed one), not the backend itself. */
static inline bool net_frame_error(int err)
{
	return err == EINVAL || err == EFAULT || err == EMSGSIZE;
}

static inline bool net_live(const struct virtio_net *net)
{
	return vdev_running(&net->dev) && !net->broken;
}

/* The driver broke a queue: the device takes nothing more until a reset (§2.1.2). */
void net_break(struct virtio_net *net, const char *what);

/* Gives the driver one frame from the backend (or the one waiting for buffers). False
 * when there is nothing more to do in this turn: no frame, too few receive buffers
 * (rx_waiting is then set), or a broken queue. On the event thread, under dev.lock. */
bool net_rx_receive_one(struct virtio_net *net);

/* Reads and drops what the backend holds, up to VIRTIO_NET_RX_BUDGET frames: no driver
 * takes them. On the event thread, under dev.lock. */
void net_rx_discard(struct virtio_net *net);

/* Takes the receive chain at head back into the stash, as a snapshot recorded the
 * stash (net_load). False if the device could not have held that chain: out of range,
 * held already, beyond what the stash takes, or malformed. */
bool net_rx_stash_reload(struct virtio_net *net, uint16_t head);

#endif
