/* virtio-blk (virtio 1.2 §5.2) requests as a driver sees them through the queue: IN,
 * OUT, FLUSH, GET_ID, DISCARD and WRITE_ZEROES, single and multi-segment, direct and
 * indirect, on writable and read-only disks, with the image contents they leave behind;
 * and the config space and features the driver reads first. Completions come through
 * the event loop, as in a VM; the test driver is blk_driver.h. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "blk_driver.h"

static void read_returns_file_contents(void **state)
{
	struct fixture *f = *state;
	struct req r = request(f, VIRTIO_BLK_T_IN, 10, 4 * SECTOR);

	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, r), 4 * SECTOR + 1);
	assert_pattern(guest(f, r.data, 4 * SECTOR), 10 * SECTOR, 4 * SECTOR);
	assert_int_equal(f->transport.interrupts[BLK_QUEUE], 1);
}

static void write_lands_in_the_file(void **state)
{
	struct fixture *f = *state;
	struct req r = write_request(f, 20, 0xab, 2 * SECTOR);
	uint8_t buf[2 * SECTOR];

	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, r), 1);
	read_image(f, 20 * SECTOR, buf, sizeof(buf));
	for (size_t i = 0; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0xab);
	assert_image_pattern(f, 19 * SECTOR, SECTOR);
	assert_image_pattern(f, 22 * SECTOR, SECTOR);
}

static void multi_segment_read_fills_every_segment_up_to_the_status_byte(void **state)
{
	struct fixture *f = *state;
	/* 100 + 924 + 1024 data bytes; the status byte ends the last data segment. */
	uint64_t a = galloc(f, 100), b = galloc(f, 924), c = galloc(f, 1025);
	struct seg segs[] = {
	    {header(f, VIRTIO_BLK_T_IN, 3), 16, false},
	    {a, 100, true},
	    {b, 924, true},
	    {c, 1025, true},
	};
	struct req r = {.status = c + 1024};

	*(uint8_t *)guest(f, r.status, 1) = 0xff;
	r.head = offer(f, segs, 4);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, r), 2048 + 1);
	assert_pattern(guest(f, a, 100), 3 * SECTOR, 100);
	assert_pattern(guest(f, b, 924), 3 * SECTOR + 100, 924);
	assert_pattern(guest(f, c, 1024), 3 * SECTOR + 1024, 1024);
}

static void multi_segment_write_takes_every_segment(void **state)
{
	struct fixture *f = *state;
	/* The header and the first 500 data bytes share a descriptor. */
	uint64_t a = galloc(f, 16 + 500), b = galloc(f, 12), c = galloc(f, 512);
	uint64_t status = status_byte(f);
	struct seg segs[] = {{a, 516, false}, {b, 12, false}, {c, 512, false}, {status, 1, true}};
	struct virtio_blk_outhdr h = {.type = htole32(VIRTIO_BLK_T_OUT), .sector = htole64(40)};
	uint8_t expect[1024], buf[1024];

	for (size_t i = 0; i < sizeof(expect); i++)
		expect[i] = (uint8_t)(i * 7 + 1);
	memcpy(guest(f, a, 16), &h, 16);
	memcpy(guest(f, a + 16, 500), expect, 500);
	memcpy(guest(f, b, 12), expect + 500, 12);
	memcpy(guest(f, c, 512), expect + 512, 512);
	struct req r = {.head = offer(f, segs, 4), .status = status};

	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	read_image(f, 40 * SECTOR, buf, sizeof(buf));
	assert_memory_equal(buf, expect, sizeof(buf));
}

