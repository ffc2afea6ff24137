/* A test driver of virtio-blk: an in-memory guest, a fake transport, a temporary image.
 * Linked into the test_virtio_blk* programs only, and written as their vocabulary: a
 * test builds requests in guest RAM the way a virtio driver does (virtio 1.2 §2.7 split
 * queue, §5.2.6 request layout), kicks the queue, runs the event loop until the device
 * used the chains, and checks the status bytes, the used lengths and the image left
 * behind. No KVM: the "transport" is a counter of interrupts and of needs-reset.
 *
 * Guest layout: one queue of QSIZE descriptors at DESC_ADDR/AVAIL_ADDR/USED_ADDR, an
 * indirect table at INDIRECT_ADDR, and buffers from a bump allocator from HEAP_ADDR up,
 * never freed within a test. Guest RAM is one mapping, so a guest address aligned to a
 * power of two up to the page size is a host address aligned the same way.
 *
 * Every function asserts (cmocka) what it needs, so a test reads as a list of steps. */
#ifndef MOTE_TESTS_BLK_DRIVER_H
#define MOTE_TESTS_BLK_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/virtio_blk.h>
#include <linux/virtio_ring.h>

#include "fake_transport.h"
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
#define BLK_QUEUE 0 /* the disk's one queue, as the transport counts its interrupts */

/* One test's world: the guest, the event loop, the disk on the image at path, and the
 * driver's own state (next free descriptor, next free guest buffer). */
