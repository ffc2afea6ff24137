/* Checks on JSON text before cJSON parses it. cJSON turns the escape \u0000 into a NUL
 * inside a string, which then ends the C string it hands out: "/img\u0000junk" would
 * silently name /img, and a key would be cut the same way. RFC 8259 §7 allows the
 * escape, so it is refused here, with raw NUL bytes, rather than taken as something
 * else than written. */
#ifndef MOTE_JSON_TEXT_H
#define MOTE_JSON_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* Whether the len bytes of text hold a NUL byte, or a \u0000 escape inside a string. */
bool json_text_holds_nul(const char *text, size_t len);

#endif
