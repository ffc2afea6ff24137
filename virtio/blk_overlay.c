/* The copy-on-write overlay of a virtio-blk disk (blk_overlay.h): opening base and
 * overlay, the presence map, and what a request asks of it. */
#include "blk_overlay.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <linux/fs.h>

#include "../vmm/file_image.h"

static uint64_t overlay_bytes(const struct blk_overlay *ov)
{
	return ov->clusters * BLK_OVERLAY_CLUSTER;
}

void blk_overlay_set_bits(uint64_t *bits, uint64_t first, uint64_t count)
{
	for (uint64_t c = first; c < first + count; c++)
		bits[c / 64] |= 1ULL << (c % 64);
}

static void overlay_clear_bits(uint64_t *bits, uint64_t first, uint64_t count)
{
	for (uint64_t c = first; c < first + count; c++)
		bits[c / 64] &= ~(1ULL << (c % 64));
}

/* Reports what failed with errno and returns it negated. */
static int overlay_host_error(const struct blk_overlay *ov, const char *path, const char *what)
{
	int err = errno;

	log_error(&ov->log, "disk %s: %s: %s", path, what, strerror(err));
	return -err;
}

/* Takes a lock without waiting: a second VM on the same file is an error, not a queue. */
static int overlay_lock(const struct blk_overlay *ov, int fd, const char *path, int how,
			const char *who)
{
	if (flock(fd, how | LOCK_NB) == 0)
		return 0;
	if (errno != EWOULDBLOCK)
		return overlay_host_error(ov, path, "cannot lock");
	log_error(&ov->log, "disk %s: locked by another process (%s)", path, who);
	return -EBUSY;
}

/* Opens path as a file of the kind wanted (file_open_kind): the fd, or a negative errno
 * reported as what failed. */
static int overlay_open_kind(const struct blk_overlay *ov, const char *path, int flags,
			     enum file_kind kind, const char *what)
{
	int fd = file_open_kind(path, flags, kind);

	if (fd == -EISDIR || fd == -EMEDIUMTYPE)
		log_error(&ov->log, "disk %s: %s must be a regular file%s", path, what,
			  kind == FILE_REGULAR_OR_BLOCK ? " or block device" : "");
	else if (fd < 0)
		log_error(&ov->log, "disk %s: cannot open %s: %s", path, what, strerror(-fd));
	return fd;
}

static int overlay_open_base(struct blk_overlay *ov, struct stat *st)
{
	const char *path = ov->base_path;

	ov->base_fd = overlay_open_kind(ov, path, O_RDONLY, FILE_REGULAR_OR_BLOCK, "the image");
	if (ov->base_fd < 0)
		return ov->base_fd;
	if (fstat(ov->base_fd, st) != 0)
		return overlay_host_error(ov, path, "fstat");
	if (S_ISREG(st->st_mode))
		ov->size = (uint64_t)st->st_size;
	else if (ioctl(ov->base_fd, BLKGETSIZE64, &ov->size) != 0)
		return overlay_host_error(ov, path, "BLKGETSIZE64");
	ov->clusters = (ov->size + BLK_OVERLAY_CLUSTER - 1) / BLK_OVERLAY_CLUSTER;
	/* Shared: VMs may share a base, but none may write it meanwhile. */
	return overlay_lock(ov, ov->base_fd, path, LOCK_SH, "is a VM writing to it?");
}

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* Opens path, a regular file, creating it when missing; *created says whether this call
 * made the name (not so through a dangling link, whose target it creates). The fd, or a
 * negative errno: -EISDIR or -EMEDIUMTYPE for a path that is no regular file. */
static int overlay_open_or_create(const char *path, bool *created)
{
	/* O_NONBLOCK: a FIFO swapped in after the look must not hang open() either. */
	const int flags = O_RDWR | O_CLOEXEC | O_NONBLOCK;
	int fd = file_open_kind(path, O_RDWR, FILE_REGULAR);

	*created = false;
	if (fd != -ENOENT)
		return fd;
	fd = open(path, flags | O_CREAT | O_EXCL, 0644);
	*created = fd >= 0;
	if (fd < 0 && errno == EEXIST)
		fd = open(path, flags | O_CREAT, 0644);
	if (fd < 0)
		return -errno;
	/* Another kind of file may have taken the name since the look. */
	struct stat st;
	int err = fstat(fd, &st) < 0 ? -errno : S_ISREG(st.st_mode) ? 0 : -EMEDIUMTYPE;
	if (!err)
		err = file_drop_nonblock(fd);
	if (err) {
		close(fd);
		return err;
	}
	return fd;
}

