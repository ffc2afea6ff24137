/* Split virtqueue: chains the driver offers are resolved exactly, and chains that break
 * the spec are refused with -EIO without touching memory outside guest RAM. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <linux/virtio_ring.h>

#include "virtio/virtqueue.h"
#include "vmm/guest_memory.h"

#define MIB (1024ULL * 1024ULL)
#define RAM_SIZE (16 * MIB)
#define QSIZE 16
#define DESC_ADDR 0x10000ULL
#define AVAIL_ADDR 0x11000ULL
#define USED_ADDR 0x12000ULL
#define INDIRECT_ADDR 0x20000ULL
#define BUF_ADDR 0x100000ULL

struct fixture {
	struct guest_memory mem;
	struct virtq q;
	struct virtq_chain chain;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f || guest_memory_create(&f->mem, RAM_SIZE, NULL) != 0)
		return -1;
	if (virtq_configure(&f->q, &f->mem, QSIZE, DESC_ADDR, AVAIL_ADDR, USED_ADDR, false) != 0)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	guest_memory_destroy(&f->mem);
	free(f);
	return 0;
}

static void *guest(struct fixture *f, uint64_t addr, uint64_t len)
{
	void *p = guest_memory_ptr(&f->mem, addr, len);

	assert_non_null(p);
	return p;
}

static void set_desc(struct fixture *f, uint64_t table, uint16_t idx, uint64_t addr, uint32_t len,
		     uint16_t flags, uint16_t next)
{
	struct vring_desc *d = guest(f, table + idx * sizeof(*d), sizeof(*d));

	*d = (struct vring_desc){.addr = addr, .len = len, .flags = flags, .next = next};
}

static struct vring_avail *avail(struct fixture *f)
{
	return guest(f, AVAIL_ADDR, 6 + 2 * QSIZE);
}

static struct vring_used *used(struct fixture *f)
{
	return guest(f, USED_ADDR, 6 + 8 * QSIZE);
}

/* The driver's side of §2.7.13: put head in the next avail slot, then bump idx. */
static void offer(struct fixture *f, uint16_t head)
{
	struct vring_avail *a = avail(f);

	a->ring[a->idx % QSIZE] = head;
	a->idx++;
}

static void assert_refused(struct fixture *f)
{
	assert_int_equal(virtq_pop(&f->q, &f->chain), -EIO);
	assert_int_equal(f->q.last_avail_idx, 0);
}

static void single_readable_descriptor_is_one_readable_segment(void **state)
{
	struct fixture *f = *state;

	set_desc(f, DESC_ADDR, 0, BUF_ADDR, 512, 0, 0);
	offer(f, 0);
	assert_int_equal(virtq_pop(&f->q, &f->chain), 1);
	assert_int_equal(f->chain.head, 0);
	assert_int_equal(f->chain.count, 1);
	assert_int_equal(f->chain.readable_count, 1);
	assert_int_equal(f->chain.readable_len, 512);
	assert_int_equal(f->chain.writable_len, 0);
	assert_ptr_equal(f->chain.seg[0].host, guest(f, BUF_ADDR, 512));
	assert_int_equal(f->chain.seg[0].len, 512);
	assert_false(f->chain.seg[0].writable);
	assert_int_equal(f->q.last_avail_idx, 1);
}

static void readable_then_writable_chain_has_both_parts(void **state)
{
	struct fixture *f = *state;
	char out[16] = {0};

	memcpy(guest(f, BUF_ADDR, 8), "request!", 8);
	set_desc(f, DESC_ADDR, 3, BUF_ADDR, 8, VRING_DESC_F_NEXT, 7);
	set_desc(f, DESC_ADDR, 7, BUF_ADDR + 0x1000, 4, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 1);
	set_desc(f, DESC_ADDR, 1, BUF_ADDR + 0x2000, 4, VRING_DESC_F_WRITE, 0);
	offer(f, 3);
	assert_int_equal(virtq_pop(&f->q, &f->chain), 1);
	assert_int_equal(f->chain.head, 3);
	assert_int_equal(f->chain.count, 3);
	assert_int_equal(f->chain.readable_count, 1);
	assert_int_equal(f->chain.readable_len, 8);
	assert_int_equal(f->chain.writable_len, 8);
	assert_int_equal(f->chain.ring_descs, 3);
	assert_true(f->chain.seg[1].writable);
	assert_true(f->chain.seg[2].writable);

	assert_int_equal(virtq_chain_read(&f->chain, 0, out, 8), 0);
	assert_memory_equal(out, "request!", 8);
	/* A write across the two writable segments lands in both. */
	assert_int_equal(virtq_chain_write(&f->chain, 2, "abcd", 4), 0);
	assert_memory_equal(guest(f, BUF_ADDR + 0x1002, 2), "ab", 2);
	assert_memory_equal(guest(f, BUF_ADDR + 0x2000, 2), "cd", 2);
}

