/* virtio-blk (virtio 1.2 §5.2) against a driver that breaks the rules. A malformed
 * request (short header, no status byte, a length or sector the disk cannot serve, too
 * many ranges, an unknown type) fails alone and the device carries on; a broken queue
 * (a chain virtq_pop() refuses, a head offered again while in flight) sets
 * DEVICE_NEEDS_RESET. A reset with requests in flight waits for them and answers none,
 * and the device serves requests again afterwards. The test driver is blk_driver.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "blk_driver.h"

static void more_ranges_than_advertised_is_ioerr(void **state)
{
	struct fixture *f = *state;
	uint32_t n = (uint32_t)CONFIG(f->dev, max_discard_seg) + 1;
	struct virtio_blk_discard_write_zeroes ranges[64];
	assert_true(n <= 64);
	for (uint32_t i = 0; i < n; i++)
		ranges[i] = range(8 * i, 8, 0);
	struct req r = range_request(f, VIRTIO_BLK_T_DISCARD, ranges, n);

	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_IOERR);
	assert_image_pattern(f, 0, 8 * n * SECTOR);
}

static void sector_past_the_end_is_ioerr(void **state)
{
	struct fixture *f = *state;
	struct req at_end = request(f, VIRTIO_BLK_T_IN, IMAGE_SECTORS, SECTOR);
	struct req across_end = write_request(f, IMAGE_SECTORS - 1, 0x22, 2 * SECTOR);
	struct req last = request(f, VIRTIO_BLK_T_IN, IMAGE_SECTORS - 1, SECTOR);

	kick_and_wait(f, 3);
	assert_int_equal(status_of(f, at_end), VIRTIO_BLK_S_IOERR);
	assert_int_equal(used_len_of(f, at_end), 1);
	assert_int_equal(status_of(f, across_end), VIRTIO_BLK_S_IOERR);
	assert_int_equal(status_of(f, last), VIRTIO_BLK_S_OK);
	assert_image_pattern(f, (IMAGE_SECTORS - 1) * SECTOR, SECTOR);
	struct stat st;
	assert_int_equal(stat(f->path, &st), 0);
	assert_int_equal(st.st_size, IMAGE_SECTORS * SECTOR);
}

static void sector_near_uint64_max_is_ioerr(void **state)
{
	struct fixture *f = *state;
	struct req rd = request(f, VIRTIO_BLK_T_IN, UINT64_MAX - 1, 2 * SECTOR);
	/* sector * 512 wraps to a small offset: must not write at the start of the image. */
	struct req wr = write_request(f, (UINT64_MAX >> 9) + 2, 0x33, SECTOR);
	struct virtio_blk_discard_write_zeroes ranges[] = {range(UINT64_MAX - 4, 8, 0)};
	struct req d = range_request(f, VIRTIO_BLK_T_DISCARD, ranges, 1);

	kick_and_wait(f, 3);
	assert_int_equal(status_of(f, rd), VIRTIO_BLK_S_IOERR);
	assert_int_equal(status_of(f, wr), VIRTIO_BLK_S_IOERR);
	assert_int_equal(status_of(f, d), VIRTIO_BLK_S_IOERR);
	assert_image_pattern(f, 0, 4 * SECTOR);
}

static void data_length_not_a_multiple_of_512_is_ioerr(void **state)
{
	struct fixture *f = *state;
	struct req rd = request(f, VIRTIO_BLK_T_IN, 0, 100);
	struct req wr = write_request(f, 0, 0x44, SECTOR + 1);

	kick_and_wait(f, 2);
	assert_int_equal(status_of(f, rd), VIRTIO_BLK_S_IOERR);
	assert_int_equal(status_of(f, wr), VIRTIO_BLK_S_IOERR);
	assert_image_pattern(f, 0, 2 * SECTOR);
}

/* A write whose data the device could only write into, a read whose data it could only
 * read: nothing would move, so it is an error, not an empty success; the image and
 * the guest's buffer are left alone. */
static void data_on_the_wrong_side_is_ioerr(void **state)
{
	struct fixture *f = *state;
	uint64_t out_data = galloc(f, SECTOR), in_data = galloc(f, SECTOR);
	struct req wr = {.status = status_byte(f)}, rd = {.status = status_byte(f)};
	struct seg out[] = {{header(f, VIRTIO_BLK_T_OUT, 0), 16, false},
			    {out_data, SECTOR, true},
			    {wr.status, 1, true}};
	struct seg in[] = {{header(f, VIRTIO_BLK_T_IN, 0), 16, false},
			   {in_data, SECTOR, false},
			   {rd.status, 1, true}};

	memset(guest(f, out_data, SECTOR), 0x5a, SECTOR);
	memset(guest(f, in_data, SECTOR), 0xa5, SECTOR);
	wr.head = offer(f, out, 3);
	rd.head = offer(f, in, 3);
	kick_and_wait(f, 2);
	assert_int_equal(status_of(f, wr), VIRTIO_BLK_S_IOERR);
	assert_int_equal(status_of(f, rd), VIRTIO_BLK_S_IOERR);
	assert_image_pattern(f, 0, SECTOR);
	for (int i = 0; i < SECTOR; i++)
		assert_int_equal(((uint8_t *)guest(f, in_data, SECTOR))[i], 0xa5);
}

