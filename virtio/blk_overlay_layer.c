/* An overlay's layer files (blk_overlay.h): a freeze writes the clusters written since
 * the previous one into a new layer; a restore copies layers back into an overlay. A
 * layer has the overlay's shape: a sparse file of the overlay's size whose data extents
 * are whole clusters, each holding what the guest had there. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blk_overlay.h"

/* The buffer of a copy the kernel cannot do itself. */
#define LAYER_COPY_CHUNK (1024 * 1024)

struct layer_copy {
	int from, to;
	const char *from_path, *to_path; /* for messages */
	bool buffered;			 /* copy_file_range refused: pread/pwrite */
	uint8_t *buf;			 /* LAYER_COPY_CHUNK bytes once buffered */
	const struct mote_log *log;
};

static int layer_copy_error(const struct layer_copy *copy, const char *what)
{
	int err = errno ? errno : EIO;

	log_error(copy->log, "disk %s: copying to %s: %s: %s", copy->from_path, copy->to_path, what,
		  strerror(err));
	return -err;
}

static int layer_write_all(struct layer_copy *copy, const uint8_t *buf, size_t len, off_t offset)
{
	for (size_t done = 0; done < len;) {
		ssize_t n = pwrite(copy->to, buf + done, len - done, offset + (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = EIO;
			return layer_copy_error(copy, "write");
		}
		done += (size_t)n;
	}
	return 0;
}

/* Through a buffer: from and to on different file systems (EXDEV), or a kernel or file
 * system without copy_file_range. */
static int layer_copy_buffered(struct layer_copy *copy, off_t offset, uint64_t len)
{
	if (!copy->buf && !(copy->buf = malloc(LAYER_COPY_CHUNK)))
		return -ENOMEM;
	while (len > 0) {
		size_t step = len < LAYER_COPY_CHUNK ? (size_t)len : LAYER_COPY_CHUNK;
		ssize_t n = pread(copy->from, copy->buf, step, offset);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			errno = n < 0 ? errno : EIO; /* the file ended: it shrank */
			return layer_copy_error(copy, "read");
		}
		int err = layer_write_all(copy, copy->buf, (size_t)n, offset);
		if (err)
			return err;
		offset += n;
		len -= (uint64_t)n;
	}
	return 0;
}

/* Copies [offset, offset + len) to the same place in the other file: in the kernel where
 * it can (a reflink on xfs or btrfs, no copy through user space elsewhere). */
static int layer_copy_range(struct layer_copy *copy, uint64_t offset, uint64_t len)
{
	loff_t in = (loff_t)offset, out = (loff_t)offset;

	while (len > 0 && !copy->buffered) {
		ssize_t n = copy_file_range(copy->from, &in, copy->to, &out, len, 0);
		if (n > 0) {
			len -= (uint64_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0) {
			errno = EIO; /* the file ended: it shrank */
			return layer_copy_error(copy, "copy_file_range");
		}
		if (errno != EXDEV && errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
			return layer_copy_error(copy, "copy_file_range");
		copy->buffered = true;
	}
	return len > 0 ? layer_copy_buffered(copy, in, len) : 0;
}

/* Copies the runs of set bits of bits (clusters) from the overlay into the layer. */
static int layer_copy_clusters(struct blk_overlay *ov, struct layer_copy *copy,
			       const uint64_t *bits)
{
	uint64_t c = 0;

	while (c < ov->clusters) {
		if (c % 64 == 0 && bits[c / 64] == 0) {
			c += 64;
			continue;
		}
		if (!blk_overlay_bit(bits, c)) {
			c++;
			continue;
		}
		uint64_t first = c;
		while (c < ov->clusters && blk_overlay_bit(bits, c))
			c++;
		int err = layer_copy_range(copy, first * BLK_OVERLAY_CLUSTER,
					   (c - first) * BLK_OVERLAY_CLUSTER);
		if (err)
			return err;
	}
	return 0;
}

/* Writes the layer into fd (a new, empty file), complete: the clusters of bits. */
static int layer_write(struct blk_overlay *ov, int fd, const char *temp, const uint64_t *bits)
{
	struct layer_copy copy = {
	    .from = ov->fd, .to = fd, .from_path = ov->path, .to_path = temp, .log = &ov->log};
	uint64_t size = ov->clusters * BLK_OVERLAY_CLUSTER;

	if (ftruncate(fd, (off_t)size) != 0) {
		int err = -errno;
		log_error(&ov->log, "layer %s: %s", temp, strerror(errno));
		return err;
	}
	/* A file system without holes would make every cluster of the layer look written. */
	int err = blk_overlay_check_sparse(fd, size, temp, &ov->log);
	if (!err)
		err = layer_copy_clusters(ov, &copy, bits);
	free(copy.buf);
	return err;
}

int blk_overlay_freeze(struct blk_overlay *ov, const char *layer_path, bool whole)
{
	struct output_file layer;

	/* Under a temporary name, synced, renamed, and the rename synced: until then the
	 * layer may still vanish, and the since map keeps what it holds. */
	int err = output_file_open(&layer, layer_path, &ov->log);
	if (!err)
		err = layer_write(ov, layer.fd, layer.temp, whole ? ov->present : ov->since);
	if (!err)
		err = output_file_commit(&layer, &ov->log);
	output_file_abandon(&layer);
	if (!err)
		memset(ov->since, 0, (ov->clusters + 63) / 64 * sizeof(uint64_t));
	return err;
}

/* Copies one layer's data extents, rounded out to whole clusters, into the overlay. */
static int layer_apply(struct blk_overlay *ov, int fd, const char *path)
{
	struct layer_copy copy = {
	    .from = fd, .to = ov->fd, .from_path = path, .to_path = ov->path, .log = &ov->log};
	off_t end = (off_t)(ov->clusters * BLK_OVERLAY_CLUSTER);
	int err = 0;

	for (off_t pos = 0; pos < end && !err;) {
		off_t data = lseek(fd, pos, SEEK_DATA);
		if (data < 0 && errno == ENXIO)
			break;
		off_t hole = data < 0 ? -1 : lseek(fd, data, SEEK_HOLE);
		if (hole < 0) {
			err = -errno;
			log_error(&ov->log, "layer %s: finding its blocks: %s", path,
				  strerror(errno));
			break;
		}
		uint64_t first = (uint64_t)data / BLK_OVERLAY_CLUSTER;
		uint64_t last = ((uint64_t)hole + BLK_OVERLAY_CLUSTER - 1) / BLK_OVERLAY_CLUSTER;
		if (last > ov->clusters)
			last = ov->clusters;
		if (first >= last)
			break;
		err = layer_copy_range(&copy, first * BLK_OVERLAY_CLUSTER,
				       (last - first) * BLK_OVERLAY_CLUSTER);
		if (!err)
			blk_overlay_set_bits(ov->present, first, last - first);
		pos = (off_t)(last * BLK_OVERLAY_CLUSTER);
	}
	free(copy.buf);
	return err;
}

int blk_overlay_apply_layers(struct blk_overlay *ov, const int *fds, const char *const *paths,
			     unsigned count)
{
	for (unsigned i = 0; i < count; i++) {
		int err = layer_apply(ov, fds[i], paths[i]);
		if (err)
			return err;
	}
	return 0;
}
