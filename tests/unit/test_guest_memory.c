/* Guest memory: the checked accessor hands out exactly the RAM that exists. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "boot/layout.h"
#include "vmm/guest_memory.h"

#define MIB (1024ULL * 1024ULL)
#define GIB (1024ULL * MIB)

static void small_guest_has_one_region_from_zero(void **state)
{
	struct guest_memory mem;
	(void)state;
	assert_int_equal(guest_memory_create(&mem, 128 * MIB, NULL), 0);
	assert_int_equal(mem.region_count, 1);
	assert_int_equal(guest_memory_low_end(&mem), 128 * MIB);
	assert_int_equal(guest_memory_end(&mem), 128 * MIB);
	assert_non_null(guest_memory_ptr(&mem, 0, 128 * MIB));
	assert_non_null(guest_memory_ptr(&mem, 128 * MIB - 1, 1));
	assert_null(guest_memory_ptr(&mem, 128 * MIB - 1, 2));
	assert_null(guest_memory_ptr(&mem, 128 * MIB, 1));
	guest_memory_destroy(&mem);
}

static void memory_beyond_the_gap_starts_at_4g(void **state)
{
	struct guest_memory mem;
	(void)state;
	assert_int_equal(guest_memory_create(&mem, 4 * GIB, NULL), 0);
	assert_int_equal(mem.region_count, 2);
	assert_int_equal(guest_memory_low_end(&mem), LAYOUT_MMIO_GAP_START);
	/* What does not fit below the gap ends that much past 4 GiB. */
	assert_int_equal(guest_memory_end(&mem), 5 * GIB);
	assert_null(guest_memory_ptr(&mem, LAYOUT_MMIO_GAP_START, 1));
	assert_null(guest_memory_ptr(&mem, LAYOUT_IOAPIC_ADDR, 4));
	assert_non_null(guest_memory_ptr(&mem, 4 * GIB, 1 * GIB));
	assert_null(guest_memory_ptr(&mem, 5 * GIB, 1));
	/* A range spanning the gap is not one piece of host memory. */
	assert_null(guest_memory_ptr(&mem, LAYOUT_MMIO_GAP_START - 8, 16));
	guest_memory_destroy(&mem);
}

static void writes_land_where_reads_find_them(void **state)
{
	struct guest_memory mem;
	const char text[] = "mote";
	(void)state;
	assert_int_equal(guest_memory_create(&mem, 64 * MIB, NULL), 0);
	assert_int_equal(guest_memory_write(&mem, 0x7000, text, sizeof(text)), 0);
	assert_memory_equal(guest_memory_ptr(&mem, 0x7000, sizeof(text)), text, sizeof(text));
	assert_int_equal(guest_memory_write(&mem, 64 * MIB - 2, text, sizeof(text)), -EFAULT);
	guest_memory_destroy(&mem);
}

static void wrapping_ranges_are_refused(void **state)
{
	struct guest_memory mem;
	(void)state;
	assert_int_equal(guest_memory_create(&mem, 64 * MIB, NULL), 0);
	assert_null(guest_memory_ptr(&mem, UINT64_MAX, 2));
	assert_null(guest_memory_ptr(&mem, 16, UINT64_MAX));
	assert_null(guest_memory_ptr(&mem, UINT64_MAX - 4096, 8192));
	guest_memory_destroy(&mem);
}

static void bad_sizes_are_refused(void **state)
{
	struct guest_memory mem;
	(void)state;
	assert_int_equal(guest_memory_create(&mem, 8 * MIB, NULL), -EINVAL);
	assert_int_equal(guest_memory_create(&mem, 129 * MIB, NULL), -EINVAL);
	assert_int_equal(guest_memory_create(&mem, 2048 * GIB, NULL), -EINVAL);
}

