/* The legacy devices in a snapshot: a UART saved and loaded into a fresh one reads the
 * same through every register (divisor latch, IER, IIR with its pending interrupt, LCR,
 * MCR, LSR, MSR, SCR) and hands the guest the same bytes from its FIFO; the i8042 keeps
 * its command byte and output buffer. Values the registers cannot hold, and every cut
 * short section, are refused. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "devices/i8042.h"
#include "devices/serial.h"

enum { RBR = 0, IER = 1, IIR = 2, LCR = 3, MCR = 4, LSR = 5, MSR = 6, SCR = 7 };
#define LCR_DLAB 0x80

struct irq_line {
	int changes;
	bool level;
};

static void observe_irq(void *opaque, bool level)
{
	struct irq_line *line = opaque;

	line->changes++;
	line->level = level;
}

static const struct serial_ops ops = {.set_irq = observe_irq};

static uint8_t in(struct serial *s, unsigned reg)
{
	uint8_t value;

	serial_access(s, reg, &value, 1, false);
	return value;
}

static void out(struct serial *s, unsigned reg, uint8_t value)
{
	serial_access(s, reg, &value, 1, true);
}

static void save_serial(struct serial *s, struct snap_writer *w)
{
	snap_writer_init(w);
	serial_save(s, w);
	assert_int_equal(w->error, 0);
}

static int load_serial(struct serial *s, const uint8_t *data, size_t len)
{
	struct snap_reader r = {.data = data, .len = len};
	int ret = serial_load(s, &r);

	return ret ? ret : snap_reader_finish(&r);
}

/* A UART the guest programmed: 115200 baud, 8N1, FIFO on, both interrupts enabled and
 * the THR-empty one pending, input in the FIFO wrapped past its end, a line half
 * printed. */
static void program(struct serial *s)
{
	uint8_t filler[SERIAL_RX_FIFO - 3];

	out(s, LCR, LCR_DLAB | 0x03);
	out(s, RBR, 0x01);
	out(s, IER, 0x00);
	out(s, LCR, 0x03);
	out(s, IIR, 0x01);
	out(s, MCR, 0x0b);
	out(s, SCR, 0x5a);
	/* Fill, drain all but three, then queue more: the FIFO wraps. */
	memset(filler, 'x', sizeof(filler));
	assert_int_equal(serial_receive(s, filler, sizeof(filler)), sizeof(filler));
	for (unsigned i = 0; i < sizeof(filler) - 3; i++)
		(void)in(s, RBR);
	assert_int_equal(serial_receive(s, (const uint8_t *)"hello", 5), 5);
	for (const char *p = "partial"; *p; p++)
		out(s, RBR, (uint8_t)*p);
	out(s, IER, 0x03);
}

static void serial_reads_the_same_after_a_round_trip(void **state)
{
	struct irq_line old_line = {0}, new_line = {0};
	struct serial old, restored;
	struct snap_writer w;

	(void)state;
	serial_init(&old, -1, &ops, &old_line);
	serial_init(&restored, -1, &ops, &new_line);
	program(&old);
	save_serial(&old, &w);
	assert_int_equal(load_serial(&restored, w.buf, w.len), 0);
	/* The interrupt controller of a new VM hears the pending interrupt again. */
	assert_true(new_line.level);

	/* The divisor latch. */
	out(&old, LCR, LCR_DLAB | 0x03);
	out(&restored, LCR, LCR_DLAB | 0x03);
	assert_int_equal(in(&restored, RBR), in(&old, RBR));
	assert_int_equal(in(&restored, IER), in(&old, IER));
	assert_int_equal(in(&restored, RBR), 0x01);
	out(&old, LCR, 0x03);
	out(&restored, LCR, 0x03);
	/* Every other register, twice: reading IIR takes a THR-empty interrupt away. */
	for (unsigned round = 0; round < 2; round++)
		for (unsigned reg = IER; reg <= SCR; reg++)
			assert_int_equal(in(&restored, reg), in(&old, reg));
	/* The FIFO, byte by byte, to its end. */
	unsigned bytes = 0;
	while (in(&old, LSR) & 0x01) {
		assert_true(in(&restored, LSR) & 0x01);
		assert_int_equal(in(&restored, RBR), in(&old, RBR));
		bytes++;
	}
	assert_int_equal(bytes, 8);
	assert_false(in(&restored, LSR) & 0x01);
	/* Then the THR-empty interrupt, which reading IIR acknowledges. */
	assert_true(new_line.level);
	assert_int_equal(in(&restored, IIR), in(&old, IIR));
	assert_false(new_line.level);
	assert_int_equal(in(&restored, IIR), in(&old, IIR));
	snap_writer_free(&w);
	serial_destroy(&old);
	serial_destroy(&restored);
}

static void serial_loopback_and_divisor_round_trip(void **state)
{
	struct serial old, restored;
	struct snap_writer w;

	(void)state;
	serial_init(&old, -1, NULL, NULL);
	serial_init(&restored, -1, NULL, NULL);
	out(&old, MCR, 0x1f); /* loopback, every modem output on */
	out(&old, LCR, LCR_DLAB | 0x1b);
	out(&old, RBR, 0x34);
	out(&old, IER, 0x12);
	save_serial(&old, &w);
	assert_int_equal(load_serial(&restored, w.buf, w.len), 0);
	for (unsigned reg = RBR; reg <= SCR; reg++)
		assert_int_equal(in(&restored, reg), in(&old, reg));
	assert_int_equal(in(&restored, MSR), 0xf0);
	snap_writer_free(&w);
	serial_destroy(&old);
	serial_destroy(&restored);
}

