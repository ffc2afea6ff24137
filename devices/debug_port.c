#include "debug_port.h"

#include <string.h>

void debug_port_init(struct debug_port *port, void (*notify)(void *, enum debug_port_event),
		     void *opaque)
{
	port->notify = notify;
	port->opaque = opaque;
}

void debug_port_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len, bool is_write)
{
	struct debug_port *port = opaque;

	(void)offset;
	if (!is_write) {
		memset(data, 0, len);
		return;
	}
	if (data[0] == DEBUG_PORT_BOOT_COMPLETE)
		port->notify(port->opaque, DEBUG_PORT_EVENT_BOOT_COMPLETE);
	else if (data[0] == DEBUG_PORT_POWER_OFF)
		port->notify(port->opaque, DEBUG_PORT_EVENT_POWER_OFF);
}