struct fixture {
	struct guest_memory mem;
	struct event_loop loop;
	struct virtio_blk *blk; /* NULL while detached */
	struct vdev *dev;
	struct fake_transport transport;
	struct mote_log log;
	char log_text[FAKE_LOG_TEXT]; /* the last message the device logged */
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

/* One descriptor's buffer. */
struct seg {
	uint64_t addr;
	uint32_t len;
	bool writable;
};

/* cmocka setup of every test: a fresh guest, a fresh queue, a new writable disk without id or
 * EVENT_IDX on a new image of IMAGE_SECTORS sectors holding pattern(). */
int blk_driver_setup(void **state);
/* Detaches the disk if attached, removes the image, frees the guest. */
int blk_driver_teardown(void **state);

/* The image's byte at offset as blk_driver_setup() wrote it. */
uint8_t pattern(uint64_t offset);
/* Fills the file at path (which must exist) with size bytes of pattern(). */
void write_pattern(const char *path, uint64_t size);
/* Creates a new file from path, a mkstemp() template it completes, holding size bytes of
 * pattern(). 0, or -1 when it could not be created. */
int new_patterned_image(char *path, uint64_t size);
/* Reads len bytes of f's image at offset, behind the device's back. */
void read_image(struct fixture *f, uint64_t offset, void *buf, size_t len);
/* buf holds pattern() for the image bytes [offset, offset + len). */
void assert_pattern(const uint8_t *buf, uint64_t offset, size_t len);
void assert_zeros(const uint8_t *buf, size_t len);
/* The image holds pattern() (or zeros) in [offset, offset + len). */
void assert_image_pattern(struct fixture *f, uint64_t offset, size_t len);
void assert_image_zeros(struct fixture *f, uint64_t offset, size_t len);

/* Writes the image back and evicts it from the host page cache. Asserts that the image
 * lives on a file system with a page cache of its own to evict: on tmpfs the cache is
 * the file, and a check of what is resident would mean nothing. */
void drop_image_cache(struct fixture *f);
/* Whether the host page cache holds the image's page at offset (mincore() on a
 * read-only mapping of the image, which itself brings nothing in). */
bool image_page_resident(struct fixture *f, uint64_t offset);

/* Host pointer to [addr, addr + len) of guest RAM; fails the test when it is not RAM. */
void *guest(struct fixture *f, uint64_t addr, uint64_t len);
/* The queue's rings, as the driver laid them out. */
struct vring_avail *avail(struct fixture *f);
struct vring_used *used(struct fixture *f);

/* A new guest buffer of len bytes, 16-byte aligned. */
uint64_t galloc(struct fixture *f, uint64_t len);
/* A new guest buffer of len bytes aligned to align, a power of two up to 4096. */
uint64_t galloc_aligned(struct fixture *f, uint64_t len, uint64_t align);

/* Writes descriptor idx of the table at guest address table: s, chained to idx + 1 when
 * more. */
void set_desc(struct fixture *f, uint64_t table, uint16_t idx, const struct seg *s, bool more);
/* Chains segs through consecutive descriptors and makes the chain available. Returns
 * its head. Does not notify the device. */
uint16_t offer(struct fixture *f, const struct seg *segs, unsigned n);
/* A new guest buffer holding a request header (§5.2.6). */
uint64_t header(struct fixture *f, uint32_t type, uint64_t sector);
/* A new guest byte for a status, 0xff until the device writes it. */
uint64_t status_byte(struct fixture *f);

/* Offers header, then len bytes of data in a new buffer filled with 0xee (device-writable
 * for IN and GET_ID), then status; no data descriptor when len is 0. */
struct req request(struct fixture *f, uint32_t type, uint64_t sector, uint32_t len);
/* The same with the data in the caller's guest buffer at data, left as it is. */
struct req request_at(struct fixture *f, uint32_t type, uint64_t sector, uint64_t data,
		      uint32_t len);
/* An OUT request of len bytes of fill. */
struct req write_request(struct fixture *f, uint64_t sector, uint8_t fill, uint32_t len);
/* A DISCARD or WRITE_ZEROES request with n ranges. */
struct req range_request(struct fixture *f, uint32_t type,
			 const struct virtio_blk_discard_write_zeroes *ranges, unsigned n);
/* One range of a DISCARD or WRITE_ZEROES request, little-endian. */
struct virtio_blk_discard_write_zeroes range(uint64_t sector, uint32_t sectors, uint32_t flags);

/* The transport's queue notification: queue_notify(0) under dev->lock. */
void notify_dev(struct vdev *dev);
/* What a driver's status write of 0 does: reset under dev->lock. */
void reset_dev(struct vdev *dev);
/* What a pause does to the device: quiesce under dev->lock, giving up after stall_ns
 * with no completion: 0 or -ETIMEDOUT. */
int quiesce_dev_bounded(struct vdev *dev, int64_t stall_ns);
/* The same with no deadline, which must succeed. */
void quiesce_dev(struct vdev *dev);
/* What a snapshot does to the quiesced device: its save under dev->lock (the bytes
 * thrown away). 0 or the save's negative errno. */
int save_dev(struct vdev *dev);
/* Runs the event loop until the used index reaches n (generous: tests may run under
 * emulation), then checks it went no further. Notifies the queue again whenever the
 * device asked the transport to serve it again. */
void wait_used(struct fixture *f, uint16_t n);
/* The driver kicks the queue and waits for n chains in all to come back. */
void kick_and_wait(struct fixture *f, uint16_t n);
/* The status byte of r as the device left it. */
uint8_t status_of(struct fixture *f, struct req r);
/* The used length the device returned for r's head; fails the test when it did not. */
uint32_t used_len_of(struct fixture *f, struct req r);

/* A config field, read as the driver does: little-endian, at its offset. */
uint64_t config_field(struct vdev *dev, uint32_t offset, uint32_t len);
#define CONFIG(dev, field)                                                                         \
	config_field((dev), offsetof(struct virtio_blk_config, field),                             \
		     sizeof(((struct virtio_blk_config *)0)->field))

/* virtio_blk_create() of the image at path on f's guest and loop, logging to f. */
int open_disk(struct fixture *f, const char *path, bool read_only, const char *id,
	      struct virtio_blk **blk);
/* What the transport does once the driver set DRIVER_OK: the queue the driver laid out
 * in guest RAM, every offered feature accepted. */
void activate(struct fixture *f, struct vdev *dev, bool event_idx);
/* A new event loop and a disk on f->path with these options, activated. */
void attach(struct fixture *f, bool read_only, const char *id, bool event_idx);
/* The same with every option given; options->path is f->path when NULL. */
void attach_options(struct fixture *f, const struct virtio_blk_options *options, bool event_idx);
/* Destroys the disk and its event loop. The queue in guest RAM stays as it is. */
void detach(struct fixture *f);
/* Detaches, then attaches a read-only disk on the same image. */
void reattach_read_only(struct fixture *f);

/* How many descriptors of this process link to target (proc(5), /proc/self/fd); *found
 * is one of them. */
unsigned fds_linked_to(const char *target, int *found);
/* The one descriptor of this process that links to target; fails the test unless there
 * is exactly one. */
int fd_linked_to(const char *target);
/* Puts the read end of a new pipe in place of the disk's image (its descriptor, dup2):
 * a read waits there until the write end, in pipe_fds[1], brings data. */
void hold_reads_on_a_pipe(struct fixture *f, int pipe_fds[2]);

#endif
