/* virtio-vsock (virtio 1.2 §5.10): the device model around the multiplexer
 * (vsock_mux.c). It owns the config space, the three queues and the event buffer
 * owed after a transport reset; the multiplexer owns the connections and the host
 * sockets. Guest packets are taken from tx as they come, and answered on rx as the
 * guest offers buffers. */
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../vmm/snapshot_stream.h"
#include "vsock.h"
#include "vsock_mux.h"

#define VSOCK_QUEUE_SIZE 256
#define RX_QUEUE 0
#define TX_QUEUE 1
#define EVENT_QUEUE 2

struct virtio_vsock {
	struct vdev dev;
	char *name; /* "virtio-vsock PATH", for messages */
	char *uds_path;
	struct mote_log log;
	struct virtio_vsock_config config;
	struct vsock_mux mux;
	bool broken;	    /* the driver broke a queue: nothing more until a reset */
	bool tx_stalled;    /* tx waits for the guest to take replies from rx */
	bool event_pending; /* a TRANSPORT_RESET waits for an event buffer */
	/* A TRANSPORT_RESET went to the guest, which has not handled it yet: host clients
	 * wait (reset_event_avail_idx: the event queue's avail index when it went). */
	bool reset_unhandled;
	uint16_t reset_event_avail_idx;
	bool complained;
	struct virtq_chain chain; /* virtq_pop() scratch */
};

static struct virtq *queue(struct virtio_vsock *vs, uint16_t q)
{
	return &vs->dev.queues[q];
}

static void vsock_break(struct virtio_vsock *vs, const char *what)
{
	vs->broken = true;
	vdev_needs_reset(&vs->dev, &vs->log, what);
}

/* The next chain of queue q: 1, 0 when there is none, -EIO when the queue is broken.
 * With EVENT_IDX, an empty ring is looked at again after telling the driver how far the
 * device has read: a chain added in between brings no notification (§2.7.10). */
static int pop(struct virtio_vsock *vs, uint16_t q)
{
	struct virtq *vq = queue(vs, q);
	int got = virtq_pop(vq, &vs->chain);

	if (got == 0 && vq->event_idx) {
		virtq_set_avail_event(vq);
		got = virtq_pop(vq, &vs->chain);
	}
	if (got < 0)
		vsock_break(vs, "broken descriptor chain");
	return got;
}

static void push(struct virtio_vsock *vs, uint16_t q, uint32_t written)
{
	/* Fails only when the queue was reset meanwhile: then there is no one to tell. */
	(void)virtq_push(queue(vs, q), vs->chain.head, written);
}

/* Gives back the chain just popped, untouched: nothing was written into it nor
 * published, so stepping the index back returns it to the ring as the driver left it
 * (QEMU's virtqueue_unpop). */
static void unpop(struct virtio_vsock *vs, uint16_t q)
{
	queue(vs, q)->last_avail_idx--;
}

/* Takes the guest packets offered on tx (§5.10.6.1: even when rx is full, while the
 * replies have room to wait), as many as *budget allows, which counts them down: once
 * the turn's budget is spent, the queue is served again after the VM's other devices. */
static void take_tx(struct virtio_vsock *vs, unsigned *budget)
{
	uint16_t old_used_idx = queue(vs, TX_QUEUE)->used_idx;

	while (!vs->broken) {
		if (*budget == 0) {
			vdev_serve_again(&vs->dev, TX_QUEUE);
			break;
		}
		if (!vsock_mux_takes_tx(&vs->mux)) {
			vs->tx_stalled = true;
			break;
		}
		if (pop(vs, TX_QUEUE) <= 0)
			break;
		vsock_mux_from_guest(&vs->mux, &vs->chain);
		push(vs, TX_QUEUE, 0);
		--*budget;
	}
	if (queue(vs, TX_QUEUE)->used_idx != old_used_idx)
		vdev_notify_used(&vs->dev, TX_QUEUE, old_used_idx);
}

/* §5.10.6.4: rx buffers are device-writable only, and must hold a header. */
static bool rx_buffer_usable(struct virtio_vsock *vs)
{
	if (vs->chain.readable_count == 0 && vs->chain.writable_len >= VSOCK_HDR_SIZE)
		return true;
	if (!vs->complained)
		vdev_complain(&vs->dev, &vs->log,
			      "%s: an rx buffer of %llu writable bytes is dropped", vs->name,
			      (unsigned long long)vs->chain.writable_len);
	vs->complained = true;
	return false;
}

