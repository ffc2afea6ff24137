/* Files (AGENT_PROTOCOL.md "Files"). An upload goes to a temporary file in the target's
 * directory, which is fsynced, given its mode and renamed over the target only once
 * every byte is there, so a reader never sees half a file and a failed upload leaves
 * nothing behind. A download streams a regular file in chunks as the output buffer
 * has room, so neither side ever holds a whole file. */
#include "agent_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads the path string that ends a payload into path (AGENT_PATH_MAX + 1 bytes).
 * Returns 0, or sends the ERROR and returns -1. */
static int read_path(struct agent_conn *c, const struct agent_header *h, struct agent_reader *rd,
		     char *path)
{
	const char *s;
	size_t n;

	agent_get_string(rd, &s, &n);
	if (!agent_reader_done(rd)) {
		conn_send_error(c, h->id, h->type, EPROTO, "payload truncated or malformed");
		return -1;
	}
	if (n > AGENT_PATH_MAX) {
		conn_send_error(c, h->id, h->type, ENAMETOOLONG, "path longer than %u bytes",
				AGENT_PATH_MAX);
		return -1;
	}
	if (n == 0) {
		conn_send_error(c, h->id, h->type, ENOENT, "empty path");
		return -1;
	}
	memcpy(path, s, n);
	path[n] = '\0';
	return 0;
}

/* Creates the temporary file next to path. Returns 0 or a positive errno. */
static int upload_create(struct upload_state *u, const char *path, uint32_t id)
{
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	size_t dir_len = !slash ? 0 : slash == path ? 1 : (size_t)(slash - path);
	char dir[AGENT_PATH_MAX + 1], tmp[AGENT_PATH_MAX + 64];

	if (*base == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
		return EISDIR;
	memcpy(dir, dir_len ? path : ".", dir_len ? dir_len : 1);
	dir[dir_len ? dir_len : 1] = '\0';
	u->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (u->dir_fd < 0)
		return errno;
	int prefix = snprintf(tmp, sizeof(tmp), "%s/", dir);
	snprintf(tmp + prefix, sizeof(tmp) - (size_t)prefix, ".mote-upload-%u-XXXXXX", id);
	u->fd = mkostemp(tmp, O_CLOEXEC);
	if (u->fd < 0)
		return errno;
	u->tmp_name = strdup(tmp + prefix);
	u->final_name = strdup(base);
	u->path = strdup(path);
	if (!u->tmp_name || !u->final_name || !u->path)
		return ENOMEM;
	return 0;
}

void upload_abort(struct request *r)
{
	struct upload_state *u = &r->upload;

	if (u->fd >= 0 && u->tmp_name)
		unlinkat(u->dir_fd, u->tmp_name, 0);
	close_fd(&u->fd);
	close_fd(&u->dir_fd);
	free(u->tmp_name);
	free(u->final_name);
	free(u->path);
	u->tmp_name = u->final_name = u->path = NULL;
}

void upload_begin(struct agent_conn *c, const struct agent_header *h, const uint8_t *payload)
{
	char path[AGENT_PATH_MAX + 1];
	struct agent_reader rd;
	struct stat st;

	agent_reader_init(&rd, payload, h->length);
	uint32_t mode = agent_get_u32(&rd);
	uint32_t flags = agent_get_u32(&rd);
	if (read_path(c, h, &rd, path) < 0)
		return;
	if (flags != 0 || (mode & ~07777u)) {
		conn_send_error(c, h->id, h->type, EINVAL, "bad UPLOAD flags 0x%x or mode 0%o",
				flags, mode);
		return;
	}
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		int err = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
		conn_send_error(c, h->id, h->type, err, "%s: %s", path,
				err == EISDIR ? strerror(err) : "not a regular file");
		return;
	}
	struct request *r = conn_new_request(c, h, REQUEST_UPLOAD);
	if (!r)
		return;
	struct upload_state *u = &r->upload;
	u->fd = u->dir_fd = -1;
	u->mode = mode;
	int err = upload_create(u, path, h->id);
	if (err) {
		conn_send_error(c, h->id, h->type, err, "%s: %s", path, strerror(err));
		upload_abort(r);
		conn_free_request(r);
		return;
	}
	conn_send_ok(c, h->id, 0, mode);
}

static void upload_fail(struct agent_conn *c, struct request *r, uint16_t type, const char *what,
			int err)
{
	conn_send_error(c, r->id, type, err, "%s %s: %s", what, r->upload.path, strerror(err));
	upload_abort(r);
	r->upload.failed = true;
}

