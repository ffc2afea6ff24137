/* virtio-mmio transport (virtio 1.2 §4.2): what a driver sees through the registers,
 * feature negotiation and the status state machine, queue setup, interrupts and
 * notifications — and that a driver breaking the rules gets DEVICE_NEEDS_RESET, never
 * a device that runs on bad state. Against a fake device and an in-memory guest. */
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
#define QMAX 64
#define DESC_ADDR 0x10000ULL
#define AVAIL_ADDR 0x11000ULL
#define USED_ADDR 0x12000ULL
#define FAKE_FEATURES ((1ULL << 0) | (1ULL << 5) | VIRTIO_FEATURE_EVENT_IDX)

struct fake_device {
	struct vdev dev;
	uint8_t config[8];
	int activations, notifies, resets;
	uint16_t last_notified_queue;
	int activate_result;
};

struct fixture {
	struct guest_memory mem;
	struct fake_device fake;
	struct virtio_mmio mmio;
	struct mote_log log;
	int logged[MOTE_LOG_DEBUG + 1]; /* messages, by level */
};

static void count_message(void *opaque, enum mote_log_level level, const char *message)
{
	struct fixture *f = opaque;

	(void)message;
	if ((unsigned)level <= MOTE_LOG_DEBUG)
		f->logged[level]++;
}

static uint64_t fake_features(struct vdev *dev)
{
	(void)dev;
	return FAKE_FEATURES;
}

static void fake_config_read(struct vdev *dev, uint32_t offset, uint8_t *data, uint32_t len)
{
	struct fake_device *fake = dev->impl;
	memcpy(data, fake->config + offset, len);
}

static void fake_config_write(struct vdev *dev, uint32_t offset, const uint8_t *data, uint32_t len)
{
	struct fake_device *fake = dev->impl;
	memcpy(fake->config + offset, data, len);
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
	fake->notifies++;
	fake->last_notified_queue = q;
}

static void fake_reset(struct vdev *dev)
{
	struct fake_device *fake = dev->impl;
	fake->resets++;
}

static const struct vdev_ops fake_ops = {
    .features = fake_features,
    .config_read = fake_config_read,
    .config_write = fake_config_write,
    .activate = fake_activate,
    .queue_notify = fake_queue_notify,
    .reset = fake_reset,
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f || guest_memory_create(&f->mem, 16 * MIB, NULL) != 0)
		return -1;
	f->fake.dev = (struct vdev){
	    .name = "fake",
	    .device_id = 42,
	    .queue_count = 2,
	    .queue_max_size = QMAX,
	    .config_size = sizeof(f->fake.config),
	    .ops = &fake_ops,
	    .impl = &f->fake,
	    .mem = &f->mem,
	};
	pthread_mutex_init(&f->fake.dev.lock, NULL);
	for (unsigned i = 0; i < sizeof(f->fake.config); i++)
		f->fake.config[i] = (uint8_t)(0xa0 + i);
	f->log = (struct mote_log){.fn = count_message, .opaque = f};
	if (virtio_mmio_init(&f->mmio, &f->fake.dev, 0xd0000000, 5, &f->log) != 0)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	virtio_mmio_destroy(&f->mmio);
	pthread_mutex_destroy(&f->fake.dev.lock);
	guest_memory_destroy(&f->mem);
	free(f);
	return 0;
}

static uint32_t rd(struct fixture *f, uint64_t offset)
{
	uint32_t value;
	virtio_mmio_access(&f->mmio, offset, (uint8_t *)&value, 4, false);
	return value;
}

static void wr(struct fixture *f, uint64_t offset, uint32_t value)
{
	virtio_mmio_access(&f->mmio, offset, (uint8_t *)&value, 4, true);
}

/* Counter value of a nonblocking eventfd, 0 when it is not signalled. */
static uint64_t eventfd_take(int fd)
{
	uint64_t count = 0;
	if (read(fd, &count, sizeof(count)) != sizeof(count))
		return 0;
	return count;
}

