/* virtio-blk (virtio 1.2 §5.2) on a raw image file, with its I/O on io_uring
 * (liburing): many requests in flight per queue; IN, OUT, FLUSH, GET_ID, DISCARD and
 * WRITE_ZEROES; read-only disks. FLUSH is an fdatasync, and the request is answered only
 * after it completed: what the guest flushed survives a kill -9 of the monitor.
 *
 * The driver is not trusted. A request that breaks a rule (short header, data not a
 * whole number of sectors, beyond the capacity or longer than the config space
 * allows, a write to a read-only disk) fails alone with VIRTIO_BLK_S_IOERR, an
 * unknown one with VIRTIO_BLK_S_UNSUPP; a chain with no writable byte for the status
 * goes back with nothing written (used length 0). Only a broken queue — a chain
 * virtq_pop() refuses, or a head offered again while the device still owns it — stops
 * the device until a reset (DEVICE_NEEDS_RESET). A disk whose io_uring had to be given
 * up (blk_ring.h) stops for good: it no longer starts after a reset. */
#ifndef MOTE_VIRTIO_BLK_H
#define MOTE_VIRTIO_BLK_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "../vmm/event_loop.h"
#include "../vmm/guest_memory.h"
#include "../vmm/log.h"
#include "vdev.h"

/* VIRTIO_BLK_ID_BYTES (§5.2.6): the serial GET_ID returns, NUL-padded. */
#define VIRTIO_BLK_ID_MAX 20

/* Chains one turn of the event thread starts before the queue waits for its next turn. */
#define VIRTIO_BLK_TAKE_BUDGET 64
/* On an overlay disk, blocks copied up from the image (synchronously, blk_overlay.h) in
 * one turn, after which the queue waits for its next turn too: a slow image then slows
 * the VM's other devices by this many reads and writes at most. */
#define VIRTIO_BLK_COPY_UP_BUDGET 16
/* The data of one IN or OUT request at most: seg_max segments of size_max bytes, as the
 * config space advertises. A longer one fails with VIRTIO_BLK_S_IOERR. */
#define VIRTIO_BLK_REQUEST_MAX_BYTES (254ull * 64 * 1024)
/* Chain bytes the requests in flight hold at most; the next chain waits in the ring. */
#define VIRTIO_BLK_BUSY_BYTES_MAX (64ull * 1024 * 1024)

struct virtio_blk_options {
	const char *path; /* raw image file */
	bool read_only;	  /* offer VIRTIO_BLK_F_RO; writes fail with VIRTIO_BLK_S_IOERR */
	const char *id;	  /* GET_ID answer, at most VIRTIO_BLK_ID_MAX bytes; NULL: none */
	/* Transfers bypass the host page cache (O_DIRECT) when the guest's buffers allow
	 * it; the others, flushes, discards and zeroing go through the page cache. */
	bool direct;
	/* A copy-on-write overlay file (blk_overlay.h): the guest's writes go there, path is
	 * opened read-only and never written, and what was never written reads from path.
	 * Created when missing. NULL: none. Not with read_only. */
	const char *overlay;
	/* A restore: a new overlay is filled from these frozen layers, oldest first, so the
	 * disk is the image plus its layers; it replaces the file named overlay only at
	 * virtio_blk_commit_overlays, and until then that file is left as it was. */
	bool overlay_restore;
	unsigned layer_count;
	const char *const *layers;
	/* How long a reset or a destroy that can no longer wait on the disk's io_uring
	 * waits for its next completion before it gives the ring up (blk_ring.h); 0:
	 * BLK_RING_STALL_MS. Tests shorten it. */
	unsigned ring_stall_ms;
};

struct virtio_blk;

/* Opens the image and takes a lock on it (exclusive for a writable disk, shared for a
 * read-only one, never waiting: two VMs cannot write one image), sets up its io_uring
 * and watches the ring's completion eventfd on loop. Errors, each with a message on log
 * naming the file: -ENOENT, -EACCES, -EISDIR (not a regular file or block device),
 * -EBUSY (locked by another process), -EINVAL (bad options, or direct on a file
 * system without O_DIRECT), others from the host. With an overlay, the image is locked
 * shared and the overlay exclusive; its own errors are blk_overlay_open()'s. */
int virtio_blk_create(const struct virtio_blk_options *options, struct guest_memory *mem,
		      struct event_loop *loop, const struct mote_log *log,
		      struct virtio_blk **blk_out);

/* The device model the transport carries. */
struct vdev *virtio_blk_vdev(struct virtio_blk *blk);

/* A restore succeeded: the restored overlays of these disks take their overlays' names,
 * all or none (blk_overlay_commit()). Destroying a disk before that leaves the file
 * there as it was. Disks without a restored overlay are skipped. */
int virtio_blk_commit_overlays(struct virtio_blk *const *disks, unsigned count);

/* Freezes the overlay's blocks written since the last freeze (whole: all it holds) into
 * a new layer file (blk_overlay_freeze()). For a paused VM: -EBUSY while requests are in
 * flight; -EINVAL when the disk has no overlay; else as blk_overlay_freeze(), after
 * which the disk goes on unchanged. */
int virtio_blk_freeze_overlay(struct virtio_blk *blk, const char *layer_path, bool whole);

/* A disk pointed at another image from now on, as Firecracker's PATCH /drives does, in
 * three steps, so that what may be slow (opening and locking a file on a slow file
 * system, syncing the old one) happens while the VM runs, and only the swap while it
 * is paused. */
struct virtio_blk_replacement {
	const char *path;  /* borrowed */
	int fd, direct_fd; /* the image opened; after the swap, the old one's */
	uint64_t capacity; /* the new image's, in sectors */
	bool same_file;	   /* path names the disk's image: only its size changes */
	bool sync;	   /* fd is an image the guest wrote: synced before it is closed */
	struct mote_log log;
	char left_name[sizeof("virtio-blk ") + PATH_MAX]; /* the old image's, for messages */
};

/* Opens path as the disk's next image into r: checked and locked as at create, with
 * the disk's read_only and direct. path naming the image open already (one resized in
 * place) is only sized again. -EINVAL for a disk with an overlay (its overlay is of
 * its image), -EIO for one out of service; else blk_open_image()'s errors, logged.
 * Calls to one disk must not overlap, from here to virtio_blk_replacement_close(). */
int virtio_blk_open_replacement(struct virtio_blk *blk, const char *path,
				struct virtio_blk_replacement *r);

/* For a paused VM: the disk reads and writes r's image from now on, and r holds the old
 * one's descriptors. A new size is told to the guest with a configuration change.
 * -EBUSY while requests are in flight, -EIO for a disk out of service: nothing changed. */
int virtio_blk_swap_image(struct virtio_blk *blk, struct virtio_blk_replacement *r);

/* Closes what r holds, the image that was not swapped in or the one swapped out (synced
 * first when the guest could write it; a failure is logged as an error). Data the guest
 * cached from the old image stays in its page cache, as with a disk swapped under a
 * running kernel. */
void virtio_blk_replacement_close(struct virtio_blk_replacement *r);

/* Waits for requests in flight, then closes the image and the ring; blk may be NULL.
 * The event loop must no longer run (or no longer watch this device). Where the ring is
 * given up instead (blk_ring.h), the guest memory is marked kept mapped: destroy it
 * after the disk. */
void virtio_blk_destroy(struct virtio_blk *blk);

#endif
