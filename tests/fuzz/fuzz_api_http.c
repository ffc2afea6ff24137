/* libFuzzer target: any bytes as what a client sends on a control API connection
 * (api_http.h) to a mote with no VM. The first byte sets the size of the pieces the bytes
 * arrive in and the replies are read in; after the client's last byte and its close, the
 * connection must have sent everything and be finished. Paths naming files reach only
 * files that do not exist or are not mote's, as in fuzz_api_request. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/api_http.h"
#include "vmm/api_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads up to max reply bytes; how many there were. */
static size_t fuzz_read_reply(struct api_http *h, size_t max)
{
	size_t len;

	api_http_output(h, &len);
	if (len > max)
		len = max;
	if (len && api_http_sent(h, len))
		abort(); /* only out of memory fails, and the fuzzer's memory is ample */
	return len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct vm_controller controller;
	struct cli_options pending;
	struct mote_log log = {0};
	struct api_http *h = malloc(sizeof(*h));

	if (size < 1 || !h) {
		free(h);
		return 0;
	}
	size_t piece = (size_t)data[0] % 97 + 1;
	size_t at = 1;
	cli_options_init(&pending);
	vm_controller_init(&controller, &pending, 0, NULL, NULL);
	api_http_init(h, &controller, &log);
	while (at < size && !api_http_finished(h)) {
		size_t room;
		char *space = api_http_input_space(h, &room);
		size_t n = room < piece ? room : piece;
		if (n > size - at)
			n = size - at;
		memcpy(space, data + at, n);
		at += n;
		if (n && api_http_received(h, n))
			abort();
		/* Neither reading nor writing can go on: the connection is stuck. */
		if (!fuzz_read_reply(h, piece * 3) && !n && !api_http_finished(h))
			abort();
	}
	if (api_http_end_of_input(h))
		abort();
	while (fuzz_read_reply(h, piece))
		;
	if (!api_http_finished(h))
		abort();
	api_http_free(h);
	free(h);
	vm_controller_destroy(&controller);
	return 0;
}
