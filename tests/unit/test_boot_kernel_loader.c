/* kernel_load(): synthetic ELF and bzImage images built in memory, loaded from a
 * buffer and from a file. Every malformed image must give -ENOEXEC without touching
 * memory it should not (run under ASan). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <asm/bootparam.h>
#include <elf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "boot/kernel_loader.h"
#include "boot/layout.h"

#define MIB (1024ULL * 1024ULL)
#define GUEST_SIZE (128 * MIB)

#define ELF_SEG_OFFSET 0x1000
#define ELF_SEG_FILESZ 0x100
#define ELF_SEG_MEMSZ 0x2000
#define ELF_SEG_PADDR (16 * MIB)
#define ELF_IMAGE_SIZE (ELF_SEG_OFFSET + ELF_SEG_FILESZ)

#define BZ_SETUP_SECTS 1
#define BZ_CODE_OFFSET ((BZ_SETUP_SECTS + 1) * 512)
#define BZ_CODE_SIZE 0x800
#define BZ_IMAGE_SIZE (BZ_CODE_OFFSET + BZ_CODE_SIZE)
#define BZ_HEADER_END 0x26c /* protocol 2.15: through kernel_info_offset */
#define BZ_INIT_SIZE (4 * MIB)

struct image {
	uint8_t bytes[0x2000];
	size_t size;
};