void upload_data(struct agent_conn *c, const struct agent_header *h, const uint8_t *payload)
{
	struct request *r = conn_find(c, h->id, REQUEST_UPLOAD);

	if (!r) {
		conn_send_error(c, h->id, h->type, ESRCH, "no upload with request id %u", h->id);
		return;
	}
	if (r->upload.failed)
		return;
	for (size_t done = 0; done < h->length;) {
		ssize_t n = write(r->upload.fd, payload + done, h->length - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			upload_fail(c, r, h->type, "write", n < 0 ? errno : EIO);
			return;
		}
		done += (size_t)n;
	}
	r->upload.bytes += h->length;
}

/* Puts the whole upload in place: data, then mode, then the name, so that after a crash
 * the target is either the old file or the whole new one. OK, or one ERROR. */
static void upload_commit(struct agent_conn *c, struct request *r, const struct agent_header *h)
{
	struct upload_state *u = &r->upload;

	if (fsync(u->fd) < 0) {
		upload_fail(c, r, h->type, "fsync", errno);
	} else if (fchmod(u->fd, u->mode) < 0) {
		upload_fail(c, r, h->type, "chmod", errno);
	} else if (renameat(u->dir_fd, u->tmp_name, u->dir_fd, u->final_name) < 0) {
		upload_fail(c, r, h->type, "rename to", errno);
	} else {
		fsync(u->dir_fd);
		conn_send_ok(c, h->id, u->bytes, u->mode);
		free(u->tmp_name);
		u->tmp_name = NULL; /* nothing left to remove */
	}
}

void upload_end(struct agent_conn *c, const struct agent_header *h, const uint8_t *payload)
{
	struct request *r = conn_find(c, h->id, REQUEST_UPLOAD);

	(void)payload;
	if (!r) {
		conn_send_error(c, h->id, h->type, ESRCH, "no upload with request id %u", h->id);
		return;
	}
	/* An upload that failed had its one ERROR: it ends here without another
	 * (AGENT_PROTOCOL.md "Files"), whatever this frame holds. */
	if (!r->upload.failed && h->length != 0)
		upload_fail(c, r, h->type, "UPLOAD_END with a payload for", EPROTO);
	else if (!r->upload.failed)
		upload_commit(c, r, h);
	upload_abort(r);
	conn_free_request(r);
}

void download_begin(struct agent_conn *c, const struct agent_header *h, const uint8_t *payload)
{
	char path[AGENT_PATH_MAX + 1];
	struct agent_reader rd;
	struct stat st;
	int err = 0;

	agent_reader_init(&rd, payload, h->length);
	if (read_path(c, h, &rd, path) < 0)
		return;
	struct request *r = conn_new_request(c, h, REQUEST_DOWNLOAD);
	if (!r)
		return;
	/* O_NONBLOCK: opening a FIFO must not wait for a writer. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		err = errno;
	else if (fstat(fd, &st) < 0)
		err = errno;
	else if (S_ISDIR(st.st_mode))
		err = EISDIR;
	else if (!S_ISREG(st.st_mode))
		err = EINVAL;
	if (err) {
		conn_send_error(c, h->id, h->type, err, "%s: %s", path,
				err == EINVAL ? "not a regular file" : strerror(err));
		if (fd >= 0)
			close(fd);
		conn_free_request(r);
		return;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	r->download.fd = fd;
	conn_send_ok(c, h->id, (uint64_t)st.st_size, st.st_mode & 07777u);
}

enum progress_wait download_progress(struct agent_conn *c, struct request *r)
{
	struct download_state *d = &r->download;

	if (!conn_has_chunk_room(c))
		return WAIT_ROOM;
	ssize_t n = conn_send_from_fd(c, AGENT_DATA, r->id, d->fd);
	if (n > 0) {
		d->sent += (uint64_t)n;
		return WAIT_ROOM;
	}
	if (n == 0) {
		uint8_t total[8];
		agent_le64_put(total, d->sent);
		conn_send(c, AGENT_END, r->id, total, sizeof(total));
	} else {
		conn_send_error(c, r->id, AGENT_DOWNLOAD, (int)-n, "read: %s", strerror((int)-n));
	}
	download_abort(r);
	conn_free_request(r);
	return WAIT_EVENTS;
}

void download_abort(struct request *r)
{
	close_fd(&r->download.fd);
}

void file_cancel(struct agent_conn *c, const struct agent_header *h)
{
	struct request *r = conn_find(c, h->id, REQUEST_FREE);

	if (h->length != 0) {
		conn_send_error(c, h->id, h->type, EPROTO, "CANCEL takes no payload");
		return;
	}
	if (!r) {
		conn_send_error(c, h->id, h->type, ESRCH, "no transfer with request id %u", h->id);
		return;
	}
	if (r->kind == REQUEST_EXEC) {
		conn_send_error(c, h->id, h->type, EINVAL, "a command is stopped with SIGNAL");
		return;
	}
	if (r->kind == REQUEST_UPLOAD)
		upload_abort(r);
	else
		download_abort(r);
	conn_free_request(r);
	conn_send_ok(c, h->id, 0, 0);
}
