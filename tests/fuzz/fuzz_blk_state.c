/* libFuzzer target: a hostile state file's device section loaded into a virtio-blk disk
 * behind virtio-mmio (virtio_mmio_load: the transport's registers and queue, then the
 * disk's own state, blk_load: whether it was broken, the capacity the guest knows),
 * over guest memory whose ring also comes from the input. The section is the input's
 * mask XORed onto one saved from a disk a driver brought up with every feature it
 * offers and sent requests (a write, a read, GET_ID, a flush), all answered, so that
 * the queue's indices are past zero (fuzz_mmio_state.h). Whatever the bytes, the load
 * must refuse cleanly or give a disk that then runs (its queue served as a restore
 * serves it, and kicked, the I/O completed) without touching host memory outside guest
 * RAM (ASan watches) and without hanging. */
#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <linux/virtio_blk.h>
#include <linux/virtio_ring.h>

#include "fuzz_blk_disk.h"
#include "fuzz_mmio_state.h"

#define RAM_SIZE (16 << 20)
#define RING_BASE 0x10000ULL /* descriptors here, avail +0x1000, used +0x2000 */
#define BUFFER_BASE 0x20000ULL
#define BUFFER_SIZE 0x20000ULL
#define REQUEST_BASE 0x40000ULL /* the template's requests, one page each */
#define IMAGE_SIZE (1 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct harness {
	struct guest_memory mem;
	struct event_loop loop;
	struct virtio_blk *blk;
	struct virtio_mmio mmio;
	struct fuzz_section template;
	uint16_t template_avail_idx; /* the chains the template's disk had taken */
};

static uint8_t *ram_at(struct harness *h, uint64_t addr, uint64_t len)
{
	return guest_memory_ptr(&h->mem, addr, len);
}

/* One request as a driver chains it (§5.2.6): the header, len bytes of data (none for a
 * flush) and the status byte, in the page at REQUEST_BASE + i * 0x1000. */
static void offer_request(struct harness *h, uint16_t i, uint32_t type, uint32_t len)
{
	uint8_t *ring = ram_at(h, RING_BASE, 0x3000);
	uint64_t page = REQUEST_BASE + i * 0x1000ULL;
	struct virtio_blk_outhdr hdr = {.type = htole32(type), .sector = htole64(1)};
	uint16_t head = (uint16_t)(3 * i);
	uint16_t data_flags =
	    VRING_DESC_F_NEXT | (type == VIRTIO_BLK_T_OUT ? 0 : VRING_DESC_F_WRITE);

	memcpy(ram_at(h, page, sizeof(hdr)), &hdr, sizeof(hdr));
	fuzz_write_desc(ring, head, page, sizeof(hdr), VRING_DESC_F_NEXT, head + 1);
	if (len) {
		fuzz_write_desc(ring, head + 1, page + 512, len, data_flags, head + 2);
		fuzz_write_desc(ring, head + 2, page + 16, 1, VRING_DESC_F_WRITE, 0);
	} else {
		fuzz_write_desc(ring, head + 1, page + 16, 1, VRING_DESC_F_WRITE, 0);
	}
	fuzz_offer(ring, head);
}

/* The section of a disk a driver brought up with every feature it offers (one it does
 * not offer would be refused at FEATURES_OK) and whose requests were all answered, as a
 * pause leaves it (virtio_mmio_quiesce). */
static int save_template(struct harness *h)
{
	struct vdev *dev = virtio_blk_vdev(h->blk);

	fuzz_mmio_bring_up(&h->mmio, (uint32_t)dev->ops->features(dev), RING_BASE, 0, 1);
	offer_request(h, 0, VIRTIO_BLK_T_OUT, 512);
	offer_request(h, 1, VIRTIO_BLK_T_IN, 512);
	offer_request(h, 2, VIRTIO_BLK_T_GET_ID, VIRTIO_BLK_ID_BYTES);
	offer_request(h, 3, VIRTIO_BLK_T_FLUSH, 0);
	fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	(void)event_loop_run_once(&h->loop, 0); /* the kick: the requests start */
	virtio_mmio_quiesce(&h->mmio, CLOCK_FOREVER);
	h->template_avail_idx = dev->queues[0].last_avail_idx;
	if (dev->queues[0].used_idx != 4 || h->template_avail_idx != 4)
		return -1;
	return fuzz_section_save(&h->mmio, &h->template);
}

/* Created once: per-input setup would dominate the run. */
static struct harness *harness_get(void)
{
	static struct harness h;
	static int state; /* 0 new, 1 ready, -1 failed */

	if (state)
		return state > 0 ? &h : NULL;
	state = -1;
	if (guest_memory_create(&h.mem, RAM_SIZE, NULL) || event_loop_init(&h.loop) ||
	    fuzz_blk_disk_create(&h.mem, &h.loop, IMAGE_SIZE, false, &h.blk, &h.mmio) ||
	    save_template(&h))
		return NULL;
	fuzz_mmio_write(&h.mmio, VIRTIO_MMIO_STATUS, 0);
	state = 1;
	return &h;
}

/* The input: the section's length and mask (fuzz_section_input_split), then the queue's
 * ring as the guest left it, the chains it made available after the template's (zeros
 * past the input's end: none). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct harness *h = harness_get();
	struct fuzz_section_input section;
	struct fuzz_queue queue = {0};

	if (!h)
		abort(); /* the host, not the input: no run would mean anything */
	fuzz_section_input_split(&h->template, data, size, &section);
	fuzz_section_input_rest(&section, &queue, sizeof(queue));
	uint8_t *ring = ram_at(h, RING_BASE, BUFFER_BASE + BUFFER_SIZE - RING_BASE);
	memset(ring, 0, BUFFER_BASE + BUFFER_SIZE - RING_BASE);
	fuzz_lay_out_queue_from(ring, &queue, h->template_avail_idx, BUFFER_BASE, BUFFER_SIZE);

	if (fuzz_section_load(&h->mmio, &h->template, &section) == 0) {
		virtio_mmio_restored(&h->mmio);
		fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
		/* The completions (a tmpfs image answers at once). */
		for (int i = 0; i < 8 && event_loop_run_once(&h->loop, 1) > 0; i++) {
		}
	}
	/* The next input starts from power-on, with nothing in flight (blk_reset waits). */
	fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_STATUS, 0);
	return 0;
}
