/* virtio-blk direct disks (virtio_blk_options.direct, like QEMU's cache=none): a transfer
 * whose offset, iovec lengths and buffer addresses are all multiples of BLK_DIRECT_ALIGN
 * goes to the image opened O_DIRECT and leaves the host page cache alone; any other is
 * served through the page cache, correctly all the same. Whether a transfer bypassed the
 * cache is seen with mincore() on the image, evicted before the request; the control
 * tests show the same check catching a transfer that went through the cache. The image
 * must be on a disk-backed file system (the fixture's /tmp), never tmpfs, whose page
 * cache is the file itself. The test driver is blk_driver.h. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "blk_driver.h"
#include "virtio/blk_request.h"

#define PAGE 4096
/* One page of the image, well inside it, and its first sector. */
#define PAGE_OFFSET (64 * 1024)
#define PAGE_SECTOR (PAGE_OFFSET / SECTOR)
/* A guest address 16 bytes past a BLK_DIRECT_ALIGN boundary. */
#define UNALIGNED 16

/* Replaces the disk with a direct one on the same image. */
static void reattach_direct(struct fixture *f, bool read_only)
{
	struct virtio_blk_options options = {.read_only = read_only, .direct = true};

	detach(f);
	attach_options(f, &options, false);
}

/* Every test but the controls runs on a writable direct disk. */
static int setup_direct(void **state)
{
	int err = blk_driver_setup(state);

	if (err == 0)
		reattach_direct(*state, false);
	return err;
}

/* Nothing of the image's test page is in the host page cache. */
static void evict_page(struct fixture *f)
{
	drop_image_cache(f);
	assert_false(image_page_resident(f, PAGE_OFFSET));
}

/* A guest buffer of len bytes, skew bytes past a boundary of align. */
static uint64_t buffer_at(struct fixture *f, uint32_t len, uint64_t align, uint64_t skew)
{
	return galloc_aligned(f, skew + len, align) + skew;
}

static struct req read_at(struct fixture *f, uint64_t sector, uint32_t len, uint64_t align,
			  uint64_t skew)
{
	uint64_t data = buffer_at(f, len, align, skew);

	memset(guest(f, data, len), 0xee, len);
	return request_at(f, VIRTIO_BLK_T_IN, sector, data, len);
}

static struct req write_at(struct fixture *f, uint64_t sector, uint8_t fill, uint32_t len,
			   uint64_t align, uint64_t skew)
{
	uint64_t data = buffer_at(f, len, align, skew);

	memset(guest(f, data, len), fill, len);
	return request_at(f, VIRTIO_BLK_T_OUT, sector, data, len);
}

static void assert_image_filled(struct fixture *f, uint64_t offset, uint8_t fill, size_t len)
{
	uint8_t buf[PAGE];

	assert_true(len <= sizeof(buf));
	read_image(f, offset, buf, len);
	for (size_t i = 0; i < len; i++)
		assert_int_equal(buf[i], fill);
}

static void assert_filled(const uint8_t *buf, uint8_t fill, size_t len)
{
	for (size_t i = 0; i < len; i++)
		assert_int_equal(buf[i], fill);
}

static void direct_read_returns_the_image_and_bypasses_the_page_cache(void **state)
{
	struct fixture *f = *state;

	evict_page(f);
	struct req r = read_at(f, PAGE_SECTOR, PAGE, PAGE, 0);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, r), PAGE + 1);
	assert_pattern(guest(f, r.data, PAGE), PAGE_OFFSET, PAGE);
	assert_false(image_page_resident(f, PAGE_OFFSET));
}

static void direct_write_lands_in_the_image_and_bypasses_the_page_cache(void **state)
{
	struct fixture *f = *state;

	evict_page(f);
	struct req w = write_at(f, PAGE_SECTOR, 0x5c, PAGE, PAGE, 0);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, w), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, w), 1);
	assert_false(image_page_resident(f, PAGE_OFFSET));
	assert_image_filled(f, PAGE_OFFSET, 0x5c, PAGE);
	assert_image_pattern(f, PAGE_OFFSET - SECTOR, SECTOR);
	assert_image_pattern(f, PAGE_OFFSET + PAGE, SECTOR);
}