struct fixture {
	struct guest_memory mem;
	struct image img;
	struct kernel_image_info info;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_int_equal(guest_memory_create(&f->mem, GUEST_SIZE, NULL), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	guest_memory_destroy(&f->mem);
	free(f);
	return 0;
}

static Elf64_Ehdr *elf_ehdr(struct image *img)
{
	return (Elf64_Ehdr *)img->bytes;
}

static Elf64_Phdr *elf_phdr(struct image *img, unsigned i)
{
	return (Elf64_Phdr *)(img->bytes + sizeof(Elf64_Ehdr) + i * sizeof(Elf64_Phdr));
}

/* One PT_LOAD of ELF_SEG_FILESZ pattern bytes at 16 MiB with a bss tail, plus a
 * PT_NOTE that the loader must skip. */
static void elf_build(struct image *img)
{
	Elf64_Ehdr *eh = elf_ehdr(img);
	Elf64_Phdr *load = elf_phdr(img, 0), *note = elf_phdr(img, 1);

	memset(img, 0, sizeof(*img));
	memcpy(eh->e_ident, ELFMAG, SELFMAG);
	eh->e_ident[EI_CLASS] = ELFCLASS64;
	eh->e_ident[EI_DATA] = ELFDATA2LSB;
	eh->e_ident[EI_VERSION] = EV_CURRENT;
	eh->e_type = ET_EXEC;
	eh->e_machine = EM_X86_64;
	eh->e_version = EV_CURRENT;
	eh->e_entry = ELF_SEG_PADDR + 0x40;
	eh->e_phoff = sizeof(Elf64_Ehdr);
	eh->e_ehsize = sizeof(Elf64_Ehdr);
	eh->e_phentsize = sizeof(Elf64_Phdr);
	eh->e_phnum = 2;

	load->p_type = PT_LOAD;
	load->p_offset = ELF_SEG_OFFSET;
	load->p_vaddr = 0xffffffff81000000ULL;
	load->p_paddr = ELF_SEG_PADDR;
	load->p_filesz = ELF_SEG_FILESZ;
	load->p_memsz = ELF_SEG_MEMSZ;

	note->p_type = PT_NOTE;
	note->p_offset = 0xffffffffffff0000ULL; /* garbage the loader must not look at */

	for (unsigned i = 0; i < ELF_SEG_FILESZ; i++)
		img->bytes[ELF_SEG_OFFSET + i] = (uint8_t)(i + 1);
	img->size = ELF_IMAGE_SIZE;
}

static struct setup_header *bz_hdr(struct image *img)
{
	return (struct setup_header *)(img->bytes + 0x1f1);
}

static void bz_build(struct image *img)
{
	struct setup_header *hdr = bz_hdr(img);

	memset(img, 0, sizeof(*img));
	hdr->setup_sects = BZ_SETUP_SECTS;
	hdr->syssize = BZ_CODE_SIZE / 16;
	hdr->boot_flag = 0xaa55;
	hdr->jump = (uint16_t)(0xeb | ((BZ_HEADER_END - 0x202) << 8));
	memcpy(&hdr->header, "HdrS", 4);
	hdr->version = 0x020f;
	hdr->loadflags = LOADED_HIGH;
	hdr->initrd_addr_max = 0x7fffffff;
	hdr->kernel_alignment = 0x200000;
	hdr->relocatable_kernel = 1;
	hdr->xloadflags = XLF_KERNEL_64 | XLF_CAN_BE_LOADED_ABOVE_4G;
	hdr->cmdline_size = 2047;
	hdr->pref_address = 16 * MIB;
	hdr->init_size = BZ_INIT_SIZE;
	for (unsigned i = 0; i < BZ_CODE_SIZE; i++)
		img->bytes[BZ_CODE_OFFSET + i] = (uint8_t)(i * 7 + 3);
	img->size = BZ_IMAGE_SIZE;
}

/* The first size bytes in an exactly sized heap block, so ASan sees any read past it. */
static int load_prefix(struct fixture *f, size_t size)
{
	uint8_t *copy = malloc(size ? size : 1);
	int ret;

	assert_non_null(copy);
	memcpy(copy, f->img.bytes, size);
	const struct kernel_source src = {.data = copy, .fd = -1, .size = size};
	ret = kernel_load(&f->mem, &src, &f->info, NULL);
	free(copy);
	return ret;
}

static int load(struct fixture *f)
{
	return load_prefix(f, f->img.size);
}

/* Loads from a file holding the image's first file_len bytes, said to hold size. */
static int load_file(struct fixture *f, size_t file_len, size_t size)
{
	int fd = memfd_create("kernel", MFD_CLOEXEC);
	int ret;

	assert_true(fd >= 0);
	assert_int_equal(write(fd, f->img.bytes, file_len), (ssize_t)file_len);
	const struct kernel_source src = {.fd = fd, .size = size};
	ret = kernel_load(&f->mem, &src, &f->info, NULL);
	close(fd);
	return ret;
}

static void elf_vmlinux_loads_at_its_physical_address_with_its_entry(void **state)
{
	struct fixture *f = *state;
	uint8_t *seg = guest_memory_ptr(&f->mem, ELF_SEG_PADDR, ELF_SEG_MEMSZ);

	memset(seg, 0xaa, ELF_SEG_MEMSZ); /* a previous boot's leftovers */
	elf_build(&f->img);
	assert_int_equal(load(f), 0);
	assert_int_equal(f->info.format, KERNEL_FORMAT_ELF);
	assert_int_equal(f->info.entry, ELF_SEG_PADDR + 0x40);
	assert_int_equal(f->info.load_start, ELF_SEG_PADDR);
	assert_int_equal(f->info.load_end, ELF_SEG_PADDR + ELF_SEG_MEMSZ);
	assert_int_equal(f->info.protocol_version, 0);
	assert_int_equal(f->info.setup_header_len, 0);
	assert_memory_equal(seg, f->img.bytes + ELF_SEG_OFFSET, ELF_SEG_FILESZ);
	for (unsigned i = ELF_SEG_FILESZ; i < ELF_SEG_MEMSZ; i++)
		assert_int_equal(seg[i], 0);
}

static void elf_vmlinux_gets_the_x86_default_cmdline_and_initrd_limits(void **state)
{
	struct fixture *f = *state;

	elf_build(&f->img);
	assert_int_equal(load(f), 0);
	assert_int_equal(f->info.cmdline_size, 2047);
	assert_int_equal(f->info.initrd_addr_max, 0x7fffffff);
}

static void elf_truncated_anywhere_is_rejected(void **state)
{
	struct fixture *f = *state;

	/* Covers the ELF header, the program header table and the segment data. */
	elf_build(&f->img);
	for (size_t size = 0; size < ELF_IMAGE_SIZE; size++)
		assert_int_equal(load_prefix(f, size), -ENOEXEC);
}

static void elf_with_bad_magic_is_neither_format(void **state)
{
	struct fixture *f = *state;

	elf_build(&f->img);
	f->img.bytes[1] = 'X';
	assert_int_equal(load(f), -ENOEXEC);
}

static void elf_32_bit_is_rejected(void **state)
{
	struct fixture *f = *state;

	elf_build(&f->img);
	elf_ehdr(&f->img)->e_ident[EI_CLASS] = ELFCLASS32;
	assert_int_equal(load(f), -ENOEXEC);
}

static void elf_big_endian_is_rejected(void **state)
{
	struct fixture *f = *state;

	elf_build(&f->img);
	elf_ehdr(&f->img)->e_ident[EI_DATA] = ELFDATA2MSB;
	assert_int_equal(load(f), -ENOEXEC);
}

static void elf_for_another_machine_is_rejected(void **state)
{
	struct fixture *f = *state;

	elf_build(&f->img);
	elf_ehdr(&f->img)->e_machine = EM_AARCH64;
	assert_int_equal(load(f), -ENOEXEC);
}

static void elf_that_is_not_an_executable_is_rejected(void **state)
{
	struct fixture *f = *state;

	elf_build(&f->img);
	elf_ehdr(&f->img)->e_type = ET_DYN;
	assert_int_equal(load(f), -ENOEXEC);
}

static void elf_with_wrong_program_header_size_is_rejected(void **state)
{
	struct fixture *f = *state;

	elf_build(&f->img);
	elf_ehdr(&f->img)->e_phentsize = sizeof(Elf64_Phdr) - 8;
	assert_int_equal(load(f), -ENOEXEC);
}

static void elf_with_program_header_count_past_the_file_is_rejected(void **state)
{
	struct fixture *f = *state;

	elf_build(&f->img);
	elf_ehdr(&f->img)->e_phnum = 0xffff;
	assert_int_equal(load(f), -ENOEXEC);
}

static void elf_with_program_header_offset_near_2_64_is_rejected(void **state)
{
	struct fixture *f = *state;

	elf_build(&f->img);
	elf_ehdr(&f->img)->e_phoff = UINT64_MAX - 8;
	assert_int_equal(load(f), -ENOEXEC);
}

static void elf_without_program_headers_is_rejected(void **state)
{
	struct fixture *f = *state;

	elf_build(&f->img);
	elf_ehdr(&f->img)->e_phnum = 0;
	assert_int_equal(load(f), -ENOEXEC);
}

static void elf_without_loadable_segment_is_rejected(void **state)
{
	struct fixture *f = *state;

	elf_build(&f->img);
	elf_phdr(&f->img, 0)->p_type = PT_NOTE;
	assert_int_equal(load(f), -ENOEXEC);
}

static void elf_segment_data_past_the_file_is_rejected(void **state)
{
	struct fixture *f = *state;

	elf_build(&f->img);
	elf_phdr(&f->img, 0)->p_offset = UINT64_MAX - 0x10;
	assert_int_equal(load(f), -ENOEXEC);
}

static void elf_segment_with_filesz_above_memsz_is_rejected(void **state)
{
	struct fixture *f = *state;

	elf_build(&f->img);
	elf_phdr(&f->img, 0)->p_memsz = ELF_SEG_FILESZ - 1;
	assert_int_equal(load(f), -ENOEXEC);
}

static void elf_segment_below_1mib_is_rejected(void **state)
{
	struct fixture *f = *state;

	elf_build(&f->img);
	elf_phdr(&f->img, 0)->p_paddr = LAYOUT_ZERO_PAGE_ADDR;
	elf_ehdr(&f->img)->e_entry = LAYOUT_ZERO_PAGE_ADDR;
	assert_int_equal(load(f), -ENOEXEC);
}

static void elf_segment_past_the_end_of_ram_is_rejected(void **state)
{
	struct fixture *f = *state;

	elf_build(&f->img);
	elf_phdr(&f->img, 0)->p_paddr = GUEST_SIZE - ELF_SEG_MEMSZ + 1;
	elf_ehdr(&f->img)->e_entry = GUEST_SIZE - ELF_SEG_MEMSZ + 1;
	assert_int_equal(load(f), -ENOEXEC);
}

/* The boot page tables map the first 4 GiB: a kernel above them could not run. */
static void elf_segment_above_4gib_is_rejected(void **state)
{
	struct fixture *f = *state;
	struct guest_memory big;
	const uint64_t high = 4096 * MIB + 16 * MIB;

	assert_int_equal(guest_memory_create(&big, 5120 * MIB, NULL), 0);
	assert_non_null(guest_memory_ptr(&big, high, ELF_SEG_MEMSZ));
	elf_build(&f->img);
	elf_phdr(&f->img, 0)->p_paddr = high;
	elf_ehdr(&f->img)->e_entry = high;
	const struct kernel_source src = {.data = f->img.bytes, .fd = -1, .size = f->img.size};
	assert_int_equal(kernel_load(&big, &src, &f->info, NULL), -ENOEXEC);
	guest_memory_destroy(&big);
}

static void elf_segment_wrapping_the_address_space_is_rejected(void **state)
{
	struct fixture *f = *state;

	elf_build(&f->img);
	elf_phdr(&f->img, 0)->p_paddr = UINT64_MAX - 0xfff;
	assert_int_equal(load(f), -ENOEXEC);
}

static void elf_entry_outside_the_loaded_segments_is_rejected(void **state)
{
	struct fixture *f = *state;

	elf_build(&f->img);
	elf_ehdr(&f->img)->e_entry = ELF_SEG_PADDR + ELF_SEG_MEMSZ;
	assert_int_equal(load(f), -ENOEXEC);
}

static void elf_rejected_late_leaves_guest_memory_untouched(void **state)
{
	struct fixture *f = *state;
	uint8_t *seg = guest_memory_ptr(&f->mem, ELF_SEG_PADDR, ELF_SEG_MEMSZ);

	memset(seg, 0xaa, ELF_SEG_MEMSZ);
	elf_build(&f->img);
	/* The second header becomes a bad PT_LOAD after a good one. */
	*elf_phdr(&f->img, 1) = *elf_phdr(&f->img, 0);
	elf_phdr(&f->img, 1)->p_paddr = 0x1000;
	assert_int_equal(load(f), -ENOEXEC);
	for (unsigned i = 0; i < ELF_SEG_MEMSZ; i++)
		assert_int_equal(seg[i], 0xaa);
}

static void bzimage_loads_protected_mode_code_at_1mib_with_entry_plus_0x200(void **state)
{
	struct fixture *f = *state;

	bz_build(&f->img);
	assert_int_equal(load(f), 0);
	assert_int_equal(f->info.format, KERNEL_FORMAT_BZIMAGE);
	assert_int_equal(f->info.entry, LAYOUT_KERNEL_ADDR + 0x200);
	assert_int_equal(f->info.load_start, LAYOUT_KERNEL_ADDR);
	assert_memory_equal(guest_memory_ptr(&f->mem, LAYOUT_KERNEL_ADDR, BZ_CODE_SIZE),
			    f->img.bytes + BZ_CODE_OFFSET, BZ_CODE_SIZE);
}

/* Loads f's image from a buffer, scribbles over the len guest bytes at loaded, loads it
 * again from a file and checks that the file gave the same info; the caller checks
 * what the second load wrote at loaded. */
static void load_file_after_buffer(struct fixture *f, uint8_t *loaded, size_t len)
{
	struct kernel_image_info from_buffer;

	assert_int_equal(load(f), 0);
	from_buffer = f->info;
	memset(loaded, 0xaa, len);
	assert_int_equal(load_file(f, f->img.size, f->img.size), 0);
	assert_memory_equal(&f->info, &from_buffer, sizeof(from_buffer));
}

static void both_formats_load_from_a_file_as_from_a_buffer(void **state)
{
	struct fixture *f = *state;
	uint8_t *seg = guest_memory_ptr(&f->mem, ELF_SEG_PADDR, ELF_SEG_MEMSZ);
	uint8_t *code = guest_memory_ptr(&f->mem, LAYOUT_KERNEL_ADDR, BZ_CODE_SIZE);

	elf_build(&f->img);
	load_file_after_buffer(f, seg, ELF_SEG_MEMSZ);
	assert_memory_equal(seg, f->img.bytes + ELF_SEG_OFFSET, ELF_SEG_FILESZ);
	assert_int_equal(seg[ELF_SEG_MEMSZ - 1], 0);

	bz_build(&f->img);
	load_file_after_buffer(f, code, BZ_CODE_SIZE);
	assert_memory_equal(code, f->img.bytes + BZ_CODE_OFFSET, BZ_CODE_SIZE);
}

/* The file was opened at one size and shrank before the loader read it all. */
static void a_kernel_file_that_ends_early_is_an_error(void **state)
{
	struct fixture *f = *state;

	elf_build(&f->img);
	assert_int_equal(load_file(f, ELF_SEG_OFFSET + 1, f->img.size), -EIO);
	assert_int_equal(load_file(f, 0x40, f->img.size), -EIO); /* cut after the ELF header */
	bz_build(&f->img);
	assert_int_equal(load_file(f, BZ_CODE_OFFSET + 1, f->img.size), -EIO);
	assert_int_equal(load_file(f, 0x100, f->img.size), -EIO); /* cut in the setup header */
}

static void bzimage_load_end_covers_init_size_from_pref_address(void **state)
{
	struct fixture *f = *state;

	bz_build(&f->img);
	assert_int_equal(load(f), 0);
	assert_int_equal(f->info.load_end, 16 * MIB + BZ_INIT_SIZE);
}

static void bzimage_setup_header_is_copied_up_to_its_declared_end(void **state)
{
	struct fixture *f = *state;

	bz_build(&f->img);
	assert_int_equal(load(f), 0);
	assert_int_equal(f->info.setup_header_len, BZ_HEADER_END - 0x1f1);
	assert_memory_equal(f->info.setup_header, f->img.bytes + 0x1f1, BZ_HEADER_END - 0x1f1);
	assert_int_equal(f->info.protocol_version, 0x020f);
	assert_int_equal(f->info.cmdline_size, 2047);
	assert_int_equal(f->info.initrd_addr_max, 0x7fffffff);
}

static void bzimage_setup_header_copy_is_bounded_by_the_buffer(void **state)
{
	struct fixture *f = *state;

	bz_build(&f->img);
	bz_hdr(&f->img)->jump = 0xffeb; /* header would run to 0x301 */
	assert_int_equal(load(f), 0);
	assert_int_equal(f->info.setup_header_len, sizeof(f->info.setup_header));
}

static void bzimage_with_zero_setup_sects_has_four(void **state)
{
	struct fixture *f = *state;
	const size_t code_offset = 5 * 512;

	bz_build(&f->img);
	bz_hdr(&f->img)->setup_sects = 0;
	for (unsigned i = 0; i < BZ_CODE_SIZE; i++)
		f->img.bytes[code_offset + i] = (uint8_t)(i ^ 0x5a);
	f->img.size = code_offset + BZ_CODE_SIZE;
	assert_int_equal(load(f), 0);
	assert_memory_equal(guest_memory_ptr(&f->mem, LAYOUT_KERNEL_ADDR, BZ_CODE_SIZE),
			    f->img.bytes + code_offset, BZ_CODE_SIZE);
}

static void bzimage_truncated_anywhere_is_rejected(void **state)
{
	struct fixture *f = *state;

	/* Covers the magic, the setup header, the real-mode setup and the
	 * protected-mode code (checked against syssize). */
	bz_build(&f->img);
	for (size_t size = 0; size < BZ_IMAGE_SIZE; size++)
		assert_int_equal(load_prefix(f, size), -ENOEXEC);
}

static void bzimage_header_declared_past_the_file_is_rejected(void **state)
{
	struct fixture *f = *state;

	bz_build(&f->img);
	bz_hdr(&f->img)->jump = 0xffeb;
	f->img.size = 0x300;
	assert_int_equal(load(f), -ENOEXEC);
}

static void bzimage_header_too_short_for_protocol_2_12_is_rejected(void **state)
{
	struct fixture *f = *state;

	bz_build(&f->img);
	bz_hdr(&f->img)->jump = (uint16_t)(0xeb | ((0x260 - 0x202) << 8));
	assert_int_equal(load(f), -ENOEXEC);
}

static void bzimage_without_boot_flag_is_rejected(void **state)
{
	struct fixture *f = *state;

	bz_build(&f->img);
	bz_hdr(&f->img)->boot_flag = 0;
	assert_int_equal(load(f), -ENOEXEC);
}

static void bzimage_older_than_protocol_2_12_is_rejected(void **state)
{
	struct fixture *f = *state;

	bz_build(&f->img);
	bz_hdr(&f->img)->version = 0x020b;
	assert_int_equal(load(f), -ENOEXEC);
}

static void bzimage_without_64_bit_entry_is_rejected(void **state)
{
	struct fixture *f = *state;

	bz_build(&f->img);
	bz_hdr(&f->img)->xloadflags = XLF_CAN_BE_LOADED_ABOVE_4G;
	assert_int_equal(load(f), -ENOEXEC);
}

static void bzimage_with_no_protected_mode_code_is_rejected(void **state)
{
	struct fixture *f = *state;

	bz_build(&f->img);
	bz_hdr(&f->img)->syssize = 0;
	f->img.size = BZ_CODE_OFFSET;
	assert_int_equal(load(f), -ENOEXEC);
}

static void bzimage_whose_init_size_exceeds_ram_is_rejected(void **state)
{
	struct fixture *f = *state;

	bz_build(&f->img);
	bz_hdr(&f->img)->init_size = GUEST_SIZE;
	assert_int_equal(load(f), -ENOEXEC);
}

/* A relocatable kernel runs at 1 MiB aligned up to kernel_alignment: 0 would mean
 * 4 GiB, and one past pref_address a start the loader did not check init_size from. */
static void bzimage_with_a_bad_kernel_alignment_is_rejected(void **state)
{
	struct fixture *f = *state;
	const uint32_t bad[] = {0, 3 * MIB, 32 * MIB};

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		bz_build(&f->img);
		bz_hdr(&f->img)->kernel_alignment = bad[i];
		assert_int_equal(load(f), -ENOEXEC);
	}
	bz_build(&f->img);
	bz_hdr(&f->img)->kernel_alignment = 16 * MIB;
	assert_int_equal(load(f), 0);
}

