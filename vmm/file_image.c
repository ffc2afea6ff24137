#include "file_image.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int file_image_open(const char *path, struct file_image *image)
{
	struct stat st;
	int ret = 0;

	image->data = NULL;
	image->size = 0;
	image->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (image->fd < 0)
		return -errno;
	if (fstat(image->fd, &st) < 0)
		ret = -errno;
	else if (!S_ISREG(st.st_mode))
		ret = -EISDIR;
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

int file_image_map(struct file_image *image)
{
	/* MAP_POPULATE: the loader reads most of the file once, front to back, and a page
	 * fault per 4 KiB page cost more than the copy itself (nested, a 17 MiB vmlinux
	 * took 170-240 ms to load faulting page by page, ~50 ms populated). */
	void *data = mmap(NULL, image->size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, image->fd, 0);

	if (data == MAP_FAILED)
		return -errno;
	image->data = data;
	return 0;
}

int file_image_read_all(const struct file_image *image, void *dst)
{
	size_t done = 0;

	while (done < image->size) {
		ssize_t n =
		    pread(image->fd, (uint8_t *)dst + done, image->size - done, (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		done += (size_t)n;
	}
	return 0;
}

void file_image_release(struct file_image *image)
{
	if (image->data)
		munmap((void *)image->data, image->size);
	if (image->fd >= 0)
		close(image->fd);
	image->data = NULL;
	image->size = 0;
	image->fd = -1;
}
