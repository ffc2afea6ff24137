/* virtio-blk in a snapshot: a pause quiesces the disk, which answers every request in
 * flight without the event thread; a disk saved with its virtio-mmio transport and
 * loaded into a fresh one on the same image reads the same through the registers and
 * goes on serving the driver's requests. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "blk_driver.h"
#include "virtio/mmio.h"

#define MMIO_BASE 0xd0000000ULL
#define MMIO_IRQ 5

static int save_device(struct vdev *dev, struct snap_writer *w)
{
	pthread_mutex_lock(&dev->lock);
	int ret = dev->ops->save(dev, w);
	pthread_mutex_unlock(&dev->lock);
	return ret;
}

static void quiesce_answers_every_request_in_flight(void **state)
{
	struct fixture *f = *state;
	struct req reads[4];

	for (unsigned i = 0; i < 4; i++)
		reads[i] = request(f, VIRTIO_BLK_T_IN, 8 * i, 4096);
	struct req flush = request(f, VIRTIO_BLK_T_FLUSH, 0, 0);
	notify_dev(f->dev);
	/* Submitted to io_uring; only the (stopped) event thread would reap them. */
	assert_int_equal(used(f)->idx, 0);
	quiesce_dev(f->dev);
	assert_int_equal(used(f)->idx, 5);
	for (unsigned i = 0; i < 4; i++) {
		assert_int_equal(status_of(f, reads[i]), VIRTIO_BLK_S_OK);
		assert_int_equal(used_len_of(f, reads[i]), 4096 + 1);
		assert_pattern(guest(f, reads[i].data, 4096), 8 * i * SECTOR, 4096);
	}
	assert_int_equal(status_of(f, flush), VIRTIO_BLK_S_OK);
	assert_true(f->transport.interrupts[BLK_QUEUE] >= 1);
}

static void quiesce_leaves_chains_not_yet_taken_in_the_ring(void **state)
{
	struct fixture *f = *state;

	request(f, VIRTIO_BLK_T_IN, 0, 512);
	notify_dev(f->dev);
	struct req later = request(f, VIRTIO_BLK_T_IN, 1, 512); /* not notified */
	quiesce_dev(f->dev);
	assert_int_equal(used(f)->idx, 1);
	assert_int_equal(f->dev->queues[0].last_avail_idx, 1);
	/* Once the device runs again, it is served as usual. */
	kick_and_wait(f, 2);
	assert_int_equal(status_of(f, later), VIRTIO_BLK_S_OK);
}

static void save_refuses_a_disk_with_requests_in_flight(void **state)
{
	struct fixture *f = *state;
	struct snap_writer w;

	request(f, VIRTIO_BLK_T_IN, 0, 4096);
	notify_dev(f->dev);
	snap_writer_init(&w);
	assert_int_equal(save_device(f->dev, &w), -EBUSY);
	quiesce_dev(f->dev);
	assert_int_equal(save_device(f->dev, &w), 0);
	snap_writer_free(&w);
}

static uint32_t rd(struct virtio_mmio *mmio, uint64_t offset)
{
	uint32_t value;

	virtio_mmio_access(mmio, offset, (uint8_t *)&value, 4, false);
	return value;
}

static void wr(struct virtio_mmio *mmio, uint64_t offset, uint32_t value)
{
	virtio_mmio_access(mmio, offset, (uint8_t *)&value, 4, true);
}

/* A new loop and disk on f's image behind mmio (nothing negotiated yet). */
static void open_mmio_disk(struct fixture *f, struct virtio_mmio *mmio)
{
	assert_int_equal(event_loop_init(&f->loop), 0);
	assert_int_equal(open_disk(f, f->path, false, NO_ID, &f->blk), 0);
	f->dev = virtio_blk_vdev(f->blk);
	assert_int_equal(virtio_mmio_init(mmio, f->dev, MMIO_BASE, MMIO_IRQ, &f->log), 0);
}

