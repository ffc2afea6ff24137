/* virtio-blk (virtio 1.2 §5.2) on a temporary image: what a driver sees through the
 * queue and the config space, the image contents it leaves behind, and that requests
 * breaking the rules are failed one by one while the device carries on. Completions come
 * through the event loop, as in a VM; an in-memory guest, a fake transport, no KVM. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cmocka.h>

#include <linux/magic.h>
#include <linux/virtio_blk.h>
#include <linux/virtio_ring.h>

#include "virtio/blk.h"
#include "vmm/event_loop.h"
#include "vmm/guest_memory.h"

#define MIB (1024ULL * 1024ULL)
#define RAM_SIZE (16 * MIB)
#define QSIZE 128
#define DESC_ADDR 0x10000ULL
#define AVAIL_ADDR 0x11000ULL
#define USED_ADDR 0x12000ULL
#define INDIRECT_ADDR 0x20000ULL
#define HEAP_ADDR 0x100000ULL
#define SECTOR 512
#define IMAGE_SECTORS 2048 /* 1 MiB */
#define NO_ID NULL

struct fake_transport {
	int interrupts;
	int needs_reset;
};

struct fixture {
	struct guest_memory mem;
	struct event_loop loop;
	struct virtio_blk *blk;
	struct vdev *dev;
	struct fake_transport transport;
	struct mote_log log;
	char log_text[512];
	char path[64];
	uint16_t next_desc;
	uint64_t next_buf;
};

/* A request as the test driver built it. */
struct req {
	uint16_t head;
	uint64_t data;	 /* guest address of its data buffer, 0 when none */
	uint64_t status; /* guest address of its status byte */
};

struct seg {
	uint64_t addr;
	uint32_t len;
	bool writable;
};

static void fake_signal_used(void *transport, uint16_t q)
{
	(void)q;
	((struct fake_transport *)transport)->interrupts++;
}

static void fake_signal_config(void *transport)
{
	(void)transport;
}

static void fake_needs_reset(void *transport)
{
	((struct fake_transport *)transport)->needs_reset++;
}

static const struct vdev_transport_ops fake_transport_ops = {
    .signal_used = fake_signal_used,
    .signal_config = fake_signal_config,
    .needs_reset = fake_needs_reset,
};

static void capture_log(void *opaque, enum mote_log_level level, const char *message)
{
	struct fixture *f = opaque;
	(void)level;
	snprintf(f->log_text, sizeof(f->log_text), "%s", message);
}

static uint8_t pattern(uint64_t offset)
{
	return (uint8_t)(offset * 31 + (offset >> 9));
}

static void write_pattern(const char *path, uint64_t size)
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

static void read_image(struct fixture *f, uint64_t offset, void *buf, size_t len)
{
	int fd = open(f->path, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, buf, len, (off_t)offset), (ssize_t)len);
	close(fd);
}

static void assert_pattern(const uint8_t *buf, uint64_t offset, size_t len)
{
	for (size_t i = 0; i < len; i++)
		assert_int_equal(buf[i], pattern(offset + i));
}

static void assert_zeros(const uint8_t *buf, size_t len)
{
	for (size_t i = 0; i < len; i++)
		assert_int_equal(buf[i], 0);
}

static void assert_image_pattern(struct fixture *f, uint64_t offset, size_t len)
{
	uint8_t *buf = malloc(len);

	read_image(f, offset, buf, len);
	assert_pattern(buf, offset, len);
	free(buf);
}

static void assert_image_zeros(struct fixture *f, uint64_t offset, size_t len)
{
	uint8_t *buf = malloc(len);

	read_image(f, offset, buf, len);
	assert_zeros(buf, len);
	free(buf);
}

static void *guest(struct fixture *f, uint64_t addr, uint64_t len)
{
	void *p = guest_memory_ptr(&f->mem, addr, len);

	assert_non_null(p);
	return p;
}

static struct vring_avail *avail(struct fixture *f)
{
	return guest(f, AVAIL_ADDR, 6 + 2 * QSIZE);
}

static struct vring_used *used(struct fixture *f)
{
	return guest(f, USED_ADDR, 6 + 8 * QSIZE);
}

static int open_disk(struct fixture *f, const char *path, bool read_only, const char *id,
		     struct virtio_blk **blk)
{
	struct virtio_blk_options options = {.path = path, .read_only = read_only, .id = id};

	return virtio_blk_create(&options, &f->mem, &f->loop, &f->log, blk);
}

/* What the transport does once the driver set DRIVER_OK: the queue the driver laid out
 * in guest RAM, every offered feature accepted. */
static void activate(struct fixture *f, struct vdev *dev, bool event_idx)
{
	dev->transport_ops = &fake_transport_ops;
	dev->transport = &f->transport;
	dev->driver_features = dev->ops->features(dev);
	assert_int_equal(virtq_configure(&dev->queues[0], &f->mem, QSIZE, DESC_ADDR, AVAIL_ADDR,
					 USED_ADDR, event_idx),
			 0);
	pthread_mutex_lock(&dev->lock);
	assert_int_equal(dev->ops->activate(dev), 0);
	dev->activated = true;
	pthread_mutex_unlock(&dev->lock);
}