/* Opens (or creates) and locks the overlay. Nothing in it is changed yet: only the lock
 * makes it ours. A restore may rename a new overlay over the name between the open and
 * the lock (and then let go of the file it replaced, whose lock we would get): the file
 * locked must still be the one the name gives, or the open is tried again. */
static int overlay_open_file(struct blk_overlay *ov, const struct stat *base, struct stat *st)
{
	const char *path = ov->path;

	for (int attempt = 0;; attempt++) {
		ov->fd = overlay_open_or_create(path, &ov->created);
		if (ov->fd == -ENOENT && attempt < 3)
			continue; /* removed between the two opens */
		if (ov->fd == -EISDIR || ov->fd == -EMEDIUMTYPE) {
			log_error(&ov->log, "disk %s: an overlay must be a regular file", path);
			return ov->fd;
		}
		if (ov->fd < 0) {
			errno = -ov->fd;
			return overlay_host_error(ov, path, "cannot open or create the overlay");
		}
		if (fstat(ov->fd, st) != 0)
			return overlay_host_error(ov, path, "fstat");
		if (same_file(st, base)) {
			log_error(&ov->log, "disk %s: the overlay is the disk's image itself",
				  path);
			return -EINVAL;
		}
		int err =
		    overlay_lock(ov, ov->fd, path, LOCK_EX,
				 "a running VM's overlay? each VM needs an overlay of its own");
		if (err)
			return err;
		struct stat named;
		if (stat(path, &named) == 0 && same_file(&named, st))
			return 0;
		close(ov->fd);
		ov->fd = -1;
		ov->created = false;
		if (attempt >= 3) {
			log_error(&ov->log, "disk %s: the overlay keeps being replaced", path);
			return -EBUSY;
		}
	}
}

int blk_overlay_check_sparse(int fd, uint64_t size, const char *path, const struct mote_log *log)
{
	struct stat st;

	if (fstat(fd, &st) != 0) {
		int err = -errno;
		log_error(log, "disk %s: fstat: %s", path, strerror(errno));
		return err;
	}
	/* SEEK_DATA reports whole allocation blocks: with larger ones, an absent cluster
	 * next to a written one would look written. */
	if (st.st_blksize > (blksize_t)BLK_OVERLAY_CLUSTER) {
		log_error(log,
			  "disk %s: its file system allocates %ld-byte blocks, more than the "
			  "%llu-byte clusters of an overlay",
			  path, (long)st.st_blksize, BLK_OVERLAY_CLUSTER);
		return -EINVAL;
	}
	if (size == 0 || lseek(fd, 0, SEEK_DATA) < 0)
		return 0; /* ENXIO: all hole, as it should be */
	log_error(log,
		  "disk %s: its file system does not report holes (SEEK_DATA), which overlays "
		  "and their layers need (ext4, xfs, btrfs and tmpfs do)",
		  path);
	return -EINVAL;
}

/* Empties the overlay: a file of its size that is all holes. */
static int overlay_empty(struct blk_overlay *ov)
{
	if (ftruncate(ov->fd, 0) != 0 || ftruncate(ov->fd, (off_t)overlay_bytes(ov)) != 0)
		return overlay_host_error(ov, ov->path, "cannot size the overlay");
	return blk_overlay_check_sparse(ov->fd, overlay_bytes(ov), ov->path, &ov->log);
}

/* A restore's new overlay: an empty file next to the one it will replace (through any
 * link: the link's target is the file replaced), locked, which the overlay's fd now is.
 * The file it replaces keeps its lock until the commit. */
static int overlay_start_new(struct blk_overlay *ov)
{
	ov->target = realpath(ov->path, NULL);
	if (!ov->target)
		return overlay_host_error(ov, ov->path, "realpath");
	int err = output_file_open(&ov->restored, ov->target, &ov->log);
	if (err)
		return err;
	ov->fd = fcntl(ov->restored.fd, F_DUPFD_CLOEXEC, 0); /* the output file's is closed
								 at the commit */
	if (ov->fd < 0)
		return overlay_host_error(ov, ov->path, "dup");
	if (flock(ov->fd, LOCK_EX | LOCK_NB) != 0)
		return overlay_host_error(ov, ov->restored.temp, "cannot lock");
	return overlay_empty(ov);
}