static void chain_copies_beyond_their_part_are_refused(void **state)
{
	struct fixture *f = *state;
	char buf[16];

	set_desc(f, DESC_ADDR, 0, BUF_ADDR, 8, VRING_DESC_F_NEXT, 1);
	set_desc(f, DESC_ADDR, 1, BUF_ADDR + 0x1000, 4, VRING_DESC_F_WRITE, 0);
	offer(f, 0);
	assert_int_equal(virtq_pop(&f->q, &f->chain), 1);
	assert_int_equal(virtq_chain_read(&f->chain, 4, buf, 5), -EFAULT);
	assert_int_equal(virtq_chain_read(&f->chain, UINT64_MAX, buf, 1), -EFAULT);
	assert_int_equal(virtq_chain_write(&f->chain, 0, buf, 5), -EFAULT);
	assert_int_equal(virtq_chain_write(&f->chain, 4, buf, 0), 0);
}

static void indirect_table_is_followed(void **state)
{
	struct fixture *f = *state;

	set_desc(f, INDIRECT_ADDR, 0, BUF_ADDR, 16, VRING_DESC_F_NEXT, 2);
	set_desc(f, INDIRECT_ADDR, 2, BUF_ADDR + 0x1000, 32, VRING_DESC_F_NEXT, 1);
	set_desc(f, INDIRECT_ADDR, 1, BUF_ADDR + 0x2000, 64, VRING_DESC_F_WRITE, 0);
	set_desc(f, DESC_ADDR, 5, INDIRECT_ADDR, 3 * sizeof(struct vring_desc),
		 VRING_DESC_F_INDIRECT, 0);
	offer(f, 5);
	assert_int_equal(virtq_pop(&f->q, &f->chain), 1);
	assert_int_equal(f->chain.head, 5);
	assert_int_equal(f->chain.count, 3);
	assert_int_equal(f->chain.readable_len, 48);
	assert_int_equal(f->chain.writable_len, 64);
	/* The table's three live outside the ring's table: the driver spent one there. */
	assert_int_equal(f->chain.ring_descs, 1);
	assert_ptr_equal(f->chain.seg[2].host, guest(f, BUF_ADDR + 0x2000, 64));
}

static void pop_returns_zero_when_nothing_is_available(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(virtq_pop(&f->q, &f->chain), 0);
	set_desc(f, DESC_ADDR, 0, BUF_ADDR, 1, 0, 0);
	offer(f, 0);
	assert_int_equal(virtq_pop(&f->q, &f->chain), 1);
	assert_int_equal(virtq_pop(&f->q, &f->chain), 0);
}

static void push_writes_used_element_then_index(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(virtq_push(&f->q, 9, 300), 0);
	assert_int_equal(virtq_push(&f->q, 4, 0), 0);
	assert_int_equal(used(f)->idx, 2);
	assert_int_equal(used(f)->ring[0].id, 9);
	assert_int_equal(used(f)->ring[0].len, 300);
	assert_int_equal(used(f)->ring[1].id, 4);
	assert_int_equal(f->q.used_idx, 2);
	assert_int_equal(virtq_push(&f->q, QSIZE, 0), -EINVAL);
	assert_int_equal(used(f)->idx, 2);
}

static void push_batch_writes_every_element_then_the_index_once(void **state)
{
	struct fixture *f = *state;
	struct virtq_used_buf bufs[] = {{.head = 3, .written = 100}, {.head = 5, .written = 7}};

	f->q.used_idx = 0xffff; /* the batch wraps the used index */
	used(f)->idx = 0xffff;
	assert_int_equal(virtq_push_batch(&f->q, bufs, 2), 0);
	assert_int_equal(used(f)->idx, 1);
	assert_int_equal(f->q.used_idx, 1);
	assert_int_equal(used(f)->ring[QSIZE - 1].id, 3);
	assert_int_equal(used(f)->ring[QSIZE - 1].len, 100);
	assert_int_equal(used(f)->ring[0].id, 5);
	assert_int_equal(used(f)->ring[0].len, 7);
}

