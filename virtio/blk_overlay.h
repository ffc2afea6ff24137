/* The copy-on-write overlay of a virtio-blk disk (mote.h, struct mote_disk.overlay): the
 * guest's writes go to the overlay file, the base image is opened read-only and never
 * changed, and what the guest never wrote is read from the base.
 *
 * The unit is a cluster of BLK_OVERLAY_CLUSTER bytes. A cluster is present in the overlay
 * once the guest wrote any byte of it, and then the overlay holds all of it: a write that
 * covers a cluster partly first copies the cluster up from the base. The overlay is a
 * sparse file of the base's size rounded up to a whole cluster, in which the present
 * clusters are exactly the data (never holes): so its presence map is rebuilt at open
 * from SEEK_DATA/SEEK_HOLE and needs no file of its own. For that reason nothing here
 * ever deallocates part of the overlay (no hole punching, no FALLOC_FL_ZERO_RANGE, whose
 * unwritten extents SEEK_DATA reports as holes): zeros are written as zeros.
 *
 * A snapshot freezes the clusters written since the previous one into a layer file (the
 * same sparse shape: its data are those clusters). A restore brings the disk back as the
 * base plus its layers, oldest first, copied into a new overlay, so a running disk is
 * always just base + overlay, and the next layer starts empty. The new overlay is built
 * under a temporary name and takes the overlay's name only when the whole restore has
 * succeeded (blk_overlay_commit): a restore that fails, at any step, leaves the file it
 * was to replace as it was, with whatever the guest wrote there after the snapshot.
 *
 * Three bitmaps, one bit per cluster: present (in the overlay), since (written since the
 * last freeze) and pending (present, but its first write, which covers it whole, has not
 * landed: the overlay still has a hole there, so reads go to the base until
 * blk_overlay_write_done). No locking here: the caller holds the device's lock. */
#ifndef MOTE_VIRTIO_BLK_OVERLAY_H
#define MOTE_VIRTIO_BLK_OVERLAY_H

#include <stdbool.h>
#include <stdint.h>

#include "../vmm/log.h"
#include "../vmm/output_file.h"

/* The host's page and the usual file system block: what SEEK_DATA reports exactly. */
#define BLK_OVERLAY_CLUSTER 4096ULL

struct blk_overlay_options {
	const char *base;    /* the image: O_RDONLY with a shared lock, never written */
	const char *overlay; /* created when missing; O_RDWR with an exclusive lock */
	/* A restore: a new overlay is filled with the data of these layer files, oldest
	 * first, to replace the one named at blk_overlay_commit (whatever that held); the
	 * since map starts empty. Otherwise an existing overlay is kept, and all it holds
	 * counts as written since the last freeze (no layer holds it yet). */
	bool restore;
	unsigned layer_count;
	const char *const *layers;
};

struct blk_overlay {
	int base_fd;
	int fd;		   /* the overlay */
	uint64_t size;	   /* the base's size in bytes */
	uint64_t clusters; /* size rounded up to clusters: the overlay's and layers' size */
	uint64_t *present; /* cluster bitmaps */
	uint64_t *since;
	uint64_t *pending;
	uint8_t *bounce;   /* one cluster, for copy-ups */
	uint64_t copy_ups; /* clusters copied up so far */
	char *base_path;
	char *path;
	struct mote_log log;
	/* A restore until blk_overlay_commit: the file named as the overlay, locked so that
	 * no other VM takes it meanwhile, and created here if it was missing (then removed
	 * again if the restore fails); fd's file is still under restored.temp, next to
	 * target, the file's real path (path may be a link to it). */
	int replaced_fd;
	bool created;
	char *target;
	struct output_file restored;
};

/* Opens base and overlay as options says, locks both without waiting, and builds the
 * presence map (from the overlay's data extents, or from the layers on a restore, into a
 * new file that blk_overlay_commit puts in the overlay's place).
 * Errors, each logged naming the file: -ENOENT, -EACCES; -EISDIR (base, overlay or a
 * layer a directory); -EMEDIUMTYPE (base neither a regular file nor a block device,
 * overlay or a layer not a regular file: a FIFO, a socket, a device); -EBUSY (base or
 * overlay locked by another process: a VM writing the base, or running on this
 * overlay); -EINVAL (overlay is the base or one of the layers, is larger than the base
 * needs, lies on a file system that does not report holes or allocates in blocks over
 * a cluster; a layer of another size); others from the host (-ENOSPC filling the
 * overlay). */
int blk_overlay_open(const struct blk_overlay_options *options, const struct mote_log *log,
		     struct blk_overlay **overlay_out);

