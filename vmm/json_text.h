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

/* Whether the len bytes are well-formed UTF-8 (RFC 3629 §4: no overlong forms, no
 * surrogates, nothing past U+10FFFF), as JSON exchanged between systems must be (RFC
 * 8259 §8.1). cJSON checks none of it. */
bool json_text_is_utf8(const char *text, size_t len);

/* Replaces, in place, each byte of the NUL-terminated text that is not part of a
 * well-formed UTF-8 sequence with '?': JSON mote prints stays UTF-8 whatever bytes a
 * path or a message held. The bytes replaced are all >= 0x80, so never a quote or a
 * backslash of the JSON around them. */
void json_text_make_utf8(char *text);

#endif
