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
	out->finished = false;
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
	/* O_EXCL | O_NOFOLLOW: never through a link planted under that name. Private
	 * until finished: what is written may be guest RAM, which whoever opened the file
	 * meanwhile could keep reading. Its real mode comes at output_file_finish. */
	out->fd = open(out->temp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
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

/* The process's umask, read without changing it (umask(2) can only set it, which would
 * race with other threads creating files): /proc/self/status "Umask:" (Linux 4.7). When
 * that cannot be read, 077, so a new file stays private. */
static mode_t process_umask(void)
{
	FILE *status = fopen("/proc/self/status", "re");
	char line[256];
	unsigned mask = 077;

	if (!status)
		return mask;
	while (fgets(line, sizeof(line), status))
		if (sscanf(line, "Umask: %o", &mask) == 1)
			break;
	fclose(status);
	return (mode_t)(mask & 0777);
}

int output_file_finish(struct output_file *out, const struct mote_log *log)
{
	struct stat old;
	int err = 0;

	if (out->fd < 0)
		return -EBADF;
	/* A file replaced keeps its permissions (a memory file is guest RAM, which its
	 * owner may have kept private), and a failure to give them is an error; a new one
	 * gets those of any new file, where the file system allows (vfat and some FUSE
	 * mounts refuse chmod: it then stays private). */
	bool replaces = stat(out->path, &old) == 0;
	mode_t mode = replaces ? old.st_mode & 07777 : 0666 & ~process_umask();
	if (fchmod(out->fd, mode) < 0 && replaces)
		err = -errno;
	if (!err && fsync(out->fd) < 0)
		err = -errno;
	if (close(out->fd) < 0 && !err)
		err = -errno;
	out->fd = -1;
	out->finished = !err;
	if (err)
		log_error(log, "%s: %s", out->temp, strerror(-err));
	return err;
}

int output_file_rename(struct output_file *out, const struct mote_log *log)
{
	if (!out->finished) {
		log_error(log, "%s: not written whole; not renamed", out->temp);
		return -EBADF;
	}
	if (rename(out->temp, out->path) < 0) {
		int err = -errno;
		log_error(log, "%s: %s", out->path, strerror(errno));
		return err;
	}
	out->temp[0] = '\0';
	out->finished = false;
	return 0;
}

int output_file_commit(struct output_file *out, const struct mote_log *log)
{
	int err = out->fd >= 0 ? output_file_finish(out, log) : 0;

	if (!err)
		err = output_file_rename(out, log);
	if (err)
		return err;
	err = output_file_sync_directory(out->path);
	if (err)
		log_error(log, OUTPUT_FILE_UNSYNCED_FMT, out->path, strerror(-err));
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