static void monitor_writes_are_recorded_per_page_when_tracking(void **state)
{
	struct guest_memory mem;
	uint64_t *bitmap;
	const char byte = 1;
	(void)state;
	assert_int_equal(guest_memory_create(&mem, 4 * GIB + 64 * MIB, NULL), 0);
	/* Without tracking nothing is recorded. */
	assert_int_equal(guest_memory_write(&mem, 0, &byte, 1), 0);
	assert_null(mem.vmm_dirty);
	assert_int_equal(guest_memory_track_dirty(&mem), 0);
	size_t words = (mem.size / GUEST_PAGE_SIZE + 63) / 64;
	bitmap = calloc(words, sizeof(uint64_t));
	assert_non_null(bitmap);
	/* Two bytes across a page boundary dirty both pages; above 4 GiB the page counts
	 * in the memory file's layout (right after the low region). */
	guest_memory_mark_dirty(&mem, 2 * GUEST_PAGE_SIZE - 1, 2);
	assert_int_equal(guest_memory_write(&mem, 4 * GIB, &byte, 1), 0);
	/* Outside RAM: ignored, no out-of-bounds bit. */
	guest_memory_mark_dirty(&mem, LAYOUT_MMIO_GAP_START, 8);
	guest_memory_collect_dirty(&mem, bitmap);
	uint64_t high_page = LAYOUT_MMIO_GAP_START / GUEST_PAGE_SIZE;
	unsigned set = 0;
	for (uint64_t page = 0; page < mem.size / GUEST_PAGE_SIZE; page++)
		set += (bitmap[page / 64] >> (page % 64)) & 1;
	assert_int_equal(set, 3);
	assert_true(bitmap[0] & (1ULL << 1));
	assert_true(bitmap[0] & (1ULL << 2));
	assert_true(bitmap[high_page / 64] & (1ULL << (high_page % 64)));
	/* Collecting clears. */
	memset(bitmap, 0, words * sizeof(uint64_t));
	guest_memory_collect_dirty(&mem, bitmap);
	assert_int_equal(bitmap[0], 0);
	/* A long range marks exactly its pages, across and within bitmap words: 60-199
	 * and 64-127 (a whole word, marked again), then 300 alone. */
	guest_memory_mark_dirty(&mem, 60 * GUEST_PAGE_SIZE, 140 * GUEST_PAGE_SIZE);
	guest_memory_mark_dirty(&mem, 64 * GUEST_PAGE_SIZE, 64 * GUEST_PAGE_SIZE);
	guest_memory_mark_dirty(&mem, 300 * GUEST_PAGE_SIZE + 5, 1);
	guest_memory_collect_dirty(&mem, bitmap);
	for (uint64_t page = 0; page < 512; page++)
		assert_int_equal((bitmap[page / 64] >> (page % 64)) & 1,
				 (page >= 60 && page < 200) || page == 300);
	free(bitmap);
	guest_memory_destroy(&mem);
}

static int memory_file(uint64_t size)
{
	char path[] = "/tmp/mote-memfile-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	return fd;
}

static void memory_from_a_file_is_private_and_leaves_the_file_unchanged(void **state)
{
	struct guest_memory mem;
	char seen[5] = {0};
	(void)state;
	int fd = memory_file(32 * MIB);
	assert_int_equal(pwrite(fd, "snap", 4, 8192), 4);
	assert_int_equal(guest_memory_create_from_file(&mem, 32 * MIB, fd, NULL), 0);
	memcpy(seen, guest_memory_ptr(&mem, 8192, 4), 4);
	assert_string_equal(seen, "snap");
	assert_int_equal(guest_memory_write(&mem, 8192, "MOTE", 4), 0);
	assert_int_equal(pread(fd, seen, 4, 8192), 4);
	assert_string_equal(seen, "snap");
	guest_memory_destroy(&mem); /* closes fd */
}

static void memory_file_shorter_than_the_guest_is_refused(void **state)
{
	struct guest_memory mem;
	(void)state;
	int fd = memory_file(32 * MIB - 4096);
	assert_int_equal(guest_memory_create_from_file(&mem, 32 * MIB, fd, NULL), -EINVAL);
	assert_null(mem.base);
}

