/* libFuzzer target: a hostile state file's device section loaded into virtio-vsock
 * behind virtio-mmio (virtio_mmio_load: the transport's registers and three queues, then
 * the device's own state, vsock_load: whether it was broken, whether the guest is owed
 * a TRANSPORT_RESET), over guest memory whose rings also come from the input. The
 * section is the input's mask XORed onto one saved from a device a driver brought up
 * with every feature it offers, with a connection open: a host program connected to a
 * guest port, the guest accepted, and the host's bytes are in an rx buffer or wait for
 * the next (fuzz_mmio_state.h). Each input loads into a device in that state too, so
 * the load drops a live connection. Whatever the bytes, the load must refuse cleanly
 * or give a device that then runs (restored as a restore does it, which resets the
 * transport; the host writing on and a new host program connecting; every queue kicked;
 * the guest giving its event buffer back) without touching host memory outside guest
 * RAM (ASan watches) and without hanging. */
#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/virtio_ring.h>

#include "fuzz_mmio_state.h"
#include "fuzz_vsock_device.h"
#include "virtio/vsock_packet.h"

#define RAM_SIZE (16 << 20)
#define QUEUES 3	     /* rx, tx, event */
#define RING_BASE 0x10000ULL /* queue q's ring block at + q * RING_STRIDE */
#define RING_STRIDE 0x4000ULL
#define BUFFER_BASE 0x20000ULL /* where the input's descriptors point */
#define BUFFER_SIZE 0x20000ULL
/* The buffers of the connection the harness opens: rx, one tx packet, one event. */
#define RX_BASE 0x40000ULL
#define RX_BUFFERS 2
#define RX_BUFFER_SIZE 0x1000ULL
#define TX_PACKET (RX_BASE + RX_BUFFERS * RX_BUFFER_SIZE)
#define EVENT_BUFFER (TX_PACKET + 0x1000)
#define RAM_USED (EVENT_BUFFER + 0x1000 - RING_BASE)
#define CONNECT_LINE "CONNECT 1000\n" /* a host program asks for guest port 1000 */
#define GUEST_BUF_ALLOC (64u << 10)
/* Long enough that no deadline passes while the harness opens its connection. */
#define TIMEOUT_MS 1000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct harness {
	struct guest_memory mem;
	struct event_loop loop;
	struct virtio_vsock *vsock;
	struct virtio_mmio mmio;
	const char *uds_path;
	struct fuzz_section template;
	uint16_t template_avail_idx[QUEUES]; /* the chains the template's device had taken */
};

static uint8_t *ram_at(struct harness *h, uint64_t addr, uint64_t len)
{
	return guest_memory_ptr(&h->mem, addr, len);
}

static uint8_t *ring(struct harness *h, unsigned q)
{
	return ram_at(h, RING_BASE + q * RING_STRIDE, RING_STRIDE);
}

static uint16_t used_idx(struct harness *h, unsigned q)
{
	uint16_t idx;

	memcpy(&idx, ring(h, q) + FUZZ_USED_OFFSET + 2, 2);
	return le16toh(idx);
}

static void run_device(struct harness *h)
{
	for (int i = 0; i < 16 && event_loop_run_once(&h->loop, 0) > 0; i++) {
	}
}

static int host_connect(struct harness *h)
{
	int fd = fuzz_unix_socket(h->uds_path, false);

	if (fd >= 0 && send(fd, CONNECT_LINE, strlen(CONNECT_LINE), MSG_NOSIGNAL) !=
			   (ssize_t)strlen(CONNECT_LINE)) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The guest's answer on tx to the device's request: it accepts (§5.10.6.2). */
static void guest_accept(struct harness *h, const struct virtio_vsock_hdr *request)
{
	struct virtio_vsock_hdr response = {
	    .src_cid = htole64(FUZZ_VSOCK_GUEST_CID),
	    .dst_cid = htole64(VSOCK_HOST_CID),
	    .src_port = request->dst_port,
	    .dst_port = request->src_port,
	    .type = htole16(VIRTIO_VSOCK_TYPE_STREAM),
	    .op = htole16(VIRTIO_VSOCK_OP_RESPONSE),
	    .buf_alloc = htole32(GUEST_BUF_ALLOC),
	};

	memcpy(ram_at(h, TX_PACKET, sizeof(response)), &response, sizeof(response));
	fuzz_write_desc(ring(h, 1), 0, TX_PACKET, sizeof(response), 0, 0);
	fuzz_offer(ring(h, 1), 0);
	fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_QUEUE_NOTIFY, 1);
}

/* Brings the device up with every feature it offers (one it does not offer would be
 * refused at FEATURES_OK) and opens a connection as a host program and a driver do: the
 * program asks for a guest port (CONNECT_LINE), the guest accepts the REQUEST that
 * arrives in its first rx buffer, the program writes, which fills the last rx buffer,
 * and writes again, which waits for the next one. An event buffer waits for a
 * TRANSPORT_RESET. The program's fd, or -1 when the device did not get that far. */
