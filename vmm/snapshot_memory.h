/* Guest memory in a snapshot's memory file (issue 5): the RAM mapping byte for byte —
 * the first bytes of the file are the guest's RAM, page-aligned, so a restore maps them
 * MAP_PRIVATE as they are — with zero pages left as holes, then one trailer page. A
 * diff file has the same layout and holds only the pages written since the previous
 * snapshot; the rest are holes, and a restore copies its data extents over the full
 * file's pages.
 *
 * The trailer says which snapshot the file belongs to (a random id, also in the state
 * file), for a diff which snapshot it applies on, and a checksum of the content, so a
 * restore refuses another snapshot's file, diffs out of order or missing, and, when it
 * is asked to read every page, a file whose content changed:
 *
 *   "MOTEMEM\0" | u32 version | u32 kind (0 full, 1 diff) | u64 guest bytes |
 *   16 bytes snapshot id | 16 bytes base id (a diff's; zeros for a full file) |
 *   u64 content checksum | u32 CRC-32 of the 68 bytes before it | zeros to 4096
 *
 * The content checksum is XXH3-64 over, for every page that is not all zeros, in
 * order, its index (u64, little-endian) and its bytes. Zero pages do not count, so the
 * checksum does not depend on which of them are holes (a copy made with or without
 * --sparse verifies alike). */
#ifndef MOTE_SNAPSHOT_MEMORY_H
#define MOTE_SNAPSHOT_MEMORY_H

#include <stdbool.h>
#include <stdint.h>

#include "guest_memory.h"
#include "log.h"

#define SNAPSHOT_MEMORY_TRAILER_SIZE 4096u
#define SNAPSHOT_ID_SIZE 16u

/* Bits of a page bitmap over the memory file (one per GUEST_PAGE_SIZE page). */
static inline uint64_t snapshot_memory_pages(const struct guest_memory *mem)
{
	return mem->size / GUEST_PAGE_SIZE;
}

/* Which snapshot a memory file belongs to. */
struct snapshot_memory_identity {
	bool diff;
	uint8_t id[SNAPSHOT_ID_SIZE];
	uint8_t base_id[SNAPSHOT_ID_SIZE]; /* a diff's: the snapshot it applies on */
	uint64_t guest_bytes;
	uint64_t content_checksum;
};

/* Fills id with random bytes (getrandom); 0 or a negative errno. */
int snapshot_memory_new_id(uint8_t id[SNAPSHOT_ID_SIZE]);

/* Writes mem into fd (an empty regular file): every non-zero page, or with a bitmap
 * only the pages it marks, zero or not (a page the guest cleared must override the
 * older file); then the trailer of identity (its diff flag and ids; the size and the
 * checksum are filled in here). 0 or a negative errno, with a message naming path. */
int snapshot_memory_write(const struct guest_memory *mem, const uint64_t *dirty, int fd,
			  struct snapshot_memory_identity *identity, const char *path,
			  const struct mote_log *log);

/* Reads and checks the trailer of the memory file fd: a regular file of guest_bytes
 * plus the trailer, whose trailer is intact and names that size. 0, or -EINVAL with a
 * message naming path. */
int snapshot_memory_read_identity(int fd, uint64_t guest_bytes,
				  struct snapshot_memory_identity *identity, const char *path,
				  const struct mote_log *log);

/* Reads every data page of fd and compares the content checksum with the trailer's
 * (identity, from snapshot_memory_read_identity). 0, -EINVAL when they differ, or
 * another negative errno, with a message naming path. */
int snapshot_memory_verify(int fd, const struct snapshot_memory_identity *identity,
			   const char *path, const struct mote_log *log);

/* Copies the data extents of a diff file (fd, whose identity was read) into mem. A
 * negative errno from the host, with a message naming path. */
int snapshot_memory_apply_diff(struct guest_memory *mem, int fd, const char *path,
			       const struct mote_log *log);

#endif