static void indirect_descriptor_request_is_served(void **state)
{
	struct fixture *f = *state;
	uint64_t data = galloc(f, SECTOR);
	struct req r = {.status = status_byte(f)};
	struct seg segs[] = {
	    {header(f, VIRTIO_BLK_T_IN, 100), 16, false},
	    {data, SECTOR, true},
	    {r.status, 1, true},
	};

	for (uint16_t i = 0; i < 3; i++)
		set_desc(f, INDIRECT_ADDR, i, &segs[i], i < 2);
	struct vring_desc *d = guest(f, DESC_ADDR, sizeof(*d));
	*d = (struct vring_desc){.addr = INDIRECT_ADDR,
				 .len = 3 * sizeof(struct vring_desc),
				 .flags = VRING_DESC_F_INDIRECT};
	avail(f)->ring[0] = 0;
	avail(f)->idx = 1;
	r.head = 0;

	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_pattern(guest(f, data, SECTOR), 100 * SECTOR, SECTOR);
}

static void flush_after_write_completes_with_status_ok(void **state)
{
	struct fixture *f = *state;
	struct req w = write_request(f, 7, 0x5a, SECTOR);

	kick_and_wait(f, 1);
	struct req flush = request(f, VIRTIO_BLK_T_FLUSH, 0, 0);
	kick_and_wait(f, 2);
	assert_int_equal(status_of(f, w), VIRTIO_BLK_S_OK);
	assert_int_equal(status_of(f, flush), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, flush), 1);
	uint8_t buf[SECTOR];
	read_image(f, 7 * SECTOR, buf, sizeof(buf));
	assert_int_equal(buf[0], 0x5a);
	assert_int_equal(buf[SECTOR - 1], 0x5a);
}

static void flush_offered_with_writes_is_answered_after_them(void **state)
{
	struct fixture *f = *state;
	struct req w[4];

	for (int i = 0; i < 4; i++)
		w[i] = write_request(f, 64 + 8 * i, (uint8_t)(0x10 + i), 8 * SECTOR);
	struct req flush = request(f, VIRTIO_BLK_T_FLUSH, 0, 0);
	kick_and_wait(f, 5);
	/* The drained fsync starts only once the writes before it completed. */
	for (int i = 0; i < 4; i++)
		assert_int_equal(status_of(f, w[i]), VIRTIO_BLK_S_OK);
	assert_int_equal(status_of(f, flush), VIRTIO_BLK_S_OK);
	assert_int_equal(used(f)->ring[4].id, flush.head);
}

static void get_id_returns_the_id_nul_padded(void **state)
{
	struct fixture *f = *state;

	detach(f);
	attach(f, false, "mote-disk-1", false);
	struct req r = request(f, VIRTIO_BLK_T_GET_ID, 0, VIRTIO_BLK_ID_BYTES);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, r), VIRTIO_BLK_ID_BYTES + 1);
	char expect[VIRTIO_BLK_ID_BYTES] = "mote-disk-1";
	assert_memory_equal(guest(f, r.data, VIRTIO_BLK_ID_BYTES), expect, VIRTIO_BLK_ID_BYTES);
}

static void discard_punches_a_hole_that_reads_back_zeros(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk_discard_write_zeroes ranges[] = {range(16, 16, 0), range(64, 8, 0)};
	struct stat before, after;

	assert_int_equal(stat(f->path, &before), 0);
	struct req r = range_request(f, VIRTIO_BLK_T_DISCARD, ranges, 2);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, r), 1);
	assert_int_equal(stat(f->path, &after), 0);
	assert_true(after.st_blocks < before.st_blocks);
	assert_int_equal(after.st_size, before.st_size);
	assert_image_zeros(f, 16 * SECTOR, 16 * SECTOR);
	assert_image_zeros(f, 64 * SECTOR, 8 * SECTOR);
	assert_image_pattern(f, 15 * SECTOR, SECTOR);
	assert_image_pattern(f, 32 * SECTOR, 32 * SECTOR);

	/* And the driver reads zeros back. */
	struct req rd = request(f, VIRTIO_BLK_T_IN, 16, 16 * SECTOR);
	kick_and_wait(f, 2);
	assert_int_equal(status_of(f, rd), VIRTIO_BLK_S_OK);
	assert_zeros(guest(f, rd.data, 16 * SECTOR), 16 * SECTOR);
}

