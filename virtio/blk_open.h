/* A virtio-blk disk's host files opened and checked: the image (locked and sized), or
 * the overlay over it (blk_overlay.h), and the O_DIRECT descriptor of a direct disk.
 * Split out of blk.c, which owns the device: the queue, the requests, the io_uring and
 * its completion eventfd, and the config space.
 *
 * Each call fills its part of a struct blk_disk whose fd and direct_fd start at -1 and
 * overlay at NULL. On failure it has logged what failed on log, naming the file, and
 * leaves in disk what it opened, for the caller to close with the rest of the disk
 * (fd when >= 0, or overlay, which owns fd; direct_fd when >= 0). */
#ifndef MOTE_VIRTIO_BLK_OPEN_H
#define MOTE_VIRTIO_BLK_OPEN_H

#include "../vmm/log.h"
#include "blk.h"
#include "blk_request.h"

/* Opens options->path (read-only for a read-only disk), a regular file or a block
 * device, sizes the disk from it (capacity rounded up to whole sectors, read_only) and
 * locks it without waiting: shared when read-only, exclusive when writable. Errors:
 * -EISDIR or -EMEDIUMTYPE (not a regular file or block device), -EBUSY (locked by
 * another process), others from the host. */
int blk_open_image(struct blk_disk *disk, const struct virtio_blk_options *options,
		   const struct mote_log *log);

/* The sectors of the regular file or block device fd (path, for messages) holds now,
 * the last one partial maybe; or a negative errno, logged. */
int blk_image_capacity(int fd, const char *path, uint64_t *capacity, const struct mote_log *log);

/* Opens the overlay options->overlay over the image options->path (blk_overlay_open(),
 * with the options' restore layers), the disk written through the overlay's fd and
 * sized from it. -EINVAL for a read-only disk; else blk_overlay_open()'s errors. */
int blk_open_overlay(struct blk_disk *disk, const struct virtio_blk_options *options,
		     const struct mote_log *log);

/* After blk_open_image() or blk_open_overlay(): opens the file written (the image, or
 * the overlay file) again with O_DIRECT, through disk->fd so that it is the file locked,
 * into disk->direct_fd. The lock stays with disk->fd. -EINVAL when its file system
 * refuses O_DIRECT; others from the host. */
int blk_open_direct(struct blk_disk *disk, const struct virtio_blk_options *options,
		    const struct mote_log *log);

#endif
