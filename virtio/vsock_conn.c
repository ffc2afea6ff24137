/* One virtio-vsock connection (vsock_conn.h). */
#include "vsock_conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

struct vsock_conn *vsock_conn_new(int fd, uint32_t buf_alloc)
{
	struct vsock_conn *conn = calloc(1, sizeof(*conn));

	if (conn) {
		conn->fd = fd;
		conn->state = VSOCK_CONN_AWAIT_LINE;
		conn->buf_alloc = buf_alloc;
	}
	return conn;
}

void vsock_conn_release(struct vsock_conn *conn)
{
	if (conn->fd >= 0)
		close(conn->fd);
	conn->fd = -1;
	free(conn->txbuf.data);
	conn->txbuf = (struct vsock_txbuf){0};
}

void vsock_conn_start_local(struct vsock_conn *conn, uint32_t local_port, uint32_t peer_port)
{
	conn->state = VSOCK_CONN_LOCAL_INIT;
	conn->local_port = local_port;
	conn->peer_port = peer_port;
	conn->owed = VSOCK_OWE_REQUEST;
}

void vsock_conn_start_peer(struct vsock_conn *conn, const struct vsock_pkt *request)
{
	conn->state = VSOCK_CONN_ESTABLISHED;
	conn->local_port = request->dst_port;
	conn->peer_port = request->src_port;
	conn->peer_buf_alloc = request->buf_alloc;
	conn->peer_fwd_cnt = request->fwd_cnt;
	conn->owed = VSOCK_OWE_RESPONSE;
}

/* §5.10.6.3: peer_free = peer_buf_alloc - (tx_cnt - peer_fwd_cnt). A guest claiming to
 * have forwarded more than it was sent gets no credit rather than a wrapped one. */
static uint32_t peer_free(const struct vsock_conn *conn)
{
	uint32_t in_flight = conn->tx_cnt - conn->peer_fwd_cnt;

	return in_flight >= conn->peer_buf_alloc ? 0 : conn->peer_buf_alloc - in_flight;
}

static uint32_t our_free(const struct vsock_conn *conn)
{
	return conn->buf_alloc - (conn->rx_cnt - conn->fwd_cnt);
}

/* Whether host bytes may still go to the guest. */
static bool reads_host(const struct vsock_conn *conn)
{
	return conn->state == VSOCK_CONN_ESTABLISHED &&
	       !(conn->guest_shut & VIRTIO_VSOCK_SHUTDOWN_RCV) &&
	       !(conn->host_shut & VIRTIO_VSOCK_SHUTDOWN_SEND);
}

/* Whether the host socket still takes guest bytes. */
static bool host_takes(const struct vsock_conn *conn)
{
	return !conn->host_hup && !(conn->host_shut & VIRTIO_VSOCK_SHUTDOWN_RCV);
}

static bool wants_data(const struct vsock_conn *conn)
{
	return reads_host(conn) && conn->host_readable;
}

/* A CREDIT_UPDATE goes to the guest once a quarter of buf_alloc more was forwarded
 * since the last fwd_cnt it saw. A guest waiting for credit has buf_alloc outstanding,
 * so it always gets one. */
static void maybe_credit_update(struct vsock_conn *conn)
{
	if (conn->fwd_cnt - conn->last_fwd_cnt_sent >= conn->buf_alloc / 4)
		conn->owed |= VSOCK_OWE_CREDIT_UPDATE;
}

/* What the tx buffer held will never reach the host: it counts as forwarded, so the
 * guest is not kept waiting for credit on a dead socket. */
static void drop_txbuf(struct vsock_conn *conn)
{
	conn->fwd_cnt += conn->txbuf.len;
	free(conn->txbuf.data);
	conn->txbuf = (struct vsock_txbuf){0};
	maybe_credit_update(conn);
}

/* The host socket refused a write for good (EPIPE: its reader is gone): the host side
 * receives nothing more, which the guest learns with a SHUTDOWN RCV. */
static void host_write_failed(struct vsock_conn *conn)
{
	conn->host_shut |= VIRTIO_VSOCK_SHUTDOWN_RCV;
	drop_txbuf(conn);
}

