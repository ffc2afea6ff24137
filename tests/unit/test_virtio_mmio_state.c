/* virtio-mmio in a snapshot (mmio.h: virtio_mmio_save/load/restored/quiesce): a device
 * saved from one transport and loaded into a fresh one reads the same through every
 * register, has the same queues and goes on working; a saved section that is cut short
 * or holds a value the register path could not have produced is refused with a reader
 * error and leaves the transport at power-on. Against a fake device with a state of its
 * own (a cookie) and an in-memory guest. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "virtio/mmio.h"
#include "vmm/guest_memory.h"

#define MIB (1024ULL * 1024ULL)
#define RAM_SIZE (16 * MIB)
#define QMAX 64
#define RING(q) (0x10000ULL + (uint64_t)(q)*0x4000ULL)
#define FAKE_ID 42
#define FAKE_FEATURES ((1ULL << 0) | (1ULL << 5) | VIRTIO_FEATURE_EVENT_IDX)
#define COOKIE 0xc0ffee11u

struct fake_device {
	struct vdev dev;
	uint32_t cookie; /* the device's own state */
	int activations, notifies, resets, quiesces, restores;
	int activate_result;
};

/* Two transports on one guest: the one saved from, and the one loaded into. */
struct fixture {
	struct guest_memory mem;
	struct fake_device fake[2];
	struct virtio_mmio mmio[2];
	struct snap_writer w;
};

static uint64_t fake_features(struct vdev *dev)
{
	(void)dev;
	return FAKE_FEATURES;
}

static void fake_config_read(struct vdev *dev, uint32_t offset, uint8_t *data, uint32_t len)
{
	(void)dev;
	(void)offset;
	memset(data, 0x5a, len);
}

static void fake_config_write(struct vdev *dev, uint32_t offset, const uint8_t *data, uint32_t len)
{
	(void)dev;
	(void)offset;
	(void)data;
	(void)len;
}

static int fake_activate(struct vdev *dev)
{
	struct fake_device *fake = dev->impl;

	fake->activations++;
	return fake->activate_result;
}

static void fake_queue_notify(struct vdev *dev, uint16_t q)
{
	struct fake_device *fake = dev->impl;

	(void)q;
	fake->notifies++;
}

static void fake_reset(struct vdev *dev)
{
	struct fake_device *fake = dev->impl;

	fake->resets++;
	fake->cookie = 0;
}

static int fake_quiesce(struct vdev *dev, int64_t stall_ns)
{
	(void)stall_ns;
	((struct fake_device *)dev->impl)->quiesces++;
	return 0;
}

static int fake_save(struct vdev *dev, struct snap_writer *w)
{
	snap_put_u32(w, ((struct fake_device *)dev->impl)->cookie);
	return 0;
}

static int fake_load(struct vdev *dev, struct snap_reader *r, uint32_t status)
{
	(void)status;
	((struct fake_device *)dev->impl)->cookie = snap_get_u32(r);
	return r->error;
}

static void fake_restored(struct vdev *dev)
{
	((struct fake_device *)dev->impl)->restores++;
}

static const struct vdev_ops fake_ops = {
    .features = fake_features,
    .config_read = fake_config_read,
    .config_write = fake_config_write,
    .activate = fake_activate,
    .queue_notify = fake_queue_notify,
    .reset = fake_reset,
    .quiesce = fake_quiesce,
    .save = fake_save,
    .load = fake_load,
    .restored = fake_restored,
};

static void fake_init(struct fixture *f, unsigned i, uint32_t device_id)
{
	f->fake[i].dev = (struct vdev){
	    .name = "fake",
	    .device_id = device_id,
	    .queue_count = 2,
	    .queue_max_size = QMAX,
	    .config_size = 8,
	    .ops = &fake_ops,
	    .impl = &f->fake[i],
	    .mem = &f->mem,
	};
	pthread_mutex_init(&f->fake[i].dev.lock, NULL);
	assert_int_equal(
	    virtio_mmio_init(&f->mmio[i], &f->fake[i].dev, 0xd0000000 + i * 0x1000, 5 + i, NULL),
	    0);
}

