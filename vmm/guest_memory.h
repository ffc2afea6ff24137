/* Guest physical memory: one memfd mapped MAP_SHARED, split into the regions of the
 * x86 layout (below the 3 GiB MMIO gap, and above 4 GiB for the rest). Every access
 * to a guest address goes through guest_memory_ptr(), which checks the whole range. */
#ifndef MOTE_GUEST_MEMORY_H
#define MOTE_GUEST_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"

#define GUEST_MEMORY_MAX_REGIONS 2
/* Guest RAM sizes mote accepts: 16 MiB to 1 TiB. */
#define GUEST_MEMORY_MIN (16ULL << 20)
#define GUEST_MEMORY_MAX (1ULL << 40)

struct guest_memory_region {
	uint64_t guest_addr;
	uint64_t size;
	uint8_t *host; /* within guest_memory.base */
	uint64_t file_offset;
};

#define GUEST_PAGE_SIZE 4096u

struct guest_memory {
	int memfd;     /* -1 for memory restored from a file */
	int source_fd; /* the memory file mapped MAP_PRIVATE, or -1 */
	uint8_t *base; /* whole mapping, size bytes */
	uint64_t size; /* total RAM in bytes */
	unsigned region_count;
	struct guest_memory_region regions[GUEST_MEMORY_MAX_REGIONS];
	/* Pages the monitor wrote (device buffers, rings, boot tables), one bit per 4 KiB
	 * page of the memory file's layout, when dirty tracking is on (else NULL). KVM's
	 * dirty log sees only the guest's own writes; diff snapshots need both. */
	uint64_t *vmm_dirty;
	/* I/O the host kernel may still carry out lands here (guest_memory_keep_mapped):
	 * destroying the memory leaves it mapped. Atomic: any thread sets it. */
	bool keep_mapped;
};

/* Creates size bytes of guest RAM (a multiple of 2 MiB, at least 16 MiB), laid out
 * around the MMIO gap [MMIO_GAP_START, 4 GiB). Returns 0 or a negative errno. */
int guest_memory_create(struct guest_memory *mem, uint64_t size, const struct mote_log *log);

/* The same layout, mapped MAP_PRIVATE from the first size bytes of a memory file
 * (snapshot restore): pages load lazily, writes stay in this process, the file is never
 * modified. Takes ownership of fd. -EINVAL when the file holds fewer bytes. */
int guest_memory_create_from_file(struct guest_memory *mem, uint64_t size, int fd,
				  const struct mote_log *log);

/* Unmaps the memory and closes its file. Memory kept mapped (below) has its range
 * reserved instead until the process ends: no longer backed by the guest's RAM and
 * inaccessible, but never handed to another mapping. */
void guest_memory_destroy(struct guest_memory *mem);

/* A device gave up I/O that the host kernel may still carry out into or out of this
 * memory (a disk whose io_uring was lost: blk_ring.h). From then on its address range is
 * never released, so that it cannot become another mapping a late write would land in
 * (guest_memory_destroy). Any thread; for good. */
void guest_memory_keep_mapped(struct guest_memory *mem);

/* Starts recording the monitor's own writes (guest_memory_mark_dirty). -ENOMEM. */
int guest_memory_track_dirty(struct guest_memory *mem);

/* Records that the monitor wrote [guest_addr, guest_addr + len); any thread. A no-op
 * without tracking or for a range outside RAM. */
void guest_memory_mark_dirty(const struct guest_memory *mem, uint64_t guest_addr, uint64_t len);

/* The same for a host range, for a device that kept a buffer's host address (one
 * guest_memory_ptr() gave); a no-op for a range outside guest RAM's mapping. */
void guest_memory_mark_dirty_host(const struct guest_memory *mem, const void *host, uint64_t len);

/* Moves the monitor-written bits into bitmap (OR, one bit per page of the file
 * layout, size / GUEST_PAGE_SIZE bits) and clears them. */
void guest_memory_collect_dirty(struct guest_memory *mem, uint64_t *bitmap);

/* Host pointer for [guest_addr, guest_addr + len) when that whole range lies in one
 * RAM region; NULL on overflow, on a range outside RAM or one that spans a hole. */
void *guest_memory_ptr(const struct guest_memory *mem, uint64_t guest_addr, uint64_t len);

/* Copies len bytes into guest memory; -EFAULT when the range is not RAM. */
int guest_memory_write(const struct guest_memory *mem, uint64_t guest_addr, const void *src,
		       uint64_t len);

/* Bytes of guest RAM that are resident (touched by the guest or the monitor). */
uint64_t guest_memory_resident_bytes(const struct guest_memory *mem);

/* End of the RAM region that starts at guest address 0 (the "low memory" top). */
uint64_t guest_memory_low_end(const struct guest_memory *mem);

/* One past the highest guest-physical address of RAM. */
uint64_t guest_memory_end(const struct guest_memory *mem);

#endif
