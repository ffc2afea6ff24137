/* Kernel and initrd files: opened and checked early (so a bad path fails before KVM is
 * touched), then either mapped (the kernel, which the loader parses in place) or read
 * straight into guest memory (the initrd). Neither stays resident in the monitor
 * after loading: the file's pages would otherwise count against mote's RSS. */
#ifndef MOTE_FILE_IMAGE_H
#define MOTE_FILE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#define FILE_IMAGE_MAX (4ULL << 30)

struct file_image {
	int fd;
	size_t size;
	const uint8_t *data; /* after file_image_map() */
};

/* Opens path. -ENOENT/-EACCES as open() says, -EISDIR for a non-regular file,
 * -ENOEXEC for an empty one, -EFBIG beyond FILE_IMAGE_MAX. */
int file_image_open(const char *path, struct file_image *image);

/* Maps the whole file read-only at image->data. */
int file_image_map(struct file_image *image);

/* Reads the whole file into dst (image->size bytes); -EIO if it shrank meanwhile. */
int file_image_read_all(const struct file_image *image, void *dst);

/* Unmaps and closes; safe on a zeroed or already released image. */
void file_image_release(struct file_image *image);

#endif
