/* libFuzzer target: a hostile guest driving a virtio-blk disk through the virtio-mmio
 * transport. The input becomes the guest's descriptor table, avail ring, request
 * headers and buffers; the harness brings the device up like a driver, notifies the queue and
 * lets the I/O complete. Whatever the bytes, the device must answer, refuse or ask for
 * a reset without touching host memory outside guest RAM (ASan watches) and without
 * hanging. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "virtio/blk.h"
#include "virtio/mmio.h"

#define RAM_SIZE (16 << 20)
#define RING_BASE 0x10000ULL /* descriptors here, avail +0x1000, used +0x2000 */
#define QUEUE_SIZE 16
#define IMAGE_SIZE (1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct harness {
	struct guest_memory mem;
	struct event_loop loop;
	struct virtio_blk *blk;
	struct virtio_mmio mmio;
};

static void reg_write(struct harness *h, uint64_t offset, uint32_t value)
{
	virtio_mmio_access(&h->mmio, offset, (uint8_t *)&value, 4, true);
}

/* Created once: per-input setup would dominate the run. */
static struct harness *harness_get(void)
{
	static struct harness h;
	static int state; /* 0 new, 1 ready, -1 failed */
	char path[] = "/dev/shm/mote-fuzz-blk-XXXXXX";

	if (state)
		return state > 0 ? &h : NULL;
	state = -1;
	int fd = mkstemp(path);
	if (fd < 0 || ftruncate(fd, IMAGE_SIZE) < 0)
		return NULL;
	close(fd);
	struct virtio_blk_options options = {.path = path, .id = "fuzz"};
	if (guest_memory_create(&h.mem, RAM_SIZE, NULL) || event_loop_init(&h.loop) ||
	    virtio_blk_create(&options, &h.mem, &h.loop, NULL, &h.blk) ||
	    virtio_mmio_init(&h.mmio, virtio_blk_vdev(h.blk), 0xd0000000, 5, NULL) ||
	    event_loop_add(&h.loop, h.mmio.notifiers[0].fd, virtio_mmio_notify_handler,
			   &h.mmio.notifiers[0]))
		return NULL;
	unlink(path); /* the open fd keeps it */
	state = 1;
	return &h;
}

/* The input, read as a driver's work: features, how many chains it makes available
 * and which heads, the descriptor table, then the bytes of the buffers. Descriptor
 * addresses below 2^48 are folded into the buffer area, so that most chains reach the
 * request parser; others stay as they are and must be refused. */
struct fuzz_input {
	uint64_t features;
	uint8_t avail_count;
	uint16_t avail[QUEUE_SIZE];
	struct {
		uint64_t addr;
		uint32_t len;
		uint16_t flags;
		uint16_t next;
	} desc[QUEUE_SIZE];
} __attribute__((packed));

#define BUFFER_BASE 0x20000ULL
#define BUFFER_SIZE 0x20000ULL

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct harness *h = harness_get();
	struct fuzz_input in = {0};

	if (!h || size < sizeof(in))
		return 0;
	memcpy(&in, data, sizeof(in));
	uint8_t *ring = guest_memory_ptr(&h->mem, RING_BASE, BUFFER_BASE + BUFFER_SIZE - RING_BASE);
	memset(ring, 0, BUFFER_BASE + BUFFER_SIZE - RING_BASE);
	for (unsigned i = 0; i < QUEUE_SIZE; i++) {
		uint64_t addr = in.desc[i].addr;
		if (addr < (1ULL << 48))
			addr = BUFFER_BASE + addr % BUFFER_SIZE;
		memcpy(ring + i * 16, &addr, 8);
		memcpy(ring + i * 16 + 8, &in.desc[i].len, 4);
		memcpy(ring + i * 16 + 12, &in.desc[i].flags, 2);
		memcpy(ring + i * 16 + 14, &in.desc[i].next, 2);
	}
	uint16_t avail_idx = in.avail_count;
	memcpy(ring + 0x1000 + 2, &avail_idx, 2); /* avail: flags, idx, ring[] */
	memcpy(ring + 0x1000 + 4, in.avail, sizeof(in.avail));
	size_t rest = size - sizeof(in) < BUFFER_SIZE ? size - sizeof(in) : BUFFER_SIZE;
	memcpy(ring + (BUFFER_BASE - RING_BASE), data + sizeof(in), rest);

	reg_write(h, VIRTIO_MMIO_STATUS, 0);
	reg_write(h, VIRTIO_MMIO_STATUS, VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER);
	reg_write(h, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
	reg_write(h, VIRTIO_MMIO_DRIVER_FEATURES, (uint32_t)in.features);
	reg_write(h, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
	reg_write(h, VIRTIO_MMIO_DRIVER_FEATURES, 1); /* VERSION_1 */
	reg_write(h, VIRTIO_MMIO_STATUS,
		  VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_FEATURES_OK);
	reg_write(h, VIRTIO_MMIO_QUEUE_SEL, 0);
	reg_write(h, VIRTIO_MMIO_QUEUE_NUM, QUEUE_SIZE);
	reg_write(h, VIRTIO_MMIO_QUEUE_DESC_LOW, (uint32_t)RING_BASE);
	reg_write(h, VIRTIO_MMIO_QUEUE_DRIVER_LOW, (uint32_t)RING_BASE + 0x1000);
	reg_write(h, VIRTIO_MMIO_QUEUE_DEVICE_LOW, (uint32_t)RING_BASE + 0x2000);
	reg_write(h, VIRTIO_MMIO_QUEUE_READY, 1);
	reg_write(h, VIRTIO_MMIO_STATUS,
		  VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_FEATURES_OK |
		      VIRTIO_STATUS_DRIVER_OK);

	/* The kick, then the completions (a tmpfs image answers at once). */
	reg_write(h, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	for (int i = 0; i < 8 && event_loop_run_once(&h->loop, 1) > 0; i++) {
	}
	return 0;
}
