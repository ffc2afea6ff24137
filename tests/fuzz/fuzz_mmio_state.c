/* The state-file side of the device-state fuzz targets (fuzz_mmio_state.h). */
#include "fuzz_mmio_state.h"

#include <stdlib.h>
#include <string.h>

int fuzz_section_save(struct virtio_mmio *mmio, struct fuzz_section *section)
{
	struct snap_writer w;

	snap_writer_init(&w);
	int ret = virtio_mmio_save(mmio, &w);
	if (!ret && (w.error || w.len > FUZZ_MAX_SECTION))
		ret = -1;
	if (!ret) {
		memcpy(section->bytes, w.buf, w.len);
		section->len = w.len;
	}
	snap_writer_free(&w);
	return ret;
}

void fuzz_section_input_split(const struct fuzz_section *section, const uint8_t *data, size_t size,
			      struct fuzz_section_input *in)
{
	uint16_t len_mask = 0;

	if (size >= 2)
		len_mask = (uint16_t)(data[0] | data[1] << 8);
	size_t skip = size < 2 ? size : 2;
	data += skip;
	size -= skip;
	in->len = (section->len ^ len_mask) % (FUZZ_MAX_SECTION + 1);
	in->mask = data;
	in->mask_len = size < in->len ? size : in->len;
	in->rest = data + in->mask_len;
	in->rest_len = size - in->mask_len;
}

int fuzz_section_load(struct virtio_mmio *mmio, const struct fuzz_section *section,
		      const struct fuzz_section_input *in)
{
	size_t len = in->len < FUZZ_MAX_SECTION ? in->len : FUZZ_MAX_SECTION;
	uint8_t *bytes = malloc(len ? len : 1);

	if (!bytes)
		abort(); /* the host, not the input */
	for (size_t i = 0; i < len; i++)
		bytes[i] = (i < section->len ? section->bytes[i] : 0) ^
			   (i < in->mask_len ? in->mask[i] : 0);
	struct snap_reader r = {.data = bytes, .len = len};
	int ret = virtio_mmio_load(mmio, &r);
	if (!ret)
		ret = snap_reader_finish(&r);
	free(bytes);
	return ret;
}

void fuzz_section_input_rest(const struct fuzz_section_input *in, void *dst, size_t len)
{
	size_t n = in->rest_len < len ? in->rest_len : len;

	memset(dst, 0, len);
	if (n)
		memcpy(dst, in->rest, n);
}