/* The presence map of an overlay kept from before: its data extents, rounded out to
 * whole clusters (every cluster it holds was written whole). */
static int overlay_scan(struct blk_overlay *ov)
{
	off_t end = (off_t)overlay_bytes(ov);

	for (off_t pos = 0; pos < end;) {
		off_t data = lseek(ov->fd, pos, SEEK_DATA);
		if (data < 0 && errno == ENXIO)
			break;
		off_t hole = data < 0 ? -1 : lseek(ov->fd, data, SEEK_HOLE);
		if (hole < 0)
			return overlay_host_error(ov, ov->path, "finding the written blocks");
		uint64_t first = (uint64_t)data / BLK_OVERLAY_CLUSTER;
		uint64_t last = ((uint64_t)hole + BLK_OVERLAY_CLUSTER - 1) / BLK_OVERLAY_CLUSTER;
		if (last > ov->clusters)
			last = ov->clusters;
		if (first >= last)
			break;
		blk_overlay_set_bits(ov->present, first, last - first);
		pos = (off_t)(last * BLK_OVERLAY_CLUSTER);
	}
	return 0;
}

/* Boot: an existing overlay goes on where it was; a new (empty) one gets its size. */
static int overlay_keep(struct blk_overlay *ov, const struct stat *st)
{
	uint64_t want = overlay_bytes(ov);
	uint64_t have = (uint64_t)st->st_size;

	if (have == 0)
		return overlay_empty(ov);
	if (have > want) {
		log_error(&ov->log,
			  "disk %s: the overlay has %llu bytes, more than the %llu its image %s "
			  "needs (an overlay of another image?)",
			  ov->path, (unsigned long long)have, (unsigned long long)want,
			  ov->base_path);
		return -EINVAL;
	}
	/* The image grew: the new clusters are holes, so they read from it. */
	if (have < want && ftruncate(ov->fd, (off_t)want) != 0)
		return overlay_host_error(ov, ov->path, "cannot size the overlay");
	int err = blk_overlay_check_sparse(ov->fd, 0, ov->path, &ov->log);
	if (!err)
		err = overlay_scan(ov);
	/* No layer holds any of it yet: the first snapshot must. */
	if (!err)
		memcpy(ov->since, ov->present, (ov->clusters + 63) / 64 * sizeof(uint64_t));
	return err;
}

/* Opens a layer for a restore and checks it fits this disk and is not the overlay, whose
 * name the restored overlay is about to take. */
static int overlay_open_layer(struct blk_overlay *ov, const char *path, const struct stat *own,
			      int *fd_out)
{
	struct stat st;
	int fd = overlay_open_kind(ov, path, O_RDONLY, FILE_REGULAR, "a layer");

	*fd_out = fd;
	if (fd < 0)
		return fd;
	if (fstat(fd, &st) != 0)
		return overlay_host_error(ov, path, "fstat");
	if (same_file(&st, own)) {
		log_error(&ov->log, "disk %s: the overlay %s is also one of the disk's layers",
			  path, ov->path);
		return -EINVAL;
	}
	if ((uint64_t)st.st_size != overlay_bytes(ov)) {
		log_error(&ov->log,
			  "disk %s: a layer of %llu bytes, where the image %s needs %llu (the "
			  "image was replaced?)",
			  path, (unsigned long long)st.st_size, ov->base_path,
			  (unsigned long long)overlay_bytes(ov));
		return -EINVAL;
	}
	return 0;
}