static void attach(struct fixture *f, bool read_only, const char *id, bool event_idx)
{
	assert_int_equal(event_loop_init(&f->loop), 0);
	assert_int_equal(open_disk(f, f->path, read_only, id, &f->blk), 0);
	f->dev = virtio_blk_vdev(f->blk);
	activate(f, f->dev, event_idx);
}

static void detach(struct fixture *f)
{
	virtio_blk_destroy(f->blk);
	event_loop_destroy(&f->loop);
	f->blk = NULL;
}

/* A fresh guest, a fresh queue, a new disk on a new image: the default for every test. */
static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f || guest_memory_create(&f->mem, RAM_SIZE, NULL) != 0)
		return -1;
	f->log = (struct mote_log){.fn = capture_log, .opaque = f};
	f->next_buf = HEAP_ADDR;
	snprintf(f->path, sizeof(f->path), "/tmp/mote-blk-XXXXXX");
	int fd = mkstemp(f->path);
	if (fd < 0)
		return -1;
	close(fd);
	write_pattern(f->path, IMAGE_SECTORS * SECTOR);
	attach(f, false, NO_ID, false);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	if (f->blk)
		detach(f);
	unlink(f->path);
	guest_memory_destroy(&f->mem);
	free(f);
	return 0;
}

/* Guest buffers come from a bump allocator above the rings. */
static uint64_t galloc(struct fixture *f, uint64_t len)
{
	uint64_t addr = f->next_buf;

	f->next_buf = (f->next_buf + len + 15) & ~15ULL;
	return addr;
}

static void set_desc(struct fixture *f, uint64_t table, uint16_t idx, const struct seg *s,
		     bool more)
{
	struct vring_desc *d = guest(f, table + idx * sizeof(*d), sizeof(*d));

	*d = (struct vring_desc){
	    .addr = s->addr,
	    .len = s->len,
	    .flags = (s->writable ? VRING_DESC_F_WRITE : 0) | (more ? VRING_DESC_F_NEXT : 0),
	    .next = idx + 1,
	};
}

/* Chains segs through consecutive descriptors and makes the chain available. */
static uint16_t offer(struct fixture *f, const struct seg *segs, unsigned n)
{
	uint16_t head = f->next_desc;

	for (unsigned i = 0; i < n; i++)
		set_desc(f, DESC_ADDR, head + i, &segs[i], i + 1 < n);
	f->next_desc += n;
	avail(f)->ring[avail(f)->idx % QSIZE] = head;
	avail(f)->idx++;
	return head;
}

static uint64_t header(struct fixture *f, uint32_t type, uint64_t sector)
{
	uint64_t addr = galloc(f, sizeof(struct virtio_blk_outhdr));
	struct virtio_blk_outhdr *h = guest(f, addr, sizeof(*h));

	*h = (struct virtio_blk_outhdr){.type = htole32(type), .sector = htole64(sector)};
	return addr;
}

static uint64_t status_byte(struct fixture *f)
{
	uint64_t addr = galloc(f, 1);

	*(uint8_t *)guest(f, addr, 1) = 0xff; /* no status yet */
	return addr;
}

/* header, then len bytes of data (device-writable for IN and GET_ID), then status. */
static struct req request(struct fixture *f, uint32_t type, uint64_t sector, uint32_t len)
{
	bool writable = type == VIRTIO_BLK_T_IN || type == VIRTIO_BLK_T_GET_ID;
	struct seg segs[3];
	unsigned n = 0;
	struct req r = {0};

	segs[n++] = (struct seg){header(f, type, sector), sizeof(struct virtio_blk_outhdr), false};
	if (len > 0) {
		r.data = galloc(f, len);
		memset(guest(f, r.data, len), 0xee, len);
		segs[n++] = (struct seg){r.data, len, writable};
	}
	r.status = status_byte(f);
	segs[n++] = (struct seg){r.status, 1, true};
	r.head = offer(f, segs, n);
	return r;
}

static struct req write_request(struct fixture *f, uint64_t sector, uint8_t fill, uint32_t len)
{
	struct req r = request(f, VIRTIO_BLK_T_OUT, sector, len);

	memset(guest(f, r.data, len), fill, len);
	return r;
}

/* A DISCARD or WRITE_ZEROES request with n ranges. */
static struct req range_request(struct fixture *f, uint32_t type,
				const struct virtio_blk_discard_write_zeroes *ranges, unsigned n)
{
	uint32_t len = n * sizeof(*ranges);
	struct req r = request(f, type, 0, len);

	memcpy(guest(f, r.data, len), ranges, len);
	return r;
}

static struct virtio_blk_discard_write_zeroes range(uint64_t sector, uint32_t sectors,
						    uint32_t flags)
{
	return (struct virtio_blk_discard_write_zeroes){
	    .sector = htole64(sector), .num_sectors = htole32(sectors), .flags = htole32(flags)};
}

static void notify_dev(struct vdev *dev)
{
	pthread_mutex_lock(&dev->lock);
	dev->ops->queue_notify(dev, 0);
	pthread_mutex_unlock(&dev->lock);
}

/* Runs the event loop until the used index reaches n (generous: tests may run under
 * emulation), then checks it went no further. */
static void wait_used(struct fixture *f, uint16_t n)
{
	for (int i = 0; i < 2000 && used(f)->idx != n; i++)
		assert_true(event_loop_run_once(&f->loop, 10) >= 0);
	assert_int_equal(used(f)->idx, n);
}

