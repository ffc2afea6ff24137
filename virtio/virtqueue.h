/* The device side of a virtio 1.2 split virtqueue (§2.7). The queue state is a plain
 * struct a snapshot can write out as is; every guest access goes through
 * guest_memory_ptr(), and nothing the driver writes into the rings is trusted: a chain
 * that breaks a rule of the spec is refused with -EIO and consumes nothing. */
#ifndef MOTE_VIRTQUEUE_H
#define MOTE_VIRTQUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../vmm/guest_memory.h"

#define VIRTQ_MAX_SIZE 32768
/* The most segments one chain may resolve to; a longer chain is refused. */
#define VIRTQ_MAX_SEGMENTS 1024

struct virtq {
	/* Serialisable state: a snapshot saves these fields as they are. */
	uint16_t size;		 /* power of two, at most VIRTQ_MAX_SIZE */
	uint16_t last_avail_idx; /* next avail ring slot the device reads */
	uint16_t used_idx;	 /* next used ring slot the device writes */
	bool event_idx;		 /* VIRTIO_F_EVENT_IDX negotiated */
	bool ready;
	uint64_t desc_addr; /* guest addresses of the three rings */
	uint64_t avail_addr;
	uint64_t used_addr;
	/* Not serialised: reattached on restore. */
	struct guest_memory *mem;
};

struct virtq_segment {
	void *host; /* len bytes of guest RAM */
	uint32_t len;
	bool writable; /* device-writable */
};

/* One descriptor chain. Readable segments come first (§2.7.4): seg[0, readable_count)
 * are device-readable, seg[readable_count, count) device-writable; the entries after
 * count hold whatever an earlier chain left there. */
struct virtq_chain {
	uint16_t head; /* for virtq_push() */
	uint32_t count;
	uint32_t readable_count;
	uint64_t readable_len;
	uint64_t writable_len;
	/* Descriptors of the queue's own table the chain takes (an indirect table counts
	 * as its one descriptor there): what the driver gets back when it is used. */
	uint32_t ring_descs;
	struct virtq_segment seg[VIRTQ_MAX_SEGMENTS];
};

/* Checks and records the ring layout the driver chose, resets the indices and marks
 * the queue ready. -EINVAL when size is not a power of two in [1, VIRTQ_MAX_SIZE], a
 * ring is misaligned (§2.7: desc 16, avail 2, used 4) or does not lie wholly in RAM. */
int virtq_configure(struct virtq *q, struct guest_memory *mem, uint16_t size, uint64_t desc,
		    uint64_t avail, uint64_t used, bool event_idx);

/* Forgets the rings; the queue is not ready until configured again. */
void virtq_reset(struct virtq *q);

/* Takes over a queue's serialisable state from a snapshot (saved: its fields up to mem)
 * on mem. A ready queue is checked as virtq_configure() checks it, and the device may
 * own at most size chains (last_avail_idx - used_idx); a queue that is not ready must
 * be all zeros. -EINVAL, leaving q reset, when the state is not one a driver could have
 * set up. */
int virtq_restore(struct virtq *q, struct guest_memory *mem, const struct virtq *saved);

/* Takes the next chain the driver made available: 1 and *chain filled in, 0 when there
 * is none (or the queue is not ready), -EIO when the queue or the chain is broken. On
 * -EIO nothing is consumed; the caller should set DEVICE_NEEDS_RESET. */
int virtq_pop(struct virtq *q, struct virtq_chain *chain);

/* Walks the chain at head as virtq_pop() would, touching no index: for a device that
 * rebuilds, after a restore, what it held of the chains it had popped. 0 and *chain
 * filled in; -EIO when the queue is not ready or head or its chain is broken. */
int virtq_chain_at(const struct virtq *q, uint16_t head, struct virtq_chain *chain);

/* Returns the chain at head to the driver with written bytes in its writable part, and
 * publishes the used index (§2.7.8). -EINVAL when head is not a descriptor index, -EIO
 * when the queue is not ready. */
int virtq_push(struct virtq *q, uint16_t head, uint32_t written);

/* One chain returned to the driver: its head and the bytes written to its writable part. */
struct virtq_used_buf {
	uint16_t head;
	uint32_t written;
};

/* Returns n chains at once and publishes the used index once, after all of them: the
 * driver sees all or none (a merged receive packet's buffers, virtio 1.2 §5.1.6.4.1).
 * -EINVAL when a head is not a descriptor index or n exceeds the queue size (nothing is
 * written then), -EIO when the queue is not ready. */
int virtq_push_batch(struct virtq *q, const struct virtq_used_buf *bufs, unsigned n);

/* Gives back the last n chains virtq_pop() returned that were not pushed, as if they
 * had not been taken: the next pops return them again. For a device that took a chain
 * it cannot serve yet (a backend that would block). -EINVAL when fewer than n chains are
 * outstanding (popped and not pushed), -EIO when the queue is not ready. */
int virtq_unpop(struct virtq *q, uint16_t n);

/* The driver's avail index as it stands (§2.7.6), for a device that must see whether
 * the driver added buffers; 0 for a queue that is not ready or whose ring is gone. */
uint16_t virtq_driver_avail_idx(const struct virtq *q);

/* Whether the driver wants an interrupt for the chains pushed since used index
 * old_used_idx (§2.7.10): by used_event with EVENT_IDX, else by NO_INTERRUPT. */
bool virtq_should_notify(struct virtq *q, uint16_t old_used_idx);

/* With EVENT_IDX, tells the driver the device has seen every chain up to
 * last_avail_idx, so it notifies only for later ones (§2.7.10). The caller pops again
 * afterwards: a chain added meanwhile brings no notification. */
void virtq_set_avail_event(struct virtq *q);

/* With EVENT_IDX, asks the driver to notify once it makes the chain at avail index
 * avail_idx available, whatever the device has read (§2.7.10). */
void virtq_set_avail_event_at(struct virtq *q, uint16_t avail_idx);

/* Copies len bytes starting offset bytes into the readable part of the chain.
 * -EFAULT when that range goes beyond the readable part. */
int virtq_chain_read(const struct virtq_chain *chain, uint64_t offset, void *dst, size_t len);

/* Copies len bytes to offset bytes into the writable part of the chain. -EFAULT when
 * that range goes beyond the writable part. */
int virtq_chain_write(const struct virtq_chain *chain, uint64_t offset, const void *src,
		      size_t len);

#endif