/* Counted whole: 4 KiB pages, or 2 MiB ones where the host gives shmem huge pages. */
static void touched_bytes_count_the_pages_written(void **state)
{
	struct guest_memory mem;
	(void)state;
	assert_int_equal(guest_memory_create(&mem, 64 * MIB, NULL), 0);
	assert_int_equal(guest_memory_resident_bytes(&mem), 0);
	assert_int_equal(guest_memory_write(&mem, 0, "a", 1), 0);
	assert_int_equal(guest_memory_write(&mem, 32 * MIB, "b", 1), 0);
	uint64_t touched = guest_memory_resident_bytes(&mem);
	assert_in_range(touched, 2 * 4096, 2 * 2 * MIB);
	assert_int_equal(touched % 4096, 0);
	guest_memory_destroy(&mem);
}

static void touched_bytes_of_memory_from_a_file_count_its_resident_pages(void **state)
{
	struct guest_memory mem;
	(void)state;
	int fd = memory_file(32 * MIB);
	assert_int_equal(guest_memory_create_from_file(&mem, 32 * MIB, fd, NULL), 0);
	assert_int_equal(guest_memory_write(&mem, 16 * MIB, "c", 1), 0);
	assert_in_range(guest_memory_resident_bytes(&mem), 4096, 32 * MIB);
	guest_memory_destroy(&mem);
}

/* Whether the page at host is mapped in this process (mincore(2): ENOMEM when not). */
static bool page_mapped(const uint8_t *host)
{
	unsigned char resident;

	return mincore((void *)host, GUEST_PAGE_SIZE, &resident) == 0;
}

/* A device gave up I/O the kernel may still carry out into the memory: destroying it
 * keeps the address range taken, so that no later mapping can be where a late write
 * lands, and gives the guest's RAM back (the range holds no page any more). */
static void kept_mapped_memory_keeps_its_range_taken_and_holds_no_page_after_destroy(void **state)
{
	struct guest_memory mem;
	unsigned char resident = 1;
	(void)state;
	assert_int_equal(guest_memory_create(&mem, 16 * MIB, NULL), 0);
	uint8_t *page = guest_memory_ptr(&mem, 0x5000, GUEST_PAGE_SIZE);
	assert_non_null(page);
	memset(page, 0x5a, GUEST_PAGE_SIZE);
	guest_memory_keep_mapped(&mem);
	guest_memory_destroy(&mem);

	/* Still mapped (mincore fails with ENOMEM on an unmapped range)... */
	assert_int_equal(mincore(page, GUEST_PAGE_SIZE, &resident), 0);
	/* ...by a reservation that holds no page: the written one is gone... */
	assert_int_equal(resident & 1, 0);
	/* ...and that no new mapping may take. */
	void *taken = mmap(page, GUEST_PAGE_SIZE, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	assert_ptr_equal(taken, MAP_FAILED);
	assert_int_equal(errno, EEXIST);
}

static void memory_not_kept_mapped_is_unmapped_at_destroy(void **state)
{
	struct guest_memory mem;
	(void)state;
	assert_int_equal(guest_memory_create(&mem, 16 * MIB, NULL), 0);
	uint8_t *page = guest_memory_ptr(&mem, 0x5000, GUEST_PAGE_SIZE);
	assert_true(page_mapped(page));
	guest_memory_destroy(&mem);
	assert_false(page_mapped(page));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(small_guest_has_one_region_from_zero),
	    cmocka_unit_test(memory_beyond_the_gap_starts_at_4g),
	    cmocka_unit_test(writes_land_where_reads_find_them),
	    cmocka_unit_test(wrapping_ranges_are_refused),
	    cmocka_unit_test(bad_sizes_are_refused),
	    cmocka_unit_test(monitor_writes_are_recorded_per_page_when_tracking),
	    cmocka_unit_test(memory_from_a_file_is_private_and_leaves_the_file_unchanged),
	    cmocka_unit_test(memory_file_shorter_than_the_guest_is_refused),
	    cmocka_unit_test(touched_bytes_count_the_pages_written),
	    cmocka_unit_test(touched_bytes_of_memory_from_a_file_count_its_resident_pages),
	    cmocka_unit_test(
		kept_mapped_memory_keeps_its_range_taken_and_holds_no_page_after_destroy),
	    cmocka_unit_test(memory_not_kept_mapped_is_unmapped_at_destroy),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