/* The driver kicks the queue and waits for n chains in all to come back. */
static void kick_and_wait(struct fixture *f, uint16_t n)
{
	notify_dev(f->dev);
	wait_used(f, n);
}

static uint8_t status_of(struct fixture *f, struct req r)
{
	return *(uint8_t *)guest(f, r.status, 1);
}

/* The used element the device returned for r's head, and its written length. */
static uint32_t used_len_of(struct fixture *f, struct req r)
{
	struct vring_used *u = used(f);

	for (uint16_t i = 0; i < u->idx; i++)
		if (u->ring[i % QSIZE].id == r.head)
			return u->ring[i % QSIZE].len;
	fail_msg("head %u was not used", r.head);
	return 0;
}

/* A config field, read as the driver does: little-endian, at its offset. */
static uint64_t config_field(struct vdev *dev, uint32_t offset, uint32_t len)
{
	uint64_t value = 0;

	dev->ops->config_read(dev, offset, (uint8_t *)&value, len);
	return le64toh(value);
}

#define CONFIG(dev, field)                                                                         \
	config_field((dev), offsetof(struct virtio_blk_config, field),                             \
		     sizeof(((struct virtio_blk_config *)0)->field))

static void reattach_read_only(struct fixture *f)
{
	detach(f);
	attach(f, true, NO_ID, false);
}

static void read_returns_file_contents(void **state)
{
	struct fixture *f = *state;
	struct req r = request(f, VIRTIO_BLK_T_IN, 10, 4 * SECTOR);

	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, r), 4 * SECTOR + 1);
	assert_pattern(guest(f, r.data, 4 * SECTOR), 10 * SECTOR, 4 * SECTOR);
	assert_int_equal(f->transport.interrupts, 1);
}

static void write_lands_in_the_file(void **state)
{
	struct fixture *f = *state;
	struct req r = write_request(f, 20, 0xab, 2 * SECTOR);
	uint8_t buf[2 * SECTOR];

	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, r), 1);
	read_image(f, 20 * SECTOR, buf, sizeof(buf));
	for (size_t i = 0; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0xab);
	assert_image_pattern(f, 19 * SECTOR, SECTOR);
	assert_image_pattern(f, 22 * SECTOR, SECTOR);
}

static void multi_segment_read_fills_every_segment_up_to_the_status_byte(void **state)
{
	struct fixture *f = *state;
	/* 100 + 924 + 1024 data bytes; the status byte ends the last data segment. */
	uint64_t a = galloc(f, 100), b = galloc(f, 924), c = galloc(f, 1025);
	struct seg segs[] = {
	    {header(f, VIRTIO_BLK_T_IN, 3), 16, false},
	    {a, 100, true},
	    {b, 924, true},
	    {c, 1025, true},
	};
	struct req r = {.status = c + 1024};

	*(uint8_t *)guest(f, r.status, 1) = 0xff;
	r.head = offer(f, segs, 4);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, r), 2048 + 1);
	assert_pattern(guest(f, a, 100), 3 * SECTOR, 100);
	assert_pattern(guest(f, b, 924), 3 * SECTOR + 100, 924);
	assert_pattern(guest(f, c, 1024), 3 * SECTOR + 1024, 1024);
}

static void multi_segment_write_takes_every_segment(void **state)
{
	struct fixture *f = *state;
	/* The header and the first 500 data bytes share a descriptor. */
	uint64_t a = galloc(f, 16 + 500), b = galloc(f, 12), c = galloc(f, 512);
	uint64_t status = status_byte(f);
	struct seg segs[] = {{a, 516, false}, {b, 12, false}, {c, 512, false}, {status, 1, true}};
	struct virtio_blk_outhdr h = {.type = htole32(VIRTIO_BLK_T_OUT), .sector = htole64(40)};
	uint8_t expect[1024], buf[1024];

	for (size_t i = 0; i < sizeof(expect); i++)
		expect[i] = (uint8_t)(i * 7 + 1);
	memcpy(guest(f, a, 16), &h, 16);
	memcpy(guest(f, a + 16, 500), expect, 500);
	memcpy(guest(f, b, 12), expect + 500, 12);
	memcpy(guest(f, c, 512), expect + 512, 512);
	struct req r = {.head = offer(f, segs, 4), .status = status};

	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	read_image(f, 40 * SECTOR, buf, sizeof(buf));
	assert_memory_equal(buf, expect, sizeof(buf));
}

static void indirect_descriptor_request_is_served(void **state)
{
	struct fixture *f = *state;
	uint64_t data = galloc(f, SECTOR);
	struct req r = {.status = status_byte(f)};
	struct seg segs[] = {
	    {header(f, VIRTIO_BLK_T_IN, 100), 16, false},
	    {data, SECTOR, true},
	    {r.status, 1, true},
	};

	for (uint16_t i = 0; i < 3; i++)
		set_desc(f, INDIRECT_ADDR, i, &segs[i], i < 2);
	struct vring_desc *d = guest(f, DESC_ADDR, sizeof(*d));
	*d = (struct vring_desc){.addr = INDIRECT_ADDR,
				 .len = 3 * sizeof(struct vring_desc),
				 .flags = VRING_DESC_F_INDIRECT};
	avail(f)->ring[0] = 0;
	avail(f)->idx = 1;
	r.head = 0;

	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_pattern(guest(f, data, SECTOR), 100 * SECTOR, SECTOR);
}