static void push_batch_with_a_bad_head_writes_nothing(void **state)
{
	struct fixture *f = *state;
	struct virtq_used_buf bufs[] = {{.head = 1, .written = 9}, {.head = QSIZE, .written = 0}};

	assert_int_equal(virtq_push_batch(&f->q, bufs, 2), -EINVAL);
	assert_int_equal(used(f)->idx, 0);
	assert_int_equal(used(f)->ring[0].len, 0);
	assert_int_equal(f->q.used_idx, 0);
}

static void push_batch_larger_than_the_queue_is_refused(void **state)
{
	struct fixture *f = *state;
	struct virtq_used_buf bufs[QSIZE + 1] = {0};

	assert_int_equal(virtq_push_batch(&f->q, bufs, QSIZE + 1), -EINVAL);
	assert_int_equal(used(f)->idx, 0);
	assert_int_equal(virtq_push_batch(&f->q, bufs, QSIZE), 0);
	assert_int_equal(used(f)->idx, QSIZE);
}

static void unpopped_chains_are_popped_again(void **state)
{
	struct fixture *f = *state;

	set_desc(f, DESC_ADDR, 0, BUF_ADDR, 10, 0, 0);
	set_desc(f, DESC_ADDR, 1, BUF_ADDR, 20, 0, 0);
	offer(f, 0);
	offer(f, 1);
	assert_int_equal(virtq_pop(&f->q, &f->chain), 1);
	assert_int_equal(virtq_pop(&f->q, &f->chain), 1);
	assert_int_equal(virtq_unpop(&f->q, 1), 0);
	assert_int_equal(virtq_pop(&f->q, &f->chain), 1);
	assert_int_equal(f->chain.head, 1);
	assert_int_equal(f->chain.readable_len, 20);
	assert_int_equal(virtq_unpop(&f->q, 2), 0);
	assert_int_equal(virtq_pop(&f->q, &f->chain), 1);
	assert_int_equal(f->chain.head, 0);
}

static void unpop_of_more_than_is_outstanding_is_refused(void **state)
{
	struct fixture *f = *state;

	set_desc(f, DESC_ADDR, 0, BUF_ADDR, 10, 0, 0);
	offer(f, 0);
	offer(f, 0);
	assert_int_equal(virtq_unpop(&f->q, 1), -EINVAL);
	assert_int_equal(virtq_pop(&f->q, &f->chain), 1);
	assert_int_equal(virtq_push(&f->q, 0, 0), 0);
	assert_int_equal(virtq_pop(&f->q, &f->chain), 1);
	/* The first chain was used: only the second can be given back. */
	assert_int_equal(virtq_unpop(&f->q, 2), -EINVAL);
	assert_int_equal(virtq_unpop(&f->q, 1), 0);
	assert_int_equal(f->q.last_avail_idx, 1);
	virtq_reset(&f->q);
	assert_int_equal(virtq_unpop(&f->q, 0), -EIO);
}

static void event_idx_notifies_only_when_used_event_is_crossed(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(
	    virtq_configure(&f->q, &f->mem, QSIZE, DESC_ADDR, AVAIL_ADDR, USED_ADDR, true), 0);
	avail(f)->ring[QSIZE] = 1; /* used_event: interrupt once entry 1 is used */
	assert_int_equal(virtq_push(&f->q, 0, 0), 0);
	assert_false(virtq_should_notify(&f->q, 0));
	assert_int_equal(virtq_push(&f->q, 1, 0), 0);
	assert_true(virtq_should_notify(&f->q, 1));
	/* The driver's NO_INTERRUPT flag means nothing once EVENT_IDX is on. */
	avail(f)->flags = VRING_AVAIL_F_NO_INTERRUPT;
	avail(f)->ring[QSIZE] = 2;
	assert_int_equal(virtq_push(&f->q, 2, 0), 0);
	assert_true(virtq_should_notify(&f->q, 2));
}

static void no_interrupt_flag_suppresses_notification_without_event_idx(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(virtq_push(&f->q, 0, 0), 0);
	assert_true(virtq_should_notify(&f->q, 0));
	avail(f)->flags = VRING_AVAIL_F_NO_INTERRUPT;
	assert_int_equal(virtq_push(&f->q, 1, 0), 0);
	assert_false(virtq_should_notify(&f->q, 1));
}

