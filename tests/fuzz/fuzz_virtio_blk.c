/* libFuzzer target: a hostile guest driving a virtio-blk disk through the virtio-mmio
 * transport. The input becomes the guest's descriptor table, avail ring, request
 * headers and buffers; the harness brings the device up like a driver, notifies the queue and
 * lets the I/O complete. Whatever the bytes, the device must answer, refuse or ask for
 * a reset without touching host memory outside guest RAM (ASan watches) and without
 * hanging. Built with FUZZ_BLK_OVERLAY (target fuzz_virtio_blk_overlay), the disk has a
 * copy-on-write overlay (virtio/blk_overlay.h) over its image. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_blk_disk.h"

#define RAM_SIZE (16 << 20)
#define RING_BASE 0x10000ULL /* descriptors here, avail +0x1000, used +0x2000 */
#define IMAGE_SIZE (1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct harness {
	struct guest_memory mem;
	struct event_loop loop;
	struct virtio_blk *blk;
	struct virtio_mmio mmio;
};

/* Created once: per-input setup would dominate the run. */
static struct harness *harness_get(void)
{
	static struct harness h;
	static int state; /* 0 new, 1 ready, -1 failed */
#ifdef FUZZ_BLK_OVERLAY
	const bool overlay = true;
#else
	const bool overlay = false;
#endif

	if (state)
		return state > 0 ? &h : NULL;
	state = -1;
	if (guest_memory_create(&h.mem, RAM_SIZE, NULL) || event_loop_init(&h.loop) ||
	    fuzz_blk_disk_create(&h.mem, &h.loop, IMAGE_SIZE, overlay, &h.blk, &h.mmio))
		return NULL;
	state = 1;
	return &h;
}

/* The input, read as a driver's work: features, how many chains it makes available
 * and which heads, the descriptor table, then the bytes of the buffers. Descriptor
 * addresses below 2^48 are folded into the buffer area, so that most chains reach the
 * request parser; others stay as they are and must be refused. */
struct fuzz_input {
	uint64_t features;
	struct fuzz_queue queue;
} __attribute__((packed));

#define BUFFER_BASE 0x20000ULL
#define BUFFER_SIZE 0x20000ULL

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct harness *h = harness_get();
	struct fuzz_input in = {0};

	if (!h)
		abort(); /* the host, not the input: no run would mean anything */
	if (size < sizeof(in))
		return 0;
	memcpy(&in, data, sizeof(in));
	uint8_t *ring = guest_memory_ptr(&h->mem, RING_BASE, BUFFER_BASE + BUFFER_SIZE - RING_BASE);
	memset(ring, 0, BUFFER_BASE + BUFFER_SIZE - RING_BASE);
	fuzz_lay_out_queue(ring, &in.queue, BUFFER_BASE, BUFFER_SIZE);
	size_t rest = size - sizeof(in) < BUFFER_SIZE ? size - sizeof(in) : BUFFER_SIZE;
	memcpy(ring + (BUFFER_BASE - RING_BASE), data + sizeof(in), rest);

	fuzz_mmio_bring_up(&h->mmio, (uint32_t)in.features, RING_BASE, 0, 1);

	/* The kick, then the completions (a tmpfs image answers at once). */
	fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	for (int i = 0; i < 8 && event_loop_run_once(&h->loop, 1) > 0; i++) {
	}
	return 0;
}
