/* Split virtqueue, device side (virtio 1.2 §2.7). The driver owns the rings and may
 * rewrite them at any moment, so each descriptor is copied out once and then checked,
 * and every length and index is bounded before it is used. */
#include <endian.h>
#include <errno.h>
#include <string.h>

#include <linux/virtio_ring.h>

#include "virtqueue.h"

#define DESC_SIZE sizeof(struct vring_desc)

/* Ring sizes including the event fields (§2.7: used_event ends the avail ring,
 * avail_event ends the used ring). */
static uint64_t desc_ring_bytes(uint16_t size)
{
	return (uint64_t)size * DESC_SIZE;
}

static uint64_t avail_ring_bytes(uint16_t size)
{
	return 4 + 2 * (uint64_t)size + 2;
}

static uint64_t used_ring_bytes(uint16_t size)
{
	return 4 + sizeof(struct vring_used_elem) * (uint64_t)size + 2;
}

static struct vring_avail *avail_ring(const struct virtq *q)
{
	return guest_memory_ptr(q->mem, q->avail_addr, avail_ring_bytes(q->size));
}

static struct vring_used *used_ring(const struct virtq *q)
{
	return guest_memory_ptr(q->mem, q->used_addr, used_ring_bytes(q->size));
}

static bool is_power_of_two(uint32_t n)
{
	return n != 0 && (n & (n - 1)) == 0;
}

int virtq_configure(struct virtq *q, struct guest_memory *mem, uint16_t size, uint64_t desc,
		    uint64_t avail, uint64_t used, bool event_idx)
{
	if (!is_power_of_two(size) || size > VIRTQ_MAX_SIZE)
		return -EINVAL;
	if (desc % VRING_DESC_ALIGN_SIZE || avail % VRING_AVAIL_ALIGN_SIZE ||
	    used % VRING_USED_ALIGN_SIZE)
		return -EINVAL;
	if (!guest_memory_ptr(mem, desc, desc_ring_bytes(size)) ||
	    !guest_memory_ptr(mem, avail, avail_ring_bytes(size)) ||
	    !guest_memory_ptr(mem, used, used_ring_bytes(size)))
		return -EINVAL;

	*q = (struct virtq){
	    .size = size,
	    .event_idx = event_idx,
	    .ready = true,
	    .desc_addr = desc,
	    .avail_addr = avail,
	    .used_addr = used,
	    .mem = mem,
	};
	return 0;
}

void virtq_reset(struct virtq *q)
{
	struct guest_memory *mem = q->mem;

	*q = (struct virtq){.mem = mem};
}

int virtq_restore(struct virtq *q, struct guest_memory *mem, const struct virtq *saved)
{
	virtq_reset(q);
	q->mem = mem;
	if (!saved->ready) {
		bool zero = saved->size == 0 && saved->last_avail_idx == 0 &&
			    saved->used_idx == 0 && !saved->event_idx && saved->desc_addr == 0 &&
			    saved->avail_addr == 0 && saved->used_addr == 0;
		return zero ? 0 : -EINVAL;
	}
	/* The driver never has more than size chains outstanding (§2.7.13.1). */
	if ((uint16_t)(saved->last_avail_idx - saved->used_idx) > saved->size)
		return -EINVAL;
	int err = virtq_configure(q, mem, saved->size, saved->desc_addr, saved->avail_addr,
				  saved->used_addr, saved->event_idx);
	if (err)
		return err;
	q->last_avail_idx = saved->last_avail_idx;
	q->used_idx = saved->used_idx;
	return 0;
}

/* One copy of a descriptor the driver may be rewriting; the fence keeps the compiler
 * from reading the guest's copy again later. */
static bool read_desc(const struct virtq *q, uint64_t table, uint16_t idx, struct vring_desc *d)
{
	const void *p = guest_memory_ptr(q->mem, table + (uint64_t)idx * DESC_SIZE, DESC_SIZE);

	if (!p)
		return false;
	memcpy(d, p, sizeof(*d));
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	d->addr = le64toh(d->addr);
	d->len = le32toh(d->len);
	d->flags = le16toh(d->flags);
	d->next = le16toh(d->next);
	return true;
}