static void header_shorter_than_16_bytes_is_ioerr(void **state)
{
	struct fixture *f = *state;
	struct req r = {.status = status_byte(f)};
	struct seg segs[] = {{header(f, VIRTIO_BLK_T_IN, 0), 8, false}, {r.status, 1, true}};

	r.head = offer(f, segs, 2);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_IOERR);
	assert_int_equal(used_len_of(f, r), 1);
	assert_int_equal(f->transport.needs_reset, 0);
}

/* Documented in blk_request.c: nowhere to put a status, so the chain comes back with
 * nothing written, and the device goes on with the next one. */
static void chain_without_status_byte_is_returned_with_nothing_written(void **state)
{
	struct fixture *f = *state;
	struct seg segs[] = {{header(f, VIRTIO_BLK_T_IN, 0), 16, false}};
	struct req bad = {.head = offer(f, segs, 1)};
	struct req good = request(f, VIRTIO_BLK_T_IN, 1, SECTOR);

	kick_and_wait(f, 2);
	assert_int_equal(used_len_of(f, bad), 0);
	assert_int_equal(status_of(f, good), VIRTIO_BLK_S_OK);
	assert_int_equal(f->transport.needs_reset, 0);
}

static void unknown_type_is_unsupp(void **state)
{
	struct fixture *f = *state;
	struct req unknown = request(f, 99, 0, SECTOR);
	struct req scsi = request(f, VIRTIO_BLK_T_SCSI_CMD, 0, 0);
	struct req barrier = request(f, VIRTIO_BLK_T_OUT | VIRTIO_BLK_T_BARRIER, 0, SECTOR);

	kick_and_wait(f, 3);
	assert_int_equal(status_of(f, unknown), VIRTIO_BLK_S_UNSUPP);
	assert_int_equal(status_of(f, scsi), VIRTIO_BLK_S_UNSUPP);
	assert_int_equal(status_of(f, barrier), VIRTIO_BLK_S_UNSUPP);
	assert_image_pattern(f, 0, SECTOR);
}

static void broken_chain_sets_needs_reset(void **state)
{
	struct fixture *f = *state;

	avail(f)->ring[0] = QSIZE; /* no such descriptor */
	avail(f)->idx = 1;
	notify_dev(f->dev);
	assert_int_equal(f->transport.needs_reset, 1);
	assert_int_equal(used(f)->idx, 0);
}

static void head_offered_again_while_in_flight_sets_needs_reset(void **state)
{
	struct fixture *f = *state;
	struct req r = request(f, VIRTIO_BLK_T_IN, 0, SECTOR);

	avail(f)->ring[1] = r.head;
	avail(f)->idx = 2;
	kick_and_wait(f, 1);
	assert_int_equal(f->transport.needs_reset, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
}

static void reset_with_requests_in_flight_waits_for_them_and_does_not_push(void **state)
{
	struct fixture *f = *state;
	struct req r[8];

	for (int i = 0; i < 8; i++)
		r[i] = request(f, VIRTIO_BLK_T_IN, 16 * i, 16 * SECTOR);
	notify_dev(f->dev);
	reset_dev(f->dev);

	/* Every read finished before reset returned, and none was answered. */
	for (int i = 0; i < 8; i++) {
		assert_pattern(guest(f, r[i].data, 16 * SECTOR), 16 * i * SECTOR, 16 * SECTOR);
		assert_int_equal(status_of(f, r[i]), 0xff);
	}
	assert_true(event_loop_run_once(&f->loop, 50) >= 0);
	assert_int_equal(used(f)->idx, 0);
	assert_int_equal(f->transport.interrupts[BLK_QUEUE], 0);
	assert_false(f->dev->queues[0].ready);
}

static void device_serves_requests_again_after_reset(void **state)
{
	struct fixture *f = *state;

	request(f, VIRTIO_BLK_T_IN, 0, SECTOR);
	notify_dev(f->dev);
	reset_dev(f->dev);

	/* The driver lays the queue out afresh. */
	memset(guest(f, AVAIL_ADDR, 6 + 2 * QSIZE), 0, 6 + 2 * QSIZE);
	memset(guest(f, USED_ADDR, 6 + 8 * QSIZE), 0, 6 + 8 * QSIZE);
	f->next_desc = 0;
	activate(f, f->dev, false);
	struct req r = request(f, VIRTIO_BLK_T_IN, 1, SECTOR);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_pattern(guest(f, r.data, SECTOR), SECTOR, SECTOR);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, blk_driver_setup, blk_driver_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(more_ranges_than_advertised_is_ioerr),
	    TEST(sector_past_the_end_is_ioerr),
	    TEST(sector_near_uint64_max_is_ioerr),
	    TEST(data_length_not_a_multiple_of_512_is_ioerr),
	    TEST(data_on_the_wrong_side_is_ioerr),
	    TEST(header_shorter_than_16_bytes_is_ioerr),
	    TEST(chain_without_status_byte_is_returned_with_nothing_written),
	    TEST(unknown_type_is_unsupp),
	    TEST(broken_chain_sets_needs_reset),
	    TEST(head_offered_again_while_in_flight_sets_needs_reset),
	    TEST(reset_with_requests_in_flight_waits_for_them_and_does_not_push),
	    TEST(device_serves_requests_again_after_reset),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