/* Restore: the overlay starts over as the layers, whatever it held. */
static int overlay_restore(struct blk_overlay *ov, const struct blk_overlay_options *options,
			   const struct stat *own)
{
	unsigned count = options->layer_count;
	int *fds = calloc(count ? count : 1, sizeof(*fds));
	int err = fds ? 0 : -ENOMEM;
	unsigned opened = 0;

	/* An overlay is always exactly its image's size (rounded up to a cluster), so a
	 * file of another size named as one, by a state file or an override, is not one:
	 * it is refused, not replaced. */
	if (own->st_size != 0 && (uint64_t)own->st_size != overlay_bytes(ov)) {
		log_error(&ov->log,
			  "disk %s: %s has %llu bytes, not the %llu of an overlay of this image; "
			  "a restore would replace it, so it is left alone",
			  ov->base_path, ov->path, (unsigned long long)own->st_size,
			  (unsigned long long)overlay_bytes(ov));
		free(fds);
		return -EINVAL;
	}
	/* All of them first: a missing layer fails before the new overlay is made. */
	for (; opened < count && !err; opened++) {
		if (!options->layers || !options->layers[opened]) {
			log_error(&ov->log, "disk %s: a layer without a path", ov->base_path);
			err = -EINVAL;
			break;
		}
		err = overlay_open_layer(ov, options->layers[opened], own, &fds[opened]);
	}
	if (!err)
		err = overlay_start_new(ov);
	if (!err)
		err = blk_overlay_apply_layers(ov, fds, options->layers, count);
	for (unsigned i = 0; i < opened && fds; i++) {
		if (fds[i] >= 0)
			close(fds[i]);
	}
	free(fds);
	return err;
}

static int overlay_alloc(struct blk_overlay *ov)
{
	size_t words = (ov->clusters + 63) / 64;

	ov->present = calloc(words ? words : 1, sizeof(uint64_t));
	ov->since = calloc(words ? words : 1, sizeof(uint64_t));
	ov->pending = calloc(words ? words : 1, sizeof(uint64_t));
	ov->bounce = malloc(BLK_OVERLAY_CLUSTER);
	return ov->present && ov->since && ov->pending && ov->bounce ? 0 : -ENOMEM;
}

int blk_overlay_open(const struct blk_overlay_options *options, const struct mote_log *log,
		     struct blk_overlay **overlay_out)
{
	struct stat base, own;

	*overlay_out = NULL;
	if (!options->base || !options->overlay) {
		log_error(log, "virtio-blk: an overlay needs an image and an overlay file");
		return -EINVAL;
	}
	struct blk_overlay *ov = calloc(1, sizeof(*ov));
	if (!ov)
		return -ENOMEM;
	ov->base_fd = -1;
	ov->fd = -1;
	ov->replaced_fd = -1;
	ov->restored.fd = -1;
	if (log)
		ov->log = *log;
	ov->base_path = strdup(options->base);
	ov->path = strdup(options->overlay);
	int err = ov->base_path && ov->path ? 0 : -ENOMEM;
	if (!err)
		err = overlay_open_base(ov, &base);
	if (!err)
		err = overlay_alloc(ov);
	if (!err)
		err = overlay_open_file(ov, &base, &own);
	if (!err && options->restore) {
		/* The file named stays as it is until the commit; the overlay will be new. */
		ov->replaced_fd = ov->fd;
		ov->fd = -1;
		err = overlay_restore(ov, options, &own);
	} else if (!err) {
		err = overlay_keep(ov, &own);
	}
	if (err) {
		blk_overlay_close(ov);
		return err;
	}
	*overlay_out = ov;
	return 0;
}

const char *blk_overlay_file_path(const struct blk_overlay *ov)
{
	return ov->restored.fd >= 0 ? ov->restored.temp : ov->path;
}

/* A restore that did not complete: its new file goes, and so does the file named as the
 * overlay if the restore created it (while that name still gives the file). */
static void overlay_abandon_restore(struct blk_overlay *ov)
{
	struct stat named, own;

	output_file_abandon(&ov->restored);
	if (ov->created && fstat(ov->replaced_fd, &own) == 0 && lstat(ov->path, &named) == 0 &&
	    same_file(&named, &own))
		unlink(ov->path);
	close(ov->replaced_fd);
	ov->replaced_fd = -1;
}

void blk_overlay_close(struct blk_overlay *ov)
{
	if (!ov)
		return;
	if (ov->replaced_fd >= 0)
		overlay_abandon_restore(ov);
	if (ov->fd >= 0)
		close(ov->fd); /* and the locks with them */
	if (ov->base_fd >= 0)
		close(ov->base_fd);
	free(ov->present);
	free(ov->since);
	free(ov->pending);
	free(ov->bounce);
	free(ov->base_path);
	free(ov->path);
	free(ov->target);
	free(ov);
}

