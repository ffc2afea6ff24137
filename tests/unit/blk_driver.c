/* The virtio-blk test driver (blk_driver.h): the guest side of the queue, a transport
 * that only counts, and the image checked behind the device's back. */
#include <dirent.h>
#include <endian.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cmocka.h>

#include <linux/magic.h>

#include "blk_driver.h"
#include "vmm/snapshot_stream.h"

uint8_t pattern(uint64_t offset)
{
	return (uint8_t)(offset * 31 + (offset >> 9));
}

void write_pattern(const char *path, uint64_t size)
{
	int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	uint8_t buf[SECTOR];

	assert_true(fd >= 0);
	for (uint64_t off = 0; off < size; off += sizeof(buf)) {
		size_t n = size - off < sizeof(buf) ? (size_t)(size - off) : sizeof(buf);
		for (size_t i = 0; i < n; i++)
			buf[i] = pattern(off + i);
		assert_int_equal(pwrite(fd, buf, n, (off_t)off), (ssize_t)n);
	}
	close(fd);
}

int new_patterned_image(char *path, uint64_t size)
{
	int fd = mkstemp(path);

	if (fd < 0)
		return -1;
	close(fd);
	write_pattern(path, size);
	return 0;
}

void read_image(struct fixture *f, uint64_t offset, void *buf, size_t len)
{
	int fd = open(f->path, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, buf, len, (off_t)offset), (ssize_t)len);
	close(fd);
}

void assert_pattern(const uint8_t *buf, uint64_t offset, size_t len)
{
	for (size_t i = 0; i < len; i++)
		assert_int_equal(buf[i], pattern(offset + i));
}

void assert_zeros(const uint8_t *buf, size_t len)
{
	for (size_t i = 0; i < len; i++)
		assert_int_equal(buf[i], 0);
}

void assert_image_pattern(struct fixture *f, uint64_t offset, size_t len)
{
	uint8_t *buf = malloc(len);

	assert_non_null(buf);
	read_image(f, offset, buf, len);
	assert_pattern(buf, offset, len);
	free(buf);
}

void assert_image_zeros(struct fixture *f, uint64_t offset, size_t len)
{
	uint8_t *buf = malloc(len);

	assert_non_null(buf);
	read_image(f, offset, buf, len);
	assert_zeros(buf, len);
	free(buf);
}

void drop_image_cache(struct fixture *f)
{
	int fd = open(f->path, O_RDONLY | O_CLOEXEC);
	struct statfs fs;

	assert_true(fd >= 0);
	assert_int_equal(fstatfs(fd, &fs), 0);
	assert_true(fs.f_type != TMPFS_MAGIC);
	/* Dirty pages are not evicted: write them back first. */
	assert_int_equal(fdatasync(fd), 0);
	assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	close(fd);
}

bool image_page_resident(struct fixture *f, uint64_t offset)
{
	long page = sysconf(_SC_PAGESIZE);
	int fd = open(f->path, O_RDONLY | O_CLOEXEC);
	unsigned char vec;

	assert_true(page > 0);
	assert_true(fd >= 0);
	off_t start = (off_t)(offset - offset % (uint64_t)page);
	void *map = mmap(NULL, (size_t)page, PROT_READ, MAP_SHARED, fd, start);
	assert_true(map != MAP_FAILED);
	assert_int_equal(mincore(map, (size_t)page, &vec), 0);
	munmap(map, (size_t)page);
	close(fd);
	return vec & 1;
}

void *guest(struct fixture *f, uint64_t addr, uint64_t len)
{
	void *p = guest_memory_ptr(&f->mem, addr, len);

	assert_non_null(p);
	return p;
}

struct vring_avail *avail(struct fixture *f)
{
	return guest(f, AVAIL_ADDR, 6 + 2 * QSIZE);
}

struct vring_used *used(struct fixture *f)
{
	return guest(f, USED_ADDR, 6 + 8 * QSIZE);
}

int open_disk(struct fixture *f, const char *path, bool read_only, const char *id,
	      struct virtio_blk **blk)
{
	struct virtio_blk_options options = {.path = path, .read_only = read_only, .id = id};

	return virtio_blk_create(&options, &f->mem, &f->loop, &f->log, blk);
}

void activate(struct fixture *f, struct vdev *dev, bool event_idx)
{
	fake_transport_attach(dev, &f->transport);
	dev->driver_features = dev->ops->features(dev);
	assert_int_equal(virtq_configure(&dev->queues[0], &f->mem, QSIZE, DESC_ADDR, AVAIL_ADDR,
					 USED_ADDR, event_idx),
			 0);
	pthread_mutex_lock(&dev->lock);
	assert_int_equal(dev->ops->activate(dev), 0);
	dev->activated = true;
	pthread_mutex_unlock(&dev->lock);
}

