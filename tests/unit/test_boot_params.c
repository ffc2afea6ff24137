/* boot_params_write() and boot_initrd_place(): the zero page as the kernel reads it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <asm/bootparam.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "boot/boot_params.h"
#include "boot/layout.h"

#define MIB (1024ULL * 1024ULL)
#define GIB (1024ULL * MIB)

struct fixture {
	struct guest_memory mem;
	struct kernel_image_info kernel;
	struct boot_setup setup;
};

static void elf_kernel(struct kernel_image_info *k)
{
	memset(k, 0, sizeof(*k));
	k->format = KERNEL_FORMAT_ELF;
	k->entry = 16 * MIB;
	k->load_start = 16 * MIB;
	k->load_end = 32 * MIB;
	k->cmdline_size = 2047;
	k->initrd_addr_max = 0x7fffffff;
}

static void bzimage_kernel(struct kernel_image_info *k)
{
	struct setup_header hdr;

	elf_kernel(k);
	k->format = KERNEL_FORMAT_BZIMAGE;
	memset(&hdr, 0, sizeof(hdr));
	hdr.setup_sects = 27;
	hdr.boot_flag = 0xaa55;
	memcpy(&hdr.header, "HdrS", 4);
	hdr.version = 0x020f;
	hdr.loadflags = LOADED_HIGH;
	hdr.kernel_alignment = 0x200000;
	hdr.xloadflags = XLF_KERNEL_64;
	hdr.cmdline_size = 2047;
	hdr.init_size = 0x1234000;
	memcpy(k->setup_header, &hdr, sizeof(hdr));
	k->setup_header_len = sizeof(hdr);
	k->protocol_version = 0x020f;
}

static int setup_with(void **state, uint64_t ram)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(guest_memory_create(&f->mem, ram, NULL), 0);
	elf_kernel(&f->kernel);
	f->setup.cmdline = "console=ttyS0 panic=1";
	*state = f;
	return 0;
}

static int setup(void **state)
{
	return setup_with(state, 128 * MIB);
}

static int setup_above_4g(void **state)
{
	/* 3 GiB below the MMIO gap, 1 GiB from 4 GiB; MAP_NORESERVE keeps it cheap. */
	return setup_with(state, 4 * GIB);
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	guest_memory_destroy(&f->mem);
	free(f);
	return 0;
}

static const struct boot_params *zero_page(struct fixture *f)
{
	return guest_memory_ptr(&f->mem, LAYOUT_ZERO_PAGE_ADDR, sizeof(struct boot_params));
}

static void assert_e820(const struct boot_e820_entry *e, uint64_t addr, uint64_t size,
			uint32_t type)
{
	assert_int_equal(e->addr, addr);
	assert_int_equal(e->size, size);
	assert_int_equal(e->type, type);
}

static void e820_for_128mib_is_low_ram_ebda_reserved_and_ram_from_1mib(void **state)
{
	struct fixture *f = *state;
	const struct boot_params *bp = zero_page(f);

	assert_int_equal(boot_params_write(&f->mem, &f->kernel, &f->setup, NULL), 0);
	assert_int_equal(bp->e820_entries, 3);
	assert_e820(&bp->e820_table[0], 0, LAYOUT_EBDA_START, 1);
	assert_e820(&bp->e820_table[1], LAYOUT_EBDA_START, 0x100000 - LAYOUT_EBDA_START, 2);
	assert_e820(&bp->e820_table[2], 0x100000, 128 * MIB - 0x100000, 1);
}

static void e820_above_4gib_adds_the_high_region(void **state)
{
	struct fixture *f = *state;
	const struct boot_params *bp = zero_page(f);

	assert_int_equal(boot_params_write(&f->mem, &f->kernel, &f->setup, NULL), 0);
	assert_int_equal(bp->e820_entries, 4);
	assert_e820(&bp->e820_table[0], 0, LAYOUT_EBDA_START, 1);
	assert_e820(&bp->e820_table[1], LAYOUT_EBDA_START, 0x100000 - LAYOUT_EBDA_START, 2);
	assert_e820(&bp->e820_table[2], 0x100000, LAYOUT_MMIO_GAP_START - 0x100000, 1);
	assert_e820(&bp->e820_table[3], 4 * GIB, 4 * GIB - LAYOUT_MMIO_GAP_START, 1);
}

static void cmdline_is_written_and_pointed_to(void **state)
{
	struct fixture *f = *state;
	const struct boot_params *bp = zero_page(f);
	const char *line = guest_memory_ptr(&f->mem, LAYOUT_CMDLINE_ADDR, LAYOUT_CMDLINE_MAX);

	assert_int_equal(boot_params_write(&f->mem, &f->kernel, &f->setup, NULL), 0);
	assert_string_equal(line, "console=ttyS0 panic=1");
	assert_int_equal(bp->hdr.cmd_line_ptr, LAYOUT_CMDLINE_ADDR);
	assert_int_equal(bp->ext_cmd_line_ptr, 0);
	assert_int_equal(bp->hdr.cmdline_size, 2047);
}

