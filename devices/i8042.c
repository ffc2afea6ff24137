#include "i8042.h"

#include <errno.h>
#include <string.h>

/* Commands and status bits from the IBM PC/AT keyboard controller; Linux uses these in
 * drivers/input/serio/i8042.h and arch/x86/kernel/reboot.c. */
#define CMD_READ_CONTROL 0x20
#define CMD_WRITE_CONTROL 0x60
#define CMD_PULSE_RESET 0xfe
#define STATUS_OUTPUT_FULL 0x01
#define STATUS_SYSTEM_FLAG 0x04
#define STATUS_KEYBOARD_UNLOCKED 0x10 /* clear means "keylock active" */

void i8042_init(struct i8042 *dev, void (*reset)(void *), void *opaque)
{
	memset(dev, 0, sizeof(*dev));
	dev->reset = reset;
	dev->opaque = opaque;
}

void i8042_data_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len, bool is_write)
{
	struct i8042 *dev = opaque;

	(void)offset;
	if (is_write) {
		if (dev->expect_control)
			dev->control = data[0];
		dev->expect_control = false;
		return;
	}
	memset(data, 0, len);
	data[0] = dev->output;
	dev->output_full = false;
}

void i8042_command_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len, bool is_write)
{
	struct i8042 *dev = opaque;

	(void)offset;
	if (!is_write) {
		/* Input buffer always empty, so `reboot=k`'s wait loop ends at once. */
		memset(data, 0, len);
		data[0] = STATUS_SYSTEM_FLAG | STATUS_KEYBOARD_UNLOCKED |
			  (dev->output_full ? STATUS_OUTPUT_FULL : 0);
		return;
	}
	switch (data[0]) {
	case CMD_READ_CONTROL:
		dev->output = dev->control;
		dev->output_full = true;
		break;
	case CMD_WRITE_CONTROL:
		dev->expect_control = true;
		break;
	case CMD_PULSE_RESET:
		if (dev->reset)
			dev->reset(dev->opaque);
		break;
	default:
		break;
	}
}

void i8042_save(const struct i8042 *dev, struct snap_writer *w)
{
	snap_put_u8(w, dev->control);
	snap_put_bool(w, dev->expect_control);
	snap_put_bool(w, dev->output_full);
	snap_put_u8(w, dev->output);
}

int i8042_load(struct i8042 *dev, struct snap_reader *r)
{
	uint8_t control = snap_get_u8(r);
	bool expect_control = snap_get_bool(r);
	bool output_full = snap_get_bool(r);
	uint8_t output = snap_get_u8(r);

	if (r->error)
		return -EINVAL;
	dev->control = control;
	dev->expect_control = expect_control;
	dev->output_full = output_full;
	dev->output = output;
	return 0;
}