/* Control: the check above sees a read that went through the page cache. */
static void buffered_read_fills_the_page_cache(void **state)
{
	struct fixture *f = *state;

	evict_page(f);
	struct req r = read_at(f, PAGE_SECTOR, PAGE, PAGE, 0);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_pattern(guest(f, r.data, PAGE), PAGE_OFFSET, PAGE);
	assert_true(image_page_resident(f, PAGE_OFFSET));
}

/* Control: and a write that went through it. */
static void buffered_write_fills_the_page_cache(void **state)
{
	struct fixture *f = *state;

	evict_page(f);
	struct req w = write_at(f, PAGE_SECTOR, 0x5c, PAGE, PAGE, 0);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, w), VIRTIO_BLK_S_OK);
	assert_true(image_page_resident(f, PAGE_OFFSET));
	assert_image_filled(f, PAGE_OFFSET, 0x5c, PAGE);
}

/* Linux aligns its buffers to 512 bytes, not to the page: those go direct too. */
static void buffer_aligned_to_512_but_not_to_the_page_goes_direct(void **state)
{
	struct fixture *f = *state;

	evict_page(f);
	struct req r = read_at(f, PAGE_SECTOR, PAGE, PAGE, BLK_DIRECT_ALIGN);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_pattern(guest(f, r.data, PAGE), PAGE_OFFSET, PAGE);
	assert_false(image_page_resident(f, PAGE_OFFSET));
}

static void unaligned_read_is_served_through_the_page_cache(void **state)
{
	struct fixture *f = *state;

	evict_page(f);
	struct req r = read_at(f, PAGE_SECTOR, PAGE, PAGE, UNALIGNED);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, r), PAGE + 1);
	assert_pattern(guest(f, r.data, PAGE), PAGE_OFFSET, PAGE);
	assert_true(image_page_resident(f, PAGE_OFFSET));
}

static void unaligned_write_is_served_through_the_page_cache(void **state)
{
	struct fixture *f = *state;

	evict_page(f);
	struct req w = write_at(f, PAGE_SECTOR, 0x6d, PAGE, PAGE, UNALIGNED);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, w), VIRTIO_BLK_S_OK);
	assert_true(image_page_resident(f, PAGE_OFFSET));
	assert_image_filled(f, PAGE_OFFSET, 0x6d, PAGE);
	assert_image_pattern(f, PAGE_OFFSET + PAGE, SECTOR);
}

/* One unaligned segment sends the whole transfer through the page cache. */
static void multi_segment_read_with_one_unaligned_segment_returns_the_image(void **state)
{
	struct fixture *f = *state;
	uint64_t a = buffer_at(f, PAGE, PAGE, 0);
	uint64_t b = buffer_at(f, SECTOR, PAGE, UNALIGNED);
	uint64_t c = buffer_at(f, PAGE, PAGE, 0);
	struct req r = {.status = status_byte(f)};
	struct seg segs[] = {
	    {header(f, VIRTIO_BLK_T_IN, PAGE_SECTOR - 8), 16, false},
	    {a, PAGE, true},
	    {b, SECTOR, true},
	    {c, PAGE, true},
	    {r.status, 1, true},
	};

	evict_page(f);
	r.head = offer(f, segs, 5);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, r), 2 * PAGE + SECTOR + 1);
	assert_pattern(guest(f, a, PAGE), PAGE_OFFSET - PAGE, PAGE);
	assert_pattern(guest(f, b, SECTOR), PAGE_OFFSET, SECTOR);
	assert_pattern(guest(f, c, PAGE), PAGE_OFFSET + SECTOR, PAGE);
	assert_true(image_page_resident(f, PAGE_OFFSET));
}