static void flush_after_write_completes_with_status_ok(void **state)
{
	struct fixture *f = *state;
	struct req w = write_request(f, 7, 0x5a, SECTOR);

	kick_and_wait(f, 1);
	struct req flush = request(f, VIRTIO_BLK_T_FLUSH, 0, 0);
	kick_and_wait(f, 2);
	assert_int_equal(status_of(f, w), VIRTIO_BLK_S_OK);
	assert_int_equal(status_of(f, flush), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, flush), 1);
	uint8_t buf[SECTOR];
	read_image(f, 7 * SECTOR, buf, sizeof(buf));
	assert_int_equal(buf[0], 0x5a);
	assert_int_equal(buf[SECTOR - 1], 0x5a);
}

static void flush_offered_with_writes_is_answered_after_them(void **state)
{
	struct fixture *f = *state;
	struct req w[4];

	for (int i = 0; i < 4; i++)
		w[i] = write_request(f, 64 + 8 * i, (uint8_t)(0x10 + i), 8 * SECTOR);
	struct req flush = request(f, VIRTIO_BLK_T_FLUSH, 0, 0);
	kick_and_wait(f, 5);
	/* The drained fsync starts only once the writes before it completed. */
	for (int i = 0; i < 4; i++)
		assert_int_equal(status_of(f, w[i]), VIRTIO_BLK_S_OK);
	assert_int_equal(status_of(f, flush), VIRTIO_BLK_S_OK);
	assert_int_equal(used(f)->ring[4].id, flush.head);
}

static void get_id_returns_the_id_nul_padded(void **state)
{
	struct fixture *f = *state;

	detach(f);
	attach(f, false, "mote-disk-1", false);
	struct req r = request(f, VIRTIO_BLK_T_GET_ID, 0, VIRTIO_BLK_ID_BYTES);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, r), VIRTIO_BLK_ID_BYTES + 1);
	char expect[VIRTIO_BLK_ID_BYTES] = "mote-disk-1";
	assert_memory_equal(guest(f, r.data, VIRTIO_BLK_ID_BYTES), expect, VIRTIO_BLK_ID_BYTES);
}

static void id_longer_than_20_bytes_is_refused(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk *blk = NULL;

	assert_int_equal(open_disk(f, f->path, true, "123456789012345678901", &blk), -EINVAL);
	assert_null(blk);
}

static void discard_punches_a_hole_that_reads_back_zeros(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk_discard_write_zeroes ranges[] = {range(16, 16, 0), range(64, 8, 0)};
	struct stat before, after;

	assert_int_equal(stat(f->path, &before), 0);
	struct req r = range_request(f, VIRTIO_BLK_T_DISCARD, ranges, 2);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, r), 1);
	assert_int_equal(stat(f->path, &after), 0);
	assert_true(after.st_blocks < before.st_blocks);
	assert_int_equal(after.st_size, before.st_size);
	assert_image_zeros(f, 16 * SECTOR, 16 * SECTOR);
	assert_image_zeros(f, 64 * SECTOR, 8 * SECTOR);
	assert_image_pattern(f, 15 * SECTOR, SECTOR);
	assert_image_pattern(f, 32 * SECTOR, 32 * SECTOR);

	/* And the driver reads zeros back. */
	struct req rd = request(f, VIRTIO_BLK_T_IN, 16, 16 * SECTOR);
	kick_and_wait(f, 2);
	assert_int_equal(status_of(f, rd), VIRTIO_BLK_S_OK);
	assert_zeros(guest(f, rd.data, 16 * SECTOR), 16 * SECTOR);
}

static void discard_with_unmap_flag_is_unsupported(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk_discard_write_zeroes ranges[] = {
	    range(16, 8, VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP)};
	struct req r = range_request(f, VIRTIO_BLK_T_DISCARD, ranges, 1);

	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_UNSUPP);
	assert_image_pattern(f, 16 * SECTOR, 8 * SECTOR);
}

static void write_zeroes_with_unknown_flag_is_unsupported(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk_discard_write_zeroes ranges[] = {range(16, 8, 1u << 1)};
	struct req r = range_request(f, VIRTIO_BLK_T_WRITE_ZEROES, ranges, 1);

	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_UNSUPP);
	assert_image_pattern(f, 16 * SECTOR, 8 * SECTOR);
}

static void write_zeroes_reads_back_zeros_with_and_without_unmap(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk_discard_write_zeroes ranges[] = {
	    range(3, 5, 0), range(100, 20, VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP)};
	struct req r = range_request(f, VIRTIO_BLK_T_WRITE_ZEROES, ranges, 2);

	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_image_zeros(f, 3 * SECTOR, 5 * SECTOR);
	assert_image_zeros(f, 100 * SECTOR, 20 * SECTOR);
	assert_image_pattern(f, 2 * SECTOR, SECTOR);
	assert_image_pattern(f, 8 * SECTOR, 92 * SECTOR);
	assert_image_pattern(f, 120 * SECTOR, SECTOR);
}

