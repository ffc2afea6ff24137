/* ELF vmlinux and bzImage loading. Every image byte is read after a bounds check
 * against the image's size, and every guest byte is written through
 * guest_memory_ptr(). The image is validated completely before anything is copied, so
 * a rejected kernel leaves guest memory untouched (a read error while copying may
 * not). */
#include "kernel_loader.h"

#include <asm/bootparam.h>
#include <elf.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "../vmm/file_image.h"
#include "layout.h"

/* Offsets into a bzImage (Documentation/x86/boot.rst, "The Real-Mode Kernel Header"). */
#define BZ_SETUP_HEADER_OFFSET 0x1f1
#define BZ_JUMP_END_OFFSET 0x201 /* byte: header length past 0x202 */
#define BZ_HEADER_MAGIC_OFFSET 0x202
#define BZ_HEADER_MAGIC "HdrS"
#define BZ_BOOT_FLAG 0xaa55
#define BZ_MIN_PROTOCOL 0x020c /* 2.12: xloadflags, so XLF_KERNEL_64 can be checked */
#define BZ_SECTOR 512
#define BZ_DEFAULT_SETUP_SECTS 4 /* boot.rst: "If this field is 0, the real value is 4." */
#define BZ_ENTRY_64_OFFSET 0x200 /* boot.rst "64-bit Boot Protocol" */

/* A vmlinux carries no setup header, so these are what every x86-64 kernel's own
 * header.S reports: cmdline_size = COMMAND_LINE_SIZE - 1 (2048 - 1) and
 * initrd_addr_max 0x7fffffff. Using the same values keeps ELF and bzImage boots of
 * one kernel equivalent. */
#define ELF_DEFAULT_CMDLINE_SIZE 2047
#define ELF_DEFAULT_INITRD_ADDR_MAX 0x7fffffffU

/* Copies len bytes at offset, which the caller has checked lie inside the image. */
static int source_read(const struct kernel_source *src, uint64_t offset, void *dst, size_t len,
		       const struct mote_log *log)
{
	if (src->data) {
		memcpy(dst, src->data + offset, len);
		return 0;
	}
	int err = file_read_at(src->fd, dst, len, offset);
	if (err)
		log_error(log, "reading the kernel at 0x%llx+0x%zx: %s", (unsigned long long)offset,
			  len, strerror(-err));
	return err;
}

static int elf_check_phdr(const struct guest_memory *mem, const Elf64_Phdr *ph, unsigned index,
			  size_t size, const struct mote_log *log)
{
	if (ph->p_offset > size || ph->p_filesz > size - ph->p_offset) {
		log_error(log,
			  "kernel ELF segment %u: file range 0x%llx+0x%llx past the %zu-byte image",
			  index, (unsigned long long)ph->p_offset, (unsigned long long)ph->p_filesz,
			  size);
		return -ENOEXEC;
	}
	if (ph->p_filesz > ph->p_memsz) {
		log_error(log, "kernel ELF segment %u: p_filesz 0x%llx larger than p_memsz 0x%llx",
			  index, (unsigned long long)ph->p_filesz, (unsigned long long)ph->p_memsz);
		return -ENOEXEC;
	}
	/* Below 1 MiB live the zero page, page tables, command line and MP table. */
	if (ph->p_paddr < LAYOUT_KERNEL_ADDR) {
		log_error(log, "kernel ELF segment %u: physical address 0x%llx below 1 MiB", index,
			  (unsigned long long)ph->p_paddr);
		return -ENOEXEC;
	}
	if (!guest_memory_ptr(mem, ph->p_paddr, ph->p_memsz)) {
		log_error(log, "kernel ELF segment %u: 0x%llx+0x%llx is outside guest RAM", index,
			  (unsigned long long)ph->p_paddr, (unsigned long long)ph->p_memsz);
		return -ENOEXEC;
	}
	/* The boot page tables identity-map the first 4 GiB only (cpu_setup.c): the kernel
	 * runs from its physical addresses until it sets up its own. */
	if (ph->p_paddr + ph->p_memsz > LAYOUT_MMIO_GAP_END) {
		log_error(log,
			  "kernel ELF segment %u: 0x%llx+0x%llx ends above 4 GiB, past the boot "
			  "page tables' identity map",
			  index, (unsigned long long)ph->p_paddr, (unsigned long long)ph->p_memsz);
		return -ENOEXEC;
	}
	return 0;
}

