/* Just enough of the PC keyboard controller (ports 0x60 and 0x64) for Linux's
 * `reboot=k`: the pulse-reset command 0xfe on the command port ends the VM. */
#ifndef MOTE_DEVICES_I8042_H
#define MOTE_DEVICES_I8042_H

#include <stdbool.h>
#include <stdint.h>

#include "../vmm/snapshot_stream.h"

#define I8042_DATA_PORT 0x60
#define I8042_COMMAND_PORT 0x64

struct i8042 {
	void (*reset)(void *opaque);
	void *opaque;
	uint8_t control;     /* the controller's command byte (0x20 reads it, 0x60 writes it) */
	bool expect_control; /* next data-port write is the command byte */
	bool output_full;
	uint8_t output;
};

void i8042_init(struct i8042 *dev, void (*reset)(void *), void *opaque);

/* bus_access_fn for a one-byte window; register it twice, at 0x60 and 0x64, with
 * i8042_data_access and i8042_command_access. */
void i8042_data_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len, bool is_write);
void i8042_command_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len,
			  bool is_write);

/* Snapshots: the command byte and the output buffer, fields only, inside a section the
 * caller opened. A load that fails marks r failed, returns -EINVAL and changes nothing. */
void i8042_save(const struct i8042 *dev, struct snap_writer *w);
int i8042_load(struct i8042 *dev, struct snap_reader *r);

#endif