static void write_zeroes_falls_back_to_writing_zeros_where_the_fs_cannot(void **state)
{
	struct fixture *f = *state;
	struct statfs fs;

	/* tmpfs punches holes but has no FALLOC_FL_ZERO_RANGE. */
	if (statfs("/dev/shm", &fs) != 0 || fs.f_type != TMPFS_MAGIC)
		skip();
	detach(f);
	unlink(f->path);
	snprintf(f->path, sizeof(f->path), "/dev/shm/mote-blk-XXXXXX");
	int fd = mkstemp(f->path);
	assert_true(fd >= 0);
	close(fd);
	write_pattern(f->path, IMAGE_SECTORS * SECTOR);
	attach(f, false, NO_ID, false);

	/* 1 MiB: more than one SQE's worth of the zero page. */
	struct virtio_blk_discard_write_zeroes ranges[] = {range(1, IMAGE_SECTORS - 2, 0)};
	struct req r = range_request(f, VIRTIO_BLK_T_WRITE_ZEROES, ranges, 1);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_image_pattern(f, 0, SECTOR);
	assert_image_zeros(f, SECTOR, (IMAGE_SECTORS - 2) * SECTOR);
	assert_image_pattern(f, (IMAGE_SECTORS - 1) * SECTOR, SECTOR);
}

static void more_ranges_than_advertised_is_ioerr(void **state)
{
	struct fixture *f = *state;
	uint32_t n = (uint32_t)CONFIG(f->dev, max_discard_seg) + 1;
	struct virtio_blk_discard_write_zeroes ranges[64];
	assert_true(n <= 64);
	for (uint32_t i = 0; i < n; i++)
		ranges[i] = range(8 * i, 8, 0);
	struct req r = range_request(f, VIRTIO_BLK_T_DISCARD, ranges, n);

	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_IOERR);
	assert_image_pattern(f, 0, 8 * n * SECTOR);
}

static void read_only_disk_refuses_out_discard_and_write_zeroes(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk_discard_write_zeroes ranges[] = {range(0, 8, 0)};

	reattach_read_only(f);
	struct req w = write_request(f, 0, 0x11, SECTOR);
	struct req d = range_request(f, VIRTIO_BLK_T_DISCARD, ranges, 1);
	struct req z = range_request(f, VIRTIO_BLK_T_WRITE_ZEROES, ranges, 1);
	kick_and_wait(f, 3);
	assert_int_equal(status_of(f, w), VIRTIO_BLK_S_IOERR);
	assert_int_equal(status_of(f, d), VIRTIO_BLK_S_IOERR);
	assert_int_equal(status_of(f, z), VIRTIO_BLK_S_IOERR);
	assert_image_pattern(f, 0, 8 * SECTOR);
}

static void read_only_disk_serves_in_and_flush(void **state)
{
	struct fixture *f = *state;

	reattach_read_only(f);
	struct req r = request(f, VIRTIO_BLK_T_IN, 5, SECTOR);
	struct req flush = request(f, VIRTIO_BLK_T_FLUSH, 0, 0);
	kick_and_wait(f, 2);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(status_of(f, flush), VIRTIO_BLK_S_OK);
	assert_pattern(guest(f, r.data, SECTOR), 5 * SECTOR, SECTOR);
}

static void sector_past_the_end_is_ioerr(void **state)
{
	struct fixture *f = *state;
	struct req at_end = request(f, VIRTIO_BLK_T_IN, IMAGE_SECTORS, SECTOR);
	struct req across_end = write_request(f, IMAGE_SECTORS - 1, 0x22, 2 * SECTOR);
	struct req last = request(f, VIRTIO_BLK_T_IN, IMAGE_SECTORS - 1, SECTOR);

	kick_and_wait(f, 3);
	assert_int_equal(status_of(f, at_end), VIRTIO_BLK_S_IOERR);
	assert_int_equal(used_len_of(f, at_end), 1);
	assert_int_equal(status_of(f, across_end), VIRTIO_BLK_S_IOERR);
	assert_int_equal(status_of(f, last), VIRTIO_BLK_S_OK);
	assert_image_pattern(f, (IMAGE_SECTORS - 1) * SECTOR, SECTOR);
	struct stat st;
	assert_int_equal(stat(f->path, &st), 0);
	assert_int_equal(st.st_size, IMAGE_SECTORS * SECTOR);
}

static void sector_near_uint64_max_is_ioerr(void **state)
{
	struct fixture *f = *state;
	struct req rd = request(f, VIRTIO_BLK_T_IN, UINT64_MAX - 1, 2 * SECTOR);
	/* sector * 512 wraps to a small offset: must not write at the start of the image. */
	struct req wr = write_request(f, (UINT64_MAX >> 9) + 2, 0x33, SECTOR);
	struct virtio_blk_discard_write_zeroes ranges[] = {range(UINT64_MAX - 4, 8, 0)};
	struct req d = range_request(f, VIRTIO_BLK_T_DISCARD, ranges, 1);

	kick_and_wait(f, 3);
	assert_int_equal(status_of(f, rd), VIRTIO_BLK_S_IOERR);
	assert_int_equal(status_of(f, wr), VIRTIO_BLK_S_IOERR);
	assert_int_equal(status_of(f, d), VIRTIO_BLK_S_IOERR);
	assert_image_pattern(f, 0, 4 * SECTOR);
}

static void data_length_not_a_multiple_of_512_is_ioerr(void **state)
{
	struct fixture *f = *state;
	struct req rd = request(f, VIRTIO_BLK_T_IN, 0, 100);
	struct req wr = write_request(f, 0, 0x44, SECTOR + 1);

	kick_and_wait(f, 2);
	assert_int_equal(status_of(f, rd), VIRTIO_BLK_S_IOERR);
	assert_int_equal(status_of(f, wr), VIRTIO_BLK_S_IOERR);
	assert_image_pattern(f, 0, 2 * SECTOR);
}