/* The driver's bring-up (§3.1.1) through the registers, every offered feature taken. */
static void driver_bring_up(struct virtio_mmio *mmio)
{
	uint32_t status = VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER;

	wr(mmio, VIRTIO_MMIO_STATUS, VIRTIO_STATUS_ACKNOWLEDGE);
	wr(mmio, VIRTIO_MMIO_STATUS, status);
	for (uint32_t bank = 0; bank < 2; bank++) {
		wr(mmio, VIRTIO_MMIO_DEVICE_FEATURES_SEL, bank);
		wr(mmio, VIRTIO_MMIO_DRIVER_FEATURES_SEL, bank);
		wr(mmio, VIRTIO_MMIO_DRIVER_FEATURES, rd(mmio, VIRTIO_MMIO_DEVICE_FEATURES));
	}
	status |= VIRTIO_STATUS_FEATURES_OK;
	wr(mmio, VIRTIO_MMIO_STATUS, status);
	assert_int_equal(rd(mmio, VIRTIO_MMIO_STATUS), status);
	wr(mmio, VIRTIO_MMIO_QUEUE_SEL, 0);
	wr(mmio, VIRTIO_MMIO_QUEUE_NUM, QSIZE);
	wr(mmio, VIRTIO_MMIO_QUEUE_DESC_LOW, (uint32_t)DESC_ADDR);
	wr(mmio, VIRTIO_MMIO_QUEUE_DRIVER_LOW, (uint32_t)AVAIL_ADDR);
	wr(mmio, VIRTIO_MMIO_QUEUE_DEVICE_LOW, (uint32_t)USED_ADDR);
	wr(mmio, VIRTIO_MMIO_QUEUE_READY, 1);
	wr(mmio, VIRTIO_MMIO_STATUS, status | VIRTIO_STATUS_DRIVER_OK);
	assert_true(rd(mmio, VIRTIO_MMIO_STATUS) & VIRTIO_STATUS_DRIVER_OK);
}

/* Every register read, with each feature bank selected. */
static void read_registers(struct virtio_mmio *mmio, uint32_t regs[2][VIRTIO_MMIO_CONFIG / 4])
{
	for (uint32_t bank = 0; bank < 2; bank++) {
		wr(mmio, VIRTIO_MMIO_DEVICE_FEATURES_SEL, bank);
		for (uint64_t offset = 0; offset < VIRTIO_MMIO_CONFIG; offset += 4)
			regs[bank][offset / 4] = rd(mmio, offset);
	}
}

static void detach_mmio_disk(struct fixture *f, struct virtio_mmio *mmio)
{
	virtio_mmio_destroy(mmio);
	detach(f);
}

static int load_section(struct virtio_mmio *mmio, const uint8_t *data, size_t len)
{
	struct snap_reader r = {.data = data, .len = len};
	int ret = virtio_mmio_load(mmio, &r);

	return ret ? ret : snap_reader_finish(&r);
}

static void disk_loaded_into_a_fresh_device_goes_on_serving_requests(void **state)
{
	struct fixture *f = *state;
	struct virtio_mmio before, after;
	uint32_t regs_before[2][VIRTIO_MMIO_CONFIG / 4], regs_after[2][VIRTIO_MMIO_CONFIG / 4];
	struct snap_writer w;

	detach(f);
	open_mmio_disk(f, &before);
	driver_bring_up(&before);
	struct req written = write_request(f, 16, 0x3c, 1024);
	virtio_mmio_notify_handler(&before.notifiers[0]);
	wait_used(f, 1);
	assert_int_equal(status_of(f, written), VIRTIO_BLK_S_OK);
	assert_int_equal(virtio_mmio_quiesce(&before, CLOCK_FOREVER), 0);
	snap_writer_init(&w);
	assert_int_equal(virtio_mmio_save(&before, &w), 0);
	read_registers(&before, regs_before);
	detach_mmio_disk(f, &before);

	/* A new process: the same image, a device built the same way. */
	open_mmio_disk(f, &after);
	for (size_t len = 0; len < w.len; len++) {
		if (load_section(&after, w.buf, len) != -EINVAL)
			fail_msg("a section cut to %zu of %zu bytes was accepted", len, w.len);
		assert_int_equal(rd(&after, VIRTIO_MMIO_STATUS), 0);
	}
	assert_int_equal(load_section(&after, w.buf, w.len), 0);
	snap_writer_free(&w);
	read_registers(&after, regs_after);
	assert_memory_equal(regs_after, regs_before, sizeof(regs_before));
	assert_int_equal(f->dev->queues[0].used_idx, 1);
	assert_int_equal(f->dev->queues[0].last_avail_idx, 1);

	/* The driver reads back what it wrote before the snapshot. */
	struct req read = request(f, VIRTIO_BLK_T_IN, 16, 1024);
	virtio_mmio_restored(&after);
	virtio_mmio_notify_handler(&after.notifiers[0]);
	wait_used(f, 2);
	assert_int_equal(status_of(f, read), VIRTIO_BLK_S_OK);
	const uint8_t *data = guest(f, read.data, 1024);
	for (unsigned i = 0; i < 1024; i++)
		assert_int_equal(data[i], 0x3c);
	virtio_mmio_destroy(&after);
}

