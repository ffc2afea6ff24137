/* The virtio-vsock connection multiplexer (vsock_mux.h). */
#include "vsock_mux.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "../vmm/clock.h"

/* Compiled in from its header (Debian's libxxhash-dev), as in snapshot_memory.c. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#define EVENT_BATCH 64
/* Clients accepted per wake-up; the level-triggered listener wakes again for more. */
#define ACCEPT_BATCH 16

static uint64_t now_ns(void)
{
	return (uint64_t)clock_now_ns();
}

/* A misbehaving guest is reported once as a warning; the rest goes to debug. */
static void __attribute__((format(printf, 2, 3)))
complain(struct vsock_mux *mux, const char *fmt, ...)
{
	char message[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(message, sizeof(message), fmt, ap);
	va_end(ap);
	log_msg(mux->log, mux->complained ? MOTE_LOG_DEBUG : MOTE_LOG_WARN, "%s: %s", mux->name,
		message);
	mux->complained = true;
}

/* The connection table. */

/* The guest picks both ports of the connections it opens: keyed with a secret of this
 * device's, the hash gives it no way to pile them into one bucket. */
static unsigned bucket_of(const struct vsock_mux *mux, uint32_t local_port, uint32_t peer_port)
{
	const uint32_t key[2] = {local_port, peer_port};

	return (unsigned)(XXH3_64bits_withSeed(key, sizeof(key), mux->hash_seed) %
			  VSOCK_TABLE_BUCKETS);
}

static struct vsock_conn *lookup(const struct vsock_mux *mux, uint32_t local_port,
				 uint32_t peer_port)
{
	struct vsock_conn *conn = mux->buckets[bucket_of(mux, local_port, peer_port)];

	while (conn && (conn->local_port != local_port || conn->peer_port != peer_port))
		conn = conn->bucket_next;
	return conn;
}

static void table_insert(struct vsock_mux *mux, struct vsock_conn *conn)
{
	struct vsock_conn **head = &mux->buckets[bucket_of(mux, conn->local_port, conn->peer_port)];

	conn->bucket_next = *head;
	*head = conn;
	conn->keyed = true;
}

static void table_remove(struct vsock_mux *mux, struct vsock_conn *conn)
{
	struct vsock_conn **p = &mux->buckets[bucket_of(mux, conn->local_port, conn->peer_port)];

	while (*p && *p != conn)
		p = &(*p)->bucket_next;
	if (*p)
		*p = conn->bucket_next;
	conn->keyed = false;
}

static int pending_find(const struct vsock_mux *mux, uint32_t src_port, uint32_t dst_port);

/* Host-initiated connections get the next free port from [2^30, 2^31): one no
 * connection uses with that guest port, and no guest connect being retried asks for
 * (it would become a second connection on the same ports). */
static uint32_t allocate_local_port(struct vsock_mux *mux, uint32_t peer_port)
{
	for (;;) {
		uint32_t port = mux->next_local_port++;
		if (mux->next_local_port >= 2 * VSOCK_FIRST_LOCAL_PORT)
			mux->next_local_port = VSOCK_FIRST_LOCAL_PORT;
		if (!lookup(mux, port, peer_port) && pending_find(mux, peer_port, port) < 0)
			return port;
	}
}

/* The list of connections with something for the guest, served round robin. */

static void rx_append(struct vsock_mux *mux, struct vsock_conn *conn)
{
	conn->rx_prev = mux->rx_tail;
	conn->rx_next = NULL;
	if (mux->rx_tail)
		mux->rx_tail->rx_next = conn;
	else
		mux->rx_head = conn;
	mux->rx_tail = conn;
	conn->in_rx = true;
}

static void rx_remove(struct vsock_mux *mux, struct vsock_conn *conn)
{
	if (conn->rx_prev)
		conn->rx_prev->rx_next = conn->rx_next;
	else
		mux->rx_head = conn->rx_next;
	if (conn->rx_next)
		conn->rx_next->rx_prev = conn->rx_prev;
	else
		mux->rx_tail = conn->rx_prev;
	conn->rx_prev = conn->rx_next = NULL;
	conn->in_rx = false;
}

/* RSTs owed for packets that have no connection (any more). */
static void rst_queue(struct vsock_mux *mux, uint64_t src_cid, uint32_t src_port, uint32_t dst_port)
{
	if (mux->rst_count == VSOCK_RSTQ_SIZE) {
		complain(mux, "the guest takes no replies; an RST to its port %u is dropped",
			 dst_port);
		return;
	}
	unsigned slot = (mux->rst_head + mux->rst_count) % VSOCK_RSTQ_SIZE;
	mux->rstq[slot] = (struct vsock_rst){src_cid, src_port, dst_port};
	mux->rst_count++;
}

/* One timerfd, armed for the earliest deadline known; when it fires, every connection
 * is looked at (there are few, and it fires seldom). */
static void timer_arm(struct vsock_mux *mux, uint64_t when_ns)
{
	if (mux->timer_ns && mux->timer_ns <= when_ns)
		return;
	struct itimerspec spec = {
	    .it_value = {.tv_sec = (time_t)(when_ns / 1000000000ULL),
			 .tv_nsec = (long)(when_ns % 1000000000ULL)},
	};
	if (timerfd_settime(mux->timer_fd, TFD_TIMER_ABSTIME, &spec, NULL) == 0)
		mux->timer_ns = when_ns;
}

static int watch(struct vsock_mux *mux, int op, int fd, uint32_t events, void *tag)
{
	struct epoll_event ev = {.events = events, .data.ptr = tag};

	return epoll_ctl(mux->epoll_fd, op, fd, &ev) < 0 ? -errno : 0;
}

/* How often a listener paused for want of file descriptors tries again, when no
 * connection of ours closes to free one (they may be taken elsewhere in the process). */
#define LISTEN_RETRY_NS (100 * 1000000ULL)

/* New clients are taken again. A listener still out of descriptors pauses again at its
 * first accept. */
static void listener_resume(struct vsock_mux *mux)
{
	if (mux->listen_paused &&
	    watch(mux, EPOLL_CTL_MOD, mux->listen_fd, EPOLLIN, &mux->listen_fd) == 0)
		mux->listen_paused = false;
}

/* A new connection for the host socket fd, with the full buf_alloc while fewer than
 * VSOCK_MUX_FULL_CREDIT_CONNECTIONS have it; NULL without memory. */
static struct vsock_conn *conn_new(const struct vsock_mux *mux, int fd)
{
	bool full = mux->full_credit_count < VSOCK_MUX_FULL_CREDIT_CONNECTIONS;

	return vsock_conn_new(fd, full ? VSOCK_CONN_BUF_ALLOC : VSOCK_CONN_BUF_ALLOC_SMALL);
}

/* While clients are held, one still sending its CONNECT line waits unread: read now, its
 * REQUEST could reach the guest before the reset it has not handled yet, which would
 * then reset the new connection as well. Its deadline runs all the same: a guest that
 * never handles the reset costs a client timeout_ms, not its whole life. */
static bool conn_held(const struct vsock_mux *mux, const struct vsock_conn *conn)
{
	return mux->clients_held && conn->state == VSOCK_CONN_AWAIT_LINE;
}

static uint32_t conn_epoll_events(const struct vsock_mux *mux, const struct vsock_conn *conn)
{
	return conn_held(mux, conn) ? 0 : vsock_conn_epoll_events(conn);
}

/* Takes a new connection (its fd already set up) into the multiplexer. */
static int conn_add(struct vsock_mux *mux, struct vsock_conn *conn)
{
	conn->epoll_events = conn_epoll_events(mux, conn);
	int err = watch(mux, EPOLL_CTL_ADD, conn->fd, conn->epoll_events, conn);
	if (err)
		return err;
	conn->in_epoll = true;
	conn->all_prev = NULL;
	conn->all_next = mux->all;
	if (mux->all)
		mux->all->all_prev = conn;
	mux->all = conn;
	mux->conn_count++;
	if (conn->buf_alloc == VSOCK_CONN_BUF_ALLOC)
		mux->full_credit_count++;
	return 0;
}

/* Unhooks the connection and closes its host socket. The struct is freed at the end
 * of the call into the multiplexer: an event batch may still name it. */
static void conn_close(struct vsock_mux *mux, struct vsock_conn *conn)
{
	if (conn->keyed)
		table_remove(mux, conn);
	if (conn->in_rx)
		rx_remove(mux, conn);
	if (conn->in_epoll)
		(void)epoll_ctl(mux->epoll_fd, EPOLL_CTL_DEL, conn->fd, NULL);
	if (conn->all_prev)
		conn->all_prev->all_next = conn->all_next;
	else
		mux->all = conn->all_next;
	if (conn->all_next)
		conn->all_next->all_prev = conn->all_prev;
	vsock_conn_release(conn);
	conn->closed = true;
	conn->all_next = mux->dead;
	mux->dead = conn;
	mux->conn_count--;
	if (conn->buf_alloc == VSOCK_CONN_BUF_ALLOC)
		mux->full_credit_count--;
	listener_resume(mux);
}

static void conn_update(struct vsock_mux *mux, struct vsock_conn *conn, enum vsock_verdict verdict);

void vsock_mux_hold_clients(struct vsock_mux *mux, bool hold)
{
	if (mux->listen_fd < 0 || hold == mux->clients_held)
		return;
	mux->clients_held = hold;
	mux->held_warned = false;
	/* The clients still sending their line stop being read, or are read again; either
	 * way their deadline starts again. */
	for (struct vsock_conn *conn = mux->all; conn; conn = conn->all_next) {
		if (conn->state == VSOCK_CONN_AWAIT_LINE) {
			conn->deadline_phase = 0;
			conn_update(mux, conn, VSOCK_KEEP);
		}
	}
}

void vsock_mux_defer_deadlines(struct vsock_mux *mux, uint64_t stood_ns)
{
	/* The timer stays armed for the earliest old deadline: it fires early, once, and
	 * on_timer arms it for the next one. */
	for (struct vsock_conn *conn = mux->all; conn; conn = conn->all_next)
		if (conn->deadline_ns)
			conn->deadline_ns += stood_ns;
	for (unsigned i = 0; i < mux->pending_count; i++)
		mux->pending[i].give_up_ns += stood_ns;
}

static void reap(struct vsock_mux *mux)
{
	while (mux->dead) {
		struct vsock_conn *conn = mux->dead;
		mux->dead = conn->all_next;
		free(conn);
	}
}

/* Applies a verdict, then brings the epoll registration, the rx list and the deadline
 * in line with the connection's new state. */
static void conn_update(struct vsock_mux *mux, struct vsock_conn *conn, enum vsock_verdict verdict)
{
	if (conn->closed)
		return;
	if (verdict == VSOCK_RESET && conn->keyed)
		rst_queue(mux, VSOCK_HOST_CID, conn->local_port, conn->peer_port);
	if (verdict != VSOCK_KEEP) {
		conn_close(mux, conn);
		return;
	}
	vsock_conn_settle(conn);
	if (conn->host_hup && conn->in_epoll) {
		/* A hang-up cannot be masked: the socket leaves epoll, and is read until
		 * EOF as the guest's credit allows. */
		(void)epoll_ctl(mux->epoll_fd, EPOLL_CTL_DEL, conn->fd, NULL);
		conn->in_epoll = false;
	} else if (conn->in_epoll) {
		uint32_t events = conn_epoll_events(mux, conn);
		if (events != conn->epoll_events &&
		    watch(mux, EPOLL_CTL_MOD, conn->fd, events, conn) == 0)
			conn->epoll_events = events;
	}
	bool wants_rx = vsock_conn_wants_rx(conn);
	if (wants_rx && !conn->in_rx)
		rx_append(mux, conn);
	else if (!wants_rx && conn->in_rx)
		rx_remove(mux, conn);
	unsigned phase = vsock_conn_timed_phase(conn);
	if (phase != conn->deadline_phase) {
		conn->deadline_phase = phase;
		conn->deadline_ns = phase ? now_ns() + mux->timeout_ms * 1000000ULL : 0;
		if (phase)
			timer_arm(mux, conn->deadline_ns);
	}
}

static uint64_t pending_retry(struct vsock_mux *mux, uint64_t now);

static void on_timer(struct vsock_mux *mux)
{
	uint64_t expirations;

	if (read(mux->timer_fd, &expirations, sizeof(expirations)) < 0) {
		/* Read already (EAGAIN): the sweep below is harmless. */
	}
	mux->timer_ns = 0;
	listener_resume(mux);
	uint64_t now = now_ns();
	uint64_t next = pending_retry(mux, now);
	for (struct vsock_conn *conn = mux->all, *after; conn; conn = after) {
		after = conn->all_next;
		if (!conn->deadline_ns)
			continue;
		if (conn->deadline_ns <= now) {
			/* A guest that never answers a connect is worth telling from one that
			 * refuses it (route): the client sees both as the connection closed. */
			if (conn->state == VSOCK_CONN_LOCAL_INIT && conn->request_sent)
				log_warn(
				    mux->log,
				    "%s: the guest did not answer a connect to its port %u from "
				    "host port %u in %u ms",
				    mux->name, conn->peer_port, conn->local_port, mux->timeout_ms);
			if (conn_held(mux, conn) && !mux->held_warned) {
				log_warn(
				    mux->log,
				    "%s: the guest has not handled the transport reset sent "
				    "at its restore; host clients are closed after %u ms until "
				    "it does",
				    mux->name, mux->timeout_ms);
				mux->held_warned = true;
			}
			conn_update(mux, conn, vsock_conn_expire(conn));
		} else if (!next || conn->deadline_ns < next) {
			next = conn->deadline_ns;
		}
	}
	if (next)
		timer_arm(mux, next);
}

/* The host side: new clients and their CONNECT lines. */

static void on_listener(struct vsock_mux *mux)
{
	for (int i = 0; i < ACCEPT_BATCH; i++) {
		int fd = vsock_uds_accept(mux->listen_fd);
		if (fd == -EAGAIN)
			return;
		if (fd == -EMFILE || fd == -ENFILE) {
			/* Once a shortage, not at every retry. */
			if (!mux->fds_short)
				log_warn(mux->log, "%s: out of file descriptors; new clients wait",
					 mux->name);
			mux->fds_short = true;
			if (watch(mux, EPOLL_CTL_MOD, mux->listen_fd, 0, &mux->listen_fd) == 0) {
				mux->listen_paused = true;
				timer_arm(mux, now_ns() + LISTEN_RETRY_NS);
			}
			return;
		}
		if (fd < 0)
			return; /* the client left meanwhile (ECONNABORTED) */
		mux->fds_short = false;
		struct vsock_conn *conn =
		    mux->conn_count < VSOCK_MAX_CONNECTIONS ? conn_new(mux, fd) : NULL;
		if (!conn || conn_add(mux, conn) != 0) {
			/* Once a burst, not once a client: a host program connecting in a
			 * loop would flood the log. */
			if (!mux->clients_refused)
				log_warn(mux->log,
					 "%s: host clients refused: %u connections (at most %u)",
					 mux->name, mux->conn_count, VSOCK_MAX_CONNECTIONS);
			mux->clients_refused = true;
			close(fd);
			free(conn);
			continue;
		}
		mux->clients_refused = false;
		conn_update(mux, conn, VSOCK_KEEP);
	}
}

/* Reads the client's "CONNECT <port>\n"; once it is complete, the guest is asked. */
static void on_connect_line(struct vsock_mux *mux, struct vsock_conn *conn)
{
	uint32_t port;
	int ret = vsock_uds_read_connect(conn->fd, conn->line, &conn->line_len, &port);

	if (ret == 0)
		return;
	if (ret < 0) {
		log_debug(mux->log, "%s: a host client sent no valid CONNECT line (%s)", mux->name,
			  strerror(-ret));
		conn_update(mux, conn, VSOCK_CLOSE);
		return;
	}
	vsock_conn_start_local(conn, allocate_local_port(mux, port), port);
	table_insert(mux, conn);
	conn_update(mux, conn, VSOCK_KEEP);
}

void vsock_mux_host_events(struct vsock_mux *mux)
{
	struct epoll_event events[EVENT_BATCH];
	int n = epoll_wait(mux->epoll_fd, events, EVENT_BATCH, 0);

	for (int i = 0; i < n; i++) {
		void *tag = events[i].data.ptr;
		if (tag == &mux->listen_fd) {
			on_listener(mux);
		} else if (tag == &mux->timer_fd) {
			on_timer(mux);
		} else {
			struct vsock_conn *conn = tag;
			if (conn->closed)
				continue;
			/* A held client is watched for nothing: only its hang-up wakes it. */
			if (conn_held(mux, conn))
				conn_update(mux, conn, VSOCK_CLOSE);
			else if (conn->state == VSOCK_CONN_AWAIT_LINE)
				on_connect_line(mux, conn);
			else
				conn_update(mux, conn,
					    vsock_conn_host_event(conn, events[i].events));
		}
	}
	reap(mux);
}

/* The guest side. */

/* Connects to "<uds_path>_<port>" for the guest's REQUEST and takes the connection in;
 * 0, or the negative errno of the connect (-ENOMEM: no memory for it). */
static int guest_connect(struct vsock_mux *mux, const struct vsock_pkt *request)
{
	int fd = vsock_uds_connect_port(mux->uds_path, request->dst_port);
	if (fd < 0)
		return fd;
	struct vsock_conn *conn = conn_new(mux, fd);
	if (conn) {
		vsock_conn_start_peer(conn, request);
		if (conn_add(mux, conn) == 0) {
			table_insert(mux, conn);
			conn_update(mux, conn, VSOCK_KEEP);
			return 0;
		}
		free(conn);
	}
	close(fd);
	return -ENOMEM;
}

static void guest_refused(struct vsock_mux *mux, const struct vsock_pkt *request, int err)
{
	log_debug(mux->log, "%s: guest connection to host port %u refused: %s", mux->name,
		  request->dst_port, strerror(-err));
	rst_queue(mux, VSOCK_HOST_CID, request->dst_port, request->src_port);
}

static int pending_find(const struct vsock_mux *mux, uint32_t src_port, uint32_t dst_port)
{
	for (unsigned i = 0; i < mux->pending_count; i++) {
		const struct vsock_pkt *request = &mux->pending[i].request;
		if (request->src_port == src_port && request->dst_port == dst_port)
			return (int)i;
	}
	return -1;
}

static void pending_remove(struct vsock_mux *mux, unsigned i)
{
	mux->pending[i] = mux->pending[--mux->pending_count];
}

/* §5.10.6.5: a REQUEST with no connection yet goes to whoever listens on
 * "<uds_path>_<port>"; nobody, or no room, is an RST at once; a full backlog is
 * retried for a while (vsock_mux.h). */
static void guest_request(struct vsock_mux *mux, const struct vsock_pkt *pkt)
{
	if (pending_find(mux, pkt->src_port, pkt->dst_port) >= 0)
		return; /* the same REQUEST again: it is being retried already */
	int err = mux->conn_count < VSOCK_MAX_CONNECTIONS ? guest_connect(mux, pkt) : -ENOSPC;
	if (err == -EAGAIN && mux->pending_count < VSOCK_MAX_PENDING) {
		struct vsock_pending_connect *pending = &mux->pending[mux->pending_count++];
		pending->request = *pkt;
		pending->give_up_ns = now_ns() + VSOCK_RETRY_LIMIT_MS * 1000000ULL;
		timer_arm(mux, now_ns() + VSOCK_RETRY_INTERVAL_MS * 1000000ULL);
		return;
	}
	if (err)
		guest_refused(mux, pkt, err);
}

/* Tries every pending connect again; returns when to try next (0: none left). */
static uint64_t pending_retry(struct vsock_mux *mux, uint64_t now)
{
	for (unsigned i = 0; i < mux->pending_count;) {
		struct vsock_pending_connect pending = mux->pending[i];
		int err = mux->conn_count < VSOCK_MAX_CONNECTIONS
			      ? guest_connect(mux, &pending.request)
			      : -ENOSPC;
		if (err == -EAGAIN && now < pending.give_up_ns) {
			i++;
			continue;
		}
		pending_remove(mux, i);
		if (err)
			guest_refused(mux, &pending.request, err);
	}
	return mux->pending_count ? now + VSOCK_RETRY_INTERVAL_MS * 1000000ULL : 0;
}

/* The guest reset a connection that does not exist, or not yet: one being retried is
 * dropped. */
static void guest_gave_up(struct vsock_mux *mux, const struct vsock_pkt *pkt)
{
	int i = pending_find(mux, pkt->src_port, pkt->dst_port);
	if (i >= 0)
		pending_remove(mux, (unsigned)i);
}

/* The packet breaks a rule: its connection is reset, or an RST answers it. */
static void refuse(struct vsock_mux *mux, const struct vsock_pkt *pkt)
{
	struct vsock_conn *conn = lookup(mux, pkt->dst_port, pkt->src_port);

	if (conn)
		conn_update(mux, conn, VSOCK_RESET);
	else if (pkt->op != VIRTIO_VSOCK_OP_RST)
		rst_queue(mux, VSOCK_HOST_CID, pkt->dst_port, pkt->src_port);
}

static void route(struct vsock_mux *mux, const struct virtq_chain *chain)
{
	struct virtio_vsock_hdr hdr;
	struct vsock_pkt pkt;

	if (virtq_chain_read(chain, 0, &hdr, sizeof(hdr)) != 0) {
		complain(mux, "dropped a tx packet of %llu bytes, short of a header",
			 (unsigned long long)chain->readable_len);
		return;
	}
	vsock_pkt_decode(&hdr, &pkt);
	/* §5.10.6.4: the driver sends with guest_cid as its source. A packet that claims
	 * another has no address to answer. */
	if (pkt.src_cid != mux->guest_cid) {
		complain(mux, "dropped a packet from CID %llu", (unsigned long long)pkt.src_cid);
		return;
	}
	if (pkt.len > VSOCK_MAX_PAYLOAD || pkt.len > chain->readable_len - VSOCK_HDR_SIZE) {
		complain(mux, "refused a packet of %u payload bytes in a chain of %llu", pkt.len,
			 (unsigned long long)chain->readable_len);
		refuse(mux, &pkt);
		return;
	}
	/* Only the host is reachable: another destination is answered in its name, so
	 * that the guest's connect fails at once. */
	if (pkt.dst_cid != VSOCK_HOST_CID) {
		if (pkt.op != VIRTIO_VSOCK_OP_RST)
			rst_queue(mux, pkt.dst_cid, pkt.dst_port, pkt.src_port);
		return;
	}
	/* §5.10.6.4: an RST for an unknown type. */
	if (pkt.type != VIRTIO_VSOCK_TYPE_STREAM) {
		refuse(mux, &pkt);
		return;
	}
	struct vsock_conn *conn = lookup(mux, pkt.dst_port, pkt.src_port);
	if (conn && conn->state == VSOCK_CONN_LOCAL_INIT && pkt.op == VIRTIO_VSOCK_OP_RST)
		log_debug(mux->log,
			  "%s: the guest refused a connect to its port %u from host port %u",
			  mux->name, conn->peer_port, conn->local_port);
	if (conn)
		conn_update(mux, conn, vsock_conn_from_guest(conn, &pkt, chain));
	else if (pkt.op == VIRTIO_VSOCK_OP_REQUEST)
		guest_request(mux, &pkt);
	else if (pkt.op == VIRTIO_VSOCK_OP_RST)
		guest_gave_up(mux, &pkt);
	else
		rst_queue(mux, VSOCK_HOST_CID, pkt.dst_port, pkt.src_port);
}

void vsock_mux_from_guest(struct vsock_mux *mux, const struct virtq_chain *chain)
{
	route(mux, chain);
	reap(mux);
}

bool vsock_mux_has_rx(const struct vsock_mux *mux)
{
	return mux->rst_count > 0 || mux->rx_head;
}

bool vsock_mux_takes_tx(const struct vsock_mux *mux)
{
	return mux->rst_count < VSOCK_RSTQ_SIZE;
}

static void write_rst(struct vsock_mux *mux, const struct virtq_chain *chain, uint32_t *written)
{
	const struct vsock_rst *rst = &mux->rstq[mux->rst_head];
	struct vsock_pkt pkt = {
	    .src_cid = rst->src_cid,
	    .dst_cid = mux->guest_cid,
	    .src_port = rst->src_port,
	    .dst_port = rst->dst_port,
	    .type = VIRTIO_VSOCK_TYPE_STREAM,
	    .op = VIRTIO_VSOCK_OP_RST,
	};
	struct virtio_vsock_hdr hdr;

	vsock_pkt_encode(&pkt, &hdr);
	(void)virtq_chain_write(chain, 0, &hdr, sizeof(hdr));
	*written = VSOCK_HDR_SIZE;
	mux->rst_head = (mux->rst_head + 1) % VSOCK_RSTQ_SIZE;
	mux->rst_count--;
}

bool vsock_mux_to_guest(struct vsock_mux *mux, const struct virtq_chain *chain, uint32_t *written)
{
	bool made = false;

	if (mux->rst_count > 0) {
		write_rst(mux, chain, written);
		return true;
	}
	/* Each connection gets one try: one with only data owed has nothing for a buffer
	 * with no room after the header, and must not be tried again and again. */
	for (unsigned tries = mux->conn_count; !made && mux->rx_head && tries > 0; tries--) {
		struct vsock_conn *conn = mux->rx_head;
		enum vsock_verdict verdict;

		rx_remove(mux, conn);
		made = vsock_conn_to_guest(conn, mux->guest_cid, chain, written, &verdict);
		/* Back at the tail if it has more: connections take turns. */
		conn_update(mux, conn, verdict);
	}
	reap(mux);
	return made;
}

void vsock_mux_scatter_local_ports(struct vsock_mux *mux)
{
	uint32_t offset;

	if (getrandom(&offset, sizeof(offset), 0) != sizeof(offset))
		offset = (uint32_t)(now_ns() ^ mux->hash_seed);
	mux->next_local_port = VSOCK_FIRST_LOCAL_PORT + offset % VSOCK_FIRST_LOCAL_PORT;
}

void vsock_mux_reset(struct vsock_mux *mux)
{
	for (struct vsock_conn *conn = mux->all, *after; conn; conn = after) {
		after = conn->all_next;
		if (conn->state != VSOCK_CONN_AWAIT_LINE)
			conn_close(mux, conn);
	}
	mux->rst_head = mux->rst_count = 0;
	mux->pending_count = 0;
	reap(mux);
}

int vsock_mux_init(struct vsock_mux *mux, uint64_t guest_cid, const char *uds_path,
		   unsigned timeout_ms, const struct mote_log *log, const char *name)
{
	*mux = (struct vsock_mux){
	    .guest_cid = guest_cid,
	    .uds_path = uds_path,
	    .timeout_ms = timeout_ms,
	    .log = log,
	    .name = name,
	    .listen_fd = -1,
	    .timer_fd = -1,
	    .next_local_port = VSOCK_FIRST_LOCAL_PORT,
	};
	if (getrandom(&mux->hash_seed, sizeof(mux->hash_seed), 0) != sizeof(mux->hash_seed))
		mux->hash_seed = now_ns() ^ (uint64_t)(uintptr_t)mux;
	mux->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (mux->epoll_fd < 0) {
		int err = -errno;
		log_error(log, "%s: epoll: %s", name, strerror(-err));
		return err;
	}
	mux->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (mux->timer_fd < 0) {
		int err = -errno;
		log_error(log, "%s: timerfd: %s", name, strerror(-err));
		return err;
	}
	mux->listen_fd = vsock_uds_listen(uds_path, &mux->listen_id);
	if (mux->listen_fd < 0) {
		int err = mux->listen_fd;
		log_error(log, "%s: cannot listen on %s: %s", name, uds_path,
			  unix_listener_strerror(err));
		mux->listen_fd = -1;
		return err;
	}
	int err = watch(mux, EPOLL_CTL_ADD, mux->listen_fd, EPOLLIN, &mux->listen_fd);
	if (!err)
		err = watch(mux, EPOLL_CTL_ADD, mux->timer_fd, EPOLLIN, &mux->timer_fd);
	if (err)
		log_error(log, "%s: epoll_ctl: %s", name, strerror(-err));
	return err;
}

int vsock_mux_fd(const struct vsock_mux *mux)
{
	return mux->epoll_fd;
}

void vsock_mux_destroy(struct vsock_mux *mux)
{
	while (mux->all)
		conn_close(mux, mux->all);
	reap(mux);
	if (mux->listen_fd >= 0) {
		unix_listener_remove(mux->uds_path, &mux->listen_id);
		close(mux->listen_fd);
	}
	if (mux->timer_fd >= 0)
		close(mux->timer_fd);
	if (mux->epoll_fd >= 0)
		close(mux->epoll_fd);
	mux->listen_fd = mux->timer_fd = mux->epoll_fd = -1;
}