static void header_shorter_than_16_bytes_is_ioerr(void **state)
{
	struct fixture *f = *state;
	struct req r = {.status = status_byte(f)};
	struct seg segs[] = {{header(f, VIRTIO_BLK_T_IN, 0), 8, false}, {r.status, 1, true}};

	r.head = offer(f, segs, 2);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_IOERR);
	assert_int_equal(used_len_of(f, r), 1);
	assert_int_equal(f->transport.needs_reset, 0);
}

/* Documented in blk_request.c: nowhere to put a status, so the chain comes back with
 * nothing written, and the device goes on with the next one. */
static void chain_without_status_byte_is_returned_with_nothing_written(void **state)
{
	struct fixture *f = *state;
	struct seg segs[] = {{header(f, VIRTIO_BLK_T_IN, 0), 16, false}};
	struct req bad = {.head = offer(f, segs, 1)};
	struct req good = request(f, VIRTIO_BLK_T_IN, 1, SECTOR);

	kick_and_wait(f, 2);
	assert_int_equal(used_len_of(f, bad), 0);
	assert_int_equal(status_of(f, good), VIRTIO_BLK_S_OK);
	assert_int_equal(f->transport.needs_reset, 0);
}

static void unknown_type_is_unsupp(void **state)
{
	struct fixture *f = *state;
	struct req unknown = request(f, 99, 0, SECTOR);
	struct req scsi = request(f, VIRTIO_BLK_T_SCSI_CMD, 0, 0);
	struct req barrier = request(f, VIRTIO_BLK_T_OUT | VIRTIO_BLK_T_BARRIER, 0, SECTOR);

	kick_and_wait(f, 3);
	assert_int_equal(status_of(f, unknown), VIRTIO_BLK_S_UNSUPP);
	assert_int_equal(status_of(f, scsi), VIRTIO_BLK_S_UNSUPP);
	assert_int_equal(status_of(f, barrier), VIRTIO_BLK_S_UNSUPP);
	assert_image_pattern(f, 0, SECTOR);
}

static void thirty_two_requests_in_flight_all_complete(void **state)
{
	struct fixture *f = *state;
	struct req r[32];

	for (int i = 0; i < 32; i++)
		r[i] = request(f, VIRTIO_BLK_T_IN, 8 * i, 8 * SECTOR);
	kick_and_wait(f, 32);
	for (int i = 0; i < 32; i++) {
		assert_int_equal(status_of(f, r[i]), VIRTIO_BLK_S_OK);
		assert_int_equal(used_len_of(f, r[i]), 8 * SECTOR + 1);
		assert_pattern(guest(f, r[i].data, 8 * SECTOR), 8 * i * SECTOR, 8 * SECTOR);
	}
	assert_true(f->transport.interrupts >= 1);
	assert_true(f->transport.interrupts <= 32);
}

static void read_past_end_of_a_partial_last_sector_is_zero_filled(void **state)
{
	struct fixture *f = *state;

	detach(f);
	assert_int_equal(truncate(f->path, 1000), 0);
	attach(f, false, NO_ID, false);
	assert_int_equal(CONFIG(f->dev, capacity), 2);

	struct req r = request(f, VIRTIO_BLK_T_IN, 1, SECTOR);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, r), SECTOR + 1);
	uint8_t *data = guest(f, r.data, SECTOR);
	assert_pattern(data, SECTOR, 1000 - SECTOR);
	assert_zeros(data + 1000 - SECTOR, 2 * SECTOR - 1000);
}

static void config_space_reads_capacity_seg_max_and_limits(void **state)
{
	struct fixture *f = *state;
	struct vdev *dev = f->dev;

	assert_int_equal(dev->config_size,
			 offsetof(struct virtio_blk_config, max_secure_erase_sectors));
	assert_int_equal(CONFIG(dev, capacity), IMAGE_SECTORS);
	assert_true(CONFIG(dev, seg_max) >= 1);
	assert_int_equal(CONFIG(dev, blk_size), SECTOR);
	assert_int_equal(CONFIG(dev, num_queues), 0);
	assert_true(CONFIG(dev, max_discard_sectors) >= 1);
	assert_true(CONFIG(dev, max_discard_seg) >= 1);
	assert_true(CONFIG(dev, discard_sector_alignment) >= 1);
	assert_true(CONFIG(dev, max_write_zeroes_sectors) >= 1);
	assert_true(CONFIG(dev, max_write_zeroes_seg) >= 1);
	assert_int_equal(CONFIG(dev, write_zeroes_may_unmap), 1);
}

static void config_space_reads_any_width_at_any_offset(void **state)
{
	struct fixture *f = *state;
	struct vdev *dev = f->dev;
	uint8_t whole[64], bytes[8];

	dev->ops->config_read(dev, 0, whole, dev->config_size);
	/* capacity byte by byte, then a word straddling capacity and size_max */
	for (uint32_t i = 0; i < 8; i++)
		dev->ops->config_read(dev, i, &bytes[i], 1);
	assert_memory_equal(bytes, whole, 8);
	assert_int_equal(config_field(dev, 0, 8), IMAGE_SECTORS);
	dev->ops->config_read(dev, 6, bytes, 4);
	assert_memory_equal(bytes, whole + 6, 4);
	dev->ops->config_read(dev, 13, bytes, 2);
	assert_memory_equal(bytes, whole + 13, 2);
	dev->ops->config_read(dev, dev->config_size - 1, bytes, 1);
	assert_int_equal(bytes[0], 0);
}