void attach_options(struct fixture *f, const struct virtio_blk_options *options, bool event_idx)
{
	struct virtio_blk_options with_path = *options;

	if (!with_path.path)
		with_path.path = f->path;
	assert_int_equal(event_loop_init(&f->loop), 0);
	assert_int_equal(virtio_blk_create(&with_path, &f->mem, &f->loop, &f->log, &f->blk), 0);
	f->dev = virtio_blk_vdev(f->blk);
	activate(f, f->dev, event_idx);
}

void attach(struct fixture *f, bool read_only, const char *id, bool event_idx)
{
	struct virtio_blk_options options = {.read_only = read_only, .id = id};

	attach_options(f, &options, event_idx);
}

void detach(struct fixture *f)
{
	virtio_blk_destroy(f->blk);
	event_loop_destroy(&f->loop);
	f->blk = NULL;
}

void reattach_read_only(struct fixture *f)
{
	detach(f);
	attach(f, true, NO_ID, false);
}

int blk_driver_setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f || guest_memory_create(&f->mem, RAM_SIZE, NULL) != 0)
		return -1;
	f->log = fake_log(&f->log_text);
	f->next_buf = HEAP_ADDR;
	snprintf(f->path, sizeof(f->path), "/tmp/mote-blk-XXXXXX");
	if (new_patterned_image(f->path, IMAGE_SECTORS * SECTOR) != 0)
		return -1;
	attach(f, false, NO_ID, false);
	*state = f;
	return 0;
}

int blk_driver_teardown(void **state)
{
	struct fixture *f = *state;

	if (f->blk)
		detach(f);
	unlink(f->path);
	guest_memory_destroy(&f->mem);
	free(f);
	return 0;
}

uint64_t galloc_aligned(struct fixture *f, uint64_t len, uint64_t align)
{
	uint64_t addr = (f->next_buf + align - 1) & ~(align - 1);

	f->next_buf = (addr + len + 15) & ~15ULL;
	return addr;
}

uint64_t galloc(struct fixture *f, uint64_t len)
{
	return galloc_aligned(f, len, 16);
}

void set_desc(struct fixture *f, uint64_t table, uint16_t idx, const struct seg *s, bool more)
{
	struct vring_desc *d = guest(f, table + idx * sizeof(*d), sizeof(*d));

	*d = (struct vring_desc){
	    .addr = s->addr,
	    .len = s->len,
	    .flags = (s->writable ? VRING_DESC_F_WRITE : 0) | (more ? VRING_DESC_F_NEXT : 0),
	    .next = idx + 1,
	};
}

uint16_t offer(struct fixture *f, const struct seg *segs, unsigned n)
{
	uint16_t head = f->next_desc;

	for (unsigned i = 0; i < n; i++)
		set_desc(f, DESC_ADDR, head + i, &segs[i], i + 1 < n);
	f->next_desc += n;
	avail(f)->ring[avail(f)->idx % QSIZE] = head;
	avail(f)->idx++;
	return head;
}

uint64_t header(struct fixture *f, uint32_t type, uint64_t sector)
{
	uint64_t addr = galloc(f, sizeof(struct virtio_blk_outhdr));
	struct virtio_blk_outhdr *h = guest(f, addr, sizeof(*h));

	*h = (struct virtio_blk_outhdr){.type = htole32(type), .sector = htole64(sector)};
	return addr;
}

uint64_t status_byte(struct fixture *f)
{
	uint64_t addr = galloc(f, 1);

	*(uint8_t *)guest(f, addr, 1) = 0xff; /* no status yet */
	return addr;
}

/* Offers header, the data at data when len > 0, then status. */
static struct req offer_request(struct fixture *f, uint32_t type, uint64_t hdr, uint64_t data,
				uint32_t len, uint64_t status)
{
	bool writable = type == VIRTIO_BLK_T_IN || type == VIRTIO_BLK_T_GET_ID;
	struct seg segs[3];
	unsigned n = 0;
	struct req r = {.data = len > 0 ? data : 0, .status = status};

	segs[n++] = (struct seg){hdr, sizeof(struct virtio_blk_outhdr), false};
	if (len > 0)
		segs[n++] = (struct seg){data, len, writable};
	segs[n++] = (struct seg){status, 1, true};
	r.head = offer(f, segs, n);
	return r;
}

struct req request(struct fixture *f, uint32_t type, uint64_t sector, uint32_t len)
{
	uint64_t hdr = header(f, type, sector);
	uint64_t data = 0;

	if (len > 0) {
		data = galloc(f, len);
		memset(guest(f, data, len), 0xee, len);
	}
	return offer_request(f, type, hdr, data, len, status_byte(f));
}

