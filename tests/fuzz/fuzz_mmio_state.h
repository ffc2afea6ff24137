/* The state-file side of the device-state fuzz targets: a device's section as
 * virtio_mmio_save() writes it, kept as a template, and the input's mask XORed onto it
 * and loaded as a restore reads a section (virtio_mmio_load, then snap_reader_finish).
 * An input of zeros is then a valid section and the fuzzer works near valid ones. */
#ifndef MOTE_TESTS_FUZZ_MMIO_STATE_H
#define MOTE_TESTS_FUZZ_MMIO_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "virtio/mmio.h"

#define FUZZ_MAX_SECTION 4096

struct fuzz_section {
	uint8_t bytes[FUZZ_MAX_SECTION];
	size_t len;
};

/* A section to load, as an input gives it: its length, and the mask for its bytes (the
 * first mask_len; zeros after them). */
struct fuzz_section_input {
	size_t len;
	const uint8_t *mask;
	size_t mask_len;
	const uint8_t *rest; /* what the input holds after the mask, for the target */
	size_t rest_len;
};

/* Saves mmio's device (registers, queues, the device's own state) into *section: 0, or
 * -1 when the device refuses or the section is longer than FUZZ_MAX_SECTION. */
int fuzz_section_save(struct virtio_mmio *mmio, struct fuzz_section *section);

/* Reads an input as a little-endian u16 XORed onto section's length (at most
 * FUZZ_MAX_SECTION), that many bytes of mask, then the rest. An input that ends early
 * leaves zeros: even an empty one loads a whole section, so the fuzzer reaches the
 * loaders from its first inputs, shorter than the rings and data a target reads too. */
void fuzz_section_input_split(const struct fuzz_section *section, const uint8_t *data, size_t size,
			      struct fuzz_section_input *in);

/* Copies what the input holds after the mask into dst (len bytes), zeros where it ends:
 * the rings and data a target reads after the section. */
void fuzz_section_input_rest(const struct fuzz_section_input *in, void *dst, size_t len);

/* Loads in->len bytes of section XOR in's mask (the section's and the mask's bytes past
 * their ends being zeros) into mmio, from a buffer of exactly that length, so that ASan
 * sees a read past its end. 0 when the load and the reader's end accept it (the device
 * is loaded, not yet restored), else negative (the transport and device are back at
 * power-on, or loaded from a section with bytes left over). */
int fuzz_section_load(struct virtio_mmio *mmio, const struct fuzz_section *section,
		      const struct fuzz_section_input *in);

#endif
