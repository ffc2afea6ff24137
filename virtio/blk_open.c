/* A virtio-blk disk's image, overlay and direct descriptor opened and checked
 * (blk_open.h). */
#include "blk_open.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

#include <linux/fs.h>

#include "../vmm/file_image.h"
#include "blk_overlay.h"

/* The sectors a file of size bytes fills, rounded up: the tail of a partial last
 * sector reads as zeros. */
static uint64_t sectors_holding(uint64_t size)
{
	return size / BLK_SECTOR_SIZE + (size % BLK_SECTOR_SIZE != 0);
}

/* Reports what failed with errno and returns it negated. */
static int blk_host_error(const struct mote_log *log, const char *path, const char *what)
{
	int err = errno;

	log_error(log, "disk %s: %s: %s", path, what, strerror(err));
	return -err;
}

/* err: -EISDIR for a directory, -EMEDIUMTYPE for another kind of file. */
static int blk_not_a_disk(const struct mote_log *log, const char *path, int err)
{
	log_error(log, "disk %s: not a regular file or block device", path);
	return err;
}

int blk_image_capacity(int fd, const char *path, uint64_t *capacity, const struct mote_log *log)
{
	struct stat st;
	uint64_t size;

	if (fstat(fd, &st) != 0)
		return blk_host_error(log, path, "fstat");
	if (S_ISREG(st.st_mode))
		size = (uint64_t)st.st_size;
	else if (ioctl(fd, BLKGETSIZE64, &size) != 0)
		return blk_host_error(log, path, "BLKGETSIZE64");
	*capacity = sectors_holding(size);
	return 0;
}

/* Opens and locks the image and sizes the disk. */
int blk_open_image(struct blk_disk *disk, const struct virtio_blk_options *options,
		   const struct mote_log *log)
{
	const char *path = options->path;

	disk->fd =
	    file_open_kind(path, options->read_only ? O_RDONLY : O_RDWR, FILE_REGULAR_OR_BLOCK);
	if (disk->fd == -EISDIR || disk->fd == -EMEDIUMTYPE)
		return blk_not_a_disk(log, path, disk->fd);
	if (disk->fd < 0) {
		errno = -disk->fd;
		return blk_host_error(log, path, "cannot open");
	}
	int err = blk_image_capacity(disk->fd, path, &disk->capacity, log);
	if (err)
		return err;
	disk->read_only = options->read_only;

	/* Never wait for the lock: two VMs writing one image is an error, not a queue. */
	if (flock(disk->fd, (options->read_only ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
		if (errno != EWOULDBLOCK)
			return blk_host_error(log, path, "cannot lock");
		log_error(log, "disk %s: locked by another process (is another VM using it?)",
			  path);
		return -EBUSY;
	}
	return 0;
}

/* The image read-only under an overlay, which takes the guest's writes: disk.fd is the
 * overlay's (owned by it), the image is read through overlay->base_fd. */
int blk_open_overlay(struct blk_disk *disk, const struct virtio_blk_options *options,
		     const struct mote_log *log)
{
	struct blk_overlay_options overlay = {
	    .base = options->path,
	    .overlay = options->overlay,
	    .restore = options->overlay_restore,
	    .layer_count = options->layer_count,
	    .layers = options->layers,
	};

	if (options->read_only) {
		log_error(log, "disk %s: an overlay is for a writable disk, not a read-only one",
			  options->path);
		return -EINVAL;
	}
	int err = blk_overlay_open(&overlay, log, &disk->overlay);
	if (err)
		return err;
	disk->fd = disk->overlay->fd;
	disk->capacity = sectors_holding(disk->overlay->size);
	return 0;
}

/* A second descriptor of the file written (the image, or its overlay), O_DIRECT, opened
 * through the first (file_reopen), so it is the very file the first one locked. The
 * lock stays with the first (flock locks an open file, and a second exclusive one here
 * would conflict with it). */
int blk_open_direct(struct blk_disk *disk, const struct virtio_blk_options *options,
		    const struct mote_log *log)
{
	const char *path = disk->overlay ? blk_overlay_file_path(disk->overlay) : options->path;
	int flags = (options->read_only ? O_RDONLY : O_RDWR) | O_DIRECT;

	/* Through the locked fd: the very file, whatever its path names by now. */
	int fd = file_reopen(disk->fd, path, flags);
	if (fd < 0) {
		errno = -fd;
		if (errno != EINVAL)
			return blk_host_error(log, path, "cannot open with O_DIRECT");
		log_error(log, "disk %s: its file system refuses O_DIRECT (drop direct)", path);
		return -EINVAL;
	}
	disk->direct_fd = fd;
	return 0;
}
