/* Files written whole or not at all (output_file.h). */
#include "output_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int output_file_open(struct output_file *out, const char *path, const struct mote_log *log)
{
	out->path = path;
	out->fd = -1;
	out->temp[0] = '\0';
	if ((size_t)snprintf(out->temp, sizeof(out->temp), "%s.tmp-%d", path, (int)getpid()) >=
	    sizeof(out->temp)) {
		out->temp[0] = '\0';
		log_error(log, "%s: path too long", path);
		return -ENAMETOOLONG;
	}
	out->fd = open(out->temp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out->fd < 0) {
		int err = -errno;
		log_error(log, "%s: %s", out->temp, strerror(errno));
		out->temp[0] = '\0';
		return err;
	}
	return 0;
}

int output_file_commit(struct output_file *out, const struct mote_log *log)
{
	if (fchmod(out->fd, 0644) < 0 || fsync(out->fd) < 0 || close(out->fd) < 0) {
		int err = -errno;
		log_error(log, "%s: %s", out->temp, strerror(errno));
		out->fd = -1;
		return err;
	}
	out->fd = -1;
	if (rename(out->temp, out->path) < 0) {
		int err = -errno;
		log_error(log, "%s: %s", out->path, strerror(errno));
		return err;
	}
	out->temp[0] = '\0';
	return 0;
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