static void fake_fini(struct fixture *f, unsigned i)
{
	virtio_mmio_destroy(&f->mmio[i]);
	pthread_mutex_destroy(&f->fake[i].dev.lock);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f || guest_memory_create(&f->mem, RAM_SIZE, NULL) != 0)
		return -1;
	fake_init(f, 0, FAKE_ID);
	fake_init(f, 1, FAKE_ID);
	snap_writer_init(&f->w);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	snap_writer_free(&f->w);
	fake_fini(f, 0);
	fake_fini(f, 1);
	guest_memory_destroy(&f->mem);
	free(f);
	return 0;
}

static uint32_t rd(struct fixture *f, unsigned i, uint64_t offset)
{
	uint32_t value;

	virtio_mmio_access(&f->mmio[i], offset, (uint8_t *)&value, 4, false);
	return value;
}

static void wr(struct fixture *f, unsigned i, uint64_t offset, uint32_t value)
{
	virtio_mmio_access(&f->mmio[i], offset, (uint8_t *)&value, 4, true);
}

static uint64_t eventfd_take(int fd)
{
	uint64_t count = 0;

	if (read(fd, &count, sizeof(count)) != sizeof(count))
		return 0;
	return count;
}

static void setup_queue(struct fixture *f, uint32_t q, uint32_t num)
{
	wr(f, 0, VIRTIO_MMIO_QUEUE_SEL, q);
	wr(f, 0, VIRTIO_MMIO_QUEUE_NUM, num);
	wr(f, 0, VIRTIO_MMIO_QUEUE_DESC_LOW, (uint32_t)RING(q));
	wr(f, 0, VIRTIO_MMIO_QUEUE_DRIVER_LOW, (uint32_t)(RING(q) + 0x1000));
	wr(f, 0, VIRTIO_MMIO_QUEUE_DEVICE_LOW, (uint32_t)(RING(q) + 0x2000));
	wr(f, 0, VIRTIO_MMIO_QUEUE_READY, 1);
}