/* The guest knows the disk by the capacity it read at boot: a disk restored on an image
 * of another size is refused, not handed to that guest. */
static void disk_loaded_onto_an_image_of_another_size_is_refused(void **state)
{
	struct fixture *f = *state;
	struct virtio_mmio before, after;
	struct snap_writer w;
	struct stat st;

	detach(f);
	open_mmio_disk(f, &before);
	driver_bring_up(&before);
	assert_int_equal(virtio_mmio_quiesce(&before, CLOCK_FOREVER), 0);
	snap_writer_init(&w);
	assert_int_equal(virtio_mmio_save(&before, &w), 0);
	detach_mmio_disk(f, &before);

	assert_int_equal(stat(f->path, &st), 0);
	assert_int_equal(truncate(f->path, st.st_size + 8 * SECTOR), 0);
	open_mmio_disk(f, &after);
	assert_int_equal(load_section(&after, w.buf, w.len), -EINVAL);
	assert_non_null(strstr(f->log_text, "the snapshot's guest knows the disk"));
	assert_int_equal(rd(&after, VIRTIO_MMIO_STATUS), 0);
	detach_mmio_disk(f, &after);

	/* The same size again: taken. */
	assert_int_equal(truncate(f->path, st.st_size), 0);
	open_mmio_disk(f, &after);
	assert_int_equal(load_section(&after, w.buf, w.len), 0);
	snap_writer_free(&w);
	virtio_mmio_destroy(&after);
}

/* A state in which the device took a chain and never used it cannot come from a
 * monitor (nothing is in flight at a save): refused, or its request would wait forever. */
static void disk_state_with_a_chain_taken_and_not_used_is_refused(void **state)
{
	struct fixture *f = *state;
	struct virtio_mmio before, after;
	struct snap_writer w;

	detach(f);
	open_mmio_disk(f, &before);
	driver_bring_up(&before);
	assert_int_equal(virtio_mmio_quiesce(&before, CLOCK_FOREVER), 0);
	f->dev->queues[0].last_avail_idx++; /* as if a request had been taken */
	snap_writer_init(&w);
	assert_int_equal(virtio_mmio_save(&before, &w), 0);
	detach_mmio_disk(f, &before);

	open_mmio_disk(f, &after);
	assert_int_equal(load_section(&after, w.buf, w.len), -EINVAL);
	assert_int_equal(rd(&after, VIRTIO_MMIO_STATUS), 0);
	snap_writer_free(&w);
	virtio_mmio_destroy(&after);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, blk_driver_setup, blk_driver_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(quiesce_answers_every_request_in_flight),
	    TEST(quiesce_leaves_chains_not_yet_taken_in_the_ring),
	    TEST(save_refuses_a_disk_with_requests_in_flight),
	    TEST(disk_loaded_into_a_fresh_device_goes_on_serving_requests),
	    TEST(disk_loaded_onto_an_image_of_another_size_is_refused),
	    TEST(disk_state_with_a_chain_taken_and_not_used_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
