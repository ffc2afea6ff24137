/* libFuzzer target: a hostile state file's sections of the port devices, the serial
 * port and the i8042 (serial_load, i8042_load). The input's first byte picks the
 * device; the rest is XORed onto a section saved from a device with state in it (bytes
 * received, keys queued), so an input of zeros is a valid section and the fuzzer works
 * near valid ones. Whatever the bytes, the load must refuse cleanly or give a device
 * whose every register then reads and writes without touching memory it does not own
 * (ASan watches, the section in a buffer of exactly its size). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_port_devices.h"
#include "vmm/snapshot_stream.h"

#define MAX_SECTION 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct template
{
	uint8_t bytes[MAX_SECTION];
	size_t len;
};

struct harness {
	struct serial serial;
	struct i8042 i8042;
	struct template serial_template, i8042_template;
};

static int keep(struct snap_writer *w, struct template *t)
{
	if (w->error || w->len > MAX_SECTION)
		return -1;
	memcpy(t->bytes, w->buf, w->len);
	t->len = w->len;
	return 0;
}

/* Created once: devices with something in them, and their sections. */
static struct harness *harness_get(void)
{
	static struct harness h;
	static int state; /* 0 new, 1 ready, -1 failed */
	struct snap_writer w;

	if (state)
		return state > 0 ? &h : NULL;
	state = -1;
	fuzz_port_devices_init(&h.serial, &h.i8042);
	serial_receive(&h.serial, (const uint8_t *)"typed", 5);
	if (i8042_send_ctrl_alt_del(&h.i8042) != 0)
		return NULL;
	snap_writer_init(&w);
	serial_save(&h.serial, &w);
	int ret = keep(&w, &h.serial_template);
	snap_writer_free(&w);
	snap_writer_init(&w);
	i8042_save(&h.i8042, &w);
	ret |= keep(&w, &h.i8042_template);
	snap_writer_free(&w);
	if (ret)
		return NULL;
	state = 1;
	return &h;
}

/* Every register of a loaded device, read, then written with the input's bytes. */
static void exercise(struct harness *h, bool serial, const uint8_t *data, size_t size)
{
	for (uint64_t reg = 0; reg < (serial ? SERIAL_REG_COUNT : 2); reg++) {
		uint8_t byte = 0;
		if (serial)
			serial_access(&h->serial, reg, &byte, 1, false);
		else if (reg == 0)
			i8042_data_access(&h->i8042, 0, &byte, 1, false);
		else
			i8042_command_access(&h->i8042, 0, &byte, 1, false);
	}
	for (size_t i = 0; i + 1 < size && i < 64; i += 2) {
		uint8_t byte = data[i + 1];
		if (serial)
			serial_access(&h->serial, data[i] % SERIAL_REG_COUNT, &byte, 1,
				      data[i] & 8);
		else if (data[i] & 1)
			i8042_command_access(&h->i8042, 0, &byte, 1, data[i] & 2);
		else
			i8042_data_access(&h->i8042, 0, &byte, 1, data[i] & 2);
	}
}

static int load(struct harness *h, bool serial, const uint8_t *section, size_t len)
{
	struct snap_reader r = {.data = section, .len = len};
	int ret = serial ? serial_load(&h->serial, &r) : i8042_load(&h->i8042, &r);

	return ret ? ret : snap_reader_finish(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct harness *h = harness_get();

	if (!h)
		abort(); /* the host, not the input: no run would mean anything */
	if (size < 1)
		return 0;
	bool serial = data[0] & 1;
	const struct template *t = serial ? &h->serial_template : &h->i8042_template;
	const uint8_t *mask = data + 1;
	size_t len = size - 1 < MAX_SECTION ? size - 1 : MAX_SECTION;
	/* Exactly len bytes, so that ASan sees a read past the section. */
	uint8_t *section = malloc(len ? len : 1);
	if (!section)
		abort();
	for (size_t i = 0; i < len; i++)
		section[i] = (i < t->len ? t->bytes[i] : 0) ^ mask[i];
	if (load(h, serial, section, len) == 0)
		exercise(h, serial, mask, len);
	free(section);
	/* The next input starts from the template's state. */
	if (load(h, serial, t->bytes, t->len) != 0)
		abort();
	return 0;
}