static void config_writes_are_ignored(void **state)
{
	struct fixture *f = *state;
	uint8_t ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	uint64_t capacity;

	f->dev->ops->config_write(f->dev, 0, ones, 8);
	f->dev->ops->config_read(f->dev, 0, (uint8_t *)&capacity, 8);
	assert_int_equal(le64toh(capacity), IMAGE_SECTORS);
}

static void features_offer_flush_discard_write_zeroes_and_ring_features(void **state)
{
	struct fixture *f = *state;
	uint64_t features = f->dev->ops->features(f->dev);

	assert_true(features & (1ULL << VIRTIO_BLK_F_SEG_MAX));
	assert_true(features & (1ULL << VIRTIO_BLK_F_BLK_SIZE));
	assert_true(features & (1ULL << VIRTIO_BLK_F_FLUSH));
	assert_true(features & (1ULL << VIRTIO_BLK_F_DISCARD));
	assert_true(features & (1ULL << VIRTIO_BLK_F_WRITE_ZEROES));
	assert_true(features & VIRTIO_FEATURE_INDIRECT_DESC);
	assert_true(features & VIRTIO_FEATURE_EVENT_IDX);
	assert_false(features & (1ULL << VIRTIO_BLK_F_RO));
	assert_false(features & (1ULL << VIRTIO_BLK_F_MQ));
	assert_false(features & (1ULL << VIRTIO_BLK_F_CONFIG_WCE));
	assert_int_equal(f->dev->device_id, VIRTIO_ID_BLOCK);
	assert_int_equal(f->dev->queue_count, 1);
}

static void read_only_disk_offers_ro_feature(void **state)
{
	struct fixture *f = *state;

	reattach_read_only(f);
	assert_true(f->dev->ops->features(f->dev) & (1ULL << VIRTIO_BLK_F_RO));
}

static void missing_file_is_enoent(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk *blk = NULL;

	assert_int_equal(open_disk(f, "/tmp/mote-blk-does-not-exist", false, NO_ID, &blk), -ENOENT);
	assert_null(blk);
	assert_non_null(strstr(f->log_text, "/tmp/mote-blk-does-not-exist"));
}

static void directory_is_eisdir(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk *blk = NULL;

	assert_int_equal(open_disk(f, "/tmp", false, NO_ID, &blk), -EISDIR);
	assert_int_equal(open_disk(f, "/tmp", true, NO_ID, &blk), -EISDIR);
	assert_null(blk);
	assert_non_null(strstr(f->log_text, "/tmp"));
}

static void image_locked_by_another_open_is_ebusy(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk *blk = NULL;

	detach(f);
	assert_int_equal(event_loop_init(&f->loop), 0);
	int fd = open(f->path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(flock(fd, LOCK_EX), 0);
	assert_int_equal(open_disk(f, f->path, false, NO_ID, &blk), -EBUSY);
	assert_int_equal(open_disk(f, f->path, true, NO_ID, &blk), -EBUSY);
	assert_null(blk);
	assert_non_null(strstr(f->log_text, f->path));
	assert_non_null(strstr(f->log_text, "locked by another process"));
	close(fd);
	event_loop_destroy(&f->loop);
}

static void second_writable_disk_on_one_image_is_ebusy(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk *blk = NULL;

	assert_int_equal(open_disk(f, f->path, false, NO_ID, &blk), -EBUSY);
	assert_int_equal(open_disk(f, f->path, true, NO_ID, &blk), -EBUSY);
	assert_null(blk);
}

static void read_only_disks_share_an_image(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk *other = NULL;

	reattach_read_only(f);
	assert_int_equal(open_disk(f, f->path, true, NO_ID, &other), 0);
	virtio_blk_destroy(other);
}

static void two_disks_serve_requests_side_by_side(void **state)
{
	struct fixture *f = *state;
	char path[64] = "/tmp/mote-blk-XXXXXX";
	int fd = mkstemp(path);
	struct virtio_blk *second = NULL;

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 64 * SECTOR), 0);
	close(fd);
	assert_int_equal(open_disk(f, path, false, NO_ID, &second), 0);
	assert_int_equal(CONFIG(virtio_blk_vdev(second), capacity), 64);

	struct req r = request(f, VIRTIO_BLK_T_IN, 2, SECTOR);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_pattern(guest(f, r.data, SECTOR), 2 * SECTOR, SECTOR);
	virtio_blk_destroy(second);
	unlink(path);
}

static void reset_with_requests_in_flight_waits_for_them_and_does_not_push(void **state)
{
	struct fixture *f = *state;
	struct req r[8];

	for (int i = 0; i < 8; i++)
		r[i] = request(f, VIRTIO_BLK_T_IN, 16 * i, 16 * SECTOR);
	notify_dev(f->dev);
	pthread_mutex_lock(&f->dev->lock);
	f->dev->ops->reset(f->dev);
	pthread_mutex_unlock(&f->dev->lock);

	/* Every read finished before reset returned, and none was answered. */
	for (int i = 0; i < 8; i++) {
		assert_pattern(guest(f, r[i].data, 16 * SECTOR), 16 * i * SECTOR, 16 * SECTOR);
		assert_int_equal(status_of(f, r[i]), 0xff);
	}
	assert_true(event_loop_run_once(&f->loop, 50) >= 0);
	assert_int_equal(used(f)->idx, 0);
	assert_int_equal(f->transport.interrupts, 0);
	assert_false(f->dev->queues[0].ready);
}

