/* Just enough of the PC keyboard controller (ports 0x60 and 0x64) for Linux's
 * `reboot=k` and for Ctrl-Alt-Del: the pulse-reset command 0xfe on the command port
 * ends the VM, and i8042_send_ctrl_alt_del() types the three keys for a guest with the
 * i8042 and AT keyboard drivers (CONFIG_SERIO_I8042, CONFIG_KEYBOARD_ATKBD), as
 * Firecracker's SendCtrlAltDel does. */
#ifndef MOTE_DEVICES_I8042_H
#define MOTE_DEVICES_I8042_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../vmm/snapshot_stream.h"

#define I8042_DATA_PORT 0x60
#define I8042_COMMAND_PORT 0x64
#define I8042_KEYBOARD_IRQ 1
#define I8042_OUTPUT_MAX 32

struct i8042 {
	void (*reset)(void *opaque);
	void (*pulse_irq)(void *opaque); /* an edge on IRQ 1; or NULL */
	void *opaque;
	/* vCPU threads and the controller's thread (Ctrl-Alt-Del) both reach the state. */
	pthread_mutex_t lock;
	uint8_t control;     /* the controller's command byte (0x20 reads it, 0x60 writes it) */
	bool expect_control; /* next data-port write is the command byte */
	/* Bytes for the guest to read from the data port, oldest first. */
	uint8_t output[I8042_OUTPUT_MAX];
	unsigned output_head, output_count;
};

void i8042_init(struct i8042 *dev, void (*reset)(void *), void *opaque);

/* Keyboard interrupts go to pulse_irq (called with opaque, from any thread, with the
 * device's lock held: pulses never overlap, and pulse_irq must not call back into the
 * device). */
void i8042_connect_irq(struct i8042 *dev, void (*pulse_irq)(void *));

/* Queues Ctrl, Alt and Del pressed then released, and interrupts the guest. The codes
 * are scan code set 1 when the guest turned translation on in the command byte, else
 * set 2, as a controller in front of a real keyboard delivers them. -ENOSPC when the
 * guest has not read the previous keys yet. */
int i8042_send_ctrl_alt_del(struct i8042 *dev);

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