static int add_segment(const struct virtq *q, struct virtq_chain *chain, const struct vring_desc *d,
		       bool *seen_writable)
{
	bool writable = d->flags & VRING_DESC_F_WRITE;

	/* §2.7.4: device-writable descriptors come after all device-readable ones. */
	if (!writable && *seen_writable)
		return -EIO;
	*seen_writable |= writable;
	if (writable)
		chain->writable_len += d->len;
	else
		chain->readable_len += d->len;
	/* §2.7.5: a chain is at most 2^32 bytes; used.len could not describe more. */
	if (chain->readable_len + chain->writable_len > (1ULL << 32))
		return -EIO;
	if (d->len == 0)
		return 0;

	void *host = guest_memory_ptr(q->mem, d->addr, d->len);
	if (!host || chain->count == VIRTQ_MAX_SEGMENTS)
		return -EIO;
	chain->seg[chain->count++] = (struct virtq_segment){host, d->len, writable};
	/* The device may write all of a writable one: diff snapshots must include it. */
	if (writable)
		guest_memory_mark_dirty(q->mem, d->addr, d->len);
	else
		chain->readable_count = chain->count;
	return 0;
}

/* Follows the chain from head through NEXT links and at most one indirect table.
 * Every descriptor visited counts against a budget of the queue size plus the
 * indirect table's length, so a loop ends in -EIO instead of spinning. */
static int walk_chain(const struct virtq *q, uint16_t head, struct virtq_chain *chain)
{
	uint64_t table = q->desc_addr;
	uint32_t table_len = q->size;
	uint32_t budget = q->size;
	bool indirect = false;
	bool seen_writable = false;
	uint16_t idx = head;

	/* The fields, not the struct: zeroing all of seg[] (16 KiB) on every pop cost more
	 * than the data of a whole 64 KiB frame spread over a few dozen buffers. */
	chain->head = head;
	chain->count = 0;
	chain->readable_count = 0;
	chain->readable_len = 0;
	chain->writable_len = 0;
	chain->ring_descs = 0;
	for (;;) {
		struct vring_desc d;

		if (budget-- == 0 || idx >= table_len || !read_desc(q, table, idx, &d))
			return -EIO;
		if (!indirect)
			chain->ring_descs++;
		if (d.flags & VRING_DESC_F_INDIRECT) {
			/* §2.7.5.3.1: no table inside a table, no NEXT beside INDIRECT. */
			if (indirect || (d.flags & VRING_DESC_F_NEXT))
				return -EIO;
			/* No longer than a chain may have segments (QEMU's limit too): a table
			 * of thousands of empty descriptors would cost a pop that many reads. */
			if (d.len == 0 || d.len % DESC_SIZE ||
			    d.len / DESC_SIZE > VIRTQ_MAX_SEGMENTS)
				return -EIO;
			if (!guest_memory_ptr(q->mem, d.addr, d.len))
				return -EIO;
			table = d.addr;
			table_len = d.len / DESC_SIZE;
			budget += table_len;
			indirect = true;
			idx = 0;
			continue;
		}
		int err = add_segment(q, chain, &d, &seen_writable);
		if (err)
			return err;
		if (!(d.flags & VRING_DESC_F_NEXT))
			return 0;
		idx = d.next;
	}
}

uint16_t virtq_driver_avail_idx(const struct virtq *q)
{
	struct vring_avail *avail = q->ready ? avail_ring(q) : NULL;

	return avail ? le16toh(__atomic_load_n(&avail->idx, __ATOMIC_ACQUIRE)) : 0;
}

int virtq_pop(struct virtq *q, struct virtq_chain *chain)
{
	if (!q->ready)
		return 0;
	struct vring_avail *avail = avail_ring(q);
	if (!avail)
		return -EIO;

	/* Acquire: the ring entry and descriptors are read only after the index that
	 * published them (§2.7.13). */
	uint16_t avail_idx = le16toh(__atomic_load_n(&avail->idx, __ATOMIC_ACQUIRE));
	uint16_t pending = avail_idx - q->last_avail_idx;
	if (pending == 0)
		return 0;
	/* The driver can never have more than size chains outstanding. */
	if (pending > q->size)
		return -EIO;

	uint16_t slot = q->last_avail_idx & (q->size - 1);
	uint16_t head = le16toh(__atomic_load_n(&avail->ring[slot], __ATOMIC_RELAXED));
	if (head >= q->size)
		return -EIO;
	int err = walk_chain(q, head, chain);
	if (err)
		return err;
	q->last_avail_idx++;
	return 1;
}

int virtq_chain_at(const struct virtq *q, uint16_t head, struct virtq_chain *chain)
{
	if (!q->ready || head >= q->size)
		return -EIO;
	return walk_chain(q, head, chain);
}

