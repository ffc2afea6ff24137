#include "file_image.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int file_image_read(const char *path, struct file_image *image)
{
	struct stat st;
	int fd, ret = 0;

	image->data = NULL;
	image->size = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		ret = -errno;
	else if (!S_ISREG(st.st_mode))
		ret = -EISDIR;
	else if (st.st_size == 0)
		ret = -ENOEXEC;
	else if ((uint64_t)st.st_size > FILE_IMAGE_MAX)
		ret = -EFBIG;
	if (!ret) {
		void *data = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (data == MAP_FAILED) {
			ret = -errno;
		} else {
			image->data = data;
			image->size = (size_t)st.st_size;
		}
	}
	close(fd);
	return ret;
}

void file_image_release(struct file_image *image)
{
	if (image->data)
		munmap((void *)image->data, image->size);
	image->data = NULL;
	image->size = 0;
}
