/* One virtio-vsock stream connection between a guest AF_VSOCK socket and a host
 * AF_UNIX socket: its state, the credit of both sides (virtio 1.2 §5.10.6.3), the
 * shutdown hints (§5.10.6.5), and the guest data the host socket could not take yet.
 *
 * The connection never reads the host socket into a buffer of its own: host bytes go
 * straight into a guest rx buffer, and only when the guest has credit for them, so a
 * guest that stops reading stops the host writer through its socket. Guest bytes go
 * straight to the host socket; what it refuses (EAGAIN) waits in the tx buffer, which
 * the credit the device advertises bounds to the connection's buf_alloc.
 *
 * The functions here do the connection's own work and say what the multiplexer
 * (vsock_mux.c) must do next: keep it, close it, or close it with an RST to the guest. */
#ifndef MOTE_VIRTIO_VSOCK_CONN_H
#define MOTE_VIRTIO_VSOCK_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "virtqueue.h"
#include "vsock_packet.h"
#include "vsock_uds.h"

/* The receive buffer the device advertises for a connection (buf_alloc): what the guest
 * may send before the host socket took it, and so what mote may have to hold for it.
 * A connection gets the full size while few others have it (vsock_mux.h), the small
 * one otherwise; it keeps its size for life, because a Linux 6.1 guest whose
 * peer shrinks buf_alloc below what it has in flight computes a wrapped credit. */
#define VSOCK_CONN_BUF_ALLOC (256u * 1024u)
#define VSOCK_CONN_BUF_ALLOC_SMALL (16u * 1024u)

enum vsock_conn_state {
	VSOCK_CONN_AWAIT_LINE,	/* a host client, its "CONNECT <port>\n" still coming */
	VSOCK_CONN_LOCAL_INIT,	/* REQUEST owed or sent to the guest, its RESPONSE awaited */
	VSOCK_CONN_ESTABLISHED, /* data flows */
	VSOCK_CONN_CLOSING,	/* the guest was told "no more either way"; its RST awaited */
};

/* What the multiplexer does with a connection after an operation. */
enum vsock_verdict {
	VSOCK_KEEP,
	VSOCK_CLOSE, /* close the host socket, tell the guest nothing */
	VSOCK_RESET, /* close the host socket and send the guest an RST */
};

/* Control packets owed to the guest. */
#define VSOCK_OWE_REQUEST 1u
#define VSOCK_OWE_RESPONSE 2u
#define VSOCK_OWE_CREDIT_UPDATE 4u
#define VSOCK_OWE_CREDIT_REQUEST 8u

/* Guest bytes the host socket has not taken: a ring of the connection's buf_alloc
 * bytes, allocated while it holds any. */
struct vsock_txbuf {
	uint8_t *data;
	uint32_t size;
	uint32_t head;
	uint32_t len;
};

struct vsock_conn {
	int fd;
	enum vsock_conn_state state;
	uint32_t buf_alloc;  /* ours, advertised to the guest */
	uint32_t local_port; /* the host side's port */
	uint32_t peer_port;  /* the guest's port */

	/* Host to guest: the guest's receive buffer as it last told us, and what we sent. */
	uint32_t peer_buf_alloc;
	uint32_t peer_fwd_cnt;
	uint32_t tx_cnt;
	bool credit_requested; /* a CREDIT_REQUEST went out since the guest last had room */

	/* Guest to host: bytes taken from the guest, bytes the host socket took, and the
	 * fwd_cnt the guest last saw. rx_cnt - fwd_cnt is what the tx buffer holds. */
	uint32_t rx_cnt;
	uint32_t fwd_cnt;
	uint32_t last_fwd_cnt_sent;
	struct vsock_txbuf txbuf;

	unsigned owed;		 /* VSOCK_OWE_* */
	uint32_t host_shut;	 /* SHUTDOWN flags the host side has come to */
	uint32_t host_shut_sent; /* ... and those the guest was sent */
	uint32_t guest_shut;	 /* SHUTDOWN flags the guest sent (permanent, §5.10.6.5) */
	bool host_readable;	 /* the host socket may have bytes (or EOF) to read */
	bool host_hup;		 /* the host client is gone; what it wrote is still read */
	bool host_write_shut;	 /* shutdown(SHUT_WR) done after the guest's SEND */
	bool request_sent;

	/* AWAIT_LINE: the CONNECT line so far. */
	char line[VSOCK_UDS_LINE_MAX];
	size_t line_len;

	/* The multiplexer's bookkeeping. */
	uint32_t epoll_events;
	bool in_epoll;
	bool keyed;  /* in the (local port, peer port) table */
	bool in_rx;  /* in the list of connections with something for the guest */
	bool closed; /* waiting to be freed at the end of the event batch */
	unsigned deadline_phase;
	uint64_t deadline_ns;
	struct vsock_conn *bucket_next;
	struct vsock_conn *all_prev, *all_next;
	struct vsock_conn *rx_prev, *rx_next;
};

/* A connection for the host socket fd, in state AWAIT_LINE, that advertises buf_alloc
 * (a VSOCK_CONN_BUF_ALLOC*); NULL without memory. */
struct vsock_conn *vsock_conn_new(int fd, uint32_t buf_alloc);

/* Closes the host socket and frees the tx buffer; the struct stays for the caller. */
void vsock_conn_release(struct vsock_conn *conn);

/* A host client asked for guest port peer_port: the guest is owed a REQUEST. */
void vsock_conn_start_local(struct vsock_conn *conn, uint32_t local_port, uint32_t peer_port);

/* The guest's REQUEST reached a host listener: the guest is owed a RESPONSE. */
void vsock_conn_start_peer(struct vsock_conn *conn, const struct vsock_pkt *request);

/* A packet from the guest for this connection; an OP_RW payload is the len bytes after
 * the header in chain's readable part (the caller checked they are there). */
enum vsock_verdict vsock_conn_from_guest(struct vsock_conn *conn, const struct vsock_pkt *pkt,
					 const struct virtq_chain *chain);

/* epoll reported events (EPOLLIN, EPOLLOUT, EPOLLHUP, EPOLLERR) on the host socket. */
enum vsock_verdict vsock_conn_host_event(struct vsock_conn *conn, uint32_t events);

/* Writes the next packet the connection has for the guest into chain's writable part
 * (at least VSOCK_HDR_SIZE bytes): true and *written, or false when it has nothing
 * after all. *verdict says what becomes of the connection. */
bool vsock_conn_to_guest(struct vsock_conn *conn, uint64_t guest_cid,
			 const struct virtq_chain *chain, uint32_t *written,
			 enum vsock_verdict *verdict);

/* Settles what follows from the state (a CREDIT_REQUEST when blocked on credit). */
void vsock_conn_settle(struct vsock_conn *conn);

/* Whether the connection has a packet for the guest. */
bool vsock_conn_wants_rx(const struct vsock_conn *conn);

/* The epoll events the host socket should wake the device for. */
uint32_t vsock_conn_epoll_events(const struct vsock_conn *conn);

/* A phase the connection may spend only a limited time in (waiting for a CONNECT line,
 * for the guest's RESPONSE, for its RST, for the host to take the last guest bytes), as
 * a nonzero number that changes from one phase to the next; 0 when none. */
unsigned vsock_conn_timed_phase(const struct vsock_conn *conn);

/* The time of the timed phase ran out. */
enum vsock_verdict vsock_conn_expire(const struct vsock_conn *conn);

#endif