int virtq_push(struct virtq *q, uint16_t head, uint32_t written)
{
	struct virtq_used_buf buf = {.head = head, .written = written};

	return virtq_push_batch(q, &buf, 1);
}

int virtq_push_batch(struct virtq *q, const struct virtq_used_buf *bufs, unsigned n)
{
	if (!q->ready)
		return -EIO;
	if (n > q->size)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++)
		if (bufs[i].head >= q->size)
			return -EINVAL;
	struct vring_used *used = used_ring(q);
	if (!used)
		return -EIO;
	guest_memory_mark_dirty(q->mem, q->used_addr, used_ring_bytes(q->size));

	for (unsigned i = 0; i < n; i++) {
		vring_used_elem_t *elem = &used->ring[(uint16_t)(q->used_idx + i) & (q->size - 1)];
		__atomic_store_n(&elem->id, htole32(bufs[i].head), __ATOMIC_RELAXED);
		__atomic_store_n(&elem->len, htole32(bufs[i].written), __ATOMIC_RELAXED);
	}
	q->used_idx += n;
	/* Release: the elements are visible before the index that publishes them (§2.7.8). */
	__atomic_store_n(&used->idx, htole16(q->used_idx), __ATOMIC_RELEASE);
	return 0;
}

int virtq_unpop(struct virtq *q, uint16_t n)
{
	if (!q->ready)
		return -EIO;
	/* Every chain popped and not pushed is still the device's. */
	if (n > (uint16_t)(q->last_avail_idx - q->used_idx))
		return -EINVAL;
	q->last_avail_idx -= n;
	return 0;
}

bool virtq_should_notify(struct virtq *q, uint16_t old_used_idx)
{
	/* A spurious interrupt is harmless, a missing one hangs the driver. Ready first: a
	 * queue never set up has no memory to look the ring up in. */
	if (!q->ready)
		return true;
	struct vring_avail *avail = avail_ring(q);
	if (!avail)
		return true;
	/* The used index store must be visible before the driver's suppression fields are
	 * read, or both sides can miss each other's update (§2.7.10). */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (q->event_idx) {
		uint16_t used_event =
		    le16toh(__atomic_load_n(&avail->ring[q->size], __ATOMIC_RELAXED));
		return vring_need_event(used_event, q->used_idx, old_used_idx);
	}
	uint16_t flags = le16toh(__atomic_load_n(&avail->flags, __ATOMIC_RELAXED));
	return !(flags & VRING_AVAIL_F_NO_INTERRUPT);
}

void virtq_set_avail_event(struct virtq *q)
{
	virtq_set_avail_event_at(q, q->last_avail_idx);
}

void virtq_set_avail_event_at(struct virtq *q, uint16_t avail_idx)
{
	if (!q->ready || !q->event_idx)
		return;
	struct vring_used *used = used_ring(q);
	if (!used)
		return;
	/* avail_event follows the size used elements. */
	uint16_t *avail_event = (uint16_t *)&used->ring[q->size];
	guest_memory_mark_dirty(q->mem, q->used_addr, used_ring_bytes(q->size));
	__atomic_store_n(avail_event, htole16(avail_idx), __ATOMIC_RELAXED);
	/* Order the store before the caller's next read of avail->idx. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/* Copies between buf and bytes [offset, offset + len) of the segments seg[0, n). */
static int chain_copy(const struct virtq_segment *seg, uint32_t n, uint64_t total, uint64_t offset,
		      void *buf, size_t len, bool to_chain)
{
	uint8_t *p = buf;

	if (offset > total || len > total - offset)
		return -EFAULT;
	for (uint32_t i = 0; i < n && len > 0; i++) {
		if (offset >= seg[i].len) {
			offset -= seg[i].len;
			continue;
		}
		size_t step = seg[i].len - offset;
		if (step > len)
			step = len;
		uint8_t *host = (uint8_t *)seg[i].host + offset;
		if (to_chain)
			memcpy(host, p, step);
		else
			memcpy(p, host, step);
		p += step;
		len -= step;
		offset = 0;
	}
	return 0;
}

int virtq_chain_read(const struct virtq_chain *chain, uint64_t offset, void *dst, size_t len)
{
	return chain_copy(chain->seg, chain->readable_count, chain->readable_len, offset, dst, len,
			  false);
}

int virtq_chain_write(const struct virtq_chain *chain, uint64_t offset, const void *src, size_t len)
{
	return chain_copy(chain->seg + chain->readable_count, chain->count - chain->readable_count,
			  chain->writable_len, offset, (void *)src, len, true);
}
