/* The i8042's keyboard side: Ctrl-Alt-Del reaches the guest as the scan codes its
 * translation setting asks for, one interrupt per byte, pulses that never overlap, and
 * the controller answers the self-tests Linux's i8042 driver runs. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <time.h>

#include <cmocka.h>

#include "devices/i8042.h"

struct irq_counter {
	unsigned pulses;
};

static void count_pulse(void *opaque)
{
	((struct irq_counter *)opaque)->pulses++;
}

static void write_command(struct i8042 *dev, uint8_t command)
{
	i8042_command_access(dev, 0, &command, 1, true);
}

static uint8_t read_status(struct i8042 *dev)
{
	uint8_t v = 0xff;

	i8042_command_access(dev, 0, &v, 1, false);
	return v;
}

static uint8_t read_data(struct i8042 *dev)
{
	uint8_t v = 0xff;

	i8042_data_access(dev, 0, &v, 1, false);
	return v;
}

static void set_control(struct i8042 *dev, uint8_t control)
{
	write_command(dev, 0x60);
	i8042_data_access(dev, 0, &control, 1, true);
}

/* Reads bytes while the status says one waits; returns how many. */
static size_t drain(struct i8042 *dev, uint8_t *out, size_t max)
{
	size_t n = 0;

	while ((read_status(dev) & 0x01) && n < max)
		out[n++] = read_data(dev);
	return n;
}

static void ctrl_alt_del_without_translation_is_scan_code_set_2(void **state)
{
	static const uint8_t want[] = {0x14, 0x11, 0xe0, 0x71, 0xe0, 0xf0,
				       0x71, 0xf0, 0x11, 0xf0, 0x14};
	struct irq_counter irq = {0};
	struct i8042 dev;
	uint8_t got[32];

	(void)state;
	i8042_init(&dev, NULL, &irq);
	i8042_connect_irq(&dev, count_pulse);
	set_control(&dev, 0x01); /* keyboard interrupt on, no translation */
	assert_int_equal(i8042_send_ctrl_alt_del(&dev), 0);
	assert_int_equal(irq.pulses, 1);
	assert_int_equal(drain(&dev, got, sizeof(got)), sizeof(want));
	assert_memory_equal(got, want, sizeof(want));
	/* One interrupt per byte: the first by the send, one after each read but the last. */
	assert_int_equal(irq.pulses, sizeof(want));
}

static void ctrl_alt_del_with_translation_is_scan_code_set_1(void **state)
{
	static const uint8_t want[] = {0x1d, 0x38, 0xe0, 0x53, 0xe0, 0xd3, 0xb8, 0x9d};
	struct irq_counter irq = {0};
	struct i8042 dev;
	uint8_t got[32];

	(void)state;
	i8042_init(&dev, NULL, &irq);
	i8042_connect_irq(&dev, count_pulse);
	set_control(&dev, 0x41);
	assert_int_equal(i8042_send_ctrl_alt_del(&dev), 0);
	assert_int_equal(drain(&dev, got, sizeof(got)), sizeof(want));
	assert_memory_equal(got, want, sizeof(want));
}

static void no_interrupt_while_the_guest_has_keyboard_interrupts_off(void **state)
{
	struct irq_counter irq = {0};
	struct i8042 dev;
	uint8_t got[32];

	(void)state;
	i8042_init(&dev, NULL, &irq);
	i8042_connect_irq(&dev, count_pulse);
	set_control(&dev, 0x00);
	assert_int_equal(i8042_send_ctrl_alt_del(&dev), 0);
	assert_int_equal(irq.pulses, 0);
	/* The bytes still wait for a polling driver. */
	assert_int_equal(drain(&dev, got, sizeof(got)), 11);
}

/* KVM's IRQ line as the pulses see it: how many are inside at once. The first one
 * dawdles between raising and lowering the line, as a thread descheduled there does. */
struct irq_line {
	int inside;
	int overlaps;
	int pulses;
	int entered;
};

static void pulse_slowly_first(void *opaque)
{
	struct irq_line *line = opaque;

	if (__atomic_add_fetch(&line->inside, 1, __ATOMIC_SEQ_CST) > 1)
		__atomic_add_fetch(&line->overlaps, 1, __ATOMIC_SEQ_CST);
	if (__atomic_fetch_add(&line->pulses, 1, __ATOMIC_SEQ_CST) == 0) {
		__atomic_store_n(&line->entered, 1, __ATOMIC_SEQ_CST);
		nanosleep(&(struct timespec){.tv_nsec = 200 * 1000 * 1000}, NULL);
	}
	__atomic_sub_fetch(&line->inside, 1, __ATOMIC_SEQ_CST);
}

static void *type_ctrl_alt_del(void *arg)
{
	return (void *)(intptr_t)i8042_send_ctrl_alt_del(arg);
}

/* The vCPU reads the first byte while the thread that typed the keys is still inside
 * its pulse: its own pulse, for the next byte, waits. Overlapping, the second raise
 * would find the line high and be no edge, and the guest would wait for ever. */
static void pulses_from_two_threads_never_overlap(void **state)
{
	struct irq_line line = {0};
	struct i8042 dev;
	pthread_t typist;
	void *typed;

	(void)state;
	i8042_init(&dev, NULL, &line);
	i8042_connect_irq(&dev, pulse_slowly_first);
	set_control(&dev, 0x01);
	assert_int_equal(pthread_create(&typist, NULL, type_ctrl_alt_del, &dev), 0);
	while (!__atomic_load_n(&line.entered, __ATOMIC_SEQ_CST))
		nanosleep(&(struct timespec){.tv_nsec = 1000 * 1000}, NULL);
	assert_int_equal(read_data(&dev), 0x14);
	assert_int_equal(pthread_join(typist, &typed), 0);
	assert_int_equal((intptr_t)typed, 0);
	assert_int_equal(line.pulses, 2);
	assert_int_equal(line.overlaps, 0);
}

static void keys_the_guest_never_reads_do_not_pile_up(void **state)
{
	struct i8042 dev;
	int ret = 0;

	(void)state;
	i8042_init(&dev, NULL, NULL);
	for (int i = 0; i < 10 && !ret; i++)
		ret = i8042_send_ctrl_alt_del(&dev);
	assert_int_equal(ret, -ENOSPC);
}

static void controller_answers_linux_self_tests(void **state)
{
	struct i8042 dev;

	(void)state;
	i8042_init(&dev, NULL, NULL);
	write_command(&dev, 0xaa);
	assert_int_equal(read_status(&dev) & 0x01, 0x01);
	assert_int_equal(read_data(&dev), 0x55);
	write_command(&dev, 0xab);
	assert_int_equal(read_data(&dev), 0x00);
	assert_int_equal(read_status(&dev) & 0x01, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(ctrl_alt_del_without_translation_is_scan_code_set_2),
	    cmocka_unit_test(ctrl_alt_del_with_translation_is_scan_code_set_1),
	    cmocka_unit_test(no_interrupt_while_the_guest_has_keyboard_interrupts_off),
	    cmocka_unit_test(pulses_from_two_threads_never_overlap),
	    cmocka_unit_test(keys_the_guest_never_reads_do_not_pile_up),
	    cmocka_unit_test(controller_answers_linux_self_tests),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
