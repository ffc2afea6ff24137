/* libFuzzer target: any bytes as a JSON config file. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/cli_options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char error[CLI_ERROR_MAX];
	struct cli_options opts;
	char *text = malloc(size + 1);

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';
	cli_options_init(&opts);
	config_file_apply(&opts, text, error, sizeof(error));
	cli_options_free(&opts);
	free(text);
	return 0;
}
