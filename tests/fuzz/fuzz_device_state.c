/* libFuzzer target: a hostile state file's device section loaded into a virtio-net
 * device behind virtio-mmio (virtio_mmio_load: the transport's registers and queues,
 * then the receive buffers the device held), over guest memory whose rings also come
 * from the input. The section is the input's mask XORed onto one saved from a running
 * device, its length the saved one's XOR the input's first two bytes (fuzz_mmio_state.h),
 * so an input of zeros is a valid section and the fuzzer works near valid ones; a
 * shorter length cuts it short, a longer one appends. Whatever the bytes, the load
 * must refuse cleanly or give a device that then runs (a frame from the host, both
 * queues kicked) without touching host memory outside guest RAM (ASan watches) and
 * without hanging. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_mmio_driver.h"
#include "fuzz_mmio_state.h"
#include "virtio/net.h"

#define RAM_SIZE (16 << 20)
#define RING_BASE 0x10000ULL /* per queue q: + q * 0x4000, avail +0x1000, used +0x2000 */
#define BUFFER_BASE 0x20000ULL
#define BUFFER_SIZE 0x20000ULL
#define HDR_LEN 12

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct harness {
	struct guest_memory mem;
	struct event_loop loop;
	struct virtio_net *net;
	struct virtio_mmio mmio;
	int fd;	  /* the device's end */
	int peer; /* the host's end */
	struct fuzz_section template;
	uint8_t frame[HDR_LEN + 1500];
};

/* The section of a device a driver brought up with every feature it offers (one it
 * does not offer would be refused at FEATURES_OK, and the template would be a device
 * that never ran), both queues ready. */
static int save_template(struct harness *h)
{
	struct vdev *dev = virtio_net_vdev(h->net);

	fuzz_mmio_bring_up(&h->mmio, (uint32_t)dev->ops->features(dev), RING_BASE, 0x4000, 2);
	return fuzz_section_save(&h->mmio, &h->template);
}

/* Created once: per-input setup would dominate the run. */
static struct harness *harness_get(void)
{
	static struct harness h;
	static int state; /* 0 new, 1 ready, -1 failed */
	int sv[2];

	if (state)
		return state > 0 ? &h : NULL;
	state = -1;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
		return NULL;
	h.fd = sv[0];
	h.peer = sv[1];
	struct virtio_net_options options = {
	    .tap_fd = h.fd, .mac = {0x52, 0x54, 0, 0, 0, 2}, .has_mac = true, .name = "fuzz"};
	if (guest_memory_create(&h.mem, RAM_SIZE, NULL) || event_loop_init(&h.loop) ||
	    virtio_net_create(&options, &h.mem, &h.loop, NULL, &h.net) ||
	    fuzz_mmio_attach(&h.mmio, virtio_net_vdev(h.net), &h.loop, 2) || save_template(&h))
		return NULL;
	state = 1;
	return &h;
}

/* The input: the section's length and mask (fuzz_section_input_split: even a short input
 * loads a whole section), then both queues' rings as the guest left them (zeros past the
 * input's end). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct harness *h = harness_get();
	struct fuzz_section_input section;
	struct fuzz_queue queue[2] = {0};

	if (!h)
		abort(); /* the host, not the input: no run would mean anything */
	fuzz_section_input_split(&h->template, data, size, &section);
	fuzz_section_input_rest(&section, queue, sizeof(queue));
	uint8_t *ring = guest_memory_ptr(&h->mem, RING_BASE, BUFFER_BASE + BUFFER_SIZE - RING_BASE);
	memset(ring, 0, BUFFER_BASE + BUFFER_SIZE - RING_BASE);
	for (unsigned q = 0; q < 2; q++)
		fuzz_lay_out_queue(ring + q * 0x4000, &queue[q], BUFFER_BASE, BUFFER_SIZE);

	if (fuzz_section_load(&h->mmio, &h->template, &section) == 0) {
		virtio_mmio_restored(&h->mmio);
		memset(h->frame, 0, sizeof(h->frame));
		(void)send(h->peer, h->frame, sizeof(h->frame), MSG_DONTWAIT);
		fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
		fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_QUEUE_NOTIFY, 1);
		for (int i = 0; i < 16 && event_loop_run_once(&h->loop, 0) > 0; i++) {
		}
	}
	/* The next input starts from power-on, with nothing left in the pair. */
	fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_STATUS, 0);
	while (recv(h->peer, h->frame, sizeof(h->frame), MSG_DONTWAIT) >= 0) {
	}
	while (recv(h->fd, h->frame, sizeof(h->frame), MSG_DONTWAIT) >= 0) {
	}
	return 0;
}
