#include "file_image.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int file_kind_error(mode_t mode, enum file_kind kind)
{
	if (S_ISREG(mode) || (kind == FILE_REGULAR_OR_BLOCK && S_ISBLK(mode)))
		return 0;
	return S_ISDIR(mode) ? -EISDIR : -EMEDIUMTYPE;
}

const char *file_open_error(int err)
{
	if (err == -EMEDIUMTYPE)
		return "not a regular file (a FIFO, socket or device)";
	if (err == -EAGAIN)
		return "replaced while it was being opened";
	return strerror(-err);
}

int file_reopen(int fd, const char *path, int flags)
{
	char link[32];
	struct stat was, st;

	if (fstat(fd, &was) < 0)
		return -errno;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	/* O_NONBLOCK while opening (dropped after): a FIFO never gets here, but open() must
	 * not wait on anything. */
	flags |= O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
	int again = open(link, flags);
	if (again < 0 && errno == ENOENT)
		again = open(path, flags);
	if (again < 0)
		return -errno;
	int err = 0;
	if (fstat(again, &st) < 0 || st.st_dev != was.st_dev || st.st_ino != was.st_ino)
		err = -EAGAIN; /* without /proc, the path was replaced meanwhile */
	else
		err = file_drop_nonblock(again);
	if (err) {
		close(again);
		return err;
	}
	return again;
}

int file_open_kind(const char *path, int flags, enum file_kind kind)
{
	struct stat st;

	/* Look before opening: open() itself acts on some devices (a watchdog arms, a tape
	 * rewinds), so what is not of the kind wanted is never opened at all. O_PATH opens
	 * nothing but the name (open(2)). */
	int path_fd = open(path, O_PATH | O_CLOEXEC);
	if (path_fd < 0)
		return -errno;
	int err = fstat(path_fd, &st) < 0 ? -errno : file_kind_error(st.st_mode, kind);
	int fd = err ? err : file_reopen(path_fd, path, flags);
	close(path_fd);
	return fd;
}

int file_open_read(const char *path)
{
	return file_open_kind(path, O_RDONLY, FILE_REGULAR);
}

int file_drop_nonblock(int fd)
{
	int flags = fcntl(fd, F_GETFL);

	if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

int file_image_open(const char *path, struct file_image *image)
{
	struct stat st;
	int ret = 0;

	image->size = 0;
	image->fd = file_open_read(path);
	if (image->fd < 0) {
		ret = image->fd;
		image->fd = -1;
		return ret;
	}
	if (fstat(image->fd, &st) < 0)
		ret = -errno;
	else if (st.st_size == 0)
		ret = -ENOEXEC;
	else if ((uint64_t)st.st_size > FILE_IMAGE_MAX)
		ret = -EFBIG;
	if (ret) {
		file_image_release(image);
		return ret;
	}
	image->size = (size_t)st.st_size;
	return 0;
}

int file_read_at(int fd, void *dst, uint64_t len, uint64_t offset)
{
	uint8_t *to = dst;

	while (len) {
		ssize_t n = pread(fd, to, len, (off_t)offset);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO; /* the file ended early */
		to += n;
		len -= (uint64_t)n;
		offset += (uint64_t)n;
	}
	return 0;
}

int file_image_read_all(const struct file_image *image, void *dst)
{
	return file_read_at(image->fd, dst, image->size, 0);
}

void file_image_release(struct file_image *image)
{
	if (image->fd >= 0)
		close(image->fd);
	image->size = 0;
	image->fd = -1;
}