/* A restore succeeded: each restored overlay of overlays (NULL, or not restored: skipped)
 * gets the owner (as far as we may) and permissions of the file it replaces, is synced,
 * and takes its name (blk_overlay_commit.c), all of them or none. 0, or a negative errno
 * (logged) after which every file named as an overlay is as it was and the overlays can
 * still be committed or closed. */
int blk_overlay_commit(struct blk_overlay *const *overlays, unsigned count);

/* The commit's swap of two names where RENAME_EXCHANGE is missing: to's file is linked
 * to "<from>.old", from's renamed over to, and "<from>.old" renamed to from, so that
 * each file always has a name. 0 or a negative errno. */
int blk_overlay_swap_through_a_link(const char *from, const char *to);

/* Where the overlay's file is now: its temporary name while a restore is not committed. */
const char *blk_overlay_file_path(const struct blk_overlay *overlay);

/* Closes every file (and their locks); a restore not committed leaves the file it was to
 * replace as it was, and no temporary file. overlay may be NULL. */
void blk_overlay_close(struct blk_overlay *overlay);

/* The length of the run at the start of [offset, offset + len) (len > 0, inside the
 * disk) whose clusters are all read from the overlay or all from the base, and which of
 * the two (present: the overlay). A cluster whose first write is in flight is read
 * from the base: a read racing that write sees the old data, not the hole, until that
 * write or another write over the cluster ends. Another write that covers it whole
 * leaves no hole when it ends first; one that covers it partly waits for it
 * (blk_overlay_write_waits), so it cannot end first. */
uint64_t blk_overlay_run(const struct blk_overlay *overlay, uint64_t offset, uint64_t len,
			 bool *present);

/* Before a write of [offset, offset + len) (len > 0, inside the disk) goes to the overlay:
 * copies up each partly covered cluster not present yet (synchronously: at most two
 * clusters), then marks every covered cluster present and written since the last freeze.
 * Marked before the write is done, so that a later partial write to one of them never
 * copies the base over it; those it covers whole and that were not present are pending
 * until blk_overlay_write_done. 0, or a negative errno when a copy-up failed (logged). */
int blk_overlay_prepare_write(struct blk_overlay *overlay, uint64_t offset, uint64_t len);

/* Whether a write of [offset, offset + len) (len > 0, inside the disk) must wait before
 * it goes to the overlay: it covers partly a cluster that is pending. Started at once,
 * it could end before that cluster's first write (which may still be retried or
 * continued), end the pending state while the overlay still has a hole around its
 * bytes, and a read would see zeros there. It may start once no cluster it covers
 * partly is pending: the first write ended (a cluster never becomes pending again). */
bool blk_overlay_write_waits(const struct blk_overlay *overlay, uint64_t offset, uint64_t len);

/* The write of [offset, offset + len) prepared above has ended (landed, failed or
 * dropped): its clusters are read from the overlay from now on. After a failed write,
 * what it covered whole reads as zeros (or as what of it landed), as a disk's sectors
 * are undefined after a failed write. */
void blk_overlay_write_done(struct blk_overlay *overlay, uint64_t offset, uint64_t len);

/* Layers (blk_overlay_layer.c). */

/* Writes the clusters written since the last freeze (whole: every present cluster) into
 * a new layer file at layer_path: sparse, the overlay's size, written under a temporary
 * name, fsynced and renamed, so that it appears whole or not at all. Only when that
 * succeeded is the since map cleared; on an error (logged: -ENOSPC, -EROFS, -EACCES, ...)
 * nothing of the disk changed and the guest may go on. No request may be in flight. */
int blk_overlay_freeze(struct blk_overlay *overlay, const char *layer_path, bool whole);

/* Copies the data of each layer file into the (empty) overlay, oldest first, and marks
 * it present. The files are opened already (fds), checked to have the overlay's size. */
int blk_overlay_apply_layers(struct blk_overlay *overlay, const int *fds, const char *const *paths,
			     unsigned count);

/* Checks that fd's file system suits an overlay or layer: it reports holes (fd, of size
 * bytes, must be all hole yet; size 0 skips that check) in blocks no larger than a
 * cluster. 0 or -EINVAL, logged naming path. */
int blk_overlay_check_sparse(int fd, uint64_t size, const char *path, const struct mote_log *log);

/* Bitmaps of one bit per cluster. */
static inline bool blk_overlay_bit(const uint64_t *bits, uint64_t cluster)
{
	return (bits[cluster / 64] >> (cluster % 64)) & 1;
}

void blk_overlay_set_bits(uint64_t *bits, uint64_t first, uint64_t count);

#endif