static int open_connection(struct harness *h)
{
	struct virtio_vsock_hdr request;
	struct vdev *dev = virtio_vsock_vdev(h->vsock);

	fuzz_mmio_bring_up(&h->mmio, (uint32_t)dev->ops->features(dev), RING_BASE, RING_STRIDE,
			   QUEUES);
	memset(ram_at(h, RING_BASE, RAM_USED), 0, RAM_USED);
	for (uint16_t i = 0; i < RX_BUFFERS; i++) {
		fuzz_write_desc(ring(h, 0), i, RX_BASE + i * RX_BUFFER_SIZE, RX_BUFFER_SIZE,
				VRING_DESC_F_WRITE, 0);
		fuzz_offer(ring(h, 0), i);
	}
	fuzz_write_desc(ring(h, 2), 0, EVENT_BUFFER, 8, VRING_DESC_F_WRITE, 0);
	fuzz_offer(ring(h, 2), 0);
	int client = host_connect(h);
	if (client < 0)
		return -1;
	run_device(h);
	memcpy(&request, ram_at(h, RX_BASE, sizeof(request)), sizeof(request));
	if (used_idx(h, 0) != 1 || le16toh(request.op) != VIRTIO_VSOCK_OP_REQUEST) {
		close(client);
		return -1;
	}
	guest_accept(h, &request);
	run_device(h);
	(void)send(client, "first", 5, MSG_NOSIGNAL);
	run_device(h);
	(void)send(client, "second", 6, MSG_NOSIGNAL);
	run_device(h);
	if (used_idx(h, 0) != RX_BUFFERS) {
		close(client);
		return -1;
	}
	return client;
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
	    fuzz_vsock_device_create(&h.mem, &h.loop, TIMEOUT_MS, &h.vsock, &h.mmio, &h.uds_path))
		return NULL;
	int client = open_connection(&h);
	if (client < 0)
		return NULL;
	struct vdev *dev = virtio_vsock_vdev(h.vsock);
	for (unsigned q = 0; q < QUEUES; q++)
		h.template_avail_idx[q] = dev->queues[q].last_avail_idx;
	int ret = fuzz_section_save(&h.mmio, &h.template);
	close(client);
	fuzz_mmio_write(&h.mmio, VIRTIO_MMIO_STATUS, 0);
	run_device(&h);
	if (ret)
		return NULL;
	state = 1;
	return &h;
}

/* The restored device at work: the host program of the connection the load dropped
 * writes on, a new one connects, every queue is kicked. Then the guest, twice, offers
 * an event buffer of its own (the TRANSPORT_RESET goes there if the input's ring had
 * none that held it) and, once it has handled the event, offers it back, which lets
 * the new program in (vsock_release_held_clients). */
static void run_restored(struct harness *h, int client)
{
	virtio_mmio_restored(&h->mmio);
	(void)send(client, "after", 5, MSG_NOSIGNAL | MSG_DONTWAIT);
	int late = host_connect(h);
	for (unsigned q = 0; q < QUEUES; q++)
		fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_QUEUE_NOTIFY, q);
	run_device(h);
	for (int i = 0; i < 2; i++) {
		fuzz_write_desc(ring(h, 2), 0, EVENT_BUFFER, 8, VRING_DESC_F_WRITE, 0);
		fuzz_offer(ring(h, 2), 0);
		fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_QUEUE_NOTIFY, 2);
		run_device(h);
	}
	if (late >= 0)
		close(late);
}

/* The input: the section's length and mask (fuzz_section_input_split), then each
 * queue's ring as the guest left it, the chains it made available after the template's
 * (zeros past the input's end: none). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct harness *h = harness_get();
	struct fuzz_section_input section;
	struct fuzz_queue queue[QUEUES] = {0};

	if (!h)
		abort(); /* the host, not the input: no run would mean anything */
	fuzz_section_input_split(&h->template, data, size, &section);
	fuzz_section_input_rest(&section, queue, sizeof(queue));
	int client = open_connection(h);
	if (client < 0)
		abort(); /* as the template's device did, from power-on */

	memset(ram_at(h, RING_BASE, BUFFER_BASE + BUFFER_SIZE - RING_BASE), 0,
	       BUFFER_BASE + BUFFER_SIZE - RING_BASE);
	for (unsigned q = 0; q < QUEUES; q++)
		fuzz_lay_out_queue_from(ring(h, q), &queue[q], h->template_avail_idx[q],
					BUFFER_BASE, BUFFER_SIZE);
	if (fuzz_section_load(&h->mmio, &h->template, &section) == 0)
		run_restored(h, client);
	close(client);
	/* The next input starts from power-on; the device drops the clients left over. */
	fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_STATUS, 0);
	run_device(h);
	return 0;
}