static void discard_with_unmap_flag_is_unsupported(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk_discard_write_zeroes ranges[] = {
	    range(16, 8, VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP)};
	struct req r = range_request(f, VIRTIO_BLK_T_DISCARD, ranges, 1);

	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_UNSUPP);
	assert_image_pattern(f, 16 * SECTOR, 8 * SECTOR);
}

static void write_zeroes_with_unknown_flag_is_unsupported(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk_discard_write_zeroes ranges[] = {range(16, 8, 1u << 1)};
	struct req r = range_request(f, VIRTIO_BLK_T_WRITE_ZEROES, ranges, 1);

	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_UNSUPP);
	assert_image_pattern(f, 16 * SECTOR, 8 * SECTOR);
}

static void write_zeroes_reads_back_zeros_with_and_without_unmap(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk_discard_write_zeroes zero = range(3, 5, 0);
	struct virtio_blk_discard_write_zeroes unmap =
	    range(100, 20, VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP);
	struct req r = range_request(f, VIRTIO_BLK_T_WRITE_ZEROES, &zero, 1);
	struct req u = range_request(f, VIRTIO_BLK_T_WRITE_ZEROES, &unmap, 1);

	kick_and_wait(f, 2);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(status_of(f, u), VIRTIO_BLK_S_OK);
	assert_image_zeros(f, 3 * SECTOR, 5 * SECTOR);
	assert_image_zeros(f, 100 * SECTOR, 20 * SECTOR);
	assert_image_pattern(f, 2 * SECTOR, SECTOR);
	assert_image_pattern(f, 8 * SECTOR, 92 * SECTOR);
	assert_image_pattern(f, 120 * SECTOR, SECTOR);
}

/* The image is a memfd, reached through its /proc/self/fd path: shmem punches holes but
 * has no FALLOC_FL_ZERO_RANGE, on every host, whatever /dev/shm is. */
static void write_zeroes_falls_back_to_writing_zeros_where_the_fs_cannot(void **state)
{
	struct fixture *f = *state;

	detach(f);
	unlink(f->path);
	int image = memfd_create("mote-blk", MFD_CLOEXEC);
	assert_true(image >= 0);
	int zeroed = fallocate(image, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 0, SECTOR);
	if (zeroed == 0 || errno != EOPNOTSUPP)
		fail_msg("fallocate(FALLOC_FL_ZERO_RANGE) on a memfd: %s, not EOPNOTSUPP: the "
			 "fallback would not be reached",
			 zeroed == 0 ? "done" : strerror(errno));
	snprintf(f->path, sizeof(f->path), "/proc/self/fd/%d", image);
	write_pattern(f->path, IMAGE_SECTORS * SECTOR);
	attach(f, false, NO_ID, false);

	/* 1 MiB: more than one SQE's worth of the zero page. */
	struct virtio_blk_discard_write_zeroes ranges[] = {range(1, IMAGE_SECTORS - 2, 0)};
	struct req r = range_request(f, VIRTIO_BLK_T_WRITE_ZEROES, ranges, 1);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_image_pattern(f, 0, SECTOR);
	assert_image_zeros(f, SECTOR, (IMAGE_SECTORS - 2) * SECTOR);
	assert_image_pattern(f, (IMAGE_SECTORS - 1) * SECTOR, SECTOR);
	detach(f);
	close(image);
	f->path[0] = '\0'; /* nothing left for the teardown to unlink */
}

