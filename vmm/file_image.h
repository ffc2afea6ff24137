/* Files a user names, opened only once they are seen to be of the kind wanted; and
 * kernel and initrd files: opened and checked early (so a bad path fails before KVM is
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

/* What a file named by a user or a state file may be. */
enum file_kind {
	FILE_REGULAR,
	FILE_REGULAR_OR_BLOCK, /* a disk image */
};

/* Opens path with flags (close-on-exec added) when it is a file of the kind wanted, the
 * way every file named by a user or a state file is opened. Anything else is refused
 * before it is opened (opening a FIFO with no writer waits; opening some devices acts
 * on them): the name is opened O_PATH, which opens nothing, the file looked at, and
 * only then opened for real (file_reopen). -EISDIR for a directory, -EMEDIUMTYPE for a
 * FIFO, socket or other device. The fd (blocking for reads and writes), or a negative
 * errno (-ENOENT, -EACCES, ... as open() says). */
int file_open_kind(const char *path, int flags, enum file_kind kind);

/* Opens the file fd refers to (fd may be an O_PATH one) anew with flags (close-on-exec
 * and no controlling terminal added; blocking), through /proc/self/fd, so
 * that no other file can take its place; without /proc, by path, and -EAGAIN if that is
 * another file by then. The new fd, or a negative errno (-EINVAL: flags the file system
 * refuses, such as O_DIRECT on tmpfs). */
int file_reopen(int fd, const char *path, int flags);

/* file_open_kind(path, O_RDONLY, FILE_REGULAR): kernels, initrds, state and memory
 * files. */
int file_open_read(const char *path);

/* Words for an error of the functions here, for a log line. */
const char *file_open_error(int err);

/* Clears O_NONBLOCK on fd, which was opened with it only so that open() could not wait:
 * a regular file ignores it, but io_uring would answer -EAGAIN rather than wait. 0, or
 * a negative errno (errno set too). */
int file_drop_nonblock(int fd);

/* Opens path as file_open_read() does (its errors); then -ENOEXEC for an empty file,
 * -EFBIG beyond FILE_IMAGE_MAX. */
int file_image_open(const char *path, struct file_image *image);

/* Reads len bytes at offset into dst, whatever the number of pread() calls it takes:
 * 0, -EIO when the file ends first, or pread's errno. */
int file_read_at(int fd, void *dst, uint64_t len, uint64_t offset);

/* Reads the whole file into dst (image->size bytes); -EIO if it shrank meanwhile. */
int file_image_read_all(const struct file_image *image, void *dst);

/* Closes; safe on an already released image. */
void file_image_release(struct file_image *image);

#endif
