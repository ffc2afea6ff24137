/* libFuzzer target: a hostile guest driving virtio-vsock through the virtio-mmio
 * transport, with host programs on the other side. The input becomes the guest's tx
 * descriptor table, avail ring and packet bytes, the shape of its rx buffers, what a
 * host client writes as its CONNECT line and what a host listener answers. The harness
 * brings the device up like a driver, kicks tx and rx and runs the device's sockets.
 * Whatever the bytes, the device must answer, refuse or ask for a reset without
 * touching memory outside guest RAM (ASan watches) and without hanging. */
#include <endian.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_vsock_device.h"
#include "virtio/vsock_packet.h"

#define RAM_SIZE (16 << 20)
#define RING_BASE 0x10000ULL /* queue q: descriptors at +q*0x3000, avail +0x1000, used +0x2000 */
#define QUEUE_SIZE FUZZ_QUEUE_SIZE
#define BUFFER_BASE 0x40000ULL /* tx packet bytes */
#define BUFFER_SIZE 0x20000ULL
#define RX_BASE 0x60000ULL
#define RX_BUFFERS 8
#define RX_BUFFER_SIZE 0x1100ULL
#define EVENT_BASE 0x70000ULL
#define HOST_PORT 5

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct harness {
	struct guest_memory mem;
	struct event_loop loop;
	struct virtio_vsock *vsock;
	struct virtio_mmio mmio;
	const char *uds_path;
	char listener_path[128];
	int listener; /* a host program on "<uds_path>_5" */
};

/* Created once: per-input setup would dominate the run. */
static struct harness *harness_get(void)
{
	static struct harness h;
	static int state; /* 0 new, 1 ready, -1 failed */

	if (state)
		return state > 0 ? &h : NULL;
	state = -1;
	/* Short timeouts, so that inputs reach them too. */
	if (guest_memory_create(&h.mem, RAM_SIZE, NULL) || event_loop_init(&h.loop) ||
	    fuzz_vsock_device_create(&h.mem, &h.loop, 1, &h.vsock, &h.mmio, &h.uds_path))
		return NULL;
	/* In the device's directory, removed with it. */
	snprintf(h.listener_path, sizeof(h.listener_path), "%s_%d", h.uds_path, HOST_PORT);
	h.listener = fuzz_unix_socket(h.listener_path, true);
	if (h.listener < 0)
		return NULL;
	state = 1;
	return &h;
}

/* The input, read as a driver's and the host's work. Its head says how: the mode
 * bits, the features, the rx buffer shapes, the host client's CONNECT line and what the
 * host listener writes back. The rest is guest packets, in one of two forms:
 * - raw (MODE_RAW): the tx descriptor table and avail ring as given, then the bytes
 *   they point into; addresses below 2^48 are folded into the packet area, so most
 *   chains reach the packet parser and the others must be refused;
 * - packets: 44-byte headers each followed by its payload, laid out as well-formed
 *   chains, with the guest's CID, the stream type and an operation of the spec's
 *   stamped in, the guest port one of four and the host port the listener's or the
 *   one next to it, so that packets meet connections (MODE_RAW_CIDS leaves all of
 *   these as they are); a header with the
 * top bit of flags set is aimed at the connection the device last asked the guest for, so
 * host-initiated connections get answers. */
#define MODE_RAW 1u
#define MODE_RAW_FEATURES 2u
#define MODE_TRANSPORT_RESET 4u
#define MODE_RAW_CIDS 8u
#define MODE_CONNECT_TEXT 16u
#define MODE_WAIT 32u /* long enough for the device's timeouts */
#define MAX_ACCEPTED 8
#define AIM_AT_REQUEST 0x80000000u
#define PACKET_SLOT 0x1100ULL
#define PACKETS (QUEUE_SIZE / 2)

struct fuzz_head {
	uint8_t mode;
	uint32_t features;
	uint16_t rx_len[RX_BUFFERS]; /* each rx buffer's length; its top bit: read-only */
	uint8_t connect_line[24];
	uint8_t host_reply[32];
} __attribute__((packed));

/* The connection the device last asked the guest for (its REQUEST on rx). */
struct request_seen {
	bool seen;
	uint32_t host_port;
	uint32_t guest_port;
};

static uint8_t *ram_at(struct harness *h, uint64_t addr, uint64_t len)
{
	return guest_memory_ptr(&h->mem, addr, len);
}

