/* libFuzzer target: any bytes as a control API request (api_server.h) to a mote with no
 * VM: the first byte picks the method, the bytes up to the first newline are the path,
 * the rest is the body. Paths naming files (a snapshot, a kernel) reach only files that
 * do not exist or are not mote's. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/api_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const methods[] = {"GET", "PUT", "PATCH", "DELETE"};
	struct vm_controller controller;
	struct cli_options pending;
	struct api_reply reply;
	char path[256];

	if (size < 1)
		return 0;
	const char *method = methods[data[0] % 4];
	const uint8_t *rest = data + 1;
	size_t left = size - 1;
	const uint8_t *newline = memchr(rest, '\n', left);
	size_t path_len = newline ? (size_t)(newline - rest) : left;
	if (path_len >= sizeof(path))
		return 0;
	memcpy(path, rest, path_len);
	path[path_len] = '\0';
	const char *body = newline ? (const char *)newline + 1 : NULL;
	size_t body_len = newline ? left - path_len - 1 : 0;

	cli_options_init(&pending);
	vm_controller_init(&controller, &pending, 0, NULL, NULL);
	api_handle(&controller, method, path, body, body_len, &reply);
	free(reply.body);
	vm_controller_destroy(&controller);
	return 0;
}