/* iov entries for bytes [offset, offset + len) of the segments seg[0, n). */
static int segments_iov(const struct virtq_segment *seg, uint32_t n, uint64_t offset, uint64_t len,
			struct iovec *iov)
{
	int count = 0;

	for (uint32_t i = 0; i < n && len > 0; i++) {
		if (offset >= seg[i].len) {
			offset -= seg[i].len;
			continue;
		}
		uint64_t step = seg[i].len - offset;
		if (step > len)
			step = len;
		iov[count++] = (struct iovec){(uint8_t *)seg[i].host + offset, (size_t)step};
		len -= step;
		offset = 0;
	}
	return count;
}

static ssize_t send_iov(int fd, struct iovec *iov, int count)
{
	struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)count};
	ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);

	if (n >= 0)
		return n;
	return errno == EWOULDBLOCK || errno == EINTR ? -EAGAIN : -errno;
}

static int txbuf_append(struct vsock_txbuf *buf, uint32_t size, const struct virtq_chain *chain,
			uint64_t offset, uint32_t len)
{
	if (!buf->data) {
		buf->data = malloc(size);
		if (!buf->data)
			return -ENOMEM;
		buf->size = size;
		buf->head = 0;
	}
	uint32_t tail = (buf->head + buf->len) % buf->size;
	uint32_t first = len < buf->size - tail ? len : buf->size - tail;
	if (virtq_chain_read(chain, offset, buf->data + tail, first) != 0 ||
	    virtq_chain_read(chain, offset + first, buf->data, len - first) != 0)
		return -EFAULT;
	buf->len += len;
	return 0;
}

/* Writes what the tx buffer holds to the host socket: bytes written or -errno. */
static ssize_t txbuf_flush(struct vsock_txbuf *buf, int fd)
{
	uint32_t first = buf->len < buf->size - buf->head ? buf->len : buf->size - buf->head;
	struct iovec iov[2] = {
	    {buf->data + buf->head, first},
	    {buf->data, buf->len - first},
	};
	ssize_t n = send_iov(fd, iov, buf->len > first ? 2 : 1);

	if (n <= 0)
		return n;
	buf->head = (buf->head + (uint32_t)n) % buf->size;
	buf->len -= (uint32_t)n;
	if (buf->len == 0) {
		free(buf->data);
		*buf = (struct vsock_txbuf){0};
	}
	return n;
}

/* What follows once the tx buffer emptied: the host reader sees EOF after the guest's
 * SEND shutdown, and a guest that shut both ways is answered with the RST that ends a
 * clean disconnect (§5.10.6.5). */
static enum vsock_verdict conn_progress(struct vsock_conn *conn)
{
	if (conn->txbuf.len > 0)
		return VSOCK_KEEP;
	if ((conn->guest_shut & VIRTIO_VSOCK_SHUTDOWN_SEND) && !conn->host_write_shut &&
	    !conn->host_hup) {
		(void)shutdown(conn->fd, SHUT_WR);
		conn->host_write_shut = true;
	}
	return conn->guest_shut == VSOCK_SHUTDOWN_BOTH ? VSOCK_RESET : VSOCK_KEEP;
}

static enum vsock_verdict guest_data(struct vsock_conn *conn, const struct vsock_pkt *pkt,
				     const struct virtq_chain *chain)
{
	uint32_t sent = 0;

	/* §5.10.6.5: the SEND hint is permanent. */
	if (conn->guest_shut & VIRTIO_VSOCK_SHUTDOWN_SEND)
		return VSOCK_RESET;
	if (pkt->len == 0)
		return VSOCK_KEEP;
	/* §5.10.6.3: the guest may send only what our buf_alloc and fwd_cnt left room for;
	 * a guest that overruns it would otherwise grow the tx buffer without bound. */
	if (pkt->len > our_free(conn))
		return VSOCK_RESET;
	conn->rx_cnt += pkt->len;
	if (!host_takes(conn)) {
		/* Sent before the guest saw our RCV shutdown: dropped, and counted. */
		conn->fwd_cnt += pkt->len;
		maybe_credit_update(conn);
		return VSOCK_KEEP;
	}
	if (conn->txbuf.len == 0) {
		struct iovec iov[VIRTQ_MAX_SEGMENTS];
		int count =
		    segments_iov(chain->seg, chain->readable_count, VSOCK_HDR_SIZE, pkt->len, iov);
		ssize_t n = send_iov(conn->fd, iov, count);
		if (n < 0 && n != -EAGAIN) {
			conn->fwd_cnt += pkt->len;
			host_write_failed(conn);
			return VSOCK_KEEP;
		}
		sent = n > 0 ? (uint32_t)n : 0;
	}
	conn->fwd_cnt += sent;
	if (sent < pkt->len && txbuf_append(&conn->txbuf, conn->buf_alloc, chain,
					    VSOCK_HDR_SIZE + (uint64_t)sent, pkt->len - sent))
		return VSOCK_RESET;
	maybe_credit_update(conn);
	return VSOCK_KEEP;
}

