/* The zero page (Documentation/x86/zero-page.rst), the command line it points at, and
 * the initrd placement (Documentation/x86/boot.rst, "Details of Header Fields"). */
#include "boot_params.h"

#include <asm/bootparam.h>
#include <errno.h>
#include <string.h>

#include "layout.h"

#define PAGE_SIZE 4096ULL
#define E820_RAM 1
#define E820_RESERVED 2
#define FOUR_GIB 0x100000000ULL

/* boot.rst: "HdrS" read as a little-endian 32-bit value. */
#define SETUP_HEADER_MAGIC 0x53726448U
#define SETUP_BOOT_FLAG 0xaa55
/* What a bzImage built with CONFIG_PHYSICAL_ALIGN=16 MiB reports; vmlinux has no header. */
#define ELF_KERNEL_ALIGNMENT 0x1000000U
/* boot.rst: type_of_loader 0xff means "undefined", for loaders without an assigned ID. */
#define LOADER_TYPE_UNDEFINED 0xff
/* boot.rst, heap_end_ptr: offset from the real-mode code start, 0xfe00 as in the
 * protocol's sample layout. Only the 16-bit entry uses it, but kernels read the flag. */
#define HEAP_END_PTR 0xfe00
#define VID_MODE_NORMAL 0xffff

static int e820_add(struct boot_params *bp, uint64_t addr, uint64_t size, uint32_t type,
		    const struct mote_log *log)
{
	struct boot_e820_entry *e;

	if (bp->e820_entries >= E820_MAX_ENTRIES_ZEROPAGE) {
		log_error(log, "e820 map: more than %d entries", E820_MAX_ENTRIES_ZEROPAGE);
		return -E2BIG;
	}
	e = &bp->e820_table[bp->e820_entries++];
	e->addr = addr;
	e->size = size;
	e->type = type;
	return 0;
}

/* zero-page.rst e820_table: the BIOS-style map. The EBDA (holding the MP table) up to
 * 1 MiB is reserved as on a PC, so the kernel never allocates over the table. */
static int e820_build(struct boot_params *bp, const struct guest_memory *mem,
		      const struct mote_log *log)
{
	uint64_t low_end = guest_memory_low_end(mem);
	int err;

	if (low_end <= LAYOUT_BIOS_END) {
		log_error(log, "e820 map: low memory ends at 0x%llx, not above 1 MiB",
			  (unsigned long long)low_end);
		return -EINVAL;
	}
	err = e820_add(bp, 0, LAYOUT_EBDA_START, E820_RAM, log);
	if (!err)
		err = e820_add(bp, LAYOUT_EBDA_START, LAYOUT_BIOS_END - LAYOUT_EBDA_START,
			       E820_RESERVED, log);
	if (!err)
		err = e820_add(bp, LAYOUT_BIOS_END, low_end - LAYOUT_BIOS_END, E820_RAM, log);
	for (unsigned i = 0; !err && i < mem->region_count; i++) {
		const struct guest_memory_region *r = &mem->regions[i];

		if (r->guest_addr >= FOUR_GIB)
			err = e820_add(bp, r->guest_addr, r->size, E820_RAM, log);
	}
	return err;
}

/* ELF kernels have no setup header: fill in what a bzImage's header.S would hold and
 * the kernel checks (boot_flag and magic identify a valid header). */
static void setup_header_synthesise(struct setup_header *hdr)
{
	hdr->boot_flag = SETUP_BOOT_FLAG;
	hdr->header = SETUP_HEADER_MAGIC;
	hdr->kernel_alignment = ELF_KERNEL_ALIGNMENT;
}

static uint64_t cmdline_limit(const struct kernel_image_info *kernel)
{
	uint64_t limit = LAYOUT_CMDLINE_MAX - 1;

	if (kernel->cmdline_size && kernel->cmdline_size < limit)
		limit = kernel->cmdline_size;
	return limit;
}

