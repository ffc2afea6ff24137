/* Parsing the numbers a user types: memory sizes ("512M", "2G", "1536") and counts. */
#ifndef MOTE_SIZE_PARSE_H
#define MOTE_SIZE_PARSE_H

#include <stdint.h>

/* "N" (MiB, as QEMU's -m), "NK", "NM", "NG", "NT" with an optional "iB"/"B" suffix,
 * case-insensitive. 0 or -EINVAL for anything else, -ERANGE on overflow. */
int size_parse(const char *text, uint64_t *bytes);

/* A decimal integer in [min, max]; -EINVAL for junk, -ERANGE outside. */
int uint_parse(const char *text, unsigned min, unsigned max, unsigned *value);

#endif
