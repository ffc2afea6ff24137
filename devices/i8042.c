#include "i8042.h"

#include <errno.h>
#include <string.h>

/* Commands and status bits from the IBM PC/AT keyboard controller; Linux uses these in
 * drivers/input/serio/i8042.h and arch/x86/kernel/reboot.c. */
#define CMD_READ_CONTROL 0x20
#define CMD_WRITE_CONTROL 0x60
#define CMD_SELF_TEST 0xaa
#define CMD_KEYBOARD_TEST 0xab
#define CMD_KEYBOARD_DISABLE 0xad
#define CMD_KEYBOARD_ENABLE 0xae
#define CMD_PULSE_RESET 0xfe
#define SELF_TEST_PASSED 0x55
#define KEYBOARD_TEST_PASSED 0x00
#define STATUS_OUTPUT_FULL 0x01
#define STATUS_SYSTEM_FLAG 0x04
#define STATUS_KEYBOARD_UNLOCKED 0x10 /* clear means "keylock active" */
#define CONTROL_KEYBOARD_INTERRUPT 0x01
#define CONTROL_KEYBOARD_DISABLED 0x10
#define CONTROL_TRANSLATE 0x40
/* A keyboard's answers to commands sent to it through the data port. */
#define KEYBOARD_ACK 0xfa
#define KEYBOARD_RESET 0xff
#define KEYBOARD_SELF_TEST_PASSED 0xaa

void i8042_init(struct i8042 *dev, void (*reset)(void *), void *opaque)
{
	memset(dev, 0, sizeof(*dev));
	dev->reset = reset;
	dev->opaque = opaque;
	pthread_mutex_init(&dev->lock, NULL);
}

void i8042_connect_irq(struct i8042 *dev, void (*pulse_irq)(void *))
{
	dev->pulse_irq = pulse_irq;
}

/* With lock held. false when full. */
static bool i8042_push(struct i8042 *dev, uint8_t byte)
{
	if (dev->output_count == I8042_OUTPUT_MAX)
		return false;
	dev->output[(dev->output_head + dev->output_count) % I8042_OUTPUT_MAX] = byte;
	dev->output_count++;
	return true;
}

/* With lock held: whether a byte from the keyboard waits and the guest wants an
 * interrupt for it. */
static bool i8042_keyboard_irq_due(const struct i8042 *dev)
{
	return dev->output_count && (dev->control & CONTROL_KEYBOARD_INTERRUPT) &&
	       !(dev->control & CONTROL_KEYBOARD_DISABLED);
}

/* With lock held, so that two pulses never overlap: KVM_IRQ_LINE sets one level for
 * all of userspace, and a pulse raised while another still holds the line high is no
 * edge (the IOAPIC coalesces it, arch/x86/kvm/ioapic.c), so its byte would wait for
 * an interrupt that never comes. Ctrl-Alt-Del's first pulse (from the thread that
 * typed it) met the vCPU's pulse for its second byte that way in a loaded outer guest:
 * the guest read one key of the three. */
static void i8042_pulse(struct i8042 *dev, bool due)
{
	if (due && dev->pulse_irq)
		dev->pulse_irq(dev->opaque);
}

int i8042_send_ctrl_alt_del(struct i8042 *dev)
{
	/* Left Ctrl, left Alt, Delete (an extended key: 0xe0 first), pressed, then released
	 * in the reverse order. Set 1 releases set bit 7, set 2 sends 0xf0 before the code. */
	static const uint8_t set1[] = {0x1d, 0x38, 0xe0, 0x53, 0xe0, 0xd3, 0xb8, 0x9d};
	static const uint8_t set2[] = {0x14, 0x11, 0xe0, 0x71, 0xe0, 0xf0,
				       0x71, 0xf0, 0x11, 0xf0, 0x14};

	pthread_mutex_lock(&dev->lock);
	bool translated = dev->control & CONTROL_TRANSLATE;
	const uint8_t *codes = translated ? set1 : set2;
	unsigned count = translated ? sizeof(set1) : sizeof(set2);
	if (dev->output_count + count > I8042_OUTPUT_MAX) {
		pthread_mutex_unlock(&dev->lock);
		return -ENOSPC;
	}
	for (unsigned i = 0; i < count; i++)
		i8042_push(dev, codes[i]);
	i8042_pulse(dev, i8042_keyboard_irq_due(dev));
	pthread_mutex_unlock(&dev->lock);
	return 0;
}