static void read_only_disk_refuses_out_discard_and_write_zeroes(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk_discard_write_zeroes ranges[] = {range(0, 8, 0)};

	reattach_read_only(f);
	struct req w = write_request(f, 0, 0x11, SECTOR);
	struct req d = range_request(f, VIRTIO_BLK_T_DISCARD, ranges, 1);
	struct req z = range_request(f, VIRTIO_BLK_T_WRITE_ZEROES, ranges, 1);
	kick_and_wait(f, 3);
	assert_int_equal(status_of(f, w), VIRTIO_BLK_S_IOERR);
	assert_int_equal(status_of(f, d), VIRTIO_BLK_S_IOERR);
	assert_int_equal(status_of(f, z), VIRTIO_BLK_S_IOERR);
	assert_image_pattern(f, 0, 8 * SECTOR);
}

static void read_only_disk_serves_in_and_flush(void **state)
{
	struct fixture *f = *state;

	reattach_read_only(f);
	struct req r = request(f, VIRTIO_BLK_T_IN, 5, SECTOR);
	struct req flush = request(f, VIRTIO_BLK_T_FLUSH, 0, 0);
	kick_and_wait(f, 2);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(status_of(f, flush), VIRTIO_BLK_S_OK);
	assert_pattern(guest(f, r.data, SECTOR), 5 * SECTOR, SECTOR);
}

static void thirty_two_requests_in_flight_all_complete(void **state)
{
	struct fixture *f = *state;
	struct req r[32];

	for (int i = 0; i < 32; i++)
		r[i] = request(f, VIRTIO_BLK_T_IN, 8 * i, 8 * SECTOR);
	kick_and_wait(f, 32);
	for (int i = 0; i < 32; i++) {
		assert_int_equal(status_of(f, r[i]), VIRTIO_BLK_S_OK);
		assert_int_equal(used_len_of(f, r[i]), 8 * SECTOR + 1);
		assert_pattern(guest(f, r[i].data, 8 * SECTOR), 8 * i * SECTOR, 8 * SECTOR);
	}
	assert_true(f->transport.interrupts[BLK_QUEUE] >= 1);
	assert_true(f->transport.interrupts[BLK_QUEUE] <= 32);
}

static void event_idx_avail_event_follows_the_last_chain_taken(void **state)
{
	struct fixture *f = *state;
	uint16_t *avail_event = guest(f, USED_ADDR + 4 + 8 * QSIZE, 2);

	detach(f);
	attach(f, false, NO_ID, true);
	avail(f)->ring[QSIZE] = 0; /* used_event: interrupt after the first */
	for (int i = 0; i < 3; i++)
		request(f, VIRTIO_BLK_T_IN, i, SECTOR);
	kick_and_wait(f, 3);
	assert_int_equal(*avail_event, 3);
	assert_true(f->transport.interrupts[BLK_QUEUE] >= 1);
}

static void config_space_reads_capacity_seg_max_and_limits(void **state)
{
	struct fixture *f = *state;
	struct vdev *dev = f->dev;

	assert_int_equal(dev->config_size,
			 offsetof(struct virtio_blk_config, max_secure_erase_sectors));
	assert_int_equal(CONFIG(dev, capacity), IMAGE_SECTORS);
	assert_true(CONFIG(dev, seg_max) >= 1);
	assert_int_equal(CONFIG(dev, blk_size), SECTOR);
	assert_int_equal(CONFIG(dev, num_queues), 0);
	assert_true(CONFIG(dev, max_discard_sectors) >= 1);
	assert_true(CONFIG(dev, max_discard_seg) >= 1);
	assert_true(CONFIG(dev, discard_sector_alignment) >= 1);
	assert_true(CONFIG(dev, max_write_zeroes_sectors) >= 1);
	assert_true(CONFIG(dev, max_write_zeroes_seg) >= 1);
	assert_int_equal(CONFIG(dev, write_zeroes_may_unmap), 1);
}

