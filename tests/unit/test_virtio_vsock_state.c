/* virtio-vsock in a snapshot: connections live in host sockets, which no snapshot holds,
 * so a restored device resets the transport (virtio 1.2 §5.10.6.6): the guest is sent
 * VIRTIO_VSOCK_EVENT_TRANSPORT_RESET, the device forgets every connection and keeps
 * nothing of them host-side, and its listener goes on taking new ones. An in-memory
 * guest, a fake transport, real AF_UNIX sockets; no KVM. */
#include <endian.h>

#include "vsock_host.h"
#include "vmm/snapshot_stream.h"

static void restored(struct vdev *dev)
{
	pthread_mutex_lock(&dev->lock);
	dev->ops->restored(dev);
	pthread_mutex_unlock(&dev->lock);
}

static void restored_device_sends_transport_reset_and_forgets_connections(void **state)
{
	struct vsock_fixture *f = *state;
	int listener = host_listen(f, 8000);
	struct gconn a, b, c;
	int fa = connect_from_host(f, 52, &a);
	int fb = connect_from_guest(f, listener, 8000, 1000, &b);

	restored(f->dev);
	assert_int_equal(used_idx(f, EVENT_QUEUE), 1);
	assert_int_equal(used(f, EVENT_QUEUE)->ring[0].len, 4);
	assert_int_equal(le32toh(*(uint32_t *)guest(f, EVENT_BUF_BASE, 4)),
			 VIRTIO_VSOCK_EVENT_TRANSPORT_RESET);
	assert_int_equal(f->transport.interrupts[EVENT_QUEUE], 1);
	/* Nothing is kept host-side: both sockets are closed. */
	host_expect_eof(f, fa);
	host_expect_eof(f, fb);
	/* The guest drops its sockets itself; an old connection is unknown now. */
	assert_no_pkt(f, 20);
	gc_send(f, &b, VIRTIO_VSOCK_OP_RW, 0, "x", 1);
	expect_rst(f, b.guest_port, b.host_port);
	/* A host client waits until the guest has handled the reset, which Linux shows by
	 * giving the event buffer back: connected before, it would be reset with the rest. */
	int early = host_client(f);
	host_printf(early, "CONNECT 53\n");
	/* Short waits (a few turns of the loop each): a client held past TEST_TIMEOUT_MS
	 * is closed. */
	assert_no_pkt(f, 10);
	notify(f, EVENT_QUEUE); /* nothing given back yet */
	assert_no_pkt(f, 10);
	offer(f, EVENT_QUEUE, 0);
	notify(f, EVENT_QUEUE);
	struct vsock_pkt pkt;
	recv_pkt(f, &pkt, NULL);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_REQUEST);
	assert_int_equal(pkt.dst_port, 53);
	/* Not the port after the last one, nor the first one a new process would take
	 * (2^30, a's): the guest may still hold sockets on those (vsock_mux.h). A chance
	 * of one in 2^29 that a random port is either. */
	assert_true(pkt.src_port >= 1u << 30 && pkt.src_port < 1u << 31);
	assert_int_equal(a.host_port, 1u << 30);
	assert_int_not_equal(pkt.src_port, a.host_port);
	assert_int_not_equal(pkt.src_port, a.host_port + 1);
	close(early);
	expect_rst(f, 53, pkt.src_port);
	close(connect_from_host(f, 54, &c));
	close(connect_from_guest(f, listener, 8000, 1001, &c));
	close(fa);
	close(fb);
	close(listener);
}

/* With EVENT_IDX the driver notifies only where avail_event says: the device asks for
 * the buffer the guest gives back after handling the reset, or it would never hear of
 * it and hold its host clients for ever. */
static void restored_device_with_event_idx_asks_to_hear_of_the_buffer_given_back(void **state)
{
	struct vsock_fixture *f = *state;

	reset_device(f);
	activate_with(f, true, true);
	restored(f->dev);
	assert_int_equal(used_idx(f, EVENT_QUEUE), 1);
	uint16_t avail_event;
	memcpy(&avail_event, &used(f, EVENT_QUEUE)->ring[QSIZE], sizeof(avail_event));
	avail_event = le16toh(avail_event);
	assert_int_equal(avail_event, avail(f, EVENT_QUEUE)->idx);
	int early = host_client(f);
	host_printf(early, "CONNECT 53\n");
	assert_no_pkt(f, 10);
	offer(f, EVENT_QUEUE, 0);
	notify(f, EVENT_QUEUE);
	struct vsock_pkt pkt;
	recv_pkt(f, &pkt, NULL);
	assert_int_equal(pkt.op, VIRTIO_VSOCK_OP_REQUEST);
	close(early);
}

static void restored_device_the_driver_never_started_sends_nothing(void **state)
{
	struct vsock_fixture *f = *state;

	reset_device(f);
	restored(f->dev);
	assert_int_equal(used_idx(f, EVENT_QUEUE), 0);
	assert_int_equal(f->transport.interrupts[EVENT_QUEUE], 0);
}

