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