int boot_initrd_place(const struct guest_memory *mem, const struct kernel_image_info *kernel,
		      uint64_t size, uint64_t *addr_out, const struct mote_log *log)
{
	uint64_t top = guest_memory_low_end(mem);
	uint64_t addr;

	if (size == 0) {
		log_error(log, "initrd is empty");
		return -EINVAL;
	}
	/* initrd_addr_max is the highest byte the initrd may occupy (boot.rst). */
	if (kernel->initrd_addr_max && (uint64_t)kernel->initrd_addr_max + 1 < top)
		top = (uint64_t)kernel->initrd_addr_max + 1;
	if (size > top || ((top - size) & ~(PAGE_SIZE - 1)) < kernel->load_end) {
		log_error(
		    log,
		    "initrd of %llu bytes does not fit between the kernel end 0x%llx and 0x%llx",
		    (unsigned long long)size, (unsigned long long)kernel->load_end,
		    (unsigned long long)top);
		return -ENOSPC;
	}
	addr = (top - size) & ~(PAGE_SIZE - 1);
	*addr_out = addr;
	return 0;
}

int boot_params_write(struct guest_memory *mem, const struct kernel_image_info *kernel,
		      const struct boot_setup *setup, const struct mote_log *log)
{
	struct boot_params bp;
	const char *cmdline = setup->cmdline ? setup->cmdline : "";
	size_t len = strlen(cmdline);
	uint64_t limit = cmdline_limit(kernel);
	int err;

	if (len > limit) {
		log_error(log, "kernel command line is %zu bytes; this kernel takes at most %llu",
			  len, (unsigned long long)limit);
		return -E2BIG;
	}
	err = guest_memory_write(mem, LAYOUT_CMDLINE_ADDR, cmdline, len + 1);
	if (err) {
		log_error(log, "writing the command line at 0x%llx: outside guest RAM",
			  (unsigned long long)LAYOUT_CMDLINE_ADDR);
		return err;
	}

	/* boot.rst: take the setup header into an otherwise zeroed boot_params. */
	memset(&bp, 0, sizeof(bp));
	if (kernel->format == KERNEL_FORMAT_BZIMAGE) {
		size_t n = kernel->setup_header_len;

		if (n > sizeof(bp) - offsetof(struct boot_params, hdr))
			n = sizeof(bp) - offsetof(struct boot_params, hdr);
		memcpy((uint8_t *)&bp + offsetof(struct boot_params, hdr), kernel->setup_header, n);
	} else {
		setup_header_synthesise(&bp.hdr);
	}

	bp.hdr.type_of_loader = LOADER_TYPE_UNDEFINED;
	bp.hdr.vid_mode = VID_MODE_NORMAL;
	bp.hdr.loadflags |= CAN_USE_HEAP;
	bp.hdr.heap_end_ptr = HEAP_END_PTR;
	bp.hdr.cmd_line_ptr = (uint32_t)LAYOUT_CMDLINE_ADDR;
	bp.ext_cmd_line_ptr = (uint32_t)(LAYOUT_CMDLINE_ADDR >> 32);
	bp.hdr.cmdline_size = (uint32_t)limit;
	if (setup->initrd_addr) {
		/* zero-page.rst: ext_ramdisk_* hold the high 32 bits. */
		bp.hdr.ramdisk_image = (uint32_t)setup->initrd_addr;
		bp.ext_ramdisk_image = (uint32_t)(setup->initrd_addr >> 32);
		bp.hdr.ramdisk_size = (uint32_t)setup->initrd_size;
		bp.ext_ramdisk_size = (uint32_t)(setup->initrd_size >> 32);
	}

	err = e820_build(&bp, mem, log);
	if (err)
		return err;

	err = guest_memory_write(mem, LAYOUT_ZERO_PAGE_ADDR, &bp, sizeof(bp));
	if (err)
		log_error(log, "writing boot_params at 0x%llx: outside guest RAM",
			  (unsigned long long)LAYOUT_ZERO_PAGE_ADDR);
	return err;
}