static int save(struct vdev *dev, struct snap_writer *w)
{
	pthread_mutex_lock(&dev->lock);
	int ret = dev->ops->save(dev, w);
	pthread_mutex_unlock(&dev->lock);
	return ret;
}

/* The device status of a started device, as the transport loads it. */
#define STARTED                                                                                    \
	(VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_FEATURES_OK |            \
	 VIRTIO_STATUS_DRIVER_OK)

static int load_with_status(struct vdev *dev, const uint8_t *data, size_t len, uint32_t status)
{
	struct snap_reader r = {.data = data, .len = len};

	pthread_mutex_lock(&dev->lock);
	int ret = dev->ops->load(dev, &r, status);
	pthread_mutex_unlock(&dev->lock);
	return ret ? ret : snap_reader_finish(&r);
}

static int load(struct vdev *dev, const uint8_t *data, size_t len)
{
	return load_with_status(dev, data, len, STARTED);
}

/* A second device, built as a restore builds it, given the first one's queues as the
 * transport's load gives them. */
static void saved_device_loads_into_a_fresh_one_that_resets_the_guest(void **state)
{
	struct vsock_fixture *f = *state;
	struct event_loop loop;
	struct virtio_vsock *fresh;
	struct fake_transport transport = {0};
	struct snap_writer w;
	char path[160];
	struct gconn a;
	int fa = connect_from_host(f, 52, &a);

	snap_writer_init(&w);
	assert_int_equal(save(f->dev, &w), 0);
	snprintf(path, sizeof(path), "%s/restored.sock", f->dir);
	assert_int_equal(event_loop_init(&loop), 0);
	struct virtio_vsock_options options = {
	    .guest_cid = TEST_CID, .uds_path = path, .timeout_ms = TEST_TIMEOUT_MS};
	assert_int_equal(virtio_vsock_create(&options, &f->mem, &loop, &f->log, &fresh), 0);
	struct vdev *dev = virtio_vsock_vdev(fresh);
	fake_transport_attach(dev, &transport);
	dev->driver_features = f->dev->driver_features;
	memcpy(dev->queues, f->dev->queues, sizeof(dev->queues));

	for (size_t len = 0; len < w.len; len++)
		assert_int_equal(load(dev, w.buf, len), -EINVAL);
	assert_int_equal(load(dev, w.buf, w.len), 0);
	dev->activated = true;
	restored(dev);
	assert_int_equal(used_idx(f, EVENT_QUEUE), 1);
	assert_int_equal(le32toh(*(uint32_t *)guest(f, EVENT_BUF_BASE, 4)),
			 VIRTIO_VSOCK_EVENT_TRANSPORT_RESET);
	assert_int_equal(transport.interrupts[EVENT_QUEUE], 1);

	virtio_vsock_destroy(fresh);
	event_loop_destroy(&loop);
	snap_writer_free(&w);
	close(fa);
}

static void saved_state_with_a_value_out_of_range_is_refused(void **state)
{
	struct vsock_fixture *f = *state;
	struct snap_writer w;

	snap_writer_init(&w);
	assert_int_equal(save(f->dev, &w), 0);
	/* Each field is a boolean: any other byte is refused. */
	for (size_t i = 0; i < w.len; i++) {
		uint8_t saved = w.buf[i];
		w.buf[i] = 2;
		assert_int_equal(load(f->dev, w.buf, w.len), -EINVAL);
		w.buf[i] = saved;
	}
	/* Broken (the first field) only with the driver asked to reset the device. */
	w.buf[0] = 1;
	assert_int_equal(load(f->dev, w.buf, w.len), -EINVAL);
	assert_int_equal(
	    load_with_status(f->dev, w.buf, w.len, STARTED | VIRTIO_STATUS_DEVICE_NEEDS_RESET), 0);
	snap_writer_free(&w);
}

/* The device holds no chain between turns: queues loaded with one taken and never used
 * cannot come from a monitor, and are refused. */
static void saved_state_over_a_chain_taken_and_not_used_is_refused(void **state)
{
	struct vsock_fixture *f = *state;
	struct snap_writer w;

	snap_writer_init(&w);
	assert_int_equal(save(f->dev, &w), 0);
	assert_int_equal(load(f->dev, w.buf, w.len), 0);
	for (uint16_t q = 0; q < f->dev->queue_count; q++) {
		f->dev->queues[q].last_avail_idx++;
		assert_int_equal(load(f->dev, w.buf, w.len), -EINVAL);
		f->dev->queues[q].last_avail_idx--;
	}
	snap_writer_free(&w);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, vsock_setup, vsock_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(restored_device_sends_transport_reset_and_forgets_connections),
	    TEST(restored_device_with_event_idx_asks_to_hear_of_the_buffer_given_back),
	    TEST(restored_device_the_driver_never_started_sends_nothing),
	    TEST(saved_device_loads_into_a_fresh_one_that_resets_the_guest),
	    TEST(saved_state_with_a_value_out_of_range_is_refused),
	    TEST(saved_state_over_a_chain_taken_and_not_used_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
