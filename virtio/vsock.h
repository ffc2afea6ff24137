/* virtio-vsock (virtio 1.2 §5.10) in the monitor, not vhost: guest AF_VSOCK stream
 * sockets bridged to host AF_UNIX stream sockets with Firecracker's protocol
 * (design.md "vsock"):
 *
 * - host-initiated: a host program connects to uds_path and writes "CONNECT <port>\n";
 *   the guest is asked for a connection to its port <port>, and once it accepts, the
 *   program reads "OK <local port>\n" and the socket carries the stream. A bad or
 *   overlong line, or a guest that refuses or does not answer, closes the socket.
 * - guest-initiated: a guest connecting to the host (CID 2) on port P reaches whoever
 *   listens on "<uds_path>_<P>"; with nobody there the guest gets an RST at once.
 *
 * Three queues: rx 0, tx 1, event 2 (§5.10.2); only VIRTIO_VSOCK_TYPE_STREAM. Both
 * directions follow the credit rules of §5.10.6.3: the guest is never sent more than
 * it has room for, and a guest that sends more than the device advertised loses the
 * connection. Up to 1023 connections at once, all waited on through one epoll fd of
 * the device's, which is the one source it adds to the VM's event loop.
 *
 * Threads and locking as for every device (vdev.h): the transport calls in with
 * dev->lock held; the device's event-loop handler takes it. */
#ifndef MOTE_VIRTIO_VSOCK_H
#define MOTE_VIRTIO_VSOCK_H

#include <stdint.h>

#include "../vmm/event_loop.h"
#include "../vmm/guest_memory.h"
#include "../vmm/log.h"
#include "vdev.h"

/* The guest CIDs a device may have: §5.10.4 reserves 0, 1, 2 (the host), 0xffffffff,
 * and the upper 32 bits. */
#define VIRTIO_VSOCK_MIN_GUEST_CID 3ULL
#define VIRTIO_VSOCK_MAX_GUEST_CID 0xfffffffeULL
/* How long the device waits, by default, for a host client's CONNECT line, for the
 * guest's RESPONSE to a host connection, for its RST after a close, and for the host
 * to take the last bytes of a guest that closed. */
#define VIRTIO_VSOCK_DEFAULT_TIMEOUT_MS 2000
/* Guest packets one turn of the event thread takes from tx before the queue waits for
 * its next turn, so that a guest keeping tx full cannot hold up its VM's other
 * devices. */
#define VIRTIO_VSOCK_TAKE_BUDGET 32
/* Rx buffers one fill writes before the queue waits for its next turn: a guest that
 * returns each buffer at once, to a host that writes without pause, cannot hold the
 * event thread either. */
#define VIRTIO_VSOCK_FILL_BUDGET 32

struct virtio_vsock_options {
	uint64_t guest_cid;   /* in [VIRTIO_VSOCK_MIN_GUEST_CID, VIRTIO_VSOCK_MAX_GUEST_CID] */
	const char *uds_path; /* the host socket to create (a stale one there is replaced) */
	unsigned timeout_ms;  /* 0: VIRTIO_VSOCK_DEFAULT_TIMEOUT_MS */
};

struct virtio_vsock;

/* Creates the device, listens on uds_path and watches the device's epoll fd on loop.
 * Errors, each with a message on log: -EINVAL (bad options: a reserved CID, no path),
 * -ENAMETOOLONG (uds_path leaves no room for "_<port>" in a socket address),
 * -EEXIST (uds_path is not a socket), -EADDRINUSE (a process serves the socket there; a
 * stale one is replaced), -ENOSPC (the loop is full), others from the host. */
int virtio_vsock_create(const struct virtio_vsock_options *options, struct guest_memory *mem,
			struct event_loop *loop, const struct mote_log *log,
			struct virtio_vsock **vsock_out);

/* The device model the transport carries. */
struct vdev *virtio_vsock_vdev(struct virtio_vsock *vsock);

/* Resets the transport (§5.10.6, Device Events), as after a restore: every connection
 * with the guest is dropped and its host socket closed, and the guest is sent
 * VIRTIO_VSOCK_EVENT_TRANSPORT_RESET on the event queue, at once or as soon as it
 * offers an event buffer. The listener and host clients still sending their CONNECT
 * line stay. Takes dev->lock. */
void virtio_vsock_transport_reset(struct virtio_vsock *vsock);

/* Closes every socket and removes uds_path; vsock may be NULL. The event loop must no
 * longer run (or no longer watch this device). */
void virtio_vsock_destroy(struct virtio_vsock *vsock);

#endif