static void multi_segment_write_with_one_unaligned_segment_lands_in_the_image(void **state)
{
	struct fixture *f = *state;
	uint64_t a = buffer_at(f, SECTOR, PAGE, 0);
	uint64_t b = buffer_at(f, SECTOR, PAGE, UNALIGNED);
	struct req w = {.status = status_byte(f)};
	struct seg segs[] = {
	    {header(f, VIRTIO_BLK_T_OUT, PAGE_SECTOR), 16, false},
	    {a, SECTOR, false},
	    {b, SECTOR, false},
	    {w.status, 1, true},
	};

	memset(guest(f, a, SECTOR), 0x71, SECTOR);
	memset(guest(f, b, SECTOR), 0x72, SECTOR);
	evict_page(f);
	w.head = offer(f, segs, 4);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, w), VIRTIO_BLK_S_OK);
	assert_true(image_page_resident(f, PAGE_OFFSET));
	assert_image_filled(f, PAGE_OFFSET, 0x71, SECTOR);
	assert_image_filled(f, PAGE_OFFSET + SECTOR, 0x72, SECTOR);
	assert_image_pattern(f, PAGE_OFFSET + 2 * SECTOR, SECTOR);
}

/* Aligned buffers whose lengths are not multiples of 512: the page cache again. */
static void segment_lengths_not_multiples_of_512_are_served_through_the_page_cache(void **state)
{
	struct fixture *f = *state;
	uint64_t a = buffer_at(f, 256, PAGE, 0);
	uint64_t b = buffer_at(f, PAGE - 256, PAGE, 0);
	struct req r = {.status = status_byte(f)};
	struct seg segs[] = {
	    {header(f, VIRTIO_BLK_T_IN, PAGE_SECTOR), 16, false},
	    {a, 256, true},
	    {b, PAGE - 256, true},
	    {r.status, 1, true},
	};

	evict_page(f);
	r.head = offer(f, segs, 4);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_pattern(guest(f, a, 256), PAGE_OFFSET, 256);
	assert_pattern(guest(f, b, PAGE - 256), PAGE_OFFSET + 256, PAGE - 256);
	assert_true(image_page_resident(f, PAGE_OFFSET));
}

static void multi_segment_aligned_read_goes_direct(void **state)
{
	struct fixture *f = *state;
	uint64_t a = buffer_at(f, SECTOR, PAGE, BLK_DIRECT_ALIGN);
	uint64_t b = buffer_at(f, PAGE - SECTOR, PAGE, 0);
	struct req r = {.status = status_byte(f)};
	struct seg segs[] = {
	    {header(f, VIRTIO_BLK_T_IN, PAGE_SECTOR), 16, false},
	    {a, SECTOR, true},
	    {b, PAGE - SECTOR, true},
	    {r.status, 1, true},
	};

	evict_page(f);
	r.head = offer(f, segs, 4);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_pattern(guest(f, a, SECTOR), PAGE_OFFSET, SECTOR);
	assert_pattern(guest(f, b, PAGE - SECTOR), PAGE_OFFSET + SECTOR, PAGE - SECTOR);
	assert_false(image_page_resident(f, PAGE_OFFSET));
}

/* The two descriptors see one file: a direct read after a buffered write that is still
 * only in the page cache returns what was written. */
static void direct_read_sees_a_buffered_write_not_yet_written_back(void **state)
{
	struct fixture *f = *state;
	struct req w = write_at(f, PAGE_SECTOR, 0x3e, PAGE, PAGE, UNALIGNED);

	evict_page(f);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, w), VIRTIO_BLK_S_OK);
	assert_true(image_page_resident(f, PAGE_OFFSET));
	struct req r = read_at(f, PAGE_SECTOR, PAGE, PAGE, 0);
	kick_and_wait(f, 2);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_filled(guest(f, r.data, PAGE), 0x3e, PAGE);
}

/* And a buffered read after a direct write does not return the stale cached page. */
static void buffered_read_after_a_direct_write_sees_the_new_data(void **state)
{
	struct fixture *f = *state;
	struct req before = read_at(f, PAGE_SECTOR, PAGE, PAGE, UNALIGNED);

	kick_and_wait(f, 1);
	assert_pattern(guest(f, before.data, PAGE), PAGE_OFFSET, PAGE);
	assert_true(image_page_resident(f, PAGE_OFFSET));
	struct req w = write_at(f, PAGE_SECTOR, 0x4f, PAGE, PAGE, 0);
	kick_and_wait(f, 2);
	assert_int_equal(status_of(f, w), VIRTIO_BLK_S_OK);
	struct req after = read_at(f, PAGE_SECTOR, PAGE, PAGE, UNALIGNED);
	kick_and_wait(f, 3);
	assert_int_equal(status_of(f, after), VIRTIO_BLK_S_OK);
	assert_filled(guest(f, after.data, PAGE), 0x4f, PAGE);
}

