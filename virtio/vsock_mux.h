/* The virtio-vsock connection multiplexer: between the device's queues (vsock.c) and
 * the host's AF_UNIX sockets. It owns the listening socket, every connection (a table
 * keyed by (local port, peer port), as Firecracker's muxer), the replies owed to the
 * guest, the timeouts, and one epoll fd of its own that watches all of these: the VM's
 * event loop has room for 64 sources, the device for 1023 connections, so the loop
 * watches only that epoll fd and the device waits on the rest itself.
 *
 * The guest is hostile: a packet that is not what the spec allows is dropped when it
 * carries no usable address (a short header, a forged source CID), and otherwise
 * answered with an RST that resets its connection, if it has one. */
#ifndef MOTE_VIRTIO_VSOCK_MUX_H
#define MOTE_VIRTIO_VSOCK_MUX_H

#include <stdbool.h>
#include <stdint.h>

#include "../vmm/log.h"
#include "virtqueue.h"
#include "vsock_conn.h"

#define VSOCK_MAX_CONNECTIONS 1023
/* What a guest can make the device hold is the sum of its connections' buf_alloc (guest
 * bytes a slow host reader has not taken). Up to this many open connections at a time
 * get the full VSOCK_CONN_BUF_ALLOC, the others VSOCK_CONN_BUF_ALLOC_SMALL: at most
 * 64 x 256 KiB + 959 x 16 KiB, about 31 MiB per device, where a full buf_alloc for
 * every connection would be 256 MiB. */
#define VSOCK_MUX_FULL_CREDIT_CONNECTIONS 64
#define VSOCK_TABLE_BUCKETS 1024
/* RSTs owed for packets of no connection; while full, the device takes no more
 * guest packets (§5.10.6.1: processing stops when the additional resources are). */
#define VSOCK_RSTQ_SIZE 1024
/* Ports for host-initiated connections come from [2^30, 2^31), as Firecracker's. */
#define VSOCK_FIRST_LOCAL_PORT (1u << 30)

/* A guest's REQUEST whose host listener had a full backlog (a non-blocking AF_UNIX
 * connect fails with EAGAIN rather than queueing): it is tried again every
 * VSOCK_RETRY_INTERVAL_MS until VSOCK_RETRY_LIMIT_MS have passed, then refused with an
 * RST. A listener that accepts slowly (socat forks a child per client) is not a
 * listener that is absent. */
#define VSOCK_MAX_PENDING 64
#define VSOCK_RETRY_INTERVAL_MS 5
#define VSOCK_RETRY_LIMIT_MS 2000

struct vsock_pending_connect {
	struct vsock_pkt request;
	uint64_t give_up_ns;
};

struct vsock_rst {
	uint64_t src_cid;
	uint32_t src_port;
	uint32_t dst_port;
};

struct vsock_mux {
	uint64_t guest_cid;
	const char *uds_path;
	unsigned timeout_ms;
	const struct mote_log *log;
	const char *name;
	bool complained; /* one warning per device for a misbehaving guest */

	int listen_fd;
	struct unix_listener_id listen_id; /* the socket at uds_path, removed at the end */
	int epoll_fd;
	int timer_fd;
	bool listen_paused;   /* out of fds: accept again once a connection closes */
	bool fds_short;	      /* said so already, until an accept succeeds */
	bool clients_refused; /* said so already, until a client is taken */
	bool clients_held;    /* host clients wait unread (vsock_mux_hold_clients) */
	bool held_warned;     /* a held client was closed, and the log told why */
	uint64_t timer_ns;    /* when the timer fires (CLOCK_MONOTONIC), 0: disarmed */

	unsigned conn_count;	    /* connections and clients still sending their CONNECT line */
	unsigned full_credit_count; /* those with VSOCK_CONN_BUF_ALLOC */
	struct vsock_conn *buckets[VSOCK_TABLE_BUCKETS];
	uint64_t hash_seed; /* the table's key, random */
	struct vsock_conn *all;
	struct vsock_conn *rx_head, *rx_tail; /* those with something for the guest */
	struct vsock_conn *dead;	      /* closed, freed after the event batch */
	uint32_t next_local_port;

	struct vsock_pending_connect pending[VSOCK_MAX_PENDING];
	unsigned pending_count;
	struct vsock_rst rstq[VSOCK_RSTQ_SIZE];
	unsigned rst_head;
	unsigned rst_count;
};

/* Listens on uds_path and sets up the epoll fd and the timer. The strings and log
 * must outlive the multiplexer. 0, or a negative errno with a message on log. */
int vsock_mux_init(struct vsock_mux *mux, uint64_t guest_cid, const char *uds_path,
		   unsigned timeout_ms, const struct mote_log *log, const char *name);

/* Closes every socket, removes uds_path. */
void vsock_mux_destroy(struct vsock_mux *mux);

/* The fd to watch for readability: then vsock_mux_host_events(). */
int vsock_mux_fd(const struct vsock_mux *mux);

/* Handles what epoll reports: new clients, CONNECT lines, socket readiness, timeouts. */
void vsock_mux_host_events(struct vsock_mux *mux);

/* One packet the guest put on the tx queue: the header and payload in chain's readable
 * part. The payload is used up (sent or buffered) before this returns. */
void vsock_mux_from_guest(struct vsock_mux *mux, const struct virtq_chain *chain);

/* Holds host clients unread (hold), or reads them again: a client held is taken in but
 * its CONNECT line waits, so nothing reaches the guest for it. It has the deadline of a
 * client that sends no line, timeout_ms from its arrival or from the change of hold,
 * whichever is later: one held for longer is closed, with one warning a hold. */
void vsock_mux_hold_clients(struct vsock_mux *mux, bool hold);

/* The VM stood still for stood_ns (a pause): every deadline moves on by as much, so
 * that the pause counts neither against the guest's time to answer a connect nor
 * against a held client's wait, nor against a connect still being retried. */
void vsock_mux_defer_deadlines(struct vsock_mux *mux, uint64_t stood_ns);

/* Whether there is something for the guest's rx queue. */
bool vsock_mux_has_rx(const struct vsock_mux *mux);

/* Whether the next guest packet can be taken: its reply has room to wait. */
bool vsock_mux_takes_tx(const struct vsock_mux *mux);

/* Fills one rx buffer (at least VSOCK_HDR_SIZE writable bytes, nothing readable): true
 * and *written, false when there was nothing for it after all. */
bool vsock_mux_to_guest(struct vsock_mux *mux, const struct virtq_chain *chain, uint32_t *written);

/* Forgets every connection with the guest, closing their host sockets, the RSTs
 * owed and the connects still being retried; the listener and the host clients still sending a
 * CONNECT line stay. */
void vsock_mux_reset(struct vsock_mux *mux);

/* Host-initiated connections go on from a random port of [2^30, 2^31) instead of the
 * next one. After a transport reset (a restore) the guest may still hold sockets of the
 * connections before it, until their owners close them, and this process does not know
 * their ports (no snapshot holds them): a request on the same pair of ports would meet
 * such a socket and be refused. Every copy restored from one snapshot would meet the
 * same ones. */
void vsock_mux_scatter_local_ports(struct vsock_mux *mux);

#endif
