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

#include "virtio/mmio.h"
#include "virtio/net.h"

#define RAM_SIZE (16 << 20)
#define RING_BASE                                                                                  \
	0x10000ULL /* per queue q: descriptors at + q * 0x4000, avail +0x1000, used +0x2000 */
#define QUEUE_SIZE 16
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

static void reg_write(struct harness *h, uint64_t offset, uint32_t value)
{
	virtio_mmio_access(&h->mmio, offset, (uint8_t *)&value, 4, true);
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
	    .tap_fd = h.fd, .mac = {0x52, 0x54, 0, 0, 0, 1}, .has_mac = true, .name = "fuzz"};
	if (guest_memory_create(&h.mem, RAM_SIZE, NULL) || event_loop_init(&h.loop) ||
	    virtio_net_create(&options, &h.mem, &h.loop, NULL, &h.net) ||
	    virtio_mmio_init(&h.mmio, virtio_net_vdev(h.net), 0xd0000000, 5, NULL))
		return NULL;
	for (unsigned q = 0; q < 2; q++)
		if (event_loop_add(&h.loop, h.mmio.notifiers[q].fd, virtio_mmio_notify_handler,
				   &h.mmio.notifiers[q]))
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
struct fuzz_queue {
	uint8_t avail_count;
	uint16_t avail[QUEUE_SIZE];
	struct {
		uint64_t addr;
		uint32_t len;
		uint16_t flags;
		uint16_t next;
	} desc[QUEUE_SIZE];
} __attribute__((packed));

struct fuzz_input {
	uint64_t features;
	uint8_t frame_count;
	uint32_t frame_len[MAX_FRAMES];
	struct fuzz_queue queue[2];
} __attribute__((packed));

static void lay_out_queue(uint8_t *ring, const struct fuzz_queue *in)
{
	for (unsigned i = 0; i < QUEUE_SIZE; i++) {
		uint64_t addr = in->desc[i].addr;
		if (addr < (1ULL << 48))
			addr = BUFFER_BASE + addr % BUFFER_SIZE;
		memcpy(ring + i * 16, &addr, 8);
		memcpy(ring + i * 16 + 8, &in->desc[i].len, 4);
		memcpy(ring + i * 16 + 12, &in->desc[i].flags, 2);
		memcpy(ring + i * 16 + 14, &in->desc[i].next, 2);
	}
	uint16_t avail_idx = in->avail_count;
	memcpy(ring + 0x1000 + 2, &avail_idx, 2); /* avail: flags, idx, ring[] */
	memcpy(ring + 0x1000 + 4, in->avail, sizeof(in->avail));
}

static void set_up_queue(struct harness *h, unsigned q)
{
	uint32_t base = (uint32_t)(RING_BASE + q * 0x4000);

	reg_write(h, VIRTIO_MMIO_QUEUE_SEL, q);
	reg_write(h, VIRTIO_MMIO_QUEUE_NUM, QUEUE_SIZE);
	reg_write(h, VIRTIO_MMIO_QUEUE_DESC_LOW, base);
	reg_write(h, VIRTIO_MMIO_QUEUE_DRIVER_LOW, base + 0x1000);
	reg_write(h, VIRTIO_MMIO_QUEUE_DEVICE_LOW, base + 0x2000);
	reg_write(h, VIRTIO_MMIO_QUEUE_READY, 1);
}

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

	if (!h || size < sizeof(in))
		return 0;
	memcpy(&in, data, sizeof(in));
	uint8_t *ring = guest_memory_ptr(&h->mem, RING_BASE, BUFFER_BASE + BUFFER_SIZE - RING_BASE);
	memset(ring, 0, BUFFER_BASE + BUFFER_SIZE - RING_BASE);
	for (unsigned q = 0; q < 2; q++)
		lay_out_queue(ring + q * 0x4000, &in.queue[q]);
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
	set_up_queue(h, 0);
	set_up_queue(h, 1);
	reg_write(h, VIRTIO_MMIO_STATUS,
		  VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_FEATURES_OK |
		      VIRTIO_STATUS_DRIVER_OK);

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
	reg_write(h, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	reg_write(h, VIRTIO_MMIO_QUEUE_NOTIFY, 1);
	for (int i = 0; i < 16 && event_loop_run_once(&h->loop, 0) > 0; i++) {
	}
	drain(h);
	return 0;
}
