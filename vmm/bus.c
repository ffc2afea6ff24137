#include "bus.h"

#include <errno.h>
#include <string.h>

void bus_init(struct bus *bus, const char *name)
{
	memset(bus, 0, sizeof(*bus));
	bus->name = name;
}

int bus_register(struct bus *bus, uint64_t base, uint64_t len, bus_access_fn access, void *opaque,
		 const char *name, const struct mote_log *log)
{
	unsigned pos = 0;

	if (len == 0 || base + len < base) {
		log_error(log, "%s bus: invalid range for %s at 0x%llx+0x%llx", bus->name, name,
			  (unsigned long long)base, (unsigned long long)len);
		return -EINVAL;
	}
	if (bus->count == BUS_MAX_RANGES) {
		log_error(log, "%s bus: no room for %s", bus->name, name);
		return -ENOSPC;
	}
	while (pos < bus->count && bus->ranges[pos].base < base)
		pos++;
	/* Sorted and disjoint, so only the neighbours can overlap. */
	if ((pos > 0 && bus->ranges[pos - 1].base + bus->ranges[pos - 1].len > base) ||
	    (pos < bus->count && base + len > bus->ranges[pos].base)) {
		log_error(log, "%s bus: %s at 0x%llx+0x%llx overlaps an existing device", bus->name,
			  name, (unsigned long long)base, (unsigned long long)len);
		return -EEXIST;
	}
	memmove(&bus->ranges[pos + 1], &bus->ranges[pos],
		(bus->count - pos) * sizeof(bus->ranges[0]));
	bus->ranges[pos] = (struct bus_range){base, len, access, opaque, name};
	bus->count++;
	return 0;
}

const struct bus_range *bus_find(const struct bus *bus, uint64_t addr, uint32_t len)
{
	unsigned lo = 0, hi = bus->count;

	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;
		const struct bus_range *r = &bus->ranges[mid];

		if (addr < r->base) {
			hi = mid;
		} else if (addr - r->base >= r->len) {
			lo = mid + 1;
		} else {
			return len <= r->len - (addr - r->base) ? r : NULL;
		}
	}
	return NULL;
}

bool bus_dispatch(const struct bus *bus, uint64_t addr, uint8_t *data, uint32_t len, bool is_write)
{
	const struct bus_range *r = bus_find(bus, addr, len);

	if (!r) {
		if (!is_write)
			memset(data, 0xff, len);
		return false;
	}
	r->access(r->opaque, addr - r->base, data, len, is_write);
	return true;
}
