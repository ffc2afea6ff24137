/* Guest memory: the checked accessor hands out exactly the RAM that exists. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(small_guest_has_one_region_from_zero),
	    cmocka_unit_test(memory_beyond_the_gap_starts_at_4g),
	    cmocka_unit_test(writes_land_where_reads_find_them),
	    cmocka_unit_test(wrapping_ranges_are_refused),
	    cmocka_unit_test(bad_sizes_are_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