static void config_space_reads_any_width_at_any_offset(void **state)
{
	struct fixture *f = *state;
	struct vdev *dev = f->dev;
	uint8_t whole[64], bytes[8];

	dev->ops->config_read(dev, 0, whole, dev->config_size);
	/* capacity byte by byte, then a word straddling capacity and size_max */
	for (uint32_t i = 0; i < 8; i++)
		dev->ops->config_read(dev, i, &bytes[i], 1);
	assert_memory_equal(bytes, whole, 8);
	assert_int_equal(config_field(dev, 0, 8), IMAGE_SECTORS);
	dev->ops->config_read(dev, 6, bytes, 4);
	assert_memory_equal(bytes, whole + 6, 4);
	dev->ops->config_read(dev, 13, bytes, 2);
	assert_memory_equal(bytes, whole + 13, 2);
	dev->ops->config_read(dev, dev->config_size - 1, bytes, 1);
	assert_int_equal(bytes[0], 0);
}

static void config_writes_are_ignored(void **state)
{
	struct fixture *f = *state;
	uint8_t ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	uint64_t capacity;

	f->dev->ops->config_write(f->dev, 0, ones, 8);
	f->dev->ops->config_read(f->dev, 0, (uint8_t *)&capacity, 8);
	assert_int_equal(le64toh(capacity), IMAGE_SECTORS);
}

static void features_offer_flush_discard_write_zeroes_and_ring_features(void **state)
{
	struct fixture *f = *state;
	uint64_t features = f->dev->ops->features(f->dev);

	assert_true(features & (1ULL << VIRTIO_BLK_F_SEG_MAX));
	assert_true(features & (1ULL << VIRTIO_BLK_F_BLK_SIZE));
	assert_true(features & (1ULL << VIRTIO_BLK_F_FLUSH));
	assert_true(features & (1ULL << VIRTIO_BLK_F_DISCARD));
	assert_true(features & (1ULL << VIRTIO_BLK_F_WRITE_ZEROES));
	assert_true(features & VIRTIO_FEATURE_INDIRECT_DESC);
	assert_true(features & VIRTIO_FEATURE_EVENT_IDX);
	assert_false(features & (1ULL << VIRTIO_BLK_F_RO));
	assert_false(features & (1ULL << VIRTIO_BLK_F_MQ));
	assert_false(features & (1ULL << VIRTIO_BLK_F_CONFIG_WCE));
	assert_int_equal(f->dev->device_id, VIRTIO_ID_BLOCK);
	assert_int_equal(f->dev->queue_count, 1);
}

static void read_only_disk_offers_ro_feature(void **state)
{
	struct fixture *f = *state;

	reattach_read_only(f);
	assert_true(f->dev->ops->features(f->dev) & (1ULL << VIRTIO_BLK_F_RO));
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, blk_driver_setup, blk_driver_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(read_returns_file_contents),
	    TEST(write_lands_in_the_file),
	    TEST(multi_segment_read_fills_every_segment_up_to_the_status_byte),
	    TEST(multi_segment_write_takes_every_segment),
	    TEST(indirect_descriptor_request_is_served),
	    TEST(flush_after_write_completes_with_status_ok),
	    TEST(flush_offered_with_writes_is_answered_after_them),
	    TEST(get_id_returns_the_id_nul_padded),
	    TEST(discard_punches_a_hole_that_reads_back_zeros),
	    TEST(discard_with_unmap_flag_is_unsupported),
	    TEST(write_zeroes_with_unknown_flag_is_unsupported),
	    TEST(write_zeroes_reads_back_zeros_with_and_without_unmap),
	    TEST(write_zeroes_falls_back_to_writing_zeros_where_the_fs_cannot),
	    TEST(read_only_disk_refuses_out_discard_and_write_zeroes),
	    TEST(read_only_disk_serves_in_and_flush),
	    TEST(thirty_two_requests_in_flight_all_complete),
	    TEST(event_idx_avail_event_follows_the_last_chain_taken),
	    TEST(config_space_reads_capacity_seg_max_and_limits),
	    TEST(config_space_reads_any_width_at_any_offset),
	    TEST(config_writes_are_ignored),
	    TEST(features_offer_flush_discard_write_zeroes_and_ring_features),
	    TEST(read_only_disk_offers_ro_feature),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