static uint8_t *ring(struct harness *h, unsigned q)
{
	return ram_at(h, RING_BASE + q * 0x3000ULL, 0x3000);
}

static void lay_out_rx_and_events(struct harness *h, const struct fuzz_head *head)
{
	uint8_t *rx = ring(h, 0), *event = ring(h, 2);

	memset(ram_at(h, RING_BASE, EVENT_BASE + 0x100 - RING_BASE), 0,
	       EVENT_BASE + 0x100 - RING_BASE);
	for (uint16_t i = 0; i < RX_BUFFERS; i++) {
		uint16_t flags = head->rx_len[i] & 0x8000 ? 0 : 2; /* VRING_DESC_F_WRITE */
		uint32_t len = (uint32_t)((head->rx_len[i] & 0x7fff) % RX_BUFFER_SIZE);
		fuzz_write_desc(rx, i, RX_BASE + i * RX_BUFFER_SIZE, len, flags, 0);
		fuzz_offer(rx, i);
	}
	for (uint16_t i = 0; i < 2; i++) {
		fuzz_write_desc(event, i, EVENT_BASE + 16 * i, 8, 2, 0);
		fuzz_offer(event, i);
	}
}

static void lay_out_raw_tx(struct harness *h, const uint8_t *data, size_t size)
{
	struct fuzz_queue raw = {0};

	memcpy(&raw, data, size < sizeof(raw) ? size : sizeof(raw));
	fuzz_lay_out_queue(ring(h, 1), &raw, BUFFER_BASE, BUFFER_SIZE);
	if (size > sizeof(raw)) {
		size_t rest = size - sizeof(raw);
		memcpy(ram_at(h, BUFFER_BASE, BUFFER_SIZE), data + sizeof(raw),
		       rest < BUFFER_SIZE ? rest : BUFFER_SIZE);
	}
}

/* Offers the next packets of the input on tx, one chain each: *used bytes taken. */
static void offer_packets(struct harness *h, uint8_t mode, const uint8_t *data, size_t size,
			  size_t *used, unsigned first, unsigned count,
			  const struct request_seen *request)
{
	uint8_t *tx = ring(h, 1);

	for (unsigned i = first; i < first + count && *used + VSOCK_HDR_SIZE <= size; i++) {
		uint64_t addr = BUFFER_BASE + i * PACKET_SLOT;
		struct virtio_vsock_hdr hdr;
		memcpy(&hdr, data + *used, sizeof(hdr));
		*used += sizeof(hdr);
		if (!(mode & MODE_RAW_CIDS)) {
			hdr.src_cid = htole64(FUZZ_VSOCK_GUEST_CID);
			hdr.dst_cid = htole64(VSOCK_HOST_CID);
			hdr.type = htole16(VIRTIO_VSOCK_TYPE_STREAM);
			hdr.op = htole16(le16toh(hdr.op) % 8);
			hdr.src_port = htole32(1000 + (le32toh(hdr.src_port) & 3));
			hdr.dst_port = htole32(HOST_PORT + (le32toh(hdr.dst_port) & 1));
		}
		if ((le32toh(hdr.flags) & AIM_AT_REQUEST) && request->seen) {
			hdr.src_port = htole32(request->guest_port);
			hdr.dst_port = htole32(request->host_port);
		}
		size_t payload = le32toh(hdr.len) % (PACKET_SLOT - VSOCK_HDR_SIZE);
		if (payload > size - *used)
			payload = size - *used;
		memcpy(ram_at(h, addr, sizeof(hdr)), &hdr, sizeof(hdr));
		memcpy(ram_at(h, addr + VSOCK_HDR_SIZE, payload + 1), data + *used, payload);
		*used += payload;
		fuzz_write_desc(tx, 2 * i, addr, VSOCK_HDR_SIZE, payload ? 1 : 0,
				(uint16_t)(2 * i + 1));
		fuzz_write_desc(tx, 2 * i + 1, addr + VSOCK_HDR_SIZE, (uint32_t)payload, 0, 0);
		fuzz_offer(tx, (uint16_t)(2 * i));
	}
}

/* Takes what the device put on rx (remembering its last REQUEST) and offers the
 * buffers again. */