static void cmdline_longer_than_the_kernel_takes_is_e2big(void **state)
{
	struct fixture *f = *state;
	char line[2049];

	memset(line, 'a', sizeof(line) - 1);
	line[sizeof(line) - 1] = '\0';
	f->setup.cmdline = line;
	assert_int_equal(boot_params_write(&f->mem, &f->kernel, &f->setup, NULL), -E2BIG);
}

static void cmdline_of_exactly_cmdline_size_fits(void **state)
{
	struct fixture *f = *state;
	char line[2048];

	memset(line, 'a', sizeof(line) - 1);
	line[sizeof(line) - 1] = '\0';
	f->setup.cmdline = line;
	assert_int_equal(boot_params_write(&f->mem, &f->kernel, &f->setup, NULL), 0);
}

static void cmdline_beyond_the_layout_buffer_is_e2big_when_kernel_allows_more(void **state)
{
	struct fixture *f = *state;
	char *line = malloc(LAYOUT_CMDLINE_MAX + 1);

	assert_non_null(line);
	memset(line, 'a', LAYOUT_CMDLINE_MAX);
	line[LAYOUT_CMDLINE_MAX] = '\0';
	f->kernel.cmdline_size = 1 << 20;
	f->setup.cmdline = line;
	assert_int_equal(boot_params_write(&f->mem, &f->kernel, &f->setup, NULL), -E2BIG);
	free(line);
}

static void loader_fields_are_set_for_every_kernel(void **state)
{
	struct fixture *f = *state;
	const struct boot_params *bp = zero_page(f);

	assert_int_equal(boot_params_write(&f->mem, &f->kernel, &f->setup, NULL), 0);
	assert_int_equal(bp->hdr.type_of_loader, 0xff);
	assert_int_equal(bp->hdr.vid_mode, 0xffff);
	assert_true(bp->hdr.loadflags & CAN_USE_HEAP);
	assert_int_equal(bp->hdr.heap_end_ptr, 0xfe00);
}

static void elf_kernel_gets_a_synthesised_setup_header(void **state)
{
	struct fixture *f = *state;
	const struct boot_params *bp = zero_page(f);

	assert_int_equal(boot_params_write(&f->mem, &f->kernel, &f->setup, NULL), 0);
	assert_int_equal(bp->hdr.boot_flag, 0xaa55);
	assert_memory_equal(&bp->hdr.header, "HdrS", 4);
	assert_int_equal(bp->hdr.kernel_alignment, 0x1000000);
}

static void bzimage_setup_header_is_copied_into_boot_params(void **state)
{
	struct fixture *f = *state;
	const struct boot_params *bp = zero_page(f);

	bzimage_kernel(&f->kernel);
	assert_int_equal(boot_params_write(&f->mem, &f->kernel, &f->setup, NULL), 0);
	assert_int_equal(bp->hdr.setup_sects, 27);
	assert_int_equal(bp->hdr.version, 0x020f);
	assert_int_equal(bp->hdr.init_size, 0x1234000);
	assert_int_equal(bp->hdr.kernel_alignment, 0x200000);
	assert_true(bp->hdr.loadflags & LOADED_HIGH);
	assert_true(bp->hdr.loadflags & CAN_USE_HEAP);
	assert_int_equal(bp->hdr.type_of_loader, 0xff);
}

static void stale_zero_page_bytes_are_cleared(void **state)
{
	struct fixture *f = *state;
	uint8_t *page =
	    guest_memory_ptr(&f->mem, LAYOUT_ZERO_PAGE_ADDR, sizeof(struct boot_params));

	memset(page, 0xff, sizeof(struct boot_params));
	assert_int_equal(boot_params_write(&f->mem, &f->kernel, &f->setup, NULL), 0);
	assert_int_equal(zero_page(f)->sentinel, 0);
	assert_int_equal(zero_page(f)->ext_ramdisk_image, 0);
}

static void no_initrd_leaves_ramdisk_fields_zero(void **state)
{
	struct fixture *f = *state;
	const struct boot_params *bp = zero_page(f);

	assert_int_equal(boot_params_write(&f->mem, &f->kernel, &f->setup, NULL), 0);
	assert_int_equal(bp->hdr.ramdisk_image, 0);
	assert_int_equal(bp->hdr.ramdisk_size, 0);
}

static void initrd_is_placed_page_aligned_at_the_top_of_low_memory(void **state)
{
	struct fixture *f = *state;
	uint64_t addr = 0;

	assert_int_equal(boot_initrd_place(&f->mem, &f->kernel, 10000, &addr, NULL), 0);
	assert_int_equal(addr % 4096, 0);
	assert_int_equal(addr, (128 * MIB - 10000) & ~4095ULL);
	assert_true(addr + 10000 <= 128 * MIB);
}

