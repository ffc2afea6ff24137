/* The debug / boot-timer I/O port. Guest-init's first act is a one-byte write of
 * DEBUG_PORT_BOOT_COMPLETE here (design.md "Boot timing"); its last is a write of
 * DEBUG_PORT_POWER_OFF. The port is the one QEMU's isa-debug-exit device listens on in
 * benchmarks/ (`-device isa-debug-exit,iobase=0xf4,iosize=4`), so the same guest
 * measures both monitors. This header is shared with guest-init. */
#ifndef MOTE_DEVICES_DEBUG_PORT_H
#define MOTE_DEVICES_DEBUG_PORT_H

#define DEBUG_PORT_ADDR 0xf4
#define DEBUG_PORT_LEN 4
/* 123: the value Firecracker's boot timer device expects, for familiarity. */
#define DEBUG_PORT_BOOT_COMPLETE 0x7b
#define DEBUG_PORT_POWER_OFF 0xfe

#ifndef MOTE_GUEST_SIDE
#include <stdint.h>

#include "../vmm/bus.h"

enum debug_port_event {
	DEBUG_PORT_EVENT_BOOT_COMPLETE,
	DEBUG_PORT_EVENT_POWER_OFF,
};

struct debug_port {
	void (*notify)(void *opaque, enum debug_port_event event);
	void *opaque;
};

void debug_port_init(struct debug_port *port, void (*notify)(void *, enum debug_port_event),
		     void *opaque);

/* bus_access_fn for the port: recognised values notify, everything else is ignored. */
void debug_port_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len, bool is_write);
#endif

#endif