static void device_serves_requests_again_after_reset(void **state)
{
	struct fixture *f = *state;

	request(f, VIRTIO_BLK_T_IN, 0, SECTOR);
	notify_dev(f->dev);
	pthread_mutex_lock(&f->dev->lock);
	f->dev->ops->reset(f->dev);
	pthread_mutex_unlock(&f->dev->lock);

	/* The driver lays the queue out afresh. */
	memset(guest(f, AVAIL_ADDR, 6 + 2 * QSIZE), 0, 6 + 2 * QSIZE);
	memset(guest(f, USED_ADDR, 6 + 8 * QSIZE), 0, 6 + 8 * QSIZE);
	f->next_desc = 0;
	activate(f, f->dev, false);
	struct req r = request(f, VIRTIO_BLK_T_IN, 1, SECTOR);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_pattern(guest(f, r.data, SECTOR), SECTOR, SECTOR);
}

static void event_idx_avail_event_follows_the_last_chain_taken(void **state)
{
	struct fixture *f = *state;
	uint16_t *avail_event = guest(f, USED_ADDR + 4 + 8 * QSIZE, 2);

	detach(f);
	attach(f, false, NO_ID, true);
	avail(f)->ring[QSIZE] = 0; /* used_event: interrupt after the first */
	for (int i = 0; i < 3; i++)
		request(f, VIRTIO_BLK_T_IN, i, SECTOR);
	kick_and_wait(f, 3);
	assert_int_equal(*avail_event, 3);
	assert_true(f->transport.interrupts >= 1);
}

static void broken_chain_sets_needs_reset(void **state)
{
	struct fixture *f = *state;

	avail(f)->ring[0] = QSIZE; /* no such descriptor */
	avail(f)->idx = 1;
	notify_dev(f->dev);
	assert_int_equal(f->transport.needs_reset, 1);
	assert_int_equal(used(f)->idx, 0);
}

static void head_offered_again_while_in_flight_sets_needs_reset(void **state)
{
	struct fixture *f = *state;
	struct req r = request(f, VIRTIO_BLK_T_IN, 0, SECTOR);

	avail(f)->ring[1] = r.head;
	avail(f)->idx = 2;
	kick_and_wait(f, 1);
	assert_int_equal(f->transport.needs_reset, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(read_returns_file_contents),
	    TEST(write_lands_in_the_file),
	    TEST(multi_segment_read_fills_every_segment_up_to_the_status_byte),
	    TEST(multi_segment_write_takes_every_segment),
	    TEST(indirect_descriptor_request_is_served),
	    TEST(flush_after_write_completes_with_status_ok),
	    TEST(flush_offered_with_writes_is_answered_after_them),
	    TEST(get_id_returns_the_id_nul_padded),
	    TEST(id_longer_than_20_bytes_is_refused),
	    TEST(discard_punches_a_hole_that_reads_back_zeros),
	    TEST(discard_with_unmap_flag_is_unsupported),
	    TEST(write_zeroes_with_unknown_flag_is_unsupported),
	    TEST(write_zeroes_reads_back_zeros_with_and_without_unmap),
	    TEST(write_zeroes_falls_back_to_writing_zeros_where_the_fs_cannot),
	    TEST(more_ranges_than_advertised_is_ioerr),
	    TEST(read_only_disk_refuses_out_discard_and_write_zeroes),
	    TEST(read_only_disk_serves_in_and_flush),
	    TEST(sector_past_the_end_is_ioerr),
	    TEST(sector_near_uint64_max_is_ioerr),
	    TEST(data_length_not_a_multiple_of_512_is_ioerr),
	    TEST(header_shorter_than_16_bytes_is_ioerr),
	    TEST(chain_without_status_byte_is_returned_with_nothing_written),
	    TEST(unknown_type_is_unsupp),
	    TEST(thirty_two_requests_in_flight_all_complete),
	    TEST(read_past_end_of_a_partial_last_sector_is_zero_filled),
	    TEST(config_space_reads_capacity_seg_max_and_limits),
	    TEST(config_space_reads_any_width_at_any_offset),
	    TEST(config_writes_are_ignored),
	    TEST(features_offer_flush_discard_write_zeroes_and_ring_features),
	    TEST(read_only_disk_offers_ro_feature),
	    TEST(missing_file_is_enoent),
	    TEST(directory_is_eisdir),
	    TEST(image_locked_by_another_open_is_ebusy),
	    TEST(second_writable_disk_on_one_image_is_ebusy),
	    TEST(read_only_disks_share_an_image),
	    TEST(two_disks_serve_requests_side_by_side),
	    TEST(reset_with_requests_in_flight_waits_for_them_and_does_not_push),
	    TEST(device_serves_requests_again_after_reset),
	    TEST(event_idx_avail_event_follows_the_last_chain_taken),
	    TEST(broken_chain_sets_needs_reset),
	    TEST(head_offered_again_while_in_flight_sets_needs_reset),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