static void avail_event_records_how_far_the_device_has_read(void **state)
{
	struct fixture *f = *state;
	uint16_t *avail_event = guest(f, USED_ADDR + 4 + 8 * QSIZE, 2);

	assert_int_equal(
	    virtq_configure(&f->q, &f->mem, QSIZE, DESC_ADDR, AVAIL_ADDR, USED_ADDR, true), 0);
	set_desc(f, DESC_ADDR, 0, BUF_ADDR, 1, 0, 0);
	offer(f, 0);
	offer(f, 0);
	assert_int_equal(virtq_pop(&f->q, &f->chain), 1);
	assert_int_equal(virtq_pop(&f->q, &f->chain), 1);
	virtq_set_avail_event(&f->q);
	assert_int_equal(*avail_event, 2);
}

static void next_loop_is_refused(void **state)
{
	struct fixture *f = *state;

	set_desc(f, DESC_ADDR, 0, BUF_ADDR, 8, VRING_DESC_F_NEXT, 1);
	set_desc(f, DESC_ADDR, 1, BUF_ADDR, 8, VRING_DESC_F_NEXT, 0);
	offer(f, 0);
	assert_refused(f);
}

static void loop_of_empty_descriptors_is_refused(void **state)
{
	struct fixture *f = *state;

	/* Empty descriptors add no segments, so only the walk's budget ends this loop. */
	set_desc(f, DESC_ADDR, 0, BUF_ADDR, 0, VRING_DESC_F_NEXT, 1);
	set_desc(f, DESC_ADDR, 1, BUF_ADDR, 0, VRING_DESC_F_NEXT, 0);
	offer(f, 0);
	assert_refused(f);
}

static void loop_inside_indirect_table_is_refused(void **state)
{
	struct fixture *f = *state;

	set_desc(f, INDIRECT_ADDR, 0, BUF_ADDR, 8, VRING_DESC_F_NEXT, 1);
	set_desc(f, INDIRECT_ADDR, 1, BUF_ADDR, 8, VRING_DESC_F_NEXT, 0);
	set_desc(f, DESC_ADDR, 0, INDIRECT_ADDR, 2 * sizeof(struct vring_desc),
		 VRING_DESC_F_INDIRECT, 0);
	offer(f, 0);
	assert_refused(f);
}

static void next_index_beyond_queue_size_is_refused(void **state)
{
	struct fixture *f = *state;

	set_desc(f, DESC_ADDR, 0, BUF_ADDR, 8, VRING_DESC_F_NEXT, QSIZE);
	offer(f, 0);
	assert_refused(f);
}

static void next_index_beyond_indirect_table_is_refused(void **state)
{
	struct fixture *f = *state;

	set_desc(f, INDIRECT_ADDR, 0, BUF_ADDR, 8, VRING_DESC_F_NEXT, 1);
	set_desc(f, DESC_ADDR, 0, INDIRECT_ADDR, sizeof(struct vring_desc), VRING_DESC_F_INDIRECT,
		 0);
	offer(f, 0);
	assert_refused(f);
}

static void buffer_outside_ram_is_refused(void **state)
{
	struct fixture *f = *state;

	set_desc(f, DESC_ADDR, 0, RAM_SIZE, 8, 0, 0);
	offer(f, 0);
	assert_refused(f);
}

static void buffer_wrapping_past_2_64_is_refused(void **state)
{
	struct fixture *f = *state;

	set_desc(f, DESC_ADDR, 0, UINT64_MAX - 3, 8, 0, 0);
	offer(f, 0);
	assert_refused(f);
}

static void huge_length_near_end_of_ram_is_refused(void **state)
{
	struct fixture *f = *state;

	set_desc(f, DESC_ADDR, 0, RAM_SIZE - 4096, 0xffffffff, VRING_DESC_F_WRITE, 0);
	offer(f, 0);
	assert_refused(f);
}

static void chain_longer_than_2_32_bytes_is_refused(void **state)
{
	struct fixture *f = *state;
	const uint16_t n = 257; /* 257 x 16 MiB = 2^32 + 16 MiB */

	/* Every descriptor is the whole of RAM, each valid; their sum is more than
	 * used.len could report. */
	for (uint16_t i = 0; i < n; i++)
		set_desc(f, INDIRECT_ADDR, i, 0, RAM_SIZE, i + 1 < n ? VRING_DESC_F_NEXT : 0,
			 i + 1);
	set_desc(f, DESC_ADDR, 0, INDIRECT_ADDR, n * sizeof(struct vring_desc),
		 VRING_DESC_F_INDIRECT, 0);
	offer(f, 0);
	assert_refused(f);
}