/* Fills rx buffers while the multiplexer has packets for the guest, up to the budget;
 * the rest waits for the queue's next turn. */
static void fill_rx(struct virtio_vsock *vs)
{
	uint16_t old_used_idx = queue(vs, RX_QUEUE)->used_idx;
	unsigned budget = VIRTIO_VSOCK_FILL_BUDGET;

	while (!vs->broken && vsock_mux_has_rx(&vs->mux)) {
		uint32_t written = 0;

		if (budget-- == 0) {
			vdev_serve_again(&vs->dev, RX_QUEUE);
			break;
		}
		if (pop(vs, RX_QUEUE) <= 0)
			break;
		if (!rx_buffer_usable(vs)) {
			push(vs, RX_QUEUE, 0);
			continue;
		}
		if (!vsock_mux_to_guest(&vs->mux, &vs->chain, &written)) {
			unpop(vs, RX_QUEUE);
			break;
		}
		push(vs, RX_QUEUE, written);
	}
	if (queue(vs, RX_QUEUE)->used_idx != old_used_idx)
		vdev_notify_used(&vs->dev, RX_QUEUE, old_used_idx);
}

/* Answers what can be answered; tx stalled for want of room for replies goes on once
 * rx took some. */
static void run_queues(struct virtio_vsock *vs, bool tx)
{
	unsigned budget = VIRTIO_VSOCK_TAKE_BUDGET; /* tx packets, for the whole turn */

	if (tx)
		take_tx(vs, &budget);
	fill_rx(vs);
	while (!vs->broken && vs->tx_stalled && vsock_mux_takes_tx(&vs->mux)) {
		vs->tx_stalled = false;
		take_tx(vs, &budget);
		fill_rx(vs);
	}
}

/* §5.10.6, Device Events: a TRANSPORT_RESET in the first event buffer the driver
 * offered. */
static void deliver_event(struct virtio_vsock *vs)
{
	uint16_t old_used_idx = queue(vs, EVENT_QUEUE)->used_idx;
	struct virtio_vsock_event event = {.id = htole32(VIRTIO_VSOCK_EVENT_TRANSPORT_RESET)};

	while (vs->event_pending && !vs->broken && vdev_running(&vs->dev)) {
		if (pop(vs, EVENT_QUEUE) <= 0)
			break;
		if (virtq_chain_write(&vs->chain, 0, &event, sizeof(event)) != 0) {
			push(vs, EVENT_QUEUE, 0); /* too small to hold it: try the next */
			continue;
		}
		push(vs, EVENT_QUEUE, sizeof(event));
		vs->event_pending = false;
		/* The driver notifies when it gives a buffer back after handling the event
		 * (vsock_release_held_clients), whatever avail_event said before. */
		vs->reset_event_avail_idx = virtq_driver_avail_idx(queue(vs, EVENT_QUEUE));
		virtq_set_avail_event_at(queue(vs, EVENT_QUEUE), vs->reset_event_avail_idx);
	}
	if (queue(vs, EVENT_QUEUE)->used_idx != old_used_idx)
		vdev_notify_used(&vs->dev, EVENT_QUEUE, old_used_idx);
}

/* The event-loop handler of the multiplexer's epoll fd. */
static void vsock_on_host_event(void *opaque)
{
	struct virtio_vsock *vs = opaque;

	pthread_mutex_lock(&vs->dev.lock);
	vsock_mux_host_events(&vs->mux);
	if (vdev_running(&vs->dev))
		run_queues(vs, false);
	pthread_mutex_unlock(&vs->dev.lock);
}

static uint64_t vsock_features(struct vdev *dev)
{
	(void)dev;
	/* §5.10.3: no feature bit means stream sockets only. */
	return VIRTIO_FEATURE_INDIRECT_DESC | VIRTIO_FEATURE_EVENT_IDX;
}

static void vsock_config_read(struct vdev *dev, uint32_t offset, uint8_t *data, uint32_t len)
{
	struct virtio_vsock *vs = dev->impl;

	memset(data, 0, len);
	if (offset <= sizeof(vs->config) && len <= sizeof(vs->config) - offset)
		memcpy(data, (const uint8_t *)&vs->config + offset, len);
}

