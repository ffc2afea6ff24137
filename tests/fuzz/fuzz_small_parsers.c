/* libFuzzer target: the small parsers of text a user, a guest's kernel command line or a
 * request hands mote. The input is the text itself (NUL-terminated copies of it, in
 * buffers of exactly its size, so that ASan sees any read past the end):
 * - cmdline_kernel_part (boot/cmdline.c): where the kernel's own parameters end; the
 *   end it reports must be inside the line and start a "--" word when not at its end;
 * - guest-init's cmdline_next/cmdline_value (boot/cmdline_param.c): every
 *   parameter it splits lies inside the line, and the walk always moves on;
 * - size_parse and uint_parse (vmm/size_parse.c), json_text_* (vmm/json_text.c). */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "boot/cmdline.h"
#include "boot/cmdline_param.h"
#include "vmm/json_text.h"
#include "vmm/size_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_kernel_part(const char *line, size_t len)
{
	size_t end = SIZE_MAX;

	if (cmdline_kernel_part(line, &end) != 0)
		return;
	if (end > len)
		abort();
	if (end < len && strncmp(line + end, "--", 2) != 0 && strncmp(line + end, "\"--\"", 4) != 0)
		abort();
}

static void check_params(const char *line, size_t len)
{
	struct cmdline_param param;
	const char *p = line, *before = line;

	while (cmdline_next(&p, &param)) {
		/* The walk moves on (a lone quote is an empty word past it). */
		if (p <= before || p > line + len || param.name < line ||
		    param.name + param.name_len > line + len)
			abort();
		if (param.value &&
		    (param.value < line || param.value + param.value_len > line + len))
			abort();
		before = p;
	}
	free(cmdline_value(line, "mote.run"));
	free(cmdline_value(line, "mote.agent"));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);
	uint64_t bytes;
	unsigned value;

	if (!text)
		abort();
	memcpy(text, data, size);
	text[size] = '\0';
	size_t len = strlen(text); /* up to the first NUL, as a C string */

	check_kernel_part(text, len);
	check_params(text, len);
	(void)size_parse(text, &bytes);
	(void)uint_parse(text, 1, 32, &value);
	(void)json_text_holds_nul(text, size);
	if (json_text_is_utf8(text, len) == false)
		json_text_make_utf8(text);
	free(text);
	return 0;
}