static void bzimage_that_cannot_relocate_and_runs_below_1mib_is_rejected(void **state)
{
	struct fixture *f = *state;

	bz_build(&f->img);
	bz_hdr(&f->img)->relocatable_kernel = 0;
	bz_hdr(&f->img)->pref_address = 0x10000;
	assert_int_equal(load(f), -ENOEXEC);
	bz_hdr(&f->img)->pref_address = 16 * MIB;
	bz_hdr(&f->img)->kernel_alignment = 0; /* not read for a kernel that stays put */
	assert_int_equal(load(f), 0);
}

static void bzimage_whose_init_size_is_below_its_code_is_rejected(void **state)
{
	struct fixture *f = *state;

	bz_build(&f->img);
	bz_hdr(&f->img)->init_size = BZ_CODE_SIZE - 16;
	assert_int_equal(load(f), -ENOEXEC);
}

static void bzimage_with_huge_pref_address_is_rejected(void **state)
{
	struct fixture *f = *state;

	bz_build(&f->img);
	bz_hdr(&f->img)->pref_address = UINT64_MAX - 0x1000;
	assert_int_equal(load(f), -ENOEXEC);
}

static void image_that_is_neither_format_is_rejected(void **state)
{
	struct fixture *f = *state;

	memset(&f->img, 0x90, sizeof(f->img));
	f->img.size = sizeof(f->img.bytes);
	assert_int_equal(load(f), -ENOEXEC);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(
		elf_vmlinux_loads_at_its_physical_address_with_its_entry, setup, teardown),
	    cmocka_unit_test_setup_teardown(
		elf_vmlinux_gets_the_x86_default_cmdline_and_initrd_limits, setup, teardown),
	    cmocka_unit_test_setup_teardown(elf_truncated_anywhere_is_rejected, setup, teardown),
	    cmocka_unit_test_setup_teardown(elf_with_bad_magic_is_neither_format, setup, teardown),
	    cmocka_unit_test_setup_teardown(elf_32_bit_is_rejected, setup, teardown),
	    cmocka_unit_test_setup_teardown(elf_big_endian_is_rejected, setup, teardown),
	    cmocka_unit_test_setup_teardown(elf_for_another_machine_is_rejected, setup, teardown),
	    cmocka_unit_test_setup_teardown(elf_that_is_not_an_executable_is_rejected, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(elf_with_wrong_program_header_size_is_rejected, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(elf_with_program_header_count_past_the_file_is_rejected,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(elf_with_program_header_offset_near_2_64_is_rejected,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(elf_without_program_headers_is_rejected, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(elf_without_loadable_segment_is_rejected, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(elf_segment_data_past_the_file_is_rejected, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(elf_segment_above_4gib_is_rejected, setup, teardown),
	    cmocka_unit_test_setup_teardown(bzimage_with_a_bad_kernel_alignment_is_rejected, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(
		bzimage_that_cannot_relocate_and_runs_below_1mib_is_rejected, setup, teardown),
	    cmocka_unit_test_setup_teardown(bzimage_whose_init_size_is_below_its_code_is_rejected,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(elf_segment_with_filesz_above_memsz_is_rejected, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(elf_segment_below_1mib_is_rejected, setup, teardown),
	    cmocka_unit_test_setup_teardown(elf_segment_past_the_end_of_ram_is_rejected, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(elf_segment_wrapping_the_address_space_is_rejected,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(elf_entry_outside_the_loaded_segments_is_rejected,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(elf_rejected_late_leaves_guest_memory_untouched, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(
		bzimage_loads_protected_mode_code_at_1mib_with_entry_plus_0x200, setup, teardown),
	    cmocka_unit_test_setup_teardown(both_formats_load_from_a_file_as_from_a_buffer, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(a_kernel_file_that_ends_early_is_an_error, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(bzimage_load_end_covers_init_size_from_pref_address,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(bzimage_setup_header_is_copied_up_to_its_declared_end,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(bzimage_setup_header_copy_is_bounded_by_the_buffer,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(bzimage_with_zero_setup_sects_has_four, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(bzimage_truncated_anywhere_is_rejected, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(bzimage_header_declared_past_the_file_is_rejected,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(bzimage_header_too_short_for_protocol_2_12_is_rejected,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(bzimage_without_boot_flag_is_rejected, setup, teardown),
	    cmocka_unit_test_setup_teardown(bzimage_older_than_protocol_2_12_is_rejected, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(bzimage_without_64_bit_entry_is_rejected, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(bzimage_with_no_protected_mode_code_is_rejected, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(bzimage_whose_init_size_exceeds_ram_is_rejected, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(bzimage_with_huge_pref_address_is_rejected, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(image_that_is_neither_format_is_rejected, setup,
					    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