static enum vsock_verdict guest_shutdown(struct vsock_conn *conn, uint32_t flags)
{
	uint32_t added = flags & VSOCK_SHUTDOWN_BOTH & ~conn->guest_shut;

	conn->guest_shut |= added;
	/* The host writer gets EPIPE rather than filling a buffer nobody reads. */
	if ((added & VIRTIO_VSOCK_SHUTDOWN_RCV) && !conn->host_hup)
		(void)shutdown(conn->fd, SHUT_RD);
	if (conn->host_hup || (conn->host_shut & VIRTIO_VSOCK_SHUTDOWN_RCV))
		drop_txbuf(conn);
	return conn_progress(conn);
}

/* The guest's RESPONSE to our REQUEST: the host client learns its port in Firecracker's
 * "OK <port>\n", and then the stream is theirs. */
static enum vsock_verdict guest_response(struct vsock_conn *conn)
{
	char ack[32];
	int len = snprintf(ack, sizeof(ack), "OK %u\n", conn->local_port);

	if (conn->state != VSOCK_CONN_LOCAL_INIT)
		return VSOCK_RESET;
	if (vsock_uds_send_all(conn->fd, ack, (size_t)len) != 0)
		return VSOCK_RESET;
	conn->state = VSOCK_CONN_ESTABLISHED;
	return VSOCK_KEEP;
}

enum vsock_verdict vsock_conn_from_guest(struct vsock_conn *conn, const struct vsock_pkt *pkt,
					 const struct virtq_chain *chain)
{
	if (pkt->op == VIRTIO_VSOCK_OP_RST)
		return VSOCK_CLOSE;
	/* §5.10.6.3: every packet of a stream carries the sender's credit. */
	conn->peer_buf_alloc = pkt->buf_alloc;
	conn->peer_fwd_cnt = pkt->fwd_cnt;
	if (peer_free(conn) > 0)
		conn->credit_requested = false;
	if (conn->state == VSOCK_CONN_LOCAL_INIT && pkt->op != VIRTIO_VSOCK_OP_RESPONSE)
		return VSOCK_RESET;

	switch (pkt->op) {
	case VIRTIO_VSOCK_OP_RESPONSE:
		return guest_response(conn);
	case VIRTIO_VSOCK_OP_RW:
		return guest_data(conn, pkt, chain);
	case VIRTIO_VSOCK_OP_SHUTDOWN:
		return guest_shutdown(conn, pkt->flags);
	case VIRTIO_VSOCK_OP_CREDIT_UPDATE:
		return VSOCK_KEEP;
	case VIRTIO_VSOCK_OP_CREDIT_REQUEST:
		conn->owed |= VSOCK_OWE_CREDIT_UPDATE;
		return VSOCK_KEEP;
	default:
		/* A second REQUEST for a live connection, or no operation at all. */
		return VSOCK_RESET;
	}
}