static void chain_of_exactly_2_32_bytes_is_accepted(void **state)
{
	struct fixture *f = *state;
	const uint16_t n = 256;

	for (uint16_t i = 0; i < n; i++)
		set_desc(f, INDIRECT_ADDR, i, 0, RAM_SIZE, i + 1 < n ? VRING_DESC_F_NEXT : 0,
			 i + 1);
	set_desc(f, DESC_ADDR, 0, INDIRECT_ADDR, n * sizeof(struct vring_desc),
		 VRING_DESC_F_INDIRECT, 0);
	offer(f, 0);
	assert_int_equal(virtq_pop(&f->q, &f->chain), 1);
	assert_int_equal(f->chain.readable_len, 1ULL << 32);
}

static void indirect_length_not_a_multiple_of_16_is_refused(void **state)
{
	struct fixture *f = *state;

	set_desc(f, INDIRECT_ADDR, 0, BUF_ADDR, 8, 0, 0);
	set_desc(f, DESC_ADDR, 0, INDIRECT_ADDR, 24, VRING_DESC_F_INDIRECT, 0);
	offer(f, 0);
	assert_refused(f);
}

static void indirect_table_outside_ram_is_refused(void **state)
{
	struct fixture *f = *state;

	set_desc(f, DESC_ADDR, 0, RAM_SIZE - 16, 32, VRING_DESC_F_INDIRECT, 0);
	offer(f, 0);
	assert_refused(f);
}

static void nested_indirect_table_is_refused(void **state)
{
	struct fixture *f = *state;

	set_desc(f, INDIRECT_ADDR + 0x100, 0, BUF_ADDR, 8, 0, 0);
	set_desc(f, INDIRECT_ADDR, 0, INDIRECT_ADDR + 0x100, sizeof(struct vring_desc),
		 VRING_DESC_F_INDIRECT, 0);
	set_desc(f, DESC_ADDR, 0, INDIRECT_ADDR, sizeof(struct vring_desc), VRING_DESC_F_INDIRECT,
		 0);
	offer(f, 0);
	assert_refused(f);
}

static void indirect_with_next_is_refused(void **state)
{
	struct fixture *f = *state;

	set_desc(f, INDIRECT_ADDR, 0, BUF_ADDR, 8, 0, 0);
	set_desc(f, DESC_ADDR, 0, INDIRECT_ADDR, sizeof(struct vring_desc),
		 VRING_DESC_F_INDIRECT | VRING_DESC_F_NEXT, 1);
	set_desc(f, DESC_ADDR, 1, BUF_ADDR, 8, 0, 0);
	offer(f, 0);
	assert_refused(f);
}

static void readable_after_writable_is_refused(void **state)
{
	struct fixture *f = *state;

	set_desc(f, DESC_ADDR, 0, BUF_ADDR, 8, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT, 1);
	set_desc(f, DESC_ADDR, 1, BUF_ADDR + 0x1000, 8, 0, 0);
	offer(f, 0);
	assert_refused(f);
}

static void more_segments_than_the_maximum_are_refused(void **state)
{
	struct fixture *f = *state;
	const uint16_t n = VIRTQ_MAX_SEGMENTS + 1;

	for (uint16_t i = 0; i < n; i++)
		set_desc(f, INDIRECT_ADDR, i, BUF_ADDR + i, 1, i + 1 < n ? VRING_DESC_F_NEXT : 0,
			 i + 1);
	set_desc(f, DESC_ADDR, 0, INDIRECT_ADDR, n * sizeof(struct vring_desc),
		 VRING_DESC_F_INDIRECT, 0);
	offer(f, 0);
	assert_refused(f);
}

static void avail_index_ahead_by_more_than_size_is_refused(void **state)
{
	struct fixture *f = *state;

	set_desc(f, DESC_ADDR, 0, BUF_ADDR, 8, 0, 0);
	avail(f)->idx = QSIZE + 1;
	assert_refused(f);
}

static void head_beyond_queue_size_is_refused(void **state)
{
	struct fixture *f = *state;

	offer(f, QSIZE);
	assert_refused(f);
}