struct req request_at(struct fixture *f, uint32_t type, uint64_t sector, uint64_t data,
		      uint32_t len)
{
	uint64_t hdr = header(f, type, sector);

	return offer_request(f, type, hdr, data, len, status_byte(f));
}

struct req write_request(struct fixture *f, uint64_t sector, uint8_t fill, uint32_t len)
{
	struct req r = request(f, VIRTIO_BLK_T_OUT, sector, len);

	memset(guest(f, r.data, len), fill, len);
	return r;
}

struct req range_request(struct fixture *f, uint32_t type,
			 const struct virtio_blk_discard_write_zeroes *ranges, unsigned n)
{
	uint32_t len = n * sizeof(*ranges);
	struct req r = request(f, type, 0, len);

	memcpy(guest(f, r.data, len), ranges, len);
	return r;
}

struct virtio_blk_discard_write_zeroes range(uint64_t sector, uint32_t sectors, uint32_t flags)
{
	return (struct virtio_blk_discard_write_zeroes){
	    .sector = htole64(sector), .num_sectors = htole32(sectors), .flags = htole32(flags)};
}

void notify_dev(struct vdev *dev)
{
	pthread_mutex_lock(&dev->lock);
	dev->ops->queue_notify(dev, 0);
	pthread_mutex_unlock(&dev->lock);
}

void reset_dev(struct vdev *dev)
{
	pthread_mutex_lock(&dev->lock);
	dev->ops->reset(dev);
	pthread_mutex_unlock(&dev->lock);
}

int quiesce_dev_bounded(struct vdev *dev, int64_t stall_ns)
{
	pthread_mutex_lock(&dev->lock);
	int err = dev->ops->quiesce(dev, stall_ns);
	pthread_mutex_unlock(&dev->lock);
	return err;
}

void quiesce_dev(struct vdev *dev)
{
	assert_int_equal(quiesce_dev_bounded(dev, CLOCK_FOREVER), 0);
}

int save_dev(struct vdev *dev)
{
	struct snap_writer w;

	snap_writer_init(&w);
	pthread_mutex_lock(&dev->lock);
	int ret = dev->ops->save(dev, &w);
	pthread_mutex_unlock(&dev->lock);
	snap_writer_free(&w);
	return ret;
}

void wait_used(struct fixture *f, uint16_t n)
{
	for (int i = 0; i < 2000 && used(f)->idx != n; i++) {
		/* What the transport does when the device asks to be served again. */
		if (f->transport.serve_again[BLK_QUEUE] > 0) {
			f->transport.serve_again[BLK_QUEUE] = 0;
			notify_dev(f->dev);
		}
		assert_true(event_loop_run_once(&f->loop, 10) >= 0);
	}
	assert_int_equal(used(f)->idx, n);
}

void kick_and_wait(struct fixture *f, uint16_t n)
{
	notify_dev(f->dev);
	wait_used(f, n);
}

uint8_t status_of(struct fixture *f, struct req r)
{
	return *(uint8_t *)guest(f, r.status, 1);
}

uint32_t used_len_of(struct fixture *f, struct req r)
{
	struct vring_used *u = used(f);

	for (uint16_t i = 0; i < u->idx; i++)
		if (u->ring[i % QSIZE].id == r.head)
			return u->ring[i % QSIZE].len;
	fail_msg("head %u was not used", r.head);
	return 0;
}

uint64_t config_field(struct vdev *dev, uint32_t offset, uint32_t len)
{
	uint64_t value = 0;

	dev->ops->config_read(dev, offset, (uint8_t *)&value, len);
	return le64toh(value);
}

unsigned fds_linked_to(const char *target, int *found)
{
	DIR *dir = opendir("/proc/self/fd");
	struct dirent *entry;
	unsigned matches = 0;

	assert_non_null(dir);
	while ((entry = readdir(dir))) {
		char path[PATH_MAX], link[PATH_MAX];
		snprintf(path, sizeof(path), "/proc/self/fd/%s", entry->d_name);
		ssize_t n = readlink(path, link, sizeof(link) - 1);
		if (n < 0)
			continue;
		link[n] = '\0';
		if (strcmp(link, target) == 0) {
			*found = atoi(entry->d_name);
			matches++;
		}
	}
	closedir(dir);
	return matches;
}

int fd_linked_to(const char *target)
{
	int found = -1;

	assert_int_equal(fds_linked_to(target, &found), 1);
	return found;
}

void hold_reads_on_a_pipe(struct fixture *f, int pipe_fds[2])
{
	char image[PATH_MAX];

	assert_non_null(realpath(f->path, image));
	assert_int_equal(pipe2(pipe_fds, O_CLOEXEC), 0);
	assert_true(dup2(pipe_fds[0], fd_linked_to(image)) >= 0);
	close(pipe_fds[0]);
}
