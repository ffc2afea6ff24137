/* Little-endian fields of mote's file formats (snapshot_stream.h, snapshot_memory.h),
 * byte by byte, so they read the same on any host and at any alignment. */
#ifndef MOTE_LITTLE_ENDIAN_H
#define MOTE_LITTLE_ENDIAN_H

#include <stdint.h>

/* The low `bytes` bytes of v at p, least significant first. */
static inline void le_store(uint8_t *p, uint64_t v, unsigned bytes)
{
	for (unsigned i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t le_load(const uint8_t *p, unsigned bytes)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < bytes; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

#endif
