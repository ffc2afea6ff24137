/* The driver side the virtio fuzz targets share: a device behind virtio-mmio brought up
 * the way a driver does it (virtio 1.2 §4.2.3.1 and §3.1.1: reset, ACKNOWLEDGE, DRIVER,
 * features, FEATURES_OK, the queues, DRIVER_OK), and split queues (§2.7) laid out in
 * guest RAM from the fuzzer's bytes. Each queue's ring is one block: the descriptor
 * table at its start, the avail ring at +0x1000, the used ring at +0x2000. */
#ifndef MOTE_TESTS_FUZZ_MMIO_DRIVER_H
#define MOTE_TESTS_FUZZ_MMIO_DRIVER_H

#include <stdint.h>

#include "virtio/mmio.h"
#include "vmm/event_loop.h"

#define FUZZ_QUEUE_SIZE 16
#define FUZZ_AVAIL_OFFSET 0x1000
#define FUZZ_USED_OFFSET 0x2000

/* One queue as the input gives it: how many chains the driver makes available, which
 * heads, and the descriptor table. Packed, so an input's bytes map onto it as they are. */
struct fuzz_queue {
	uint8_t avail_count;
	uint16_t avail[FUZZ_QUEUE_SIZE];
	struct {
		uint64_t addr;
		uint32_t len;
		uint16_t flags;
		uint16_t next;
	} desc[FUZZ_QUEUE_SIZE];
} __attribute__((packed));

/* Puts dev behind mmio and watches its first `queues` notifiers on loop: 0 or an error. */
int fuzz_mmio_attach(struct virtio_mmio *mmio, struct vdev *dev, struct event_loop *loop,
		     unsigned queues);

/* A driver's 32-bit write to the register at offset. */
void fuzz_mmio_write(struct virtio_mmio *mmio, uint64_t offset, uint32_t value);

/* Resets the device and brings it up again with features (bits 0-31; VERSION_1 above)
 * and queues 0..queues-1 of FUZZ_QUEUE_SIZE, queue q's ring at ring_base + q * stride. */
void fuzz_mmio_bring_up(struct virtio_mmio *mmio, uint32_t features, uint64_t ring_base,
			uint64_t stride, unsigned queues);

/* Writes descriptor i of the table at table. */
void fuzz_write_desc(uint8_t *table, unsigned i, uint64_t addr, uint32_t len, uint16_t flags,
		     uint16_t next);

/* Makes the chain at head available in the ring block at ring, after those before. */
void fuzz_offer(uint8_t *ring, uint16_t head);

/* Writes in's descriptor table and avail ring into the ring block at ring. Addresses
 * below 2^48 are folded into [buffer_base, buffer_base + buffer_size), so that most
 * chains reach the device's checks; others stay as they are and must be refused. */
void fuzz_lay_out_queue(uint8_t *ring, const struct fuzz_queue *in, uint64_t buffer_base,
			uint64_t buffer_size);

/* The same for a device that has taken first chains already (its last_avail_idx): in's
 * chains are the ones the driver made available after those. */
void fuzz_lay_out_queue_from(uint8_t *ring, const struct fuzz_queue *in, uint16_t first,
			     uint64_t buffer_base, uint64_t buffer_size);

#endif
