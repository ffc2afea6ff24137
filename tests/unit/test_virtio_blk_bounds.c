/* The bounds that keep one guest's disk from holding up the rest of its VM (blk.c): a
 * turn of the event thread starts at most VIRTIO_BLK_TAKE_BUDGET chains and asks to be
 * served again; an IN or OUT request carries at most seg_max * size_max bytes, and a
 * WRITE_ZEROES one range of as many; requests in flight hold at most
 * VIRTIO_BLK_BUSY_BYTES_MAX bytes, so a reset or a pause waits for that much I/O and no
 * more, and what waited in the ring goes afterwards. The test driver is blk_driver.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "blk_driver.h"

/* Enough for the largest request: sparse, so it reads as zeros. */
#define BIG_IMAGE_BYTES (16 * MIB)
/* One guest buffer the large requests all point into. */
#define SCRATCH_BYTES (8 * MIB)
#define FIRST_SEGMENT 4096
/* Largest reads offered at once: more than the bytes-in-flight bound lets start. */
#define BIG_REQUESTS 8

/* Reopens the disk on a sparse image of BIG_IMAGE_BYTES. */
static void use_big_image(struct fixture *f)
{
	detach(f);
	assert_int_equal(truncate(f->path, 0), 0);
	assert_int_equal(truncate(f->path, BIG_IMAGE_BYTES), 0);
	attach(f, false, NO_ID, false);
}

/* An IN request of len bytes from sector 0: the first FIRST_SEGMENT bytes into a buffer
 * of its own, filled with 0xee, the rest into scratch (in segments of at most
 * SCRATCH_BYTES, all the same guest bytes). */
static struct req big_read(struct fixture *f, uint64_t scratch, uint64_t len)
{
	struct seg segs[8];
	unsigned n = 0;
	struct req r = {.data = galloc_aligned(f, FIRST_SEGMENT, 4096)};

	memset(guest(f, r.data, FIRST_SEGMENT), 0xee, FIRST_SEGMENT);
	segs[n++] = (struct seg){header(f, VIRTIO_BLK_T_IN, 0), 16, false};
	segs[n++] = (struct seg){r.data, FIRST_SEGMENT, true};
	for (uint64_t rest = len - FIRST_SEGMENT; rest > 0; n++) {
		uint32_t piece = rest < SCRATCH_BYTES ? (uint32_t)rest : SCRATCH_BYTES;
		segs[n] = (struct seg){scratch, piece, true};
		rest -= piece;
	}
	r.status = status_byte(f);
	segs[n++] = (struct seg){r.status, 1, true};
	r.head = offer(f, segs, n);
	return r;
}

/* Reopens the disk on the big image and offers BIG_REQUESTS largest reads, all into
 * one scratch buffer beyond their first segments. */
static void offer_big_reads(struct fixture *f, struct req *r)
{
	use_big_image(f);
	uint64_t scratch = galloc_aligned(f, SCRATCH_BYTES, 4096);
	for (int i = 0; i < BIG_REQUESTS; i++)
		r[i] = big_read(f, scratch, VIRTIO_BLK_REQUEST_MAX_BYTES);
}

static bool untouched(struct fixture *f, struct req r)
{
	const uint8_t *data = guest(f, r.data, FIRST_SEGMENT);

	for (size_t i = 0; i < FIRST_SEGMENT; i++)
		if (data[i] != 0xee)
			return false;
	return true;
}

static void a_turn_starts_at_most_the_budget_and_asks_to_be_served_again(void **state)
{
	struct fixture *f = *state;
	const uint16_t offered = VIRTIO_BLK_TAKE_BUDGET + 36;

	/* Chains the device answers at once: a header and no status byte. */
	assert_true(offered <= QSIZE);
	for (uint16_t i = 0; i < offered; i++) {
		struct seg s = {header(f, VIRTIO_BLK_T_GET_ID, 0), 16, false};
		offer(f, &s, 1);
	}
	notify_dev(f->dev);
	assert_int_equal(used(f)->idx, VIRTIO_BLK_TAKE_BUDGET);
	assert_int_equal(f->transport.serve_again[BLK_QUEUE], 1);

	/* The transport serves the queue again: the rest goes. */
	wait_used(f, offered);
	assert_int_equal(f->transport.serve_again[BLK_QUEUE], 0);
}

static void config_bounds_a_request_to_seg_max_times_size_max(void **state)
{
	struct fixture *f = *state;

	assert_true(f->dev->ops->features(f->dev) & (1ULL << VIRTIO_BLK_F_SIZE_MAX));
	assert_int_equal(CONFIG(f->dev, size_max) * CONFIG(f->dev, seg_max),
			 VIRTIO_BLK_REQUEST_MAX_BYTES);
}

static void request_longer_than_the_bound_is_ioerr(void **state)
{
	struct fixture *f = *state;

	use_big_image(f);
	uint64_t scratch = galloc_aligned(f, SCRATCH_BYTES, 4096);
	struct req at_bound = big_read(f, scratch, VIRTIO_BLK_REQUEST_MAX_BYTES);
	struct req past_bound = big_read(f, scratch, VIRTIO_BLK_REQUEST_MAX_BYTES + SECTOR);

	kick_and_wait(f, 2);
	assert_int_equal(status_of(f, at_bound), VIRTIO_BLK_S_OK);
	assert_false(untouched(f, at_bound));
	assert_int_equal(status_of(f, past_bound), VIRTIO_BLK_S_IOERR);
	assert_true(untouched(f, past_bound));
}