/* The driver's side of §3.1.1 up to FEATURES_OK, accepting `features`. */
static void negotiate(struct fixture *f, uint64_t features)
{
	wr(f, VIRTIO_MMIO_STATUS, VIRTIO_STATUS_ACKNOWLEDGE);
	wr(f, VIRTIO_MMIO_STATUS, VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER);
	wr(f, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
	wr(f, VIRTIO_MMIO_DRIVER_FEATURES, (uint32_t)features);
	wr(f, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
	wr(f, VIRTIO_MMIO_DRIVER_FEATURES, (uint32_t)(features >> 32));
	wr(f, VIRTIO_MMIO_STATUS,
	   VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_FEATURES_OK);
}

static void setup_queue(struct fixture *f, uint32_t q, uint32_t num)
{
	wr(f, VIRTIO_MMIO_QUEUE_SEL, q);
	wr(f, VIRTIO_MMIO_QUEUE_NUM, num);
	wr(f, VIRTIO_MMIO_QUEUE_DESC_LOW, (uint32_t)DESC_ADDR);
	wr(f, VIRTIO_MMIO_QUEUE_DESC_HIGH, 0);
	wr(f, VIRTIO_MMIO_QUEUE_DRIVER_LOW, (uint32_t)AVAIL_ADDR);
	wr(f, VIRTIO_MMIO_QUEUE_DRIVER_HIGH, 0);
	wr(f, VIRTIO_MMIO_QUEUE_DEVICE_LOW, (uint32_t)USED_ADDR);
	wr(f, VIRTIO_MMIO_QUEUE_DEVICE_HIGH, 0);
	wr(f, VIRTIO_MMIO_QUEUE_READY, 1);
}

static void driver_ok(struct fixture *f)
{
	wr(f, VIRTIO_MMIO_STATUS, rd(f, VIRTIO_MMIO_STATUS) | VIRTIO_STATUS_DRIVER_OK);
}

static void bring_up(struct fixture *f)
{
	negotiate(f, FAKE_FEATURES | VIRTIO_FEATURE_VERSION_1);
	setup_queue(f, 0, QMAX);
	driver_ok(f);
}

static void identifies_as_a_modern_virtio_mmio_device(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(rd(f, VIRTIO_MMIO_MAGIC_VALUE), 0x74726976);
	assert_int_equal(rd(f, VIRTIO_MMIO_VERSION), 2);
	assert_int_equal(rd(f, VIRTIO_MMIO_DEVICE_ID), 42);
	assert_int_equal(rd(f, VIRTIO_MMIO_VENDOR_ID), VIRTIO_MMIO_VENDOR);
}

static void offers_device_features_and_version_1_by_bank(void **state)
{
	struct fixture *f = *state;

	wr(f, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 0);
	assert_int_equal(rd(f, VIRTIO_MMIO_DEVICE_FEATURES), (uint32_t)FAKE_FEATURES);
	wr(f, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 1);
	assert_int_equal(rd(f, VIRTIO_MMIO_DEVICE_FEATURES), 1); /* bit 32: VERSION_1 */
	wr(f, VIRTIO_MMIO_DEVICE_FEATURES_SEL, 7);
	assert_int_equal(rd(f, VIRTIO_MMIO_DEVICE_FEATURES), 0);
}

static void accepts_a_subset_of_the_offered_features(void **state)
{
	struct fixture *f = *state;

	negotiate(f, (1ULL << 5) | VIRTIO_FEATURE_VERSION_1);
	assert_true(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_FEATURES_OK);
	assert_int_equal(f->fake.dev.driver_features, (1ULL << 5) | VIRTIO_FEATURE_VERSION_1);
}

static void refuses_features_that_were_not_offered(void **state)
{
	struct fixture *f = *state;

	negotiate(f, (1ULL << 7) | VIRTIO_FEATURE_VERSION_1);
	assert_false(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_FEATURES_OK);
}

static void refuses_a_legacy_driver_without_version_1(void **state)
{
	struct fixture *f = *state;

	negotiate(f, 1ULL << 0);
	assert_false(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_FEATURES_OK);
}

static void ignores_feature_writes_after_features_ok(void **state)
{
	struct fixture *f = *state;

	negotiate(f, VIRTIO_FEATURE_VERSION_1);
	wr(f, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
	wr(f, VIRTIO_MMIO_DRIVER_FEATURES, 1);
	driver_ok(f);
	assert_int_equal(f->fake.dev.driver_features, VIRTIO_FEATURE_VERSION_1);
}

static void queue_ready_hands_the_rings_to_the_virtqueue(void **state)
{
	struct fixture *f = *state;

	negotiate(f, VIRTIO_FEATURE_VERSION_1 | VIRTIO_FEATURE_EVENT_IDX);
	wr(f, VIRTIO_MMIO_QUEUE_SEL, 1);
	assert_int_equal(rd(f, VIRTIO_MMIO_QUEUE_NUM_MAX), QMAX);
	setup_queue(f, 1, 32);
	const struct virtq *q = &f->fake.dev.queues[1];
	assert_true(q->ready);
	assert_int_equal(q->size, 32);
	assert_int_equal(q->desc_addr, DESC_ADDR);
	assert_int_equal(q->avail_addr, AVAIL_ADDR);
	assert_int_equal(q->used_addr, USED_ADDR);
	assert_true(q->event_idx);
	assert_int_equal(rd(f, VIRTIO_MMIO_QUEUE_READY), 1);
}

static void queue_larger_than_its_maximum_needs_reset(void **state)
{
	struct fixture *f = *state;

	negotiate(f, VIRTIO_FEATURE_VERSION_1);
	setup_queue(f, 0, QMAX * 2);
	assert_false(f->fake.dev.queues[0].ready);
	assert_true(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
}

static void rings_outside_guest_memory_need_reset(void **state)
{
	struct fixture *f = *state;

	negotiate(f, VIRTIO_FEATURE_VERSION_1);
	wr(f, VIRTIO_MMIO_QUEUE_SEL, 0);
	wr(f, VIRTIO_MMIO_QUEUE_NUM, 16);
	wr(f, VIRTIO_MMIO_QUEUE_DESC_LOW, 0);
	wr(f, VIRTIO_MMIO_QUEUE_DESC_HIGH, 0x100); /* 1 TiB: no RAM there */
	wr(f, VIRTIO_MMIO_QUEUE_READY, 1);
	assert_false(f->fake.dev.queues[0].ready);
	assert_true(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
}

static void queue_registers_are_frozen_while_the_queue_is_ready(void **state)
{
	struct fixture *f = *state;

	negotiate(f, VIRTIO_FEATURE_VERSION_1);
	setup_queue(f, 0, 16);
	wr(f, VIRTIO_MMIO_QUEUE_DESC_LOW, 0x40000);
	assert_int_equal(f->fake.dev.queues[0].desc_addr, DESC_ADDR);
	assert_int_equal(f->mmio.queue_regs[0].desc, DESC_ADDR);
}

static void queue_ready_again_keeps_the_queues_place(void **state)
{
	struct fixture *f = *state;
	struct virtq *q = &f->fake.dev.queues[0];

	bring_up(f);
	q->last_avail_idx = 5; /* as if the device had taken five chains */
	q->used_idx = 3;
	wr(f, VIRTIO_MMIO_QUEUE_READY, 1);
	assert_int_equal(q->last_avail_idx, 5);
	assert_int_equal(q->used_idx, 3);
	assert_false(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
}

/* Without VIRTIO_F_RING_RESET a running device cannot give up one queue's buffers: the
 * queue stays as it is and the device waits for a reset. Before DRIVER_OK, and after a
 * reset, disabling a queue is the plain register write. */
static void disabling_a_queue_of_a_running_device_needs_reset(void **state)
{
	struct fixture *f = *state;
	struct virtq *q = &f->fake.dev.queues[0];

	negotiate(f, VIRTIO_FEATURE_VERSION_1);
	setup_queue(f, 0, QMAX);
	wr(f, VIRTIO_MMIO_QUEUE_READY, 0);
	assert_false(q->ready);
	assert_int_equal(rd(f, VIRTIO_MMIO_QUEUE_READY), 0);
	assert_false(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET);

	setup_queue(f, 0, QMAX);
	driver_ok(f);
	q->last_avail_idx = 5;
	wr(f, VIRTIO_MMIO_QUEUE_READY, 0);
	assert_true(q->ready);
	assert_int_equal(q->last_avail_idx, 5);
	assert_true(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
	/* The device hears of it: its backend stops filling the queues too. */
	assert_false(vdev_running(&f->fake.dev));

	wr(f, VIRTIO_MMIO_STATUS, 0);
	assert_false(q->ready);
	bring_up(f);
	assert_true(q->ready);
	assert_false(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
	assert_true(vdev_running(&f->fake.dev));
}

/* §2.1: bits 4, 5 and 8-31 of the status are reserved; setting them neither sticks nor
 * counts as clearing a bit later. */
static void reserved_status_bits_are_not_kept(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	uint32_t status = rd(f, VIRTIO_MMIO_STATUS);
	wr(f, VIRTIO_MMIO_STATUS, status | 0x10 | 0x20 | 0x100);
	assert_int_equal(rd(f, VIRTIO_MMIO_STATUS), status);
	wr(f, VIRTIO_MMIO_STATUS, status);
	assert_int_equal(rd(f, VIRTIO_MMIO_STATUS), status);
	assert_true(vdev_running(&f->fake.dev));
}

static void an_absent_queue_reads_as_size_zero_and_ignores_writes(void **state)
{
	struct fixture *f = *state;

	negotiate(f, VIRTIO_FEATURE_VERSION_1);
	wr(f, VIRTIO_MMIO_QUEUE_SEL, 1000);
	assert_int_equal(rd(f, VIRTIO_MMIO_QUEUE_NUM_MAX), 0);
	wr(f, VIRTIO_MMIO_QUEUE_NUM, 16);
	wr(f, VIRTIO_MMIO_QUEUE_READY, 1);
	assert_int_equal(rd(f, VIRTIO_MMIO_QUEUE_READY), 0);
	assert_false(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
}

static void driver_ok_activates_the_device(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	assert_int_equal(f->fake.activations, 1);
	assert_true(f->fake.dev.activated);
	assert_true(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DRIVER_OK);
}

static void driver_ok_without_features_ok_needs_reset(void **state)
{
	struct fixture *f = *state;

	wr(f, VIRTIO_MMIO_STATUS, VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER);
	wr(f, VIRTIO_MMIO_STATUS,
	   VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_DRIVER_OK);
	assert_int_equal(f->fake.activations, 0);
	assert_false(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DRIVER_OK);
	assert_true(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
}

static void a_device_that_cannot_start_needs_reset(void **state)
{
	struct fixture *f = *state;

	f->fake.activate_result = -EIO;
	bring_up(f);
	assert_false(f->fake.dev.activated);
	assert_true(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
}

static void clearing_a_status_bit_needs_reset(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	wr(f, VIRTIO_MMIO_STATUS, VIRTIO_STATUS_ACKNOWLEDGE);
	assert_true(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
	assert_true(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DRIVER_OK);
}

/* DEVICE_NEEDS_RESET is the device's bit: a driver writing it changes nothing, and a
 * driver leaving it out of a write does not clear it. */
static void needs_reset_is_the_devices_bit_alone(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	wr(f, VIRTIO_MMIO_STATUS, rd(f, VIRTIO_MMIO_STATUS) | VIRTIO_STATUS_DEVICE_NEEDS_RESET);
	assert_false(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
	assert_true(vdev_running(&f->fake.dev));
	virtio_mmio_notify_handler(&f->mmio.notifiers[0]);
	assert_int_equal(f->fake.notifies, 1);

	wr(f, VIRTIO_MMIO_QUEUE_SEL, 0);
	wr(f, VIRTIO_MMIO_QUEUE_READY, 0); /* of the running device: it stops */
	uint32_t status = rd(f, VIRTIO_MMIO_STATUS);
	assert_true(status & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
	wr(f, VIRTIO_MMIO_STATUS, status & ~VIRTIO_STATUS_DEVICE_NEEDS_RESET);
	assert_true(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
	assert_false(vdev_running(&f->fake.dev));
	virtio_mmio_notify_handler(&f->mmio.notifiers[0]);
	assert_int_equal(f->fake.notifies, 1);
}

/* A driver that breaks a rule, resets the device and breaks it again, in a loop, gets
 * VDEV_COMPLAINTS_MAX warnings in the VM's life; the rest go to debug level. */
static void warnings_about_a_driver_are_bounded_across_resets(void **state)
{
	struct fixture *f = *state;
	const int rounds = 100;

	for (int i = 0; i < rounds; i++) {
		wr(f, VIRTIO_MMIO_STATUS, 0);
		wr(f, VIRTIO_MMIO_STATUS, VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER);
		wr(f, VIRTIO_MMIO_STATUS,
		   VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_DRIVER_OK);
		assert_true(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
	}
	assert_int_equal(f->logged[MOTE_LOG_WARN], VDEV_COMPLAINTS_MAX);
	assert_int_equal(f->logged[MOTE_LOG_DEBUG], rounds - VDEV_COMPLAINTS_MAX);
}

static void writing_status_zero_resets_everything(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	wr(f, VIRTIO_MMIO_STATUS, 0);
	assert_int_equal(f->fake.resets, 1);
	assert_int_equal(rd(f, VIRTIO_MMIO_STATUS), 0);
	assert_false(f->fake.dev.activated);
	assert_false(f->fake.dev.queues[0].ready);
	assert_int_equal(f->fake.dev.driver_features, 0);
	wr(f, VIRTIO_MMIO_QUEUE_SEL, 0);
	assert_int_equal(rd(f, VIRTIO_MMIO_QUEUE_READY), 0);
	/* And the device can be brought up again. */
	bring_up(f);
	assert_int_equal(f->fake.activations, 2);
}

static void notifications_reach_the_device_only_once_it_runs(void **state)
{
	struct fixture *f = *state;

	negotiate(f, VIRTIO_FEATURE_VERSION_1);
	setup_queue(f, 0, 16);
	wr(f, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	virtio_mmio_notify_handler(&f->mmio.notifiers[0]);
	assert_int_equal(f->fake.notifies, 0);

	driver_ok(f);
	wr(f, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	assert_int_equal(eventfd_take(f->mmio.notifiers[0].fd), 1);
	virtio_mmio_notify_handler(&f->mmio.notifiers[0]);
	assert_int_equal(f->fake.notifies, 1);
	assert_int_equal(f->fake.last_notified_queue, 0);
}

static void a_queue_notify_exit_goes_to_that_queues_eventfd(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	wr(f, VIRTIO_MMIO_QUEUE_NOTIFY, 1);
	assert_int_equal(eventfd_take(f->mmio.notifiers[0].fd), 0);
	assert_int_equal(eventfd_take(f->mmio.notifiers[1].fd), 1);
	wr(f, VIRTIO_MMIO_QUEUE_NOTIFY, 9); /* no such queue: dropped */
	assert_int_equal(eventfd_take(f->mmio.notifiers[0].fd), 0);
	assert_int_equal(eventfd_take(f->mmio.notifiers[1].fd), 0);
}

static void a_device_needing_reset_gets_no_more_notifications(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	eventfd_take(f->mmio.irq_fd);
	vdev_needs_reset(&f->fake.dev, NULL, "a broken chain");
	assert_true(rd(f, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
	/* §2.1.2: a running driver hears about it through a config-change interrupt. */
	assert_int_equal(rd(f, VIRTIO_MMIO_INTERRUPT_STATUS), VIRTIO_MMIO_INT_CONFIG);
	assert_int_equal(eventfd_take(f->mmio.irq_fd), 1);
	virtio_mmio_notify_handler(&f->mmio.notifiers[0]);
	assert_int_equal(f->fake.notifies, 0);
}

static void used_buffers_raise_the_interrupt_until_acknowledged(void **state)
{
	struct fixture *f = *state;

	bring_up(f);
	f->fake.dev.transport_ops->signal_used(f->fake.dev.transport, 0);
	assert_int_equal(eventfd_take(f->mmio.irq_fd), 1);
	assert_int_equal(rd(f, VIRTIO_MMIO_INTERRUPT_STATUS), VIRTIO_MMIO_INT_VRING);
	wr(f, VIRTIO_MMIO_INTERRUPT_ACK, VIRTIO_MMIO_INT_VRING);
	assert_int_equal(rd(f, VIRTIO_MMIO_INTERRUPT_STATUS), 0);
}

/* A config change always changes the generation. With no driver yet it interrupts
 * nobody (the driver to come reads the config afresh); once the driver runs the device,
 * it interrupts at once. */
static void a_config_change_bumps_the_generation(void **state)
{
	struct fixture *f = *state;
	uint32_t before = rd(f, VIRTIO_MMIO_CONFIG_GENERATION);

	f->fake.dev.transport_ops->signal_config(f->fake.dev.transport);
	assert_int_equal(rd(f, VIRTIO_MMIO_CONFIG_GENERATION), before + 1);
	assert_int_equal(rd(f, VIRTIO_MMIO_INTERRUPT_STATUS), 0);
	assert_int_equal(eventfd_take(f->mmio.irq_fd), 0);

	bring_up(f);
	assert_int_equal(eventfd_take(f->mmio.irq_fd), 0);
	f->fake.dev.transport_ops->signal_config(f->fake.dev.transport);
	assert_int_equal(rd(f, VIRTIO_MMIO_CONFIG_GENERATION), before + 2);
	assert_int_equal(rd(f, VIRTIO_MMIO_INTERRUPT_STATUS), VIRTIO_MMIO_INT_CONFIG);
	assert_int_equal(eventfd_take(f->mmio.irq_fd), 1);
}

/* A driver mid-probe (features negotiated, DRIVER_OK not yet set) may have read the
 * config already: the change is latched and interrupts it once it sets DRIVER_OK. */
static void a_config_change_during_the_probe_interrupts_at_driver_ok(void **state)
{
	struct fixture *f = *state;

	negotiate(f, FAKE_FEATURES | VIRTIO_FEATURE_VERSION_1);
	setup_queue(f, 0, QMAX);
	f->fake.dev.transport_ops->signal_config(f->fake.dev.transport);
	assert_int_equal(eventfd_take(f->mmio.irq_fd), 0);
	assert_int_equal(rd(f, VIRTIO_MMIO_INTERRUPT_STATUS), VIRTIO_MMIO_INT_CONFIG);
	driver_ok(f);
	assert_int_equal(eventfd_take(f->mmio.irq_fd), 1);
	assert_int_equal(rd(f, VIRTIO_MMIO_INTERRUPT_STATUS), VIRTIO_MMIO_INT_CONFIG);
}

static void config_space_is_readable_and_writable_at_any_width(void **state)
{
	struct fixture *f = *state;
	uint8_t byte;
	uint16_t half;
	uint32_t word;

	virtio_mmio_access(&f->mmio, VIRTIO_MMIO_CONFIG + 3, &byte, 1, false);
	assert_int_equal(byte, 0xa3);
	virtio_mmio_access(&f->mmio, VIRTIO_MMIO_CONFIG + 6, (uint8_t *)&half, 2, false);
	assert_int_equal(half, 0xa7a6);
	word = 0x11223344;
	virtio_mmio_access(&f->mmio, VIRTIO_MMIO_CONFIG + 4, (uint8_t *)&word, 4, true);
	assert_int_equal(f->fake.config[4], 0x44);
	assert_int_equal(f->fake.config[7], 0x11);
}

static void config_access_beyond_the_config_space_reads_zero(void **state)
{
	struct fixture *f = *state;
	uint32_t word = 0xffffffff;
	uint64_t wide = ~0ULL;

	virtio_mmio_access(&f->mmio, VIRTIO_MMIO_CONFIG + 6, (uint8_t *)&word, 4, false);
	assert_int_equal(word, 0);
	virtio_mmio_access(&f->mmio, VIRTIO_MMIO_CONFIG + 0xe00, (uint8_t *)&wide, 8, false);
	assert_int_equal(wide, 0);
	word = 0x55555555;
	virtio_mmio_access(&f->mmio, VIRTIO_MMIO_CONFIG + 6, (uint8_t *)&word, 4, true);
	assert_int_equal(f->fake.config[6], 0xa6);
}

static void narrow_or_unaligned_register_accesses_are_ignored(void **state)
{
	struct fixture *f = *state;
	uint16_t half = 0xffff;
	uint32_t word = 0xffffffff;

	virtio_mmio_access(&f->mmio, VIRTIO_MMIO_MAGIC_VALUE, (uint8_t *)&half, 2, false);
	assert_int_equal(half, 0);
	virtio_mmio_access(&f->mmio, VIRTIO_MMIO_VERSION + 1, (uint8_t *)&word, 4, false);
	assert_int_equal(word, 0);
	half = VIRTIO_STATUS_ACKNOWLEDGE;
	virtio_mmio_access(&f->mmio, VIRTIO_MMIO_STATUS, (uint8_t *)&half, 2, true);
	assert_int_equal(rd(f, VIRTIO_MMIO_STATUS), 0);
}

static void there_are_no_shared_memory_regions(void **state)
{
	struct fixture *f = *state;

	wr(f, VIRTIO_MMIO_SHM_SEL, 0);
	assert_int_equal(rd(f, VIRTIO_MMIO_SHM_LEN_LOW), 0xffffffff);
	assert_int_equal(rd(f, VIRTIO_MMIO_SHM_LEN_HIGH), 0xffffffff);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(identifies_as_a_modern_virtio_mmio_device),
	    TEST(offers_device_features_and_version_1_by_bank),
	    TEST(accepts_a_subset_of_the_offered_features),
	    TEST(refuses_features_that_were_not_offered),
	    TEST(refuses_a_legacy_driver_without_version_1),
	    TEST(ignores_feature_writes_after_features_ok),
	    TEST(queue_ready_hands_the_rings_to_the_virtqueue),
	    TEST(queue_larger_than_its_maximum_needs_reset),
	    TEST(rings_outside_guest_memory_need_reset),
	    TEST(queue_registers_are_frozen_while_the_queue_is_ready),
	    TEST(queue_ready_again_keeps_the_queues_place),
	    TEST(disabling_a_queue_of_a_running_device_needs_reset),
	    TEST(reserved_status_bits_are_not_kept),
	    TEST(an_absent_queue_reads_as_size_zero_and_ignores_writes),
	    TEST(driver_ok_activates_the_device),
	    TEST(driver_ok_without_features_ok_needs_reset),
	    TEST(a_device_that_cannot_start_needs_reset),
	    TEST(clearing_a_status_bit_needs_reset),
	    TEST(needs_reset_is_the_devices_bit_alone),
	    TEST(warnings_about_a_driver_are_bounded_across_resets),
	    TEST(writing_status_zero_resets_everything),
	    TEST(notifications_reach_the_device_only_once_it_runs),
	    TEST(a_queue_notify_exit_goes_to_that_queues_eventfd),
	    TEST(a_device_needing_reset_gets_no_more_notifications),
	    TEST(used_buffers_raise_the_interrupt_until_acknowledged),
	    TEST(a_config_change_bumps_the_generation),
	    TEST(a_config_change_during_the_probe_interrupts_at_driver_ok),
	    TEST(config_space_is_readable_and_writable_at_any_width),
	    TEST(config_access_beyond_the_config_space_reads_zero),
	    TEST(narrow_or_unaligned_register_accesses_are_ignored),
	    TEST(there_are_no_shared_memory_regions),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