/* Whether a read of cluster goes to the overlay: it holds the cluster's data, which a
 * first write still in flight does not yet. */
static bool overlay_readable(const struct blk_overlay *ov, uint64_t cluster)
{
	return blk_overlay_bit(ov->present, cluster) && !blk_overlay_bit(ov->pending, cluster);
}

uint64_t blk_overlay_run(const struct blk_overlay *ov, uint64_t offset, uint64_t len, bool *present)
{
	uint64_t cluster = offset / BLK_OVERLAY_CLUSTER;
	uint64_t end = (cluster + 1) * BLK_OVERLAY_CLUSTER;

	*present = overlay_readable(ov, cluster);
	while (end < offset + len && overlay_readable(ov, ++cluster) == *present)
		end += BLK_OVERLAY_CLUSTER;
	return (end < offset + len ? end : offset + len) - offset;
}

/* Copies one cluster from the base into the overlay. Beyond the base's end (its last
 * cluster may be partial) it reads as zeros, as the guest sees it. */
static int overlay_copy_up(struct blk_overlay *ov, uint64_t cluster)
{
	off_t offset = (off_t)(cluster * BLK_OVERLAY_CLUSTER);
	size_t got = 0;

	while (got < BLK_OVERLAY_CLUSTER) {
		ssize_t n = pread(ov->base_fd, ov->bounce + got, BLK_OVERLAY_CLUSTER - got,
				  offset + (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return overlay_host_error(ov, ov->base_path, "reading a block to copy up");
		if (n == 0)
			break;
		got += (size_t)n;
	}
	memset(ov->bounce + got, 0, BLK_OVERLAY_CLUSTER - got);
	for (size_t done = 0; done < BLK_OVERLAY_CLUSTER;) {
		ssize_t n = pwrite(ov->fd, ov->bounce + done, BLK_OVERLAY_CLUSTER - done,
				   offset + (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = EIO;
			return overlay_host_error(ov, ov->path, "copying a block up");
		}
		done += (size_t)n;
	}
	blk_overlay_set_bits(ov->present, cluster, 1);
	ov->copy_ups++;
	return 0;
}

bool blk_overlay_write_waits(const struct blk_overlay *ov, uint64_t offset, uint64_t len)
{
	uint64_t first = offset / BLK_OVERLAY_CLUSTER;
	uint64_t last = (offset + len - 1) / BLK_OVERLAY_CLUSTER;

	return (offset % BLK_OVERLAY_CLUSTER && blk_overlay_bit(ov->pending, first)) ||
	       ((offset + len) % BLK_OVERLAY_CLUSTER && blk_overlay_bit(ov->pending, last));
}

int blk_overlay_prepare_write(struct blk_overlay *ov, uint64_t offset, uint64_t len)
{
	uint64_t first = offset / BLK_OVERLAY_CLUSTER;
	uint64_t last = (offset + len - 1) / BLK_OVERLAY_CLUSTER;
	int err = 0;

	if (offset % BLK_OVERLAY_CLUSTER && !blk_overlay_bit(ov->present, first))
		err = overlay_copy_up(ov, first);
	if (!err && (offset + len) % BLK_OVERLAY_CLUSTER && !blk_overlay_bit(ov->present, last))
		err = overlay_copy_up(ov, last);
	if (err)
		return err;
	/* Covered whole and not in the overlay yet: the overlay has a hole there until
	 * this write lands, so reads still go to the base meanwhile. */
	for (uint64_t c = first; c <= last; c++)
		if (!blk_overlay_bit(ov->present, c))
			blk_overlay_set_bits(ov->pending, c, 1);
	blk_overlay_set_bits(ov->present, first, last - first + 1);
	blk_overlay_set_bits(ov->since, first, last - first + 1);
	return 0;
}

void blk_overlay_write_done(struct blk_overlay *ov, uint64_t offset, uint64_t len)
{
	uint64_t first = offset / BLK_OVERLAY_CLUSTER;
	uint64_t last = (offset + len - 1) / BLK_OVERLAY_CLUSTER;

	overlay_clear_bits(ov->pending, first, last - first + 1);
}