static void serial_every_truncation_is_refused(void **state)
{
	struct serial old, restored;
	struct snap_writer w;

	(void)state;
	serial_init(&old, -1, NULL, NULL);
	serial_init(&restored, -1, NULL, NULL);
	program(&old);
	save_serial(&old, &w);
	for (size_t len = 0; len < w.len; len++)
		assert_int_equal(load_serial(&restored, w.buf, len), -EINVAL);
	/* Nothing was taken over. */
	assert_int_equal(in(&restored, SCR), 0);
	assert_int_equal(in(&restored, IER), 0);
	snap_writer_free(&w);
	serial_destroy(&old);
	serial_destroy(&restored);
}

/* Offsets in serial_save()'s layout. */
#define SAVED_IER 0
#define SAVED_MCR 2
#define SAVED_FCR 6
#define SAVED_THRI 7
#define SAVED_RX_COUNT 8

static void serial_values_the_registers_cannot_hold_are_refused(void **state)
{
	struct serial old, restored;
	struct snap_writer w;
	const struct {
		size_t offset;
		uint8_t value;
	} bad[] = {
	    {SAVED_IER, 0x10},	     {SAVED_MCR, 0x20},
	    {SAVED_FCR, 0x02},	     {SAVED_THRI, 2}, /* not a boolean */
	    {SAVED_RX_COUNT + 1, 5},		      /* 1280 bytes: more than the FIFO holds */
	};

	(void)state;
	serial_init(&old, -1, NULL, NULL);
	serial_init(&restored, -1, NULL, NULL);
	save_serial(&old, &w);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint8_t saved = w.buf[bad[i].offset];
		w.buf[bad[i].offset] = bad[i].value;
		assert_int_equal(load_serial(&restored, w.buf, w.len), -EINVAL);
		w.buf[bad[i].offset] = saved;
	}
	assert_int_equal(load_serial(&restored, w.buf, w.len), 0);
	snap_writer_free(&w);
	serial_destroy(&old);
	serial_destroy(&restored);
}

/* The half-printed line may end up in mote's own messages: a control byte put there by
 * hand (the live UART turns them into '?') is refused. */
static void serial_line_with_a_control_byte_is_refused(void **state)
{
	struct serial old, restored;
	struct snap_writer w;

	(void)state;
	serial_init(&old, -1, NULL, NULL);
	serial_init(&restored, -1, NULL, NULL);
	out(&old, 0, 'o');
	out(&old, 0, 'k');
	save_serial(&old, &w);
	/* The line is the last field saved. */
	assert_int_equal(w.buf[w.len - 1], 'k');
	assert_int_equal(load_serial(&restored, w.buf, w.len), 0);
	w.buf[w.len - 1] = 0x1b;
	assert_int_equal(load_serial(&restored, w.buf, w.len), -EINVAL);
	w.buf[w.len - 1] = 0xc3;
	assert_int_equal(load_serial(&restored, w.buf, w.len), -EINVAL);
	snap_writer_free(&w);
	serial_destroy(&old);
	serial_destroy(&restored);
}

static int load_i8042(struct i8042 *dev, const uint8_t *data, size_t len)
{
	struct snap_reader r = {.data = data, .len = len};
	int ret = i8042_load(dev, &r);

	return ret ? ret : snap_reader_finish(&r);
}

static uint8_t port(void (*access)(void *, uint64_t, uint8_t *, uint32_t, bool), struct i8042 *dev)
{
	uint8_t value;

	access(dev, 0, &value, 1, false);
	return value;
}

static void i8042_keeps_its_command_byte_and_output(void **state)
{
	struct i8042 old, restored;
	struct snap_writer w;
	uint8_t byte = 0x60;

	(void)state;
	i8042_init(&old, NULL, NULL);
	i8042_init(&restored, NULL, NULL);
	i8042_command_access(&old, 0, &byte, 1, true);
	byte = 0x47;
	i8042_data_access(&old, 0, &byte, 1, true);
	byte = 0x20; /* read the command byte: the output buffer fills */
	i8042_command_access(&old, 0, &byte, 1, true);
	snap_writer_init(&w);
	i8042_save(&old, &w);
	for (size_t len = 0; len < w.len; len++)
		assert_int_equal(load_i8042(&restored, w.buf, len), -EINVAL);
	assert_int_equal(load_i8042(&restored, w.buf, w.len), 0);
	assert_int_equal(port(i8042_command_access, &restored), port(i8042_command_access, &old));
	assert_int_equal(port(i8042_data_access, &restored), 0x47);
	assert_int_equal(port(i8042_data_access, &old), 0x47);
	assert_int_equal(port(i8042_command_access, &restored), port(i8042_command_access, &old));
	snap_writer_free(&w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(serial_reads_the_same_after_a_round_trip),
	    cmocka_unit_test(serial_loopback_and_divisor_round_trip),
	    cmocka_unit_test(serial_every_truncation_is_refused),
	    cmocka_unit_test(serial_values_the_registers_cannot_hold_are_refused),
	    cmocka_unit_test(serial_line_with_a_control_byte_is_refused),
	    cmocka_unit_test(i8042_keeps_its_command_byte_and_output),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
