/* The driver side of the virtio fuzz targets (fuzz_mmio_driver.h). */
#include <string.h>

#include "fuzz_mmio_driver.h"

int fuzz_mmio_attach(struct virtio_mmio *mmio, struct vdev *dev, struct event_loop *loop,
		     unsigned queues)
{
	int err = virtio_mmio_init(mmio, dev, 0xd0000000, 5, NULL);

	for (unsigned q = 0; !err && q < queues; q++)
		err = event_loop_add(loop, mmio->notifiers[q].fd, virtio_mmio_notify_handler,
				     &mmio->notifiers[q]);
	return err;
}

void fuzz_mmio_write(struct virtio_mmio *mmio, uint64_t offset, uint32_t value)
{
	virtio_mmio_access(mmio, offset, (uint8_t *)&value, 4, true);
}

void fuzz_mmio_bring_up(struct virtio_mmio *mmio, uint32_t features, uint64_t ring_base,
			uint64_t stride, unsigned queues)
{
	uint32_t base = VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER;

	fuzz_mmio_write(mmio, VIRTIO_MMIO_STATUS, 0);
	fuzz_mmio_write(mmio, VIRTIO_MMIO_STATUS, base);
	fuzz_mmio_write(mmio, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 0);
	fuzz_mmio_write(mmio, VIRTIO_MMIO_DRIVER_FEATURES, features);
	fuzz_mmio_write(mmio, VIRTIO_MMIO_DRIVER_FEATURES_SEL, 1);
	fuzz_mmio_write(mmio, VIRTIO_MMIO_DRIVER_FEATURES, 1); /* VERSION_1 */
	fuzz_mmio_write(mmio, VIRTIO_MMIO_STATUS, base | VIRTIO_STATUS_FEATURES_OK);
	for (unsigned q = 0; q < queues; q++) {
		uint32_t ring = (uint32_t)(ring_base + q * stride);
		fuzz_mmio_write(mmio, VIRTIO_MMIO_QUEUE_SEL, q);
		fuzz_mmio_write(mmio, VIRTIO_MMIO_QUEUE_NUM, FUZZ_QUEUE_SIZE);
		fuzz_mmio_write(mmio, VIRTIO_MMIO_QUEUE_DESC_LOW, ring);
		fuzz_mmio_write(mmio, VIRTIO_MMIO_QUEUE_DRIVER_LOW, ring + FUZZ_AVAIL_OFFSET);
		fuzz_mmio_write(mmio, VIRTIO_MMIO_QUEUE_DEVICE_LOW, ring + FUZZ_USED_OFFSET);
		fuzz_mmio_write(mmio, VIRTIO_MMIO_QUEUE_READY, 1);
	}
	fuzz_mmio_write(mmio, VIRTIO_MMIO_STATUS,
			base | VIRTIO_STATUS_FEATURES_OK | VIRTIO_STATUS_DRIVER_OK);
}

void fuzz_write_desc(uint8_t *table, unsigned i, uint64_t addr, uint32_t len, uint16_t flags,
		     uint16_t next)
{
	memcpy(table + i * 16, &addr, 8);
	memcpy(table + i * 16 + 8, &len, 4);
	memcpy(table + i * 16 + 12, &flags, 2);
	memcpy(table + i * 16 + 14, &next, 2);
}

void fuzz_offer(uint8_t *ring, uint16_t head)
{
	uint16_t idx;

	memcpy(&idx, ring + FUZZ_AVAIL_OFFSET + 2, 2); /* avail: flags, idx, ring[] */
	memcpy(ring + FUZZ_AVAIL_OFFSET + 4 + 2 * (idx % FUZZ_QUEUE_SIZE), &head, 2);
	idx++;
	__atomic_thread_fence(__ATOMIC_RELEASE);
	memcpy(ring + FUZZ_AVAIL_OFFSET + 2, &idx, 2);
}

void fuzz_lay_out_queue(uint8_t *ring, const struct fuzz_queue *in, uint64_t buffer_base,
			uint64_t buffer_size)
{
	fuzz_lay_out_queue_from(ring, in, 0, buffer_base, buffer_size);
}

void fuzz_lay_out_queue_from(uint8_t *ring, const struct fuzz_queue *in, uint16_t first,
			     uint64_t buffer_base, uint64_t buffer_size)
{
	for (unsigned i = 0; i < FUZZ_QUEUE_SIZE; i++) {
		uint64_t addr = in->desc[i].addr;
		if (addr < (1ULL << 48))
			addr = buffer_base + addr % buffer_size;
		fuzz_write_desc(ring, i, addr, in->desc[i].len, in->desc[i].flags,
				in->desc[i].next);
	}
	/* The chains after first fill the ring's slots from first's on, round it. */
	for (unsigned i = 0; i < FUZZ_QUEUE_SIZE; i++)
		memcpy(ring + FUZZ_AVAIL_OFFSET + 4 + 2 * ((first + i) % FUZZ_QUEUE_SIZE),
		       &in->avail[i], 2);
	uint16_t avail_idx = (uint16_t)(first + in->avail_count);
	memcpy(ring + FUZZ_AVAIL_OFFSET + 2, &avail_idx, 2);
}