static void vsock_config_write(struct vdev *dev, uint32_t offset, const uint8_t *data, uint32_t len)
{
	/* §5.10.4: guest_cid is read-only. */
	(void)dev;
	(void)offset;
	(void)data;
	(void)len;
}

static int vsock_activate(struct vdev *dev)
{
	(void)dev;
	return 0;
}

/* Linux's driver handles an event, then gives its buffer back and notifies the event
 * queue (virtio_transport_event_work): a buffer added after the reset event was taken
 * means the guest has reset its connections. A host client accepted before that would
 * be connected, then reset with the others, and hang up: it waits, unread. */
static void vsock_release_held_clients(struct virtio_vsock *vs)
{
	if (!vs->reset_unhandled || vs->event_pending ||
	    virtq_driver_avail_idx(queue(vs, EVENT_QUEUE)) == vs->reset_event_avail_idx)
		return;
	vs->reset_unhandled = false;
	vsock_mux_hold_clients(&vs->mux, false);
}

static void vsock_queue_notify(struct vdev *dev, uint16_t q)
{
	struct virtio_vsock *vs = dev->impl;

	if (vs->broken)
		return;
	if (q == EVENT_QUEUE) {
		deliver_event(vs);
		vsock_release_held_clients(vs);
	} else if (q == RX_QUEUE || q == TX_QUEUE)
		run_queues(vs, q == TX_QUEUE);
}

static void vsock_reset(struct vdev *dev)
{
	struct virtio_vsock *vs = dev->impl;

	/* The guest's sockets are gone with its driver; the host's go too. */
	vsock_mux_reset(&vs->mux);
	for (uint16_t q = 0; q < dev->queue_count; q++)
		virtq_reset(queue(vs, q));
	vs->broken = false;
	vs->tx_stalled = false;
	vs->event_pending = false;
	vs->reset_unhandled = false;
	vsock_mux_hold_clients(&vs->mux, false);
	vs->complained = false;
}

/* §5.10.6.6: the guest drops every connection it has when it sees the event, and
 * keeps its listening sockets; the device forgets its side of them. */
static void vsock_reset_transport(struct virtio_vsock *vs)
{
	vsock_mux_reset(&vs->mux);
	vsock_mux_scatter_local_ports(&vs->mux);
	/* Replies it stalled for are gone with the connections; with EVENT_IDX the guest
	 * may not notify tx again, so the queue is served once more. */
	if (vs->tx_stalled)
		vdev_serve_again(&vs->dev, TX_QUEUE);
	vs->tx_stalled = false;
	vs->event_pending = true;
	vs->reset_unhandled = true;
	vsock_mux_hold_clients(&vs->mux, true);
	deliver_event(vs);
}

/* Snapshots: connections live in host sockets, which no snapshot holds, so beyond the
 * queues (the transport's) there is only whether the device stopped and whether the
 * guest is still owed an event. Nothing is in flight: each guest packet is taken whole
 * and each reply written whole, or left in its ring. */
static int vsock_save(struct vdev *dev, struct snap_writer *w)
{
	struct virtio_vsock *vs = dev->impl;

	snap_put_bool(w, vs->broken);
	snap_put_bool(w, vs->event_pending);
	return 0;
}

static int vsock_load(struct vdev *dev, struct snap_reader *r, uint32_t status)
{
	struct virtio_vsock *vs = dev->impl;

	vs->broken = vdev_load_broken(r, status);
	vs->event_pending = snap_get_bool(r);
	/* The device holds no chain between turns: every one taken was used. */
	for (uint16_t q = 0; q < dev->queue_count && !r->error; q++)
		if (queue(vs, q)->last_avail_idx != queue(vs, q)->used_idx)
			return snap_fail(r, "virtio-vsock: a chain taken and never used");
	return r->error;
}

/* The guest's connections were with the process that took the snapshot: after a
 * restore they are reset, as §5.10.6.6 describes for a migrated guest. */
static void vsock_restored(struct vdev *dev)
{
	struct virtio_vsock *vs = dev->impl;

	if (vdev_running(dev) && !vs->broken)
		vsock_reset_transport(vs);
}

static void vsock_resumed(struct vdev *dev, uint64_t paused_ns)
{
	struct virtio_vsock *vs = dev->impl;

	vsock_mux_defer_deadlines(&vs->mux, paused_ns);
}

