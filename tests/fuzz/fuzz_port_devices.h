/* The port devices as the fuzz targets that drive them set them up: the serial port
 * with its output discarded, and the i8042, both with callbacks (interrupt lines, a
 * reset, a panic line seen) that do nothing. */
#ifndef MOTE_TESTS_FUZZ_PORT_DEVICES_H
#define MOTE_TESTS_FUZZ_PORT_DEVICES_H

#include "devices/i8042.h"
#include "devices/serial.h"

void fuzz_port_devices_init(struct serial *serial, struct i8042 *i8042);

#endif
