/* The kernel command line's parameters split as the kernel splits them, so that a word
 * inside another's quoted value is part of that value and not a parameter of its own:
 * guest-init reads /proc/cmdline with it, and the monitor finds where the kernel's own
 * parameters end (cmdline_kernel_part). */
#ifndef MOTE_BOOT_CMDLINE_PARAM_H
#define MOTE_BOOT_CMDLINE_PARAM_H

#include <stdbool.h>
#include <stddef.h>

/* One parameter, pointing into the line. */
struct cmdline_param {
	const char *word;	  /* where it starts, an opening quote included */
	const char *name, *value; /* value NULL: no '=' */
	size_t name_len, value_len;
	bool unclosed; /* a double quote in it is never closed: it runs to the line's end */
};

/* Splits the parameter at *p as the kernel's next_arg() (lib/cmdline.c) does: words
 * part at white space outside double quotes; a quote opening the whole word, or its
 * value, is taken off with the closing one. Moves *p past it; false at the end. */
bool cmdline_next(const char **p, struct cmdline_param *param);

/* The value of the last parameter `KEY=VALUE` (a bare `KEY` yields ""), as the kernel
 * lets a later parameter override an earlier one. A malloc'd string, or NULL when KEY
 * is not there (or out of memory). */
char *cmdline_value(const char *cmdline, const char *key);

#endif
