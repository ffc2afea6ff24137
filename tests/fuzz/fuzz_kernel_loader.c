/* libFuzzer target: any bytes as a kernel image. The loader must reject or load them
 * without touching memory outside the image or guest RAM (ASan watches). */
#include <stddef.h>
#include <stdint.h>

#include "boot/kernel_loader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct guest_memory mem;
	static int ready;
	struct kernel_image_info info;

	/* One 32 MiB guest for the whole run: creating it per input would dominate. */
	if (!ready) {
		if (guest_memory_create(&mem, 32 << 20, NULL))
			return 0;
		ready = 1;
	}
	const struct kernel_source src = {.data = data, .fd = -1, .size = size};
	kernel_load(&mem, &src, &info, NULL);
	return 0;
}