enum vsock_verdict vsock_conn_host_event(struct vsock_conn *conn, uint32_t events)
{
	if (conn->state == VSOCK_CONN_LOCAL_INIT) {
		/* The client left before the guest answered: the request is withdrawn. */
		if (events & (EPOLLHUP | EPOLLERR))
			return conn->request_sent ? VSOCK_RESET : VSOCK_CLOSE;
		return VSOCK_KEEP;
	}
	if (events & (EPOLLHUP | EPOLLERR)) {
		/* Gone both ways. What it wrote before is still read, up to the EOF that
		 * becomes the guest's SHUTDOWN; nothing more can be written. */
		conn->host_hup = true;
		drop_txbuf(conn);
		if (reads_host(conn))
			conn->host_readable = true;
		else
			conn->host_shut = VSOCK_SHUTDOWN_BOTH;
		return conn_progress(conn);
	}
	if (events & EPOLLIN)
		conn->host_readable = true;
	if ((events & EPOLLOUT) && conn->txbuf.len > 0) {
		ssize_t n = txbuf_flush(&conn->txbuf, conn->fd);
		if (n > 0) {
			conn->fwd_cnt += (uint32_t)n;
			maybe_credit_update(conn);
		} else if (n < 0 && n != -EAGAIN) {
			host_write_failed(conn);
		}
	}
	return conn_progress(conn);
}

/* Reads host bytes into the guest buffer after the header: how many, 0 at EOF, or
 * -errno (-ENOBUFS: the buffer has no room after the header). */
static ssize_t read_host(struct vsock_conn *conn, const struct virtq_chain *chain)
{
	struct iovec iov[VIRTQ_MAX_SEGMENTS];
	uint64_t want = chain->writable_len - VSOCK_HDR_SIZE;

	if (want > VSOCK_MAX_PAYLOAD)
		want = VSOCK_MAX_PAYLOAD;
	if (want > peer_free(conn))
		want = peer_free(conn);
	if (want == 0)
		return -ENOBUFS;
	int count = segments_iov(chain->seg + chain->readable_count,
				 chain->count - chain->readable_count, VSOCK_HDR_SIZE, want, iov);
	struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)count};
	ssize_t n = recvmsg(conn->fd, &msg, MSG_DONTWAIT);
	if (n < 0)
		return errno == EWOULDBLOCK || errno == EINTR ? -EAGAIN : -errno;
	/* A short read most likely emptied the socket: epoll says when there is more. A
	 * client that hung up is not watched any more, so it is read until EOF. */
	if (n > 0 && (uint64_t)n < want && !conn->host_hup)
		conn->host_readable = false;
	return n;
}

/* The next data packet, or an EOF turned into a SHUTDOWN hint: true when pkt is one. */
static bool data_to_guest(struct vsock_conn *conn, const struct virtq_chain *chain,
			  struct vsock_pkt *pkt, enum vsock_verdict *verdict)
{
	ssize_t n = read_host(conn, chain);

	if (n == -ENOBUFS)
		return false;
	if (n > 0) {
		pkt->op = VIRTIO_VSOCK_OP_RW;
		pkt->len = (uint32_t)n;
		conn->tx_cnt += (uint32_t)n;
		return true;
	}
	if (n == -EAGAIN && !conn->host_hup) {
		conn->host_readable = false;
		return false;
	}
	if (n < 0 && n != -EAGAIN) {
		pkt->op = VIRTIO_VSOCK_OP_RST;
		*verdict = VSOCK_CLOSE;
		return true;
	}
	/* EOF: the host sends nothing more. */
	conn->host_readable = false;
	conn->host_shut |= VIRTIO_VSOCK_SHUTDOWN_SEND;
	if (conn->host_hup)
		conn->host_shut |= VIRTIO_VSOCK_SHUTDOWN_RCV;
	return false;
}

/* The control packet owed next, if any. */
static bool control_to_guest(struct vsock_conn *conn, struct vsock_pkt *pkt)
{
	if (conn->host_shut != conn->host_shut_sent) {
		pkt->op = VIRTIO_VSOCK_OP_SHUTDOWN;
		pkt->flags = conn->host_shut;
		conn->host_shut_sent = conn->host_shut;
		if (conn->host_shut == VSOCK_SHUTDOWN_BOTH)
			conn->state = VSOCK_CONN_CLOSING;
	} else if (conn->owed & VSOCK_OWE_CREDIT_UPDATE) {
		pkt->op = VIRTIO_VSOCK_OP_CREDIT_UPDATE;
	} else if (conn->owed & VSOCK_OWE_CREDIT_REQUEST) {
		pkt->op = VIRTIO_VSOCK_OP_CREDIT_REQUEST;
		conn->owed &= ~VSOCK_OWE_CREDIT_REQUEST;
	} else {
		return false;
	}
	return true;
}

