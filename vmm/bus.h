/* Port I/O and MMIO dispatch (design.md: a registry, sorted array + binary search).
 * Each handler sees the offset from its own base, never the absolute address. */
#ifndef MOTE_BUS_H
#define MOTE_BUS_H

#include <stdbool.h>
#include <stdint.h>

#include "log.h"

/* data holds len bytes (1, 2, 4 or 8). Reads fill data; writes consume it. */
typedef void (*bus_access_fn)(void *opaque, uint64_t offset, uint8_t *data, uint32_t len,
			      bool is_write);

struct bus_range {
	uint64_t base;
	uint64_t len;
	bus_access_fn access;
	void *opaque;
	const char *name;
};

#define BUS_MAX_RANGES 64

struct bus {
	const char *name; /* "pio" or "mmio", for messages */
	unsigned count;
	struct bus_range ranges[BUS_MAX_RANGES]; /* sorted by base, never overlapping */
};

void bus_init(struct bus *bus, const char *name);

/* Adds [base, base+len). -EEXIST if it overlaps a registered range, -EINVAL for
 * len 0 or a wrapping range, -ENOSPC when full. Setup-time only (not thread-safe
 * against concurrent dispatch). */
int bus_register(struct bus *bus, uint64_t base, uint64_t len, bus_access_fn access, void *opaque,
		 const char *name, const struct mote_log *log);

/* The range containing [addr, addr+len), or NULL. An access straddling a range end
 * matches nothing. */
const struct bus_range *bus_find(const struct bus *bus, uint64_t addr, uint32_t len);

/* Dispatches one access. Unclaimed reads return all ones (like an empty ISA bus);
 * unclaimed writes are dropped. Returns whether a handler took it. */
bool bus_dispatch(const struct bus *bus, uint64_t addr, uint8_t *data, uint32_t len, bool is_write);

#endif