/* The driver's side of §3.1.1 on transport 0 up to FEATURES_OK, with both queues set up. */
static void negotiate(struct fixture *f)
{
	uint64_t features = FAKE_FEATURES | VIRTIO_FEATURE_VERSION_1;

	wr(f, 0, VIRTIO_MMIO_STATUS, VIRTIO_STATUS_ACKNOWLEDGE);
	wr(f, 0, VIRTIO_MMIO_STATUS, VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER);
	wr(f, 0, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
	wr(f, 0, VIRTIO_MMIO_DRIVER_FEATURES, (uint32_t)features);
	wr(f, 0, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
	wr(f, 0, VIRTIO_MMIO_DRIVER_FEATURES, (uint32_t)(features >> 32));
	wr(f, 0, VIRTIO_MMIO_STATUS,
	   VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_FEATURES_OK);
	setup_queue(f, 0, QMAX);
	setup_queue(f, 1, 16);
}

/* Transport 0 in use: the driver started it, the device used chains on queue 0 and
 * interrupted, the driver left other selects than the default. */
static void bring_up(struct fixture *f)
{
	negotiate(f);
	wr(f, 0, VIRTIO_MMIO_STATUS, rd(f, 0, VIRTIO_MMIO_STATUS) | VIRTIO_STATUS_DRIVER_OK);
	assert_true(f->fake[0].dev.activated);
	f->fake[0].cookie = COOKIE;
	f->fake[0].dev.queues[0].last_avail_idx = 7;
	f->fake[0].dev.queues[0].used_idx = 5;
	f->fake[0].dev.transport_ops->signal_used(f->fake[0].dev.transport, 0);
	wr(f, 0, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 1);
	wr(f, 0, VIRTIO_MMIO_QUEUE_SEL, 1);
}

static void save(struct fixture *f)
{
	snap_writer_free(&f->w);
	snap_writer_init(&f->w);
	assert_int_equal(virtio_mmio_save(&f->mmio[0], &f->w), 0);
	assert_int_equal(f->w.error, 0);
}

/* Loads len bytes of buf into transport 1; the reader's state is left in *r. */
static int load_bytes(struct fixture *f, const uint8_t *buf, size_t len, struct snap_reader *r)
{
	*r = (struct snap_reader){.data = buf, .len = len};
	int ret = virtio_mmio_load(&f->mmio[1], r);
	if (!ret)
		ret = snap_reader_finish(r);
	return ret;
}

static int load(struct fixture *f, struct snap_reader *r)
{
	return load_bytes(f, f->w.buf, f->w.len, r);
}

static void assert_refused(struct fixture *f, const char *what)
{
	struct snap_reader r;

	save(f);
	if (load(f, &r) != -EINVAL || !r.error || !r.failure)
		fail_msg("%s was accepted", what);
	/* Nothing of it stays: the transport is back at power-on. */
	assert_int_equal(rd(f, 1, VIRTIO_MMIO_STATUS), 0);
	assert_false(f->fake[1].dev.activated);
	assert_false(f->fake[1].dev.queues[0].ready);
}

static void assert_same_queues(struct fixture *f)
{
	for (unsigned q = 0; q < 2; q++) {
		const struct virtq *a = &f->fake[0].dev.queues[q], *b = &f->fake[1].dev.queues[q];
		assert_int_equal(a->ready, b->ready);
		assert_int_equal(a->size, b->size);
		assert_int_equal(a->last_avail_idx, b->last_avail_idx);
		assert_int_equal(a->used_idx, b->used_idx);
		assert_int_equal(a->event_idx, b->event_idx);
		assert_int_equal(a->desc_addr, b->desc_addr);
		assert_int_equal(a->avail_addr, b->avail_addr);
		assert_int_equal(a->used_addr, b->used_addr);
		assert_ptr_equal(b->mem, &f->mem);
		const struct virtio_mmio_queue_regs *ra = &f->mmio[0].queue_regs[q];
		const struct virtio_mmio_queue_regs *rb = &f->mmio[1].queue_regs[q];
		assert_int_equal(ra->num, rb->num);
		assert_int_equal(ra->desc, rb->desc);
		assert_int_equal(ra->driver, rb->driver);
		assert_int_equal(ra->device, rb->device);
	}
}

static void loaded_transport_reads_like_the_saved_one(void **state)
{
	struct fixture *f = *state;
	struct snap_reader r;

	bring_up(f);
	save(f);
	assert_int_equal(load(f, &r), 0);
	/* Every register, with the selects as the driver left them ... */
	for (uint64_t offset = 0; offset < VIRTIO_MMIO_CONFIG; offset += 4)
		assert_int_equal(rd(f, 1, offset), rd(f, 0, offset));
	/* ... and with each queue and feature bank selected. */
	for (uint32_t sel = 0; sel < 2; sel++) {
		wr(f, 0, VIRTIO_MMIO_QUEUE_SEL, sel);
		wr(f, 1, VIRTIO_MMIO_QUEUE_SEL, sel);
		wr(f, 0, VIRTIO_MMIO_DEVICE_FEATURES_SEL, sel);
		wr(f, 1, VIRTIO_MMIO_DEVICE_FEATURES_SEL, sel);
		for (uint64_t offset = 0; offset < VIRTIO_MMIO_CONFIG; offset += 4)
			assert_int_equal(rd(f, 1, offset), rd(f, 0, offset));
	}
	assert_same_queues(f);
	assert_int_equal(f->fake[1].dev.driver_features, f->fake[0].dev.driver_features);
	assert_int_equal(f->fake[1].cookie, COOKIE);
}

static void loaded_device_that_was_started_is_started_again_and_served(void **state)
{
	struct fixture *f = *state;
	struct snap_reader r;

	bring_up(f);
	save(f);
	assert_int_equal(load(f, &r), 0);
	assert_true(f->fake[1].dev.activated);
	assert_int_equal(f->fake[1].activations, 1);
	virtio_mmio_notify_handler(&f->mmio[1].notifiers[0]);
	assert_int_equal(f->fake[1].notifies, 1);
	/* The driver can still reset and set it up again. */
	wr(f, 1, VIRTIO_MMIO_STATUS, 0);
	assert_false(f->fake[1].dev.queues[0].ready);
	assert_int_equal(rd(f, 1, VIRTIO_MMIO_STATUS), 0);
}

static void device_not_started_yet_is_not_started_by_a_load(void **state)
{
	struct fixture *f = *state;
	struct snap_reader r;

	negotiate(f);
	save(f);
	assert_int_equal(load(f, &r), 0);
	assert_false(f->fake[1].dev.activated);
	assert_int_equal(f->fake[1].activations, 0);
	assert_int_equal(rd(f, 1, VIRTIO_MMIO_STATUS), rd(f, 0, VIRTIO_MMIO_STATUS));
	assert_same_queues(f);
	/* The driver goes on where it stopped. */
	wr(f, 1, VIRTIO_MMIO_STATUS, rd(f, 1, VIRTIO_MMIO_STATUS) | VIRTIO_STATUS_DRIVER_OK);
	assert_true(f->fake[1].dev.activated);
}

static void started_device_the_driver_gave_up_on_loads_as_it_was(void **state)
{
	struct fixture *f = *state;
	struct snap_reader r;

	bring_up(f);
	wr(f, 0, VIRTIO_MMIO_STATUS, rd(f, 0, VIRTIO_MMIO_STATUS) | VIRTIO_STATUS_FAILED);
	save(f);
	assert_int_equal(load(f, &r), 0);
	assert_int_equal(rd(f, 1, VIRTIO_MMIO_STATUS), rd(f, 0, VIRTIO_MMIO_STATUS));
	assert_true(f->fake[1].dev.activated);
}

/* A device waiting for its reset still waits after a load: the backend must not fill its
 * queues, and no queue is served. */
static void device_waiting_for_a_reset_still_waits_after_a_load(void **state)
{
	struct fixture *f = *state;
	struct snap_reader r;

	bring_up(f);
	wr(f, 0, VIRTIO_MMIO_QUEUE_SEL, 0);
	wr(f, 0, VIRTIO_MMIO_QUEUE_READY, 0); /* of a running device: needs a reset */
	assert_true(rd(f, 0, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
	save(f);
	assert_int_equal(load(f, &r), 0);
	assert_true(f->fake[1].dev.activated);
	assert_true(f->fake[1].dev.needs_reset);
	assert_false(vdev_running(&f->fake[1].dev));
	virtio_mmio_notify_handler(&f->mmio[1].notifiers[0]);
	assert_int_equal(f->fake[1].notifies, 0);
	wr(f, 1, VIRTIO_MMIO_STATUS, 0);
	assert_false(f->fake[1].dev.needs_reset);
}

static void device_that_cannot_start_again_fails_the_load_at_power_on(void **state)
{
	struct fixture *f = *state;
	struct snap_reader r;

	bring_up(f);
	save(f);
	f->fake[1].activate_result = -EIO;
	assert_int_equal(load(f, &r), -EIO);
	assert_int_equal(r.error, 0); /* the state file was fine */
	assert_int_equal(rd(f, 1, VIRTIO_MMIO_STATUS), 0);
	assert_false(f->fake[1].dev.activated);
}

static void restored_serves_every_ready_queue_and_raises_a_pending_interrupt(void **state)
{
	struct fixture *f = *state;
	struct snap_reader r;

	bring_up(f);
	save(f);
	assert_int_equal(load(f, &r), 0);
	assert_int_equal(eventfd_take(f->mmio[1].irq_fd), 0);
	virtio_mmio_restored(&f->mmio[1]);
	assert_int_equal(f->fake[1].restores, 1);
	/* Notifications and the interrupt of the old process did not come along. */
	assert_true(eventfd_take(f->mmio[1].notifiers[0].fd) > 0);
	assert_true(eventfd_take(f->mmio[1].notifiers[1].fd) > 0);
	assert_true(eventfd_take(f->mmio[1].irq_fd) > 0);
	assert_int_equal(rd(f, 1, VIRTIO_MMIO_INTERRUPT_STATUS), VIRTIO_MMIO_INT_VRING);
}

static void restored_device_the_driver_never_started_is_left_alone(void **state)
{
	struct fixture *f = *state;
	struct snap_reader r;

	negotiate(f);
	save(f);
	assert_int_equal(load(f, &r), 0);
	virtio_mmio_restored(&f->mmio[1]);
	assert_int_equal(eventfd_take(f->mmio[1].notifiers[0].fd), 0);
	assert_int_equal(eventfd_take(f->mmio[1].irq_fd), 0);
}

static void quiesce_asks_the_device(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	assert_int_equal(virtio_mmio_quiesce(&f->mmio[0], CLOCK_FOREVER), 0);
	assert_int_equal(f->fake[0].quiesces, 1);
}

static void every_truncation_is_refused(void **state)
{
	struct fixture *f = *state;
	struct snap_reader r;

	bring_up(f);
	save(f);
	for (size_t len = 0; len < f->w.len; len++) {
		if (load_bytes(f, f->w.buf, len, &r) != -EINVAL || !r.error)
			fail_msg("a section cut to %zu of %zu bytes was accepted", len, f->w.len);
		assert_int_equal(rd(f, 1, VIRTIO_MMIO_STATUS), 0);
	}
	/* And a byte too many. */
	uint8_t *longer = calloc(1, f->w.len + 1);
	assert_non_null(longer);
	memcpy(longer, f->w.buf, f->w.len);
	assert_int_equal(load_bytes(f, longer, f->w.len + 1, &r), -EINVAL);
	free(longer);
}

/* A flipped bit the checks cannot tell from a driver's choice (an index, an address
 * inside RAM) is loaded as it reads; every other one is refused. Either way the
 * transport then holds exactly what it accepted: saved again, it gives the same bytes. */
static void every_bit_flip_is_refused_or_loaded_exactly(void **state)
{
	struct fixture *f = *state;
	struct snap_reader r;
	struct snap_writer again;
	unsigned refused = 0, bits = 0;

	bring_up(f);
	save(f);
	uint8_t *flipped = malloc(f->w.len);
	assert_non_null(flipped);
	for (size_t bit = 0; bit < f->w.len * 8; bit++, bits++) {
		memcpy(flipped, f->w.buf, f->w.len);
		flipped[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		int ret = load_bytes(f, flipped, f->w.len, &r);
		if (ret) {
			assert_int_equal(ret, -EINVAL);
			assert_true(r.error);
			assert_int_equal(rd(f, 1, VIRTIO_MMIO_STATUS), 0);
			refused++;
			continue;
		}
		snap_writer_init(&again);
		assert_int_equal(virtio_mmio_save(&f->mmio[1], &again), 0);
		assert_int_equal(again.len, f->w.len);
		assert_memory_equal(again.buf, flipped, f->w.len);
		snap_writer_free(&again);
	}
	free(flipped);
	/* The kind, the status, the booleans and the queue layout are all checked. */
	assert_true(refused > bits / 4);
}

static void queue_size_not_a_power_of_two_is_refused(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	f->fake[0].dev.queues[1].size = 24;
	assert_refused(f, "a queue of 24");
}

static void queue_larger_than_the_device_allows_is_refused(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	f->fake[0].dev.queues[0].size = 2 * QMAX;
	assert_refused(f, "a queue of twice the maximum");
}

static void ring_outside_guest_memory_is_refused(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	f->fake[0].dev.queues[0].used_addr = RAM_SIZE - 0x100;
	assert_refused(f, "a used ring across the end of RAM");
}

static void misaligned_ring_is_refused(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	f->fake[0].dev.queues[0].desc_addr += 8;
	assert_refused(f, "a descriptor table on 8 bytes");
}

static void more_chains_owned_than_the_queue_holds_is_refused(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	f->fake[0].dev.queues[1].last_avail_idx = 17;
	f->fake[0].dev.queues[1].used_idx = 0;
	assert_refused(f, "17 chains owned on a queue of 16");
}

static void queue_not_ready_with_state_is_refused(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	f->fake[0].dev.queues[1].ready = false;
	assert_refused(f, "a queue not ready with rings");
}

static void unknown_status_bits_are_refused(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	f->mmio[0].status |= 0x20;
	assert_refused(f, "status bit 5");
}

/* What a guest writes to the status register always saves into something that loads. */
static void reserved_status_bits_a_guest_writes_do_not_spoil_the_snapshot(void **state)
{
	struct fixture *f = *state;
	struct snap_reader r;

	bring_up(f);
	wr(f, 0, VIRTIO_MMIO_STATUS, rd(f, 0, VIRTIO_MMIO_STATUS) | 0x20 | 0x100);
	save(f);
	assert_int_equal(load(f, &r), 0);
	assert_int_equal(rd(f, 1, VIRTIO_MMIO_STATUS), rd(f, 0, VIRTIO_MMIO_STATUS));
	assert_true(f->fake[1].dev.activated);
}

static void driver_ok_without_features_ok_is_refused(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	f->mmio[0].status &= ~VIRTIO_STATUS_FEATURES_OK;
	assert_refused(f, "DRIVER_OK without FEATURES_OK");
}

static void features_not_offered_are_refused(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	f->mmio[0].driver_features |= 1ULL << 40;
	assert_refused(f, "feature bit 40");
}

static void started_device_without_driver_ok_is_refused(void **state)
{
	struct fixture *f = *state;

	negotiate(f);
	f->fake[0].dev.activated = true;
	assert_refused(f, "a started device before DRIVER_OK");
}

static void event_idx_without_the_feature_is_refused(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	f->mmio[0].driver_features &= ~VIRTIO_FEATURE_EVENT_IDX;
	assert_refused(f, "EVENT_IDX on a queue, not negotiated");
}

static void unknown_interrupt_bits_are_refused(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	f->mmio[0].interrupt_status |= 4;
	assert_refused(f, "interrupt status bit 2");
}

static void device_of_another_kind_is_refused(void **state)
{
	struct fixture *f = *state;
	struct snap_reader r;

	bring_up(f);
	save(f);
	fake_fini(f, 1);
	fake_init(f, 1, FAKE_ID + 1);
	assert_int_equal(load(f, &r), -EINVAL);
	assert_true(r.error);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(loaded_transport_reads_like_the_saved_one),
	    TEST(loaded_device_that_was_started_is_started_again_and_served),
	    TEST(device_not_started_yet_is_not_started_by_a_load),
	    TEST(started_device_the_driver_gave_up_on_loads_as_it_was),
	    TEST(device_waiting_for_a_reset_still_waits_after_a_load),
	    TEST(device_that_cannot_start_again_fails_the_load_at_power_on),
	    TEST(restored_serves_every_ready_queue_and_raises_a_pending_interrupt),
	    TEST(restored_device_the_driver_never_started_is_left_alone),
	    TEST(quiesce_asks_the_device),
	    TEST(every_truncation_is_refused),
	    TEST(every_bit_flip_is_refused_or_loaded_exactly),
	    TEST(queue_size_not_a_power_of_two_is_refused),
	    TEST(queue_larger_than_the_device_allows_is_refused),
	    TEST(ring_outside_guest_memory_is_refused),
	    TEST(misaligned_ring_is_refused),
	    TEST(more_chains_owned_than_the_queue_holds_is_refused),
	    TEST(queue_not_ready_with_state_is_refused),
	    TEST(unknown_status_bits_are_refused),
	    TEST(reserved_status_bits_a_guest_writes_do_not_spoil_the_snapshot),
	    TEST(driver_ok_without_features_ok_is_refused),
	    TEST(features_not_offered_are_refused),
	    TEST(started_device_without_driver_ok_is_refused),
	    TEST(event_idx_without_the_feature_is_refused),
	    TEST(unknown_interrupt_bits_are_refused),
	    TEST(device_of_another_kind_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
