/* A whole file mapped read-only: kernels and initrds are read once at VM creation. */
#ifndef MOTE_FILE_IMAGE_H
#define MOTE_FILE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#define FILE_IMAGE_MAX (4ULL << 30)

struct file_image {
	const uint8_t *data;
	size_t size;
};

/* Maps path. -ENOENT/-EACCES as open() says, -EISDIR for a non-regular file,
 * -ENOEXEC for an empty one, -EFBIG beyond FILE_IMAGE_MAX. */
int file_image_read(const char *path, struct file_image *image);

void file_image_release(struct file_image *image);

#endif
