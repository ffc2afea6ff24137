/* Kernel and initrd files: opened and checked early (so a bad path fails before KVM is
 * touched), then read straight into guest memory (the kernel by the loader, segment by
 * segment; the initrd whole). Neither is ever held in the monitor's own memory: the
 * file's pages would count against mote's RSS. */
#ifndef MOTE_FILE_IMAGE_H
#define MOTE_FILE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#define FILE_IMAGE_MAX (4ULL << 30)

struct file_image {
	int fd;
	size_t size;
};

/* Opens path to read, close-on-exec, the way every file named by a user or a state file
 * is opened: without waiting, so that a FIFO with no writer (or a device that blocks in
 * open) cannot hang the caller before it checks what the file is. The fd (blocking
 * again for reads), or a negative errno. */
int file_open_read(const char *path);

/* Clears O_NONBLOCK on fd, which was opened with it only so that open() could not wait:
 * a regular file ignores it, but io_uring would answer -EAGAIN rather than wait. 0, or
 * a negative errno (errno set too). */
int file_drop_nonblock(int fd);

/* Opens path. -ENOENT/-EACCES as open() says, -EISDIR for a non-regular file,
 * -ENOEXEC for an empty one, -EFBIG beyond FILE_IMAGE_MAX. */
int file_image_open(const char *path, struct file_image *image);

/* Reads len bytes at offset into dst, whatever the number of pread() calls it takes:
 * 0, -EIO when the file ends first, or pread's errno. */
int file_read_at(int fd, void *dst, uint64_t len, uint64_t offset);

/* Reads the whole file into dst (image->size bytes); -EIO if it shrank meanwhile. */
int file_image_read_all(const struct file_image *image, void *dst);

/* Closes; safe on an already released image. */
void file_image_release(struct file_image *image);

#endif