/* O_DIRECT stops at the end of the file; the rest of the last sector reads as zeros. */
static void direct_read_of_a_partial_last_sector_is_zero_filled(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk_options direct = {.direct = true};

	detach(f);
	assert_int_equal(truncate(f->path, 1000), 0);
	attach_options(f, &direct, false);
	assert_int_equal(CONFIG(f->dev, capacity), 2);
	struct req r = read_at(f, 0, 2 * SECTOR, PAGE, 0);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, r), 2 * SECTOR + 1);
	uint8_t *data = guest(f, r.data, 2 * SECTOR);
	assert_pattern(data, 0, 1000);
	assert_zeros(data + 1000, 2 * SECTOR - 1000);
}

static void direct_read_only_disk_refuses_writes_with_ioerr(void **state)
{
	struct fixture *f = *state;

	reattach_direct(f, true);
	struct req aligned = write_at(f, PAGE_SECTOR, 0x11, PAGE, PAGE, 0);
	struct req unaligned = write_at(f, PAGE_SECTOR, 0x22, PAGE, PAGE, UNALIGNED);
	kick_and_wait(f, 2);
	assert_int_equal(status_of(f, aligned), VIRTIO_BLK_S_IOERR);
	assert_int_equal(used_len_of(f, aligned), 1);
	assert_int_equal(status_of(f, unaligned), VIRTIO_BLK_S_IOERR);
	assert_image_pattern(f, PAGE_OFFSET, PAGE);
}

static void direct_read_only_disk_reads_direct(void **state)
{
	struct fixture *f = *state;

	reattach_direct(f, true);
	evict_page(f);
	struct req r = read_at(f, PAGE_SECTOR, PAGE, PAGE, 0);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_pattern(guest(f, r.data, PAGE), PAGE_OFFSET, PAGE);
	assert_false(image_page_resident(f, PAGE_OFFSET));
}

#define DIRECT_TEST(name) cmocka_unit_test_setup_teardown(name, setup_direct, blk_driver_teardown)
#define BUFFERED_TEST(name)                                                                        \
	cmocka_unit_test_setup_teardown(name, blk_driver_setup, blk_driver_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    DIRECT_TEST(direct_read_returns_the_image_and_bypasses_the_page_cache),
	    DIRECT_TEST(direct_write_lands_in_the_image_and_bypasses_the_page_cache),
	    BUFFERED_TEST(buffered_read_fills_the_page_cache),
	    BUFFERED_TEST(buffered_write_fills_the_page_cache),
	    DIRECT_TEST(buffer_aligned_to_512_but_not_to_the_page_goes_direct),
	    DIRECT_TEST(unaligned_read_is_served_through_the_page_cache),
	    DIRECT_TEST(unaligned_write_is_served_through_the_page_cache),
	    DIRECT_TEST(multi_segment_read_with_one_unaligned_segment_returns_the_image),
	    DIRECT_TEST(multi_segment_write_with_one_unaligned_segment_lands_in_the_image),
	    DIRECT_TEST(segment_lengths_not_multiples_of_512_are_served_through_the_page_cache),
	    DIRECT_TEST(multi_segment_aligned_read_goes_direct),
	    DIRECT_TEST(direct_read_sees_a_buffered_write_not_yet_written_back),
	    DIRECT_TEST(buffered_read_after_a_direct_write_sees_the_new_data),
	    DIRECT_TEST(direct_read_of_a_partial_last_sector_is_zero_filled),
	    DIRECT_TEST(direct_read_only_disk_refuses_writes_with_ioerr),
	    DIRECT_TEST(direct_read_only_disk_reads_direct),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
