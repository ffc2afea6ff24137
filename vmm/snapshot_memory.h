/* Guest memory in a snapshot's memory file (issue 5): the RAM mapping byte for byte —
 * the file's size is the guest's RAM, page-aligned, so a restore maps it MAP_PRIVATE
 * as it is — with zero pages left as holes. A diff file has the same size and holds
 * only the pages written since the previous snapshot; the rest are holes, and a restore
 * copies its data extents over the full file's pages. */
#ifndef MOTE_SNAPSHOT_MEMORY_H
#define MOTE_SNAPSHOT_MEMORY_H

#include <stdint.h>

#include "guest_memory.h"
#include "log.h"

/* Bits of a page bitmap over the memory file (one per GUEST_PAGE_SIZE page). */
static inline uint64_t snapshot_memory_pages(const struct guest_memory *mem)
{
	return mem->size / GUEST_PAGE_SIZE;
}

/* Writes mem into fd (an empty regular file): every non-zero page, or with a bitmap
 * only the pages it marks, zero or not (a page the guest cleared must override the
 * older file). 0 or a negative errno, with a message naming path. */
int snapshot_memory_write(const struct guest_memory *mem, const uint64_t *dirty, int fd,
			  const char *path, const struct mote_log *log);

/* Copies the data extents of a diff file (fd, of mem->size bytes) into mem. -EINVAL
 * for a file of another size; others from the host, with a message naming path. */
int snapshot_memory_apply_diff(struct guest_memory *mem, int fd, const char *path,
			       const struct mote_log *log);

#endif
