/* The fuzz targets' port devices (fuzz_port_devices.h). */
#include "fuzz_port_devices.h"

static void no_irq(void *opaque, bool level)
{
	(void)opaque;
	(void)level;
}

static void no_event(void *opaque, enum serial_event event, const char *line)
{
	(void)opaque;
	(void)event;
	(void)line;
}

static void no_reset(void *opaque)
{
	(void)opaque;
}

static void no_pulse(void *opaque)
{
	(void)opaque;
}

static const struct serial_ops serial_ops = {.set_irq = no_irq, .event = no_event};

void fuzz_port_devices_init(struct serial *serial, struct i8042 *i8042)
{
	serial_init(serial, -1, &serial_ops, NULL);
	i8042_init(i8042, no_reset, NULL);
	i8042_connect_irq(i8042, no_pulse);
}