void i8042_data_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len, bool is_write)
{
	struct i8042 *dev = opaque;
	bool due = false;

	(void)offset;
	pthread_mutex_lock(&dev->lock);
	if (is_write) {
		if (dev->expect_control) {
			dev->control = data[0];
		} else {
			/* A command for the keyboard itself: acknowledged, and a reset also
			 * reports a passed self-test. */
			i8042_push(dev, KEYBOARD_ACK);
			if (data[0] == KEYBOARD_RESET)
				i8042_push(dev, KEYBOARD_SELF_TEST_PASSED);
			due = i8042_keyboard_irq_due(dev);
		}
		dev->expect_control = false;
	} else {
		memset(data, 0, len);
		if (dev->output_count) {
			data[0] = dev->output[dev->output_head];
			dev->output_head = (dev->output_head + 1) % I8042_OUTPUT_MAX;
			dev->output_count--;
			/* One byte per interrupt: the next one gets its own. */
			due = i8042_keyboard_irq_due(dev);
		}
	}
	i8042_pulse(dev, due);
	pthread_mutex_unlock(&dev->lock);
}

void i8042_command_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len, bool is_write)
{
	struct i8042 *dev = opaque;
	bool reset = false;

	(void)offset;
	pthread_mutex_lock(&dev->lock);
	if (!is_write) {
		/* Input buffer always empty, so `reboot=k`'s wait loop ends at once. */
		memset(data, 0, len);
		data[0] = STATUS_SYSTEM_FLAG | STATUS_KEYBOARD_UNLOCKED |
			  (dev->output_count ? STATUS_OUTPUT_FULL : 0);
		pthread_mutex_unlock(&dev->lock);
		return;
	}
	switch (data[0]) {
	case CMD_READ_CONTROL:
		i8042_push(dev, dev->control);
		break;
	case CMD_WRITE_CONTROL:
		dev->expect_control = true;
		break;
	case CMD_SELF_TEST:
		i8042_push(dev, SELF_TEST_PASSED);
		break;
	case CMD_KEYBOARD_TEST:
		i8042_push(dev, KEYBOARD_TEST_PASSED);
		break;
	case CMD_KEYBOARD_DISABLE:
		dev->control |= CONTROL_KEYBOARD_DISABLED;
		break;
	case CMD_KEYBOARD_ENABLE:
		dev->control &= (uint8_t)~CONTROL_KEYBOARD_DISABLED;
		break;
	case CMD_PULSE_RESET:
		reset = true;
		break;
	default:
		break;
	}
	pthread_mutex_unlock(&dev->lock);
	/* Outside the lock: the reset ends the VM, which may come back to this device. */
	if (reset && dev->reset)
		dev->reset(dev->opaque);
}

void i8042_save(const struct i8042 *dev, struct snap_writer *w)
{
	snap_put_u8(w, dev->control);
	snap_put_bool(w, dev->expect_control);
	snap_put_u32(w, dev->output_count);
	for (unsigned i = 0; i < dev->output_count; i++)
		snap_put_u8(w, dev->output[(dev->output_head + i) % I8042_OUTPUT_MAX]);
}

int i8042_load(struct i8042 *dev, struct snap_reader *r)
{
	uint8_t control = snap_get_u8(r);
	bool expect_control = snap_get_bool(r);
	uint32_t count = snap_get_u32(r);
	uint8_t output[I8042_OUTPUT_MAX];

	if (!r->error && count > I8042_OUTPUT_MAX)
		snap_fail(r, "i8042: more queued keyboard bytes than the controller holds");
	for (uint32_t i = 0; i < count && !r->error; i++)
		output[i] = snap_get_u8(r);
	if (r->error)
		return -EINVAL;
	pthread_mutex_lock(&dev->lock);
	dev->control = control;
	dev->expect_control = expect_control;
	memcpy(dev->output, output, count);
	dev->output_head = 0;
	dev->output_count = count;
	pthread_mutex_unlock(&dev->lock);
	return 0;
}