static int elf_check_header(const Elf64_Ehdr *eh, size_t size, const struct mote_log *log)
{
	if (eh->e_ident[EI_CLASS] != ELFCLASS64 || eh->e_ident[EI_DATA] != ELFDATA2LSB) {
		log_error(log, "kernel ELF: not a little-endian 64-bit ELF (class %u, data %u)",
			  eh->e_ident[EI_CLASS], eh->e_ident[EI_DATA]);
		return -ENOEXEC;
	}
	if (eh->e_machine != EM_X86_64) {
		log_error(log, "kernel ELF: machine %u is not x86-64", eh->e_machine);
		return -ENOEXEC;
	}
	if (eh->e_type != ET_EXEC) {
		log_error(log, "kernel ELF: type %u is not an executable", eh->e_type);
		return -ENOEXEC;
	}
	if (eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phnum == 0) {
		log_error(log,
			  "kernel ELF: program header size %u, count %u: expected %zu-byte entries",
			  eh->e_phentsize, eh->e_phnum, sizeof(Elf64_Phdr));
		return -ENOEXEC;
	}
	/* e_phnum * e_phentsize is at most 0xffff * 56: no overflow in 64 bits. */
	if (eh->e_phoff > size || (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr) > size - eh->e_phoff) {
		log_error(
		    log,
		    "kernel ELF: program headers at 0x%llx (%u entries) past the %zu-byte image",
		    (unsigned long long)eh->e_phoff, eh->e_phnum, size);
		return -ENOEXEC;
	}
	return 0;
}

/* head: the image's first bytes, at least the ELF header's worth when size allows. */
static int elf_load(struct guest_memory *mem, const struct kernel_source *src, const uint8_t *head,
		    struct kernel_image_info *info, const struct mote_log *log)
{
	size_t size = src->size;
	Elf64_Ehdr eh;
	Elf64_Phdr ph;
	uint64_t start = UINT64_MAX, end = 0;
	unsigned loads = 0;
	int err;

	if (size < sizeof(eh)) {
		log_error(log, "kernel ELF: %zu bytes is shorter than the ELF header", size);
		return -ENOEXEC;
	}
	/* Copied out: the head buffer has no alignment guarantee. */
	memcpy(&eh, head, sizeof(eh));
	err = elf_check_header(&eh, size, log);
	if (err)
		return err;

	/* First pass validates everything, second copies: no half-loaded kernel. */
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		err = source_read(src, eh.e_phoff + (uint64_t)i * sizeof(ph), &ph, sizeof(ph), log);
		if (err)
			return err;
		if (ph.p_type != PT_LOAD || ph.p_memsz == 0)
			continue;
		err = elf_check_phdr(mem, &ph, i, size, log);
		if (err)
			return err;
		loads++;
		if (ph.p_paddr < start)
			start = ph.p_paddr;
		if (ph.p_paddr + ph.p_memsz > end)
			end = ph.p_paddr + ph.p_memsz;
	}
	if (!loads) {
		log_error(log, "kernel ELF: no loadable segment");
		return -ENOEXEC;
	}
	if (eh.e_entry < start || eh.e_entry >= end) {
		log_error(log, "kernel ELF: entry 0x%llx outside the loaded 0x%llx..0x%llx",
			  (unsigned long long)eh.e_entry, (unsigned long long)start,
			  (unsigned long long)end);
		return -ENOEXEC;
	}

	for (unsigned i = 0; i < eh.e_phnum; i++) {
		err = source_read(src, eh.e_phoff + (uint64_t)i * sizeof(ph), &ph, sizeof(ph), log);
		if (err)
			return err;
		if (ph.p_type != PT_LOAD || ph.p_memsz == 0)
			continue;
		/* Read again from the file, which may have changed since: checked again. */
		err = elf_check_phdr(mem, &ph, i, size, log);
		if (err)
			return err;
		uint8_t *dst = guest_memory_ptr(mem, ph.p_paddr, ph.p_memsz);
		err = source_read(src, ph.p_offset, dst, ph.p_filesz, log);
		if (err)
			return err;
		/* The bss tail: guest memory may hold a previous boot's bytes. */
		memset(dst + ph.p_filesz, 0, ph.p_memsz - ph.p_filesz);
	}

	info->format = KERNEL_FORMAT_ELF;
	/* vmlinux's e_entry is phys_startup_64, a physical address (vmlinux.lds.S). */
	info->entry = eh.e_entry;
	info->load_start = start;
	info->load_end = end;
	info->cmdline_size = ELF_DEFAULT_CMDLINE_SIZE;
	info->initrd_addr_max = ELF_DEFAULT_INITRD_ADDR_MAX;
	return 0;
}

