/* Checks on JSON text before cJSON parses it (json_text.h). */
#include "json_text.h"

#include <string.h>

bool json_text_holds_nul(const char *text, size_t len)
{
	bool in_string = false;

	if (memchr(text, '\0', len))
		return true;
	for (size_t i = 0; i < len; i++) {
		if (!in_string) {
			in_string = text[i] == '"';
		} else if (text[i] == '"') {
			in_string = false;
		} else if (text[i] == '\\') {
			/* An escape: \u0000 is the one that makes a NUL; any other escape
			 * (\\ included) is skipped whole, so its second byte starts nothing. */
			if (len - i > 5 && memcmp(text + i + 1, "u0000", 5) == 0)
				return true;
			i++;
		}
	}
	return false;
}

/* The length of the well-formed UTF-8 sequence at text (RFC 3629 §4's table), or 0. */
static size_t utf8_sequence_length(const unsigned char *text, size_t len)
{
	unsigned char b = text[0];
	size_t n;
	unsigned char low = 0x80, high = 0xbf; /* the second byte's range */

	if (b < 0x80)
		return 1;
	if (b >= 0xc2 && b <= 0xdf) {
		n = 2;
	} else if (b >= 0xe0 && b <= 0xef) {
		n = 3;
		if (b == 0xe0)
			low = 0xa0; /* overlong below U+0800 */
		else if (b == 0xed)
			high = 0x9f; /* the UTF-16 surrogates */
	} else if (b >= 0xf0 && b <= 0xf4) {
		n = 4;
		if (b == 0xf0)
			low = 0x90; /* overlong below U+10000 */
		else if (b == 0xf4)
			high = 0x8f; /* past U+10FFFF */
	} else {
		return 0; /* a continuation byte, 0xc0, 0xc1 or 0xf5 and up */
	}
	if (len < n || text[1] < low || text[1] > high)
		return 0;
	for (size_t i = 2; i < n; i++)
		if ((text[i] & 0xc0) != 0x80)
			return 0;
	return n;
}

bool json_text_is_utf8(const char *text, size_t len)
{
	const unsigned char *t = (const unsigned char *)text;

	for (size_t i = 0; i < len;) {
		size_t n = utf8_sequence_length(t + i, len - i);
		if (!n)
			return false;
		i += n;
	}
	return true;
}

void json_text_make_utf8(char *text)
{
	unsigned char *t = (unsigned char *)text;
	size_t len = strlen(text);

	for (size_t i = 0; i < len;) {
		size_t n = utf8_sequence_length(t + i, len - i);
		if (n) {
			i += n;
		} else {
			t[i] = '?';
			i++;
		}
	}
}
