/* The end of a restore's overlays (blk_overlay.h): each restored overlay, built under a
 * temporary name next to the file it replaces, takes that file's name, for all of a
 * VM's disks at once or for none of them. So a restore that fails at its last step
 * still leaves every overlay file as it was.
 *
 * Each disk's two names are swapped, the new file to the overlay's name and the old one
 * to the temporary name; until every disk's swap and its directory's sync succeeded,
 * a swap is undone by swapping again; after, the old files go. renameat2's
 * RENAME_EXCHANGE swaps in one step on ext4, xfs, btrfs and tmpfs; where a file system
 * lacks it (NFS, older ZFS), the old file is first given a third name with link(), so
 * that it is never without one. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blk_overlay.h"

static int commit_error(const struct blk_overlay *ov, const char *what)
{
	int err = errno ? errno : EIO;

	log_error(&ov->log, "disk %s: committing the restored overlay: %s: %s", ov->path, what,
		  strerror(err));
	return -err;
}

static bool commit_pending(const struct blk_overlay *ov)
{
	return ov && ov->replaced_fd >= 0 && ov->restored.fd >= 0;
}

/* The new file as the old one was to its users, and on the disk before its name is. */
static int commit_prepare(struct blk_overlay *ov)
{
	struct stat old;

	if (fstat(ov->replaced_fd, &old) != 0)
		return commit_error(ov, "fstat");
	/* Only root may give a file away; anyone else keeps the file as theirs. First, as a
	 * chown clears set-id bits. */
	if (fchown(ov->fd, old.st_uid, old.st_gid) != 0 && errno != EPERM)
		return commit_error(ov, "fchown");
	if (fchmod(ov->fd, old.st_mode & 07777) != 0)
		return commit_error(ov, "fchmod");
	if (fsync(ov->fd) != 0)
		return commit_error(ov, "fsync");
	return 0;
}

int blk_overlay_swap_through_a_link(const char *from, const char *to)
{
	char spare[sizeof(((struct output_file *)0)->temp) + 8];

	if ((size_t)snprintf(spare, sizeof(spare), "%s.old", from) >= sizeof(spare))
		return -ENAMETOOLONG;
	if (link(to, spare) != 0)
		return -errno;
	if (rename(from, to) != 0) {
		int err = -errno;
		unlink(spare);
		return err;
	}
	return rename(spare, from) == 0 ? 0 : -errno;
}

/* Swaps the names of the new file (the temporary name) and the file it replaces (the
 * overlay's); the same call swaps them back. */
static int commit_swap(struct blk_overlay *ov)
{
	if (renameat2(AT_FDCWD, ov->restored.temp, AT_FDCWD, ov->target, RENAME_EXCHANGE) == 0)
		return 0;
	if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
		return commit_error(ov, "rename");
	int err = blk_overlay_swap_through_a_link(ov->restored.temp, ov->target);
	if (err) {
		errno = -err;
		return commit_error(ov, "rename");
	}
	return 0;
}

/* A swap that cannot be undone leaves the old file under the temporary name: it is kept
 * there (not removed with the temporary file) and said where. */
static void commit_undo(struct blk_overlay *ov)
{
	if (commit_swap(ov) == 0)
		return;
	log_error(&ov->log, "disk %s: the overlay as it was is kept as %s", ov->path,
		  ov->restored.temp);
	ov->restored.temp[0] = '\0';
}

/* The renames reach the disk with the directory. */
static int commit_sync_directory(struct blk_overlay *ov)
{
	int err = output_file_sync_directory(ov->target);

	if (err) {
		errno = -err;
		return commit_error(ov, "syncing its directory");
	}
	return 0;
}

/* The old file, under the temporary name since the swap, goes, and with its lock the
 * overlay is the disk's own. */
static void commit_finish(struct blk_overlay *ov)
{
	if (unlink(ov->restored.temp) != 0)
		(void)commit_error(ov, "removing the old overlay");
	close(ov->restored.fd);
	ov->restored.fd = -1;
	ov->restored.temp[0] = '\0';
	close(ov->replaced_fd);
	ov->replaced_fd = -1;
	ov->created = false;
}

int blk_overlay_commit(struct blk_overlay *const *overlays, unsigned count)
{
	unsigned swapped = 0;
	int err = 0;

	for (unsigned i = 0; i < count && !err; i++)
		err = commit_pending(overlays[i]) ? commit_prepare(overlays[i]) : 0;
	while (!err && swapped < count) {
		struct blk_overlay *ov = overlays[swapped];
		err = commit_pending(ov) ? commit_swap(ov) : 0;
		if (!err)
			swapped++;
	}
	for (unsigned i = 0; i < count && !err; i++)
		err = commit_pending(overlays[i]) ? commit_sync_directory(overlays[i]) : 0;
	for (unsigned i = 0; i < swapped; i++) {
		if (!commit_pending(overlays[i]))
			continue;
		if (!err)
			commit_finish(overlays[i]);
		else
			commit_undo(overlays[i]);
	}
	return err;
}