static void configure_refuses_bad_sizes(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(virtq_configure(&f->q, &f->mem, 0, DESC_ADDR, AVAIL_ADDR, USED_ADDR, 0),
			 -EINVAL);
	assert_int_equal(virtq_configure(&f->q, &f->mem, 24, DESC_ADDR, AVAIL_ADDR, USED_ADDR, 0),
			 -EINVAL);
	assert_int_equal(
	    virtq_configure(&f->q, &f->mem, 32768, 0x100000, 0x200000, 0x300000, false), 0);
}

static void configure_refuses_misaligned_rings(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(
	    virtq_configure(&f->q, &f->mem, QSIZE, DESC_ADDR + 8, AVAIL_ADDR, USED_ADDR, 0),
	    -EINVAL);
	assert_int_equal(
	    virtq_configure(&f->q, &f->mem, QSIZE, DESC_ADDR, AVAIL_ADDR + 1, USED_ADDR, 0),
	    -EINVAL);
	assert_int_equal(
	    virtq_configure(&f->q, &f->mem, QSIZE, DESC_ADDR, AVAIL_ADDR, USED_ADDR + 2, 0),
	    -EINVAL);
}

static void configure_refuses_rings_outside_ram(void **state)
{
	struct fixture *f = *state;
	/* Room for the used elements but not for avail_event after them. */
	uint64_t used_end = RAM_SIZE - (4 + 8 * QSIZE);

	assert_int_equal(
	    virtq_configure(&f->q, &f->mem, QSIZE, RAM_SIZE - 128, AVAIL_ADDR, USED_ADDR, 0),
	    -EINVAL);
	assert_int_equal(
	    virtq_configure(&f->q, &f->mem, QSIZE, DESC_ADDR, RAM_SIZE - 36, USED_ADDR, 0),
	    -EINVAL);
	assert_int_equal(virtq_configure(&f->q, &f->mem, QSIZE, DESC_ADDR, AVAIL_ADDR, used_end, 0),
			 -EINVAL);
	assert_int_equal(
	    virtq_configure(&f->q, &f->mem, QSIZE, DESC_ADDR, AVAIL_ADDR, used_end - 4, 0), 0);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(single_readable_descriptor_is_one_readable_segment),
	    TEST(readable_then_writable_chain_has_both_parts),
	    TEST(chain_copies_beyond_their_part_are_refused),
	    TEST(indirect_table_is_followed),
	    TEST(pop_returns_zero_when_nothing_is_available),
	    TEST(push_writes_used_element_then_index),
	    TEST(push_batch_writes_every_element_then_the_index_once),
	    TEST(push_batch_with_a_bad_head_writes_nothing),
	    TEST(push_batch_larger_than_the_queue_is_refused),
	    TEST(unpopped_chains_are_popped_again),
	    TEST(unpop_of_more_than_is_outstanding_is_refused),
	    TEST(event_idx_notifies_only_when_used_event_is_crossed),
	    TEST(no_interrupt_flag_suppresses_notification_without_event_idx),
	    TEST(avail_event_records_how_far_the_device_has_read),
	    TEST(next_loop_is_refused),
	    TEST(loop_of_empty_descriptors_is_refused),
	    TEST(loop_inside_indirect_table_is_refused),
	    TEST(next_index_beyond_queue_size_is_refused),
	    TEST(next_index_beyond_indirect_table_is_refused),
	    TEST(buffer_outside_ram_is_refused),
	    TEST(buffer_wrapping_past_2_64_is_refused),
	    TEST(huge_length_near_end_of_ram_is_refused),
	    TEST(chain_longer_than_2_32_bytes_is_refused),
	    TEST(chain_of_exactly_2_32_bytes_is_accepted),
	    TEST(indirect_length_not_a_multiple_of_16_is_refused),
	    TEST(indirect_table_outside_ram_is_refused),
	    TEST(nested_indirect_table_is_refused),
	    TEST(indirect_with_next_is_refused),
	    TEST(readable_after_writable_is_refused),
	    TEST(more_segments_than_the_maximum_are_refused),
	    TEST(avail_index_ahead_by_more_than_size_is_refused),
	    TEST(head_beyond_queue_size_is_refused),
	    TEST(configure_refuses_bad_sizes),
	    TEST(configure_refuses_misaligned_rings),
	    TEST(configure_refuses_rings_outside_ram),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
