/* Bus dispatch: each access reaches exactly the device that owns it, at its offset. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "vmm/bus.h"

struct recorder {
	int calls;
	uint64_t offset;
	uint32_t len;
	bool is_write;
	uint8_t written;
};

static void record_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len, bool is_write)
{
	struct recorder *r = opaque;

	r->calls++;
	r->offset = offset;
	r->len = len;
	r->is_write = is_write;
	if (is_write)
		r->written = data[0];
	else
		memset(data, 0x5a, len);
}

static void dispatch_passes_offset_relative_to_device_base(void **state)
{
	struct bus bus;
	struct recorder serial = {0};
	uint8_t data = 0x41;

	(void)state;
	bus_init(&bus, "pio");
	assert_int_equal(bus_register(&bus, 0x3f8, 8, record_access, &serial, "serial", NULL), 0);
	assert_true(bus_dispatch(&bus, 0x3fd, &data, 1, true));
	assert_int_equal(serial.calls, 1);
	assert_int_equal(serial.offset, 5);
	assert_true(serial.is_write);
	assert_int_equal(serial.written, 0x41);
}

static void dispatch_finds_the_right_device_among_many(void **state)
{
	struct bus bus;
	struct recorder devices[20] = {0};
	uint8_t data[4];

	(void)state;
	bus_init(&bus, "mmio");
	/* Registered out of order on purpose: the registry keeps them sorted. */
	for (int i = 19; i >= 0; i--)
		assert_int_equal(bus_register(&bus, 0xd0000000ULL + (uint64_t)i * 0x1000, 0x1000,
					      record_access, &devices[i], "dev", NULL),
				 0);
	for (int i = 0; i < 20; i++) {
		assert_true(bus_dispatch(&bus, 0xd0000000ULL + (uint64_t)i * 0x1000 + 0x70, data, 4,
					 false));
		assert_int_equal(devices[i].calls, 1);
		assert_int_equal(devices[i].offset, 0x70);
		assert_int_equal(data[0], 0x5a);
	}
}

static void unclaimed_read_returns_all_ones(void **state)
{
	struct bus bus;
	uint8_t data[2] = {0, 0};

	(void)state;
	bus_init(&bus, "pio");
	assert_false(bus_dispatch(&bus, 0x80, data, 2, false));
	assert_int_equal(data[0], 0xff);
	assert_int_equal(data[1], 0xff);
}

static void access_straddling_the_end_of_a_device_matches_nothing(void **state)
{
	struct bus bus;
	struct recorder dev = {0};
	uint8_t data[4];

	(void)state;
	bus_init(&bus, "pio");
	assert_int_equal(bus_register(&bus, 0x60, 1, record_access, &dev, "i8042", NULL), 0);
	assert_false(bus_dispatch(&bus, 0x60, data, 4, false));
	assert_int_equal(dev.calls, 0);
}

static void overlapping_registration_is_refused(void **state)
{
	struct bus bus;
	struct recorder dev = {0};

	(void)state;
	bus_init(&bus, "pio");
	assert_int_equal(bus_register(&bus, 0x3f8, 8, record_access, &dev, "a", NULL), 0);
	assert_int_equal(bus_register(&bus, 0x3ff, 1, record_access, &dev, "b", NULL), -EEXIST);
	assert_int_equal(bus_register(&bus, 0x3f0, 9, record_access, &dev, "c", NULL), -EEXIST);
	assert_int_equal(bus_register(&bus, 0x3f0, 8, record_access, &dev, "d", NULL), 0);
	assert_int_equal(bus_register(&bus, 0x400, 0, record_access, &dev, "e", NULL), -EINVAL);
	assert_int_equal(bus_register(&bus, UINT64_MAX - 1, 4, record_access, &dev, "f", NULL),
			 -EINVAL);
}

static void full_registry_reports_no_space(void **state)
{
	struct bus bus;
	struct recorder dev = {0};

	(void)state;
	bus_init(&bus, "pio");
	for (unsigned i = 0; i < BUS_MAX_RANGES; i++)
		assert_int_equal(bus_register(&bus, i * 2, 1, record_access, &dev, "x", NULL), 0);
	assert_int_equal(bus_register(&bus, 0x1000, 1, record_access, &dev, "y", NULL), -ENOSPC);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(dispatch_passes_offset_relative_to_device_base),
	    cmocka_unit_test(dispatch_finds_the_right_device_among_many),
	    cmocka_unit_test(unclaimed_read_returns_all_ones),
	    cmocka_unit_test(access_straddling_the_end_of_a_device_matches_nothing),
	    cmocka_unit_test(overlapping_registration_is_refused),
	    cmocka_unit_test(full_registry_reports_no_space),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
