/* Guest memory in a snapshot's memory file (issue 5). The file starts with the guest's
 * RAM byte for byte, page-aligned, so a restore maps it MAP_PRIVATE as it is, with
 * zero pages left as holes; a trailer page ends it. A diff file has the same start and
 * holds only the pages written since the previous snapshot, then a bitmap of those
 * pages, then the trailer; a restore copies the pages the bitmap names over the older
 * memory. The bitmap, not the holes, says which pages a diff holds: a diff copied with
 * its holes filled in, or with its zero pages turned into holes, means the same.
 *
 *   full: RAM | trailer          diff: RAM | bitmap | trailer
 *   bitmap: one bit per page, page i in byte i/8, bit i%8; padded with zeros to a
 *           multiple of 4096 bytes
 *
 * The trailer says which snapshot the file belongs to (a random id, also in the state
 * file), for a diff which snapshot it applies on, and a checksum of the content, so a
 * restore refuses another snapshot's file, diffs out of order or missing, and, when it
 * is asked to read every page, a file whose content changed:
 *
 *   "MOTEMEM\0" | u32 version | u32 kind (0 full, 1 diff) | u64 guest bytes |
 *   16 bytes snapshot id | 16 bytes base id (a diff's; zeros for a full file) |
 *   u64 content checksum | u64 bitmap bytes (0 for a full file) |
 *   u32 CRC-32 of the 72 bytes before it | zeros to 4096             (little-endian)
 *
 * The content checksum is XXH3-64 over pages in order, each as its index (u64,
 * little-endian) then its bytes: for a full file every page that is not all zeros (so
 * holes or written zeros verify alike), for a diff every page its bitmap names. */
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
	uint64_t bitmap_bytes; /* a diff's page bitmap, after the RAM; 0 for a full file */
};

/* Fills id with random bytes (getrandom); 0 or a negative errno. */
int snapshot_memory_new_id(uint8_t id[SNAPSHOT_ID_SIZE]);

/* Writes mem into fd (an empty regular file): every non-zero page, or with dirty (a
 * diff) the pages dirty marks, zero or not (a page the guest cleared must override the
 * older memory), and dirty itself; then the trailer of identity (its ids; the diff
 * flag, sizes and checksum are filled in here). 0 or a negative errno, with a message
 * naming path. */
int snapshot_memory_write(const struct guest_memory *mem, const uint64_t *dirty, int fd,
			  struct snapshot_memory_identity *identity, const char *path,
			  const struct mote_log *log);

/* Reads and checks the trailer of the memory file fd: a regular file of guest_bytes,
 * a diff's bitmap and the trailer, whose trailer is intact and names those sizes. 0,
 * or -EINVAL with a message naming path. */
int snapshot_memory_read_identity(int fd, uint64_t guest_bytes,
				  struct snapshot_memory_identity *identity, const char *path,
				  const struct mote_log *log);

/* The same for a memory file whose guest size is not known yet (it is the trailer's). */
int snapshot_memory_probe(int fd, struct snapshot_memory_identity *identity, const char *path,
			  const struct mote_log *log);

/* Opens a memory file for reading (a diff's, with diff: for the message). The fd, or a
 * negative errno with a message naming path (NULL: -EINVAL). */
int snapshot_memory_open(const char *path, bool diff, const struct mote_log *log);

/* Whether a memory file (identity, read from path) comes next in a chain of memory files:
 * with previous NULL, the chain's start, which must be a full file; else a diff taken
 * right after the snapshot previous is the memory of (read from previous_path). 0, or
 * -EINVAL with a message saying what the chain needs. */
int snapshot_memory_check_chain(const struct snapshot_memory_identity *identity, const char *path,
				const struct snapshot_memory_identity *previous,
				const char *previous_path, const struct mote_log *log);

/* Reads every data page of fd and compares the content checksum with the trailer's
 * (identity, from snapshot_memory_read_identity). 0, -EINVAL when they differ, or
 * another negative errno, with a message naming path. */
int snapshot_memory_verify(int fd, const struct snapshot_memory_identity *identity,
			   const char *path, const struct mote_log *log);

/* Reads a full memory file (fd, whose identity was read) into mem, which has its size
 * and is all zeros, and checks the content against the checksum as it goes. 0, -EINVAL
 * when they differ, or another negative errno, with a message naming path. */
int snapshot_memory_load_full(struct guest_memory *mem, int fd,
			      const struct snapshot_memory_identity *identity, const char *path,
			      const struct mote_log *log);

/* Copies the pages a diff file (fd, whose identity was read) names into mem; with
 * verify, checks what it copied against the content checksum too. -EINVAL for a bitmap
 * that names pages past the guest's, or (verify) content that does not match, another
 * negative errno from the host, with a message naming path. */
int snapshot_memory_apply_diff(struct guest_memory *mem, int fd,
			       const struct snapshot_memory_identity *identity, bool verify,
			       const char *path, const struct mote_log *log);

#endif
