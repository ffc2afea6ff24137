/* libFuzzer target: a hostile guest driving a virtio-net device through the virtio-mmio
 * transport, with a socket pair standing in for the TAP. The input becomes the features
 * the driver accepts, both queues' descriptor tables and avail rings, the bytes of the
 * guest's buffers, and the frames the host side sends. The harness brings the device up
 * like a driver, kicks both queues and runs the event loop. Whatever the bytes, the
 * device must send, receive, drop or ask for a reset without touching host memory
 * outside guest RAM (ASan watches) and without hanging. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_mmio_driver.h"
#include "virtio/net.h"

#define RAM_SIZE (16 << 20)
#define RING_BASE                                                                                  \
	0x10000ULL /* per queue q: descriptors at + q * 0x4000, avail +0x1000, used +0x2000 */
#define BUFFER_BASE 0x20000ULL
#define BUFFER_SIZE 0x20000ULL
#define MAX_FRAMES 4
#define HDR_LEN 12

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct harness {
	struct guest_memory mem;
	struct event_loop loop;
	struct virtio_net *net;
	struct virtio_mmio mmio;
	int fd;	  /* the device's end */
	int peer; /* the host's end */
	uint8_t frame[HDR_LEN + VIRTIO_NET_MAX_FRAME + 64];
};

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
	    .tap_fd = h.fd, .mac = {0x52, 0x54, 0, 0, 0, 1}, .has_mac = true, .name = "fuzz"};
	if (guest_memory_create(&h.mem, RAM_SIZE, NULL) || event_loop_init(&h.loop) ||
	    virtio_net_create(&options, &h.mem, &h.loop, NULL, &h.net) ||
	    fuzz_mmio_attach(&h.mmio, virtio_net_vdev(h.net), &h.loop, 2))
		return NULL;
	state = 1;
	return &h;
}

/* The input, read as a driver's work and the host's traffic: features, the frames the
 * host sends (their lengths; the bytes come from the buffer area's), and for each queue
 * how many chains the driver makes available, which heads, and the descriptor table;
 * then the bytes of the buffers. Descriptor addresses below 2^48 are folded into the
 * buffer area, so that most chains reach the device's checks; others stay as they are
 * and must be refused. */
struct fuzz_input {
	uint64_t features;
	uint8_t frame_count;
	uint32_t frame_len[MAX_FRAMES];
	struct fuzz_queue queue[2];
} __attribute__((packed));

/* Empties both ends, so that no frame is left for the next input. */
static void drain(struct harness *h)
{
	while (recv(h->peer, h->frame, sizeof(h->frame), MSG_DONTWAIT) >= 0) {
	}
	while (recv(h->fd, h->frame, sizeof(h->frame), MSG_DONTWAIT) >= 0) {
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct harness *h = harness_get();
	struct fuzz_input in;

	if (!h)
		abort(); /* the host, not the input: no run would mean anything */
	if (size < sizeof(in))
		return 0;
	memcpy(&in, data, sizeof(in));
	uint8_t *ring = guest_memory_ptr(&h->mem, RING_BASE, BUFFER_BASE + BUFFER_SIZE - RING_BASE);
	memset(ring, 0, BUFFER_BASE + BUFFER_SIZE - RING_BASE);
	for (unsigned q = 0; q < 2; q++)
		fuzz_lay_out_queue(ring + q * 0x4000, &in.queue[q], BUFFER_BASE, BUFFER_SIZE);
	size_t rest = size - sizeof(in) < BUFFER_SIZE ? size - sizeof(in) : BUFFER_SIZE;
	memcpy(ring + (BUFFER_BASE - RING_BASE), data + sizeof(in), rest);

	fuzz_mmio_bring_up(&h->mmio, (uint32_t)in.features, RING_BASE, 0x4000, 2);

	/* The host's frames, cut from the buffer bytes, some longer than any the device
	 * takes; then both kicks, and the loop until it is idle. */
	const uint8_t *bytes = data + sizeof(in);
	size_t avail_bytes = size - sizeof(in);
	for (unsigned i = 0; i < in.frame_count % (MAX_FRAMES + 1); i++) {
		size_t len = in.frame_len[i] % sizeof(h->frame);
		memset(h->frame, 0, len);
		memcpy(h->frame, bytes, len < avail_bytes ? len : avail_bytes);
		if (send(h->peer, h->frame, len, MSG_DONTWAIT) < 0)
			break;
	}
	fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_QUEUE_NOTIFY, 1);
	for (int i = 0; i < 16 && event_loop_run_once(&h->loop, 0) > 0; i++) {
	}
	drain(h);
	return 0;
}