static void write_zeroes_of_more_than_a_largest_write_is_ioerr(void **state)
{
	struct fixture *f = *state;

	use_big_image(f);
	assert_int_equal(CONFIG(f->dev, max_write_zeroes_seg), 1);
	assert_int_equal(CONFIG(f->dev, max_write_zeroes_sectors) * SECTOR,
			 VIRTIO_BLK_REQUEST_MAX_BYTES);
	uint32_t most = VIRTIO_BLK_REQUEST_MAX_BYTES / SECTOR;
	struct virtio_blk_discard_write_zeroes at_bound = range(0, most, 0);
	struct virtio_blk_discard_write_zeroes past_bound = range(0, most + 1, 0);
	struct virtio_blk_discard_write_zeroes two[] = {range(0, 8, 0), range(16, 8, 0)};
	struct req ok = range_request(f, VIRTIO_BLK_T_WRITE_ZEROES, &at_bound, 1);
	struct req too_long = range_request(f, VIRTIO_BLK_T_WRITE_ZEROES, &past_bound, 1);
	struct req too_many = range_request(f, VIRTIO_BLK_T_WRITE_ZEROES, two, 2);

	kick_and_wait(f, 3);
	assert_int_equal(status_of(f, ok), VIRTIO_BLK_S_OK);
	assert_int_equal(status_of(f, too_long), VIRTIO_BLK_S_IOERR);
	assert_int_equal(status_of(f, too_many), VIRTIO_BLK_S_IOERR);
}

/* Chain bytes of a largest read: header, data, status. */
#define BIG_CHAIN_BYTES (16 + VIRTIO_BLK_REQUEST_MAX_BYTES + 1)
/* How many start: requests start while those in flight hold less than the bound. */
#define ADMITTED ((unsigned)((VIRTIO_BLK_BUSY_BYTES_MAX + BIG_CHAIN_BYTES - 1) / BIG_CHAIN_BYTES))

static void reset_waits_only_for_what_the_busy_bound_let_in(void **state)
{
	struct fixture *f = *state;
	struct req r[BIG_REQUESTS];
	const unsigned admitted = ADMITTED;

	assert_true(admitted > 0 && admitted < BIG_REQUESTS);
	offer_big_reads(f, r);
	notify_dev(f->dev);
	reset_dev(f->dev);

	/* The reset waited for the requests started, which read into their buffers; the
	 * others were never started. */
	for (unsigned i = 0; i < BIG_REQUESTS; i++)
		assert_int_equal(untouched(f, r[i]), i >= admitted);
	assert_int_equal(used(f)->idx, 0);
}

static void write_zeroes_count_the_zeros_they_may_write_in_the_bytes_in_flight(void **state)
{
	struct fixture *f = *state;
	const uint32_t most = VIRTIO_BLK_REQUEST_MAX_BYTES / SECTOR;
	/* Each is charged its range, so this many fill the bound. */
	const unsigned zeroing =
	    (unsigned)((VIRTIO_BLK_BUSY_BYTES_MAX + VIRTIO_BLK_REQUEST_MAX_BYTES - 1) /
		       VIRTIO_BLK_REQUEST_MAX_BYTES);
	struct virtio_blk_discard_write_zeroes whole = range(0, most, 0);
	struct req reads[2];

	use_big_image(f);
	uint64_t scratch = galloc_aligned(f, SCRATCH_BYTES, 4096);
	for (unsigned i = 0; i < zeroing; i++)
		range_request(f, VIRTIO_BLK_T_WRITE_ZEROES, &whole, 1);
	for (int i = 0; i < 2; i++)
		reads[i] = big_read(f, scratch, SECTOR * 16);
	notify_dev(f->dev);
	reset_dev(f->dev);

	/* Small as their chains are, the reads waited behind the zeroing. */
	for (int i = 0; i < 2; i++)
		assert_true(untouched(f, reads[i]));
}

static void chains_left_for_room_go_once_requests_end(void **state)
{
	struct fixture *f = *state;
	struct req r[BIG_REQUESTS];

	offer_big_reads(f, r);
	kick_and_wait(f, BIG_REQUESTS);
	for (int i = 0; i < BIG_REQUESTS; i++) {
		assert_int_equal(status_of(f, r[i]), VIRTIO_BLK_S_OK);
		assert_false(untouched(f, r[i]));
	}
}

static void pause_answers_what_was_started_and_serves_the_rest_after(void **state)
{
	struct fixture *f = *state;
	struct req r[BIG_REQUESTS];
	const unsigned admitted = ADMITTED;

	offer_big_reads(f, r);
	notify_dev(f->dev);
	quiesce_dev(f->dev);

	/* The quiesce answered what it had started and asked for the queue to be served
	 * once the VM runs again, for the chains still in the ring. */
	assert_int_equal(used(f)->idx, admitted);
	for (unsigned i = 0; i < admitted; i++)
		assert_int_equal(status_of(f, r[i]), VIRTIO_BLK_S_OK);
	assert_int_equal(f->transport.serve_again[BLK_QUEUE], 1);
	wait_used(f, BIG_REQUESTS);
	for (int i = 0; i < BIG_REQUESTS; i++)
		assert_int_equal(status_of(f, r[i]), VIRTIO_BLK_S_OK);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, blk_driver_setup, blk_driver_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(a_turn_starts_at_most_the_budget_and_asks_to_be_served_again),
	    TEST(config_bounds_a_request_to_seg_max_times_size_max),
	    TEST(request_longer_than_the_bound_is_ioerr),
	    TEST(write_zeroes_of_more_than_a_largest_write_is_ioerr),
	    TEST(reset_waits_only_for_what_the_busy_bound_let_in),
	    TEST(write_zeroes_count_the_zeros_they_may_write_in_the_bytes_in_flight),
	    TEST(chains_left_for_room_go_once_requests_end),
	    TEST(pause_answers_what_was_started_and_serves_the_rest_after),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