static void drain_rx(struct harness *h, uint16_t *seen, struct request_seen *request)
{
	uint8_t *rx = ring(h, 0);
	uint16_t used_idx;

	memcpy(&used_idx, rx + 0x2000 + 2, 2);
	for (; *seen != used_idx; (*seen)++) {
		uint32_t id, len;
		memcpy(&id, rx + 0x2000 + 4 + 8 * (*seen % QUEUE_SIZE), 4);
		memcpy(&len, rx + 0x2000 + 8 + 8 * (*seen % QUEUE_SIZE), 4);
		if (id >= RX_BUFFERS)
			continue;
		struct virtio_vsock_hdr hdr;
		uint8_t *buf = ram_at(h, RX_BASE + id * RX_BUFFER_SIZE, sizeof(hdr));
		memcpy(&hdr, buf, sizeof(hdr));
		if (len >= sizeof(hdr) && le16toh(hdr.op) == VIRTIO_VSOCK_OP_REQUEST)
			*request = (struct request_seen){true, le32toh(hdr.src_port),
							 le32toh(hdr.dst_port)};
		fuzz_offer(rx, (uint16_t)id);
	}
}

static void run_device(struct harness *h, int rounds)
{
	for (int i = 0; i < rounds && event_loop_run_once(&h->loop, 0) > 0; i++) {
	}
}

static int host_client(struct harness *h, const struct fuzz_head *head)
{
	char line[32];
	int fd = fuzz_unix_socket(h->uds_path, false);

	if (fd < 0)
		return fd;
	if (head->mode & MODE_CONNECT_TEXT) {
		int len = snprintf(line, sizeof(line), "CONNECT %u\n", head->connect_line[0]);
		(void)send(fd, line, (size_t)len, MSG_NOSIGNAL);
	} else {
		(void)send(fd, head->connect_line, strnlen((const char *)head->connect_line, 24),
			   MSG_NOSIGNAL);
	}
	return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct harness *h = harness_get();
	struct fuzz_head head;
	struct request_seen request = {0};
	uint16_t rx_seen = 0;
	size_t used = 0;

	if (!h)
		abort(); /* the host, not the input: no run would mean anything */
	if (size < sizeof(head))
		return 0;
	memcpy(&head, data, sizeof(head));
	data += sizeof(head);
	size -= sizeof(head);
	uint32_t offered = VIRTIO_FEATURE_INDIRECT_DESC | VIRTIO_FEATURE_EVENT_IDX;
	fuzz_mmio_bring_up(&h->mmio,
			   head.mode & MODE_RAW_FEATURES ? head.features : head.features & offered,
			   RING_BASE, 0x3000, 3);
	lay_out_rx_and_events(h, &head);
	if (head.mode & MODE_RAW)
		lay_out_raw_tx(h, data, size);
	else
		offer_packets(h, head.mode, data, size, &used, 0, PACKETS / 2, &request);

	/* The guest's first packets, and a host client asking for a guest port. */
	fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_QUEUE_NOTIFY, 1);
	int client = host_client(h, &head);
	run_device(h, 8);
	drain_rx(h, &rx_seen, &request);
	fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_QUEUE_NOTIFY, 0);

	/* The host program answers guest connections to its port; it hangs up later. */
	int accepted[MAX_ACCEPTED];
	unsigned accepted_count = 0;
	for (int fd; (fd = accept(h->listener, NULL, NULL)) >= 0;) {
		(void)send(fd, head.host_reply, sizeof(head.host_reply),
			   MSG_NOSIGNAL | MSG_DONTWAIT);
		if (accepted_count < MAX_ACCEPTED)
			accepted[accepted_count++] = fd;
		else
			close(fd);
	}
	if (!(head.mode & MODE_RAW)) {
		offer_packets(h, head.mode, data, size, &used, PACKETS / 2, PACKETS / 2, &request);
		fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_QUEUE_NOTIFY, 1);
	}
	if (client >= 0)
		(void)send(client, head.host_reply, sizeof(head.host_reply),
			   MSG_NOSIGNAL | MSG_DONTWAIT);
	run_device(h, 8);
	drain_rx(h, &rx_seen, &request);
	fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	if (head.mode & MODE_TRANSPORT_RESET)
		virtio_vsock_transport_reset(h->vsock);
	if (client >= 0)
		close(client);
	for (unsigned i = 0; i < accepted_count; i++)
		close(accepted[i]);
	run_device(h, 8);
	drain_rx(h, &rx_seen, &request);
	if (head.mode & MODE_WAIT)
		usleep(1500);
	(void)event_loop_run_once(&h->loop, 1); /* timeouts may fire */
	run_device(h, 8);
	drain_rx(h, &rx_seen, &request);
	fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_QUEUE_NOTIFY, 0);
	return 0;
}
