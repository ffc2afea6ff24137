/* Builds the guest kernel command line from the base (user's or default) and the
 * pieces the monitor appends (virtio_mmio.device=..., root=...). */
#ifndef MOTE_BOOT_CMDLINE_H
#define MOTE_BOOT_CMDLINE_H

#include <stddef.h>

struct cmdline {
	char buf[4096];
	size_t len;
	int overflow; /* set when an append did not fit; reported by cmdline_check */
};

void cmdline_init(struct cmdline *cl, const char *base);

/* Appends " piece" (a space only between words). Sets overflow instead of cutting. */
void cmdline_append(struct cmdline *cl, const char *piece);

/* 0, or -E2BIG when the line (without its NUL) is longer than max_len or overflowed. */
int cmdline_check(const struct cmdline *cl, size_t max_len);

/* Where the kernel's own parameters end in line, as the kernel splits it (lib/cmdline.c
 * next_arg(): words part at white space outside double quotes; kernel-parameters.rst:
 * what follows a "--" word goes to init): *end is the offset of that "--" word, or the
 * line's length. 0, or -EINVAL when a double quote before it is never closed: the
 * kernel would take the rest of the line, parameters appended by mote included, as
 * part of one value. */
int cmdline_kernel_part(const char *line, size_t *end);

#endif