static const struct vdev_ops vsock_ops = {
    .features = vsock_features,
    .config_read = vsock_config_read,
    .config_write = vsock_config_write,
    .activate = vsock_activate,
    .queue_notify = vsock_queue_notify,
    .reset = vsock_reset,
    .save = vsock_save,
    .load = vsock_load,
    .restored = vsock_restored,
    .resumed = vsock_resumed,
};

void virtio_vsock_transport_reset(struct virtio_vsock *vs)
{
	pthread_mutex_lock(&vs->dev.lock);
	vsock_reset_transport(vs);
	pthread_mutex_unlock(&vs->dev.lock);
}

static void vsock_free(struct virtio_vsock *vs)
{
	free(vs->uds_path);
	free(vs->name);
	free(vs);
}

static int vsock_check_options(const struct virtio_vsock_options *options, struct guest_memory *mem,
			       struct event_loop *loop, const struct mote_log *log)
{
	if (!options || !options->uds_path || !*options->uds_path || !mem || !loop) {
		log_error(log, "virtio-vsock: no socket path, guest memory or event loop");
		return -EINVAL;
	}
	if (options->guest_cid < VIRTIO_VSOCK_MIN_GUEST_CID ||
	    options->guest_cid > VIRTIO_VSOCK_MAX_GUEST_CID) {
		log_error(log, "vsock %s: guest CID %llu is reserved (use 3 to %llu)",
			  options->uds_path, (unsigned long long)options->guest_cid,
			  VIRTIO_VSOCK_MAX_GUEST_CID);
		return -EINVAL;
	}
	int err = vsock_uds_path_check(options->uds_path);
	if (err)
		log_error(log, "vsock %s: the path is too long for a socket with \"_<port>\"",
			  options->uds_path);
	return err;
}

int virtio_vsock_create(const struct virtio_vsock_options *options, struct guest_memory *mem,
			struct event_loop *loop, const struct mote_log *log,
			struct virtio_vsock **vsock_out)
{
	int err = vsock_check_options(options, mem, loop, log);
	if (err)
		return err;

	struct virtio_vsock *vs = calloc(1, sizeof(*vs));
	if (!vs)
		return -ENOMEM;
	if (log)
		vs->log = *log;
	vs->uds_path = strdup(options->uds_path);
	if (!vs->uds_path || asprintf(&vs->name, "virtio-vsock %s", options->uds_path) < 0) {
		vs->name = NULL;
		vsock_free(vs);
		return -ENOMEM;
	}
	unsigned timeout_ms =
	    options->timeout_ms ? options->timeout_ms : VIRTIO_VSOCK_DEFAULT_TIMEOUT_MS;
	err = vsock_mux_init(&vs->mux, options->guest_cid, vs->uds_path, timeout_ms, &vs->log,
			     vs->name);
	if (err) {
		vsock_mux_destroy(&vs->mux);
		vsock_free(vs);
		return err;
	}
	vs->config.guest_cid = htole64(options->guest_cid);
	vs->dev = (struct vdev){
	    .name = vs->name,
	    .device_id = VIRTIO_ID_VSOCK,
	    .queue_count = 3,
	    .queue_max_size = VSOCK_QUEUE_SIZE,
	    .config_size = sizeof(vs->config),
	    .ops = &vsock_ops,
	    .impl = vs,
	    .mem = mem,
	};
	pthread_mutex_init(&vs->dev.lock, NULL);

	/* Last: the loop cannot forget an fd, and the handler may run from here on. */
	err = event_loop_add(loop, vsock_mux_fd(&vs->mux), vsock_on_host_event, vs);
	if (err) {
		log_error(log, "vsock %s: watching its sockets: %s", options->uds_path,
			  strerror(-err));
		pthread_mutex_destroy(&vs->dev.lock);
		vsock_mux_destroy(&vs->mux);
		vsock_free(vs);
		return err;
	}
	*vsock_out = vs;
	return 0;
}

struct vdev *virtio_vsock_vdev(struct virtio_vsock *vs)
{
	return &vs->dev;
}

void virtio_vsock_destroy(struct virtio_vsock *vs)
{
	if (!vs)
		return;
	vsock_mux_destroy(&vs->mux);
	pthread_mutex_destroy(&vs->dev.lock);
	vsock_free(vs);
}