bool vsock_conn_to_guest(struct vsock_conn *conn, uint64_t guest_cid,
			 const struct virtq_chain *chain, uint32_t *written,
			 enum vsock_verdict *verdict)
{
	struct vsock_pkt pkt = {
	    .src_cid = VSOCK_HOST_CID,
	    .dst_cid = guest_cid,
	    .src_port = conn->local_port,
	    .dst_port = conn->peer_port,
	    .type = VIRTIO_VSOCK_TYPE_STREAM,
	};
	bool ready = false;

	*verdict = VSOCK_KEEP;
	if (conn->owed & VSOCK_OWE_REQUEST) {
		pkt.op = VIRTIO_VSOCK_OP_REQUEST;
		conn->owed &= ~VSOCK_OWE_REQUEST;
		conn->request_sent = true;
		ready = true;
	} else if (conn->owed & VSOCK_OWE_RESPONSE) {
		pkt.op = VIRTIO_VSOCK_OP_RESPONSE;
		conn->owed &= ~VSOCK_OWE_RESPONSE;
		ready = true;
	} else if (wants_data(conn) && peer_free(conn) > 0) {
		ready = data_to_guest(conn, chain, &pkt, verdict);
	}
	if (!ready && !control_to_guest(conn, &pkt))
		return false;

	/* §5.10.6.3: every packet tells the guest our credit. */
	pkt.buf_alloc = conn->buf_alloc;
	pkt.fwd_cnt = conn->fwd_cnt;
	conn->last_fwd_cnt_sent = conn->fwd_cnt;
	conn->owed &= ~VSOCK_OWE_CREDIT_UPDATE;

	struct virtio_vsock_hdr hdr;
	vsock_pkt_encode(&pkt, &hdr);
	(void)virtq_chain_write(chain, 0, &hdr, sizeof(hdr));
	*written = VSOCK_HDR_SIZE + pkt.len;
	return true;
}

void vsock_conn_settle(struct vsock_conn *conn)
{
	/* §5.10.6.3: out of credit with host bytes waiting, ask the guest where it is. */
	if (wants_data(conn) && peer_free(conn) == 0 && !conn->credit_requested) {
		conn->owed |= VSOCK_OWE_CREDIT_REQUEST;
		conn->credit_requested = true;
	}
}

bool vsock_conn_wants_rx(const struct vsock_conn *conn)
{
	if (conn->state == VSOCK_CONN_AWAIT_LINE)
		return false;
	return conn->owed != 0 || conn->host_shut != conn->host_shut_sent ||
	       (wants_data(conn) && peer_free(conn) > 0);
}

uint32_t vsock_conn_epoll_events(const struct vsock_conn *conn)
{
	uint32_t events = 0;

	switch (conn->state) {
	case VSOCK_CONN_AWAIT_LINE:
		return EPOLLIN;
	case VSOCK_CONN_LOCAL_INIT:
		return 0; /* the stream waits for the guest; a hang-up still wakes us */
	default:
		if (reads_host(conn) && !conn->host_readable)
			events |= EPOLLIN;
		if (conn->txbuf.len > 0)
			events |= EPOLLOUT;
		return events;
	}
}

unsigned vsock_conn_timed_phase(const struct vsock_conn *conn)
{
	switch (conn->state) {
	case VSOCK_CONN_AWAIT_LINE:
		return 1;
	case VSOCK_CONN_LOCAL_INIT:
		return 2;
	case VSOCK_CONN_CLOSING:
		return 3;
	default:
		/* The guest closed; the host has yet to take its last bytes. */
		return conn->guest_shut == VSOCK_SHUTDOWN_BOTH ? 4 : 0;
	}
}

enum vsock_verdict vsock_conn_expire(const struct vsock_conn *conn)
{
	if (conn->state == VSOCK_CONN_AWAIT_LINE)
		return VSOCK_CLOSE;
	if (conn->state == VSOCK_CONN_LOCAL_INIT && !conn->request_sent)
		return VSOCK_CLOSE;
	return VSOCK_RESET;
}