static int bzimage_check_header(const struct setup_header *hdr, size_t hdr_end,
				const struct mote_log *log)
{
	if (hdr->boot_flag != BZ_BOOT_FLAG) {
		log_error(log, "bzImage: boot_flag 0x%04x is not 0xaa55", hdr->boot_flag);
		return -ENOEXEC;
	}
	if (hdr->version < BZ_MIN_PROTOCOL) {
		log_error(log, "bzImage: boot protocol %u.%02u is older than 2.12",
			  hdr->version >> 8, hdr->version & 0xff);
		return -ENOEXEC;
	}
	/* The last field read here is init_size; a 2.12 header is at least that long. */
	if (hdr_end < BZ_SETUP_HEADER_OFFSET + offsetof(struct setup_header, init_size) +
			  sizeof(hdr->init_size)) {
		log_error(log, "bzImage: setup header ends at 0x%zx, too short for protocol 2.12",
			  hdr_end);
		return -ENOEXEC;
	}
	if (!(hdr->xloadflags & XLF_KERNEL_64)) {
		log_error(log,
			  "bzImage: no 64-bit entry point (XLF_KERNEL_64 clear in xloadflags 0x%x)",
			  hdr->xloadflags);
		return -ENOEXEC;
	}
	/* Where the kernel runs (compressed/head_64.S, the 64-bit entry): a relocatable one
	 * at its load address (1 MiB) aligned up to kernel_alignment, or at pref_address
	 * (LOAD_PHYSICAL_ADDR) when that is higher; any other at pref_address. init_size
	 * is checked from pref_address, so the aligned 1 MiB must not pass it; an
	 * alignment of 0 would round it up to 4 GiB. */
	uint32_t align = hdr->kernel_alignment;
	if (hdr->relocatable_kernel &&
	    (align == 0 || (align & (align - 1)) ||
	     (LAYOUT_KERNEL_ADDR + align - 1) / align * align >
		 (hdr->pref_address > LAYOUT_KERNEL_ADDR ? hdr->pref_address
							 : LAYOUT_KERNEL_ADDR))) {
		log_error(log,
			  "bzImage: kernel_alignment 0x%x is not a power of two that keeps the "
			  "kernel at or below pref_address 0x%llx",
			  align, (unsigned long long)hdr->pref_address);
		return -ENOEXEC;
	}
	if (!hdr->relocatable_kernel && hdr->pref_address < LAYOUT_KERNEL_ADDR) {
		log_error(
		    log,
		    "bzImage: a kernel that cannot relocate wants to run at 0x%llx, below 1 MiB",
		    (unsigned long long)hdr->pref_address);
		return -ENOEXEC;
	}
	if ((uint64_t)hdr->init_size < (uint64_t)hdr->syssize * 16) {
		log_error(log, "bzImage: init_size 0x%x is smaller than the kernel's 0x%llx bytes",
			  hdr->init_size, (unsigned long long)hdr->syssize * 16);
		return -ENOEXEC;
	}
	return 0;
}

/* head: the image's first bytes, all of them up to 0x202 + 0xff, the furthest a setup
 * header can end (its length is one byte at 0x201). */