static void initrd_stays_below_initrd_addr_max(void **state)
{
	struct fixture *f = *state;
	uint64_t addr = 0;

	f->kernel.initrd_addr_max = 64 * MIB - 1;
	assert_int_equal(boot_initrd_place(&f->mem, &f->kernel, 8192, &addr, NULL), 0);
	assert_int_equal(addr, 64 * MIB - 8192);
}

static void initrd_on_a_big_guest_stays_below_2gib(void **state)
{
	struct fixture *f = *state;
	uint64_t addr = 0;

	assert_int_equal(boot_initrd_place(&f->mem, &f->kernel, 4096, &addr, NULL), 0);
	assert_int_equal(addr, 2 * GIB - 4096);
}

static void initrd_fields_are_set_in_boot_params(void **state)
{
	struct fixture *f = *state;
	const struct boot_params *bp = zero_page(f);

	assert_int_equal(boot_initrd_place(&f->mem, &f->kernel, 12345, &f->setup.initrd_addr, NULL),
			 0);
	f->setup.initrd_size = 12345;
	assert_int_equal(boot_params_write(&f->mem, &f->kernel, &f->setup, NULL), 0);
	assert_int_equal(bp->hdr.ramdisk_image, f->setup.initrd_addr);
	assert_int_equal(bp->hdr.ramdisk_size, 12345);
	assert_int_equal(bp->ext_ramdisk_image, 0);
	assert_int_equal(bp->ext_ramdisk_size, 0);
}

static void initrd_above_4gib_sets_the_ext_fields(void **state)
{
	struct fixture *f = *state;
	const struct boot_params *bp = zero_page(f);

	f->setup.initrd_addr = 0x123456000ULL;
	f->setup.initrd_size = 0x100000000ULL + 0x1000;
	assert_int_equal(boot_params_write(&f->mem, &f->kernel, &f->setup, NULL), 0);
	assert_int_equal(bp->hdr.ramdisk_image, 0x23456000);
	assert_int_equal(bp->ext_ramdisk_image, 1);
	assert_int_equal(bp->hdr.ramdisk_size, 0x1000);
	assert_int_equal(bp->ext_ramdisk_size, 1);
}

static void initrd_too_big_for_the_space_above_the_kernel_is_enospc(void **state)
{
	struct fixture *f = *state;
	uint64_t addr = 0;

	/* The kernel ends at 32 MiB: 96 MiB are left. */
	assert_int_equal(boot_initrd_place(&f->mem, &f->kernel, 96 * MIB + 1, &addr, NULL),
			 -ENOSPC);
	assert_int_equal(boot_initrd_place(&f->mem, &f->kernel, 96 * MIB, &addr, NULL), 0);
	assert_int_equal(addr, 32 * MIB);
}

static void initrd_larger_than_memory_is_enospc(void **state)
{
	struct fixture *f = *state;
	uint64_t addr = 0;

	assert_int_equal(boot_initrd_place(&f->mem, &f->kernel, UINT64_MAX, &addr, NULL), -ENOSPC);
}

static void empty_initrd_is_einval(void **state)
{
	struct fixture *f = *state;
	uint64_t addr = 0;

	assert_int_equal(boot_initrd_place(&f->mem, &f->kernel, 0, &addr, NULL), -EINVAL);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
#define TEST_4G(name) cmocka_unit_test_setup_teardown(name, setup_above_4g, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(e820_for_128mib_is_low_ram_ebda_reserved_and_ram_from_1mib),
	    TEST_4G(e820_above_4gib_adds_the_high_region),
	    TEST(cmdline_is_written_and_pointed_to),
	    TEST(cmdline_longer_than_the_kernel_takes_is_e2big),
	    TEST(cmdline_of_exactly_cmdline_size_fits),
	    TEST(cmdline_beyond_the_layout_buffer_is_e2big_when_kernel_allows_more),
	    TEST(loader_fields_are_set_for_every_kernel),
	    TEST(elf_kernel_gets_a_synthesised_setup_header),
	    TEST(bzimage_setup_header_is_copied_into_boot_params),
	    TEST(stale_zero_page_bytes_are_cleared),
	    TEST(no_initrd_leaves_ramdisk_fields_zero),
	    TEST(initrd_is_placed_page_aligned_at_the_top_of_low_memory),
	    TEST(initrd_stays_below_initrd_addr_max),
	    TEST_4G(initrd_on_a_big_guest_stays_below_2gib),
	    TEST(initrd_fields_are_set_in_boot_params),
	    TEST(initrd_above_4gib_sets_the_ext_fields),
	    TEST(initrd_too_big_for_the_space_above_the_kernel_is_enospc),
	    TEST(initrd_larger_than_memory_is_enospc),
	    TEST(empty_initrd_is_einval),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
