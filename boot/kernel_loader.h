/* Loads a Linux x86-64 kernel into guest memory: an ELF vmlinux (PT_LOAD segments at
 * their physical addresses) or a bzImage (Documentation/x86/boot.rst, protocol 2.12+,
 * 64-bit entry at the protected-mode code + 0x200). Only loads; boot_params are built
 * by boot_params.c. */
#ifndef MOTE_BOOT_KERNEL_LOADER_H
#define MOTE_BOOT_KERNEL_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "../vmm/guest_memory.h"

enum kernel_format {
	KERNEL_FORMAT_ELF,
	KERNEL_FORMAT_BZIMAGE,
};

struct kernel_image_info {
	enum kernel_format format;
	uint64_t entry;	     /* guest physical 64-bit entry point */
	uint64_t load_start; /* lowest guest physical byte written */
	/* One past the highest byte the kernel occupies; for a bzImage this includes the
	 * init_size area it decompresses into, so nothing else may be placed below it. */
	uint64_t load_end;
	/* bzImage only: the setup header (boot.rst, offsets 0x1f1..) to copy into
	 * boot_params.hdr, and its length in bytes. */
	uint8_t setup_header[0x290 - 0x1f1];
	size_t setup_header_len;
	uint16_t protocol_version; /* 0 for ELF */
	/* The kernel's limit, excluding NUL; 0: unknown. ELF: 2047, what x86-64 reports. */
	uint32_t cmdline_size;
	/* Highest address the initrd may occupy (inclusive, boot.rst); 0: unknown.
	 * ELF: 0x7fffffff, what every x86-64 header.S reports. */
	uint32_t initrd_addr_max;
};

/* Where the image's bytes come from: a buffer holding all of it, or a file read with
 * pread() straight into guest memory, so that the monitor never holds the image (a
 * 17 MiB vmlinux of which the guest needs 10). */
struct kernel_source {
	const uint8_t *data; /* the whole image; NULL: read it from fd */
	int fd;
	size_t size; /* the image's length in bytes */
};

/* Parses the image and copies the kernel into mem. Rejects with -ENOEXEC and a message
 * anything that is neither format, is truncated, has segments outside guest RAM or
 * below 1 MiB, or a bzImage older than protocol 2.12 or without XLF_KERNEL_64; -EIO or
 * the read's errno when the file cannot be read (or shrank) while loading. */
int kernel_load(struct guest_memory *mem, const struct kernel_source *src,
		struct kernel_image_info *info, const struct mote_log *log);

#endif
