/* The zero page (struct boot_params, Documentation/x86/zero-page.rst) with its e820
 * map, the kernel command line and the initrd placement. */
#ifndef MOTE_BOOT_BOOT_PARAMS_H
#define MOTE_BOOT_BOOT_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "../vmm/guest_memory.h"
#include "kernel_loader.h"

struct boot_setup {
	const char *cmdline;  /* complete command line, NUL-terminated */
	uint64_t initrd_addr; /* 0 when there is no initrd */
	uint64_t initrd_size;
};

/* Picks where an initrd of size bytes goes: page-aligned, as high as possible in low
 * memory, below initrd_addr_max, above the kernel. -ENOSPC when it does not fit. */
int boot_initrd_place(const struct guest_memory *mem, const struct kernel_image_info *kernel,
		      uint64_t size, uint64_t *addr_out, const struct mote_log *log);

/* Writes the command line to LAYOUT_CMDLINE_ADDR and boot_params to
 * LAYOUT_ZERO_PAGE_ADDR: setup header (bzImage) or a synthesised one (ELF), loader
 * type 0xff, cmd_line_ptr, ramdisk, and the e820 map of mem: RAM below the EBDA,
 * reserved EBDA..1 MiB, RAM from 1 MiB to the gap, RAM above 4 GiB. -E2BIG when the
 * command line exceeds the kernel's cmdline_size or LAYOUT_CMDLINE_MAX. */
int boot_params_write(struct guest_memory *mem, const struct kernel_image_info *kernel,
		      const struct boot_setup *setup, const struct mote_log *log);

#endif