static int bzimage_load(struct guest_memory *mem, const struct kernel_source *src,
			const uint8_t *head, struct kernel_image_info *info,
			const struct mote_log *log)
{
	size_t size = src->size;
	struct setup_header hdr;
	size_t hdr_end, copy_len, setup_size, code_size;
	uint64_t runtime_start, runtime_end;
	uint8_t *dst;
	int err;

	hdr_end = BZ_HEADER_MAGIC_OFFSET + (size_t)head[BZ_JUMP_END_OFFSET];
	if (hdr_end > size) {
		log_error(log, "bzImage: setup header ends at 0x%zx, past the %zu-byte image",
			  hdr_end, size);
		return -ENOEXEC;
	}
	memset(&hdr, 0, sizeof(hdr));
	copy_len = hdr_end - BZ_SETUP_HEADER_OFFSET;
	memcpy(&hdr, head + BZ_SETUP_HEADER_OFFSET,
	       copy_len < sizeof(hdr) ? copy_len : sizeof(hdr));
	err = bzimage_check_header(&hdr, hdr_end, log);
	if (err)
		return err;

	setup_size =
	    ((size_t)(hdr.setup_sects ? hdr.setup_sects : BZ_DEFAULT_SETUP_SECTS) + 1) * BZ_SECTOR;
	if (setup_size >= size) {
		log_error(log,
			  "bzImage: %zu bytes of real-mode setup leave no protected-mode code in "
			  "the %zu-byte image",
			  setup_size, size);
		return -ENOEXEC;
	}
	code_size = size - setup_size;
	/* syssize counts the protected-mode code in 16-byte paragraphs (boot.rst); the
	 * kernel build pads the image to at least that, so less means a cut-off file. */
	if (code_size < (uint64_t)hdr.syssize * 16) {
		log_error(log,
			  "bzImage: %zu bytes of protected-mode code, header says %llu: truncated",
			  code_size, (unsigned long long)hdr.syssize * 16);
		return -ENOEXEC;
	}
	if (!guest_memory_ptr(mem, LAYOUT_KERNEL_ADDR, code_size)) {
		log_error(log, "bzImage: %zu bytes of kernel at 1 MiB do not fit in guest RAM",
			  code_size);
		return -ENOEXEC;
	}
	/* boot.rst, init_size: the kernel needs init_size bytes from its runtime start,
	 * which for a kernel loaded at 1 MiB is pref_address (LOAD_PHYSICAL_ADDR) whether
	 * it relocates (1 MiB aligned up to kernel_alignment stays below it) or not. */
	runtime_start =
	    hdr.pref_address > LAYOUT_KERNEL_ADDR ? hdr.pref_address : LAYOUT_KERNEL_ADDR;
	if (!guest_memory_ptr(mem, runtime_start, hdr.init_size)) {
		log_error(log, "bzImage: init_size 0x%x from 0x%llx does not fit in guest RAM",
			  hdr.init_size, (unsigned long long)runtime_start);
		return -ENOEXEC;
	}
	runtime_end = runtime_start + hdr.init_size;

	dst = guest_memory_ptr(mem, LAYOUT_KERNEL_ADDR, code_size);
	err = source_read(src, setup_size, dst, code_size, log);
	if (err)
		return err;

	info->format = KERNEL_FORMAT_BZIMAGE;
	info->entry = LAYOUT_KERNEL_ADDR + BZ_ENTRY_64_OFFSET;
	info->load_start = LAYOUT_KERNEL_ADDR;
	info->load_end = LAYOUT_KERNEL_ADDR + code_size;
	if (runtime_end > info->load_end)
		info->load_end = runtime_end;
	info->setup_header_len =
	    copy_len < sizeof(info->setup_header) ? copy_len : sizeof(info->setup_header);
	memcpy(info->setup_header, head + BZ_SETUP_HEADER_OFFSET, info->setup_header_len);
	info->protocol_version = hdr.version;
	info->cmdline_size = hdr.cmdline_size;
	info->initrd_addr_max = hdr.initrd_addr_max;
	return 0;
}

int kernel_load(struct guest_memory *mem, const struct kernel_source *src,
		struct kernel_image_info *info, const struct mote_log *log)
{
	/* Enough for the ELF header and for the longest bzImage setup header. */
	uint8_t head[BZ_HEADER_MAGIC_OFFSET + 0x100];
	size_t size = src->size;
	size_t head_len = size < sizeof(head) ? size : sizeof(head);
	int err;

	memset(info, 0, sizeof(*info));
	err = source_read(src, 0, head, head_len, log);
	if (err)
		return err;
	if (head_len >= SELFMAG && memcmp(head, ELFMAG, SELFMAG) == 0)
		return elf_load(mem, src, head, info, log);
	if (head_len >= BZ_HEADER_MAGIC_OFFSET + 4 &&
	    memcmp(head + BZ_HEADER_MAGIC_OFFSET, BZ_HEADER_MAGIC, 4) == 0)
		return bzimage_load(mem, src, head, info, log);
	log_error(log,
		  "kernel image (%zu bytes) is neither an ELF vmlinux nor a bzImage (no \"HdrS\" "
		  "at 0x202)",
		  size);
	return -ENOEXEC;
}
