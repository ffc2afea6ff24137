/* Files written whole or not at all (output_file.h). */
#include "output_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

int output_file_open(struct output_file *out, const char *path, const struct mote_log *log)
{
	uint32_t tag = 0;

	out->path = path;
	out->fd = -1;
	out->temp[0] = '\0';
	/* A name nobody else writes: a random part, so that two writers of one path in one
	 * process (or a pid reused) never share a temporary file. */
	if (getrandom(&tag, sizeof(tag), 0) != sizeof(tag))
		tag = (uint32_t)(uintptr_t)out;
	if ((size_t)snprintf(out->temp, sizeof(out->temp), "%s.tmp-%d-%08x", path, (int)getpid(),
			     tag) >= sizeof(out->temp)) {
		out->temp[0] = '\0';
		log_error(log, "%s: path too long", path);
		return -ENAMETOOLONG;
	}
	/* O_EXCL | O_NOFOLLOW: never through a link planted under that name. The mode is
	 * what the umask leaves of 0666, as for any new file, unless a file it replaces
	 * says otherwise (output_file_commit). */
	out->fd = open(out->temp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
	if (out->fd < 0) {
		int err = -errno;
		log_error(log, "%s: %s", out->temp, strerror(errno));
		out->temp[0] = '\0';
		return err;
	}
	return 0;
}

/* The rename reaches the disk with the directory: without this, a crash could bring
 * back the old file after its replacement's inputs were deleted. */
int output_file_sync_directory(const char *path)
{
	char *copy = strdup(path);

	if (!copy)
		return -ENOMEM;
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int err = fd >= 0 && fsync(fd) == 0 ? 0 : -errno;
	if (fd >= 0)
		close(fd);
	free(copy);
	return err;
}

int output_file_commit(struct output_file *out, const struct mote_log *log)
{
	struct stat old;
	int err = 0;

	/* A file replaced keeps its permissions (a memory file is guest RAM, which its
	 * owner may have kept private). */
	if (stat(out->path, &old) == 0 && fchmod(out->fd, old.st_mode & 07777) < 0)
		err = -errno;
	if (!err && fsync(out->fd) < 0)
		err = -errno;
	if (close(out->fd) < 0 && !err)
		err = -errno;
	out->fd = -1;
	if (err) {
		log_error(log, "%s: %s", out->temp, strerror(-err));
		return err;
	}
	if (rename(out->temp, out->path) < 0) {
		err = -errno;
		log_error(log, "%s: %s", out->path, strerror(errno));
		return err;
	}
	out->temp[0] = '\0';
	err = output_file_sync_directory(out->path);
	if (err)
		log_error(log, "%s: syncing its directory: %s", out->path, strerror(-err));
	return err;
}

void output_file_abandon(struct output_file *out)
{
	if (out->fd >= 0)
		close(out->fd);
	out->fd = -1;
	if (out->temp[0])
		unlink(out->temp);
	out->temp[0] = '\0';
}
