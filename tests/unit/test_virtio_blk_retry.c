/* virtio-blk requests (blk_request.h) whose transfers the host answers -EAGAIN or -EINTR:
 * a shortage that passes within a second does not fail the request, one that lasts fails
 * it with VIRTIO_BLK_S_IOERR, within seconds. The kernel cannot be made to answer -EAGAIN
 * to the device's SQEs on demand: io_uring waits on a pipe or a socket until it is ready,
 * even one opened O_NONBLOCK (Linux 6.18), and carries a regular file's I/O out in its
 * own workers; only RWF_NOWAIT, which the device never asks for, makes it give up.
 * Network and FUSE file systems are where -EAGAIN comes from. So the test plays blk.c: it
 * runs the request's I/O on a real ring and image, and hands the request the kernel's
 * answer to each SQE, but -EAGAIN or -EINTR instead of the bytes a transfer moved while
 * the shortage lasts.
 *
 * A pause of the VM meeting a request that pauses before a retry is tested on the device
 * itself (blk_driver.h), which drives its own ring. There the test stands in for the
 * device's one way to the kernel, io_uring_submit(): while the shortage lasts, each read
 * handed over goes instead to an empty pipe with RWF_NOWAIT, which the kernel answers
 * -EAGAIN at once, moving nothing. */
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cmocka.h>

#include "blk_driver.h"
#include "virtio/blk_request.h"
#include "vmm/clock.h"

#define NS_PER_MS 1000000LL
/* A shortage the device rides out: a few ms, well under its second of retries. */
#define SHORTAGE_MS 50
#define FOREVER (-1)
/* BLK_RETRY_BUDGET_MS (blk_request.c): the pauses in a row after which the next -EAGAIN
 * fails a request. */
#define RETRY_BUDGET_MS 1000
/* Generous (a loaded host, sanitizers): a persistent shortage fails a request in about
 * a second. */
#define FAILED_WITHIN_S 10
#define STATUS_UNSET 0xff

/* One request on its own disk: the chain's buffers, header, data and status byte, are
 * plain memory standing in for guest RAM. */
struct world {
	struct blk_disk disk;
	struct blk_request req;
	struct virtq_chain chain;
	struct virtio_blk_outhdr header;
	uint8_t data[SECTOR];
	uint8_t status;
	char path[64];
};

static int setup(void **state)
{
	struct world *w = calloc(1, sizeof(*w));

	if (!w)
		return -1;
	snprintf(w->path, sizeof(w->path), "/tmp/mote-blk-retry-XXXXXX");
	if (new_patterned_image(w->path, IMAGE_SECTORS * SECTOR) != 0)
		return -1;
	w->disk.fd = open(w->path, O_RDWR | O_CLOEXEC);
	w->disk.direct_fd = -1;
	w->disk.capacity = IMAGE_SECTORS;
	if (w->disk.fd < 0 || io_uring_queue_init(BLK_QUEUE_SIZE, &w->disk.ring, 0) < 0)
		return -1;
	*state = w;
	return 0;
}

static int teardown(void **state)
{
	struct world *w = *state;

	io_uring_queue_exit(&w->disk.ring);
	close(w->disk.fd);
	unlink(w->path);
	free(w);
	return 0;
}

/* Lays out a request of type on sector with one sector of data, as a driver does
 * (§5.2.6): header, data (device-writable for IN), status. */
static void lay_out(struct world *w, uint32_t type, uint64_t sector)
{
	bool in = type == VIRTIO_BLK_T_IN;
	struct virtq_chain *c = &w->chain;

	w->header = (struct virtio_blk_outhdr){.type = htole32(type), .sector = htole64(sector)};
	w->status = STATUS_UNSET;
	*c = (struct virtq_chain){.head = 0, .count = 3, .readable_count = in ? 1 : 2};
	c->seg[0] = (struct virtq_segment){&w->header, sizeof(w->header), false};
	c->seg[1] = (struct virtq_segment){w->data, sizeof(w->data), in};
	c->seg[2] = (struct virtq_segment){&w->status, 1, true};
	c->readable_len = sizeof(w->header) + (in ? 0 : sizeof(w->data));
	c->writable_len = 1 + (in ? sizeof(w->data) : 0);
}

/* Hands the kernel what the request queued and waits for the next completion: its
 * result. */
static int next_result(struct world *w)
{
	struct io_uring_cqe *cqe;

	assert_true(w->disk.in_flight > 0);
	assert_true(io_uring_submit(&w->disk.ring) >= 0);
	assert_int_equal(io_uring_wait_cqe(&w->disk.ring, &cqe), 0);
	assert_ptr_equal(io_uring_cqe_get_data(cqe), &w->req);
	int res = cqe->res;
	io_uring_cqe_seen(&w->disk.ring, cqe);
	return res;
}

/* Starts the request laid out and carries out its I/O until it is answered; for
 * shortage_ms from the start (FOREVER: to the end), a transfer that moved bytes is
 * answered err instead. Returns the status byte. */
static uint8_t run(struct world *w, int err, int64_t shortage_ms)
{
	int64_t end = shortage_ms == FOREVER ? INT64_MAX : clock_now_ns() + shortage_ms * NS_PER_MS;
	bool answered = blk_request_start(&w->disk, &w->req, &w->chain);

	while (!answered) {
		int res = next_result(w);
		if (res >= 0 && clock_now_ns() < end)
			res = err;
		answered = blk_request_complete(&w->disk, &w->req, res);
	}
	assert_int_equal(w->disk.in_flight, 0);
	return w->status;
}

static void read_short_of_data_for_a_few_ms_is_answered_with_the_data(void **state)
{
	struct world *w = *state;

	lay_out(w, VIRTIO_BLK_T_IN, 10);
	memset(w->data, 0xee, sizeof(w->data));
	assert_int_equal(run(w, -EAGAIN, SHORTAGE_MS), VIRTIO_BLK_S_OK);
	assert_int_equal(w->req.used_len, SECTOR + 1);
	assert_pattern(w->data, 10 * SECTOR, SECTOR);
}

static void write_interrupted_for_a_few_ms_lands_in_the_image(void **state)
{
	struct world *w = *state;
	uint8_t image[SECTOR];

	lay_out(w, VIRTIO_BLK_T_OUT, 20);
	memset(w->data, 0x5a, sizeof(w->data));
	assert_int_equal(run(w, -EINTR, SHORTAGE_MS), VIRTIO_BLK_S_OK);
	assert_int_equal(w->req.used_len, 1);
	assert_int_equal(pread(w->disk.fd, image, sizeof(image), 20 * SECTOR), SECTOR);
	assert_memory_equal(image, w->data, SECTOR);
}

/* Not at once, as a few tries in a row would: once the pauses added up to the budget. */
static void read_short_of_data_for_good_fails_after_about_a_second_of_pauses(void **state)
{
	struct world *w = *state;
	int64_t start = clock_now_ns();

	lay_out(w, VIRTIO_BLK_T_IN, 10);
	assert_int_equal(run(w, -EAGAIN, FOREVER), VIRTIO_BLK_S_IOERR);
	assert_int_equal(w->req.used_len, 1);
	assert_in_range((clock_now_ns() - start) / NS_PER_MS, RETRY_BUDGET_MS / 2,
			FAILED_WITHIN_S * 1000);
}

/* What a reset counts on (blk_request.h): while the request waits to try again it still
 * owes a completion, and once a drop took that completion it owes nothing and queued
 * nothing more. */
static void request_waiting_to_retry_owes_one_completion_until_dropped(void **state)
{
	struct world *w = *state;

	lay_out(w, VIRTIO_BLK_T_IN, 10);
	memset(w->data, 0xee, sizeof(w->data));
	assert_false(blk_request_start(&w->disk, &w->req, &w->chain));
	next_result(w);
	assert_false(blk_request_complete(&w->disk, &w->req, -EAGAIN));
	assert_int_equal(w->disk.in_flight, 1);
	/* The completion owed is the pause's timeout, not the read's again. */
	assert_int_equal(next_result(w), -ETIME);
	blk_request_drop(&w->disk, &w->req);
	assert_int_equal(w->disk.in_flight, 0);
	assert_int_equal(io_uring_sq_ready(&w->disk.ring), 0);
	assert_int_equal(w->status, STATUS_UNSET);
}

/* The device level. */

/* A shortage as the device meets it: until end_ns (0: none, INT64_MAX: for good), its
 * reads go to the read end of empty, a pipe nothing is ever written into. */
static struct {
	int64_t end_ns;
	int empty[2];
} shortage = {.empty = {-1, -1}};

/* Stands in for liburing's, which the device calls (blk_ring_submit) and this calls in
 * turn (the tests link liburing shared): while the shortage lasts, each read queued and
 * not yet taken by the kernel goes to the empty pipe with RWF_NOWAIT (preadv2(2)). The
 * request-level tests above go through here too, with no shortage. */
int io_uring_submit(struct io_uring *ring)
{
	static int (*kernel_submit)(struct io_uring *);

	if (!kernel_submit)
		kernel_submit = (int (*)(struct io_uring *))dlsym(RTLD_NEXT, "io_uring_submit");
	assert_true(kernel_submit != NULL);
	if (clock_now_ns() < shortage.end_ns) {
		unsigned tail = ring->sq.sqe_tail;
		for (unsigned i = tail - io_uring_sq_ready(ring); i != tail; i++) {
			struct io_uring_sqe *sqe = &ring->sq.sqes[i & ring->sq.ring_mask];
			if (sqe->opcode == IORING_OP_READV) {
				sqe->fd = shortage.empty[0];
				sqe->rw_flags = RWF_NOWAIT;
			}
		}
	}
	return kernel_submit(ring);
}

static int device_setup(void **state)
{
	if (pipe2(shortage.empty, O_CLOEXEC) != 0)
		return -1;
	return blk_driver_setup(state);
}

static int device_teardown(void **state)
{
	shortage.end_ns = 0;
	int ret = blk_driver_teardown(state);
	close(shortage.empty[0]);
	close(shortage.empty[1]);
	return ret;
}

/* A read of sector 10 short of data for good, as the device left it once it took the
 * kernel's -EAGAIN to its first try: pausing before it goes again, unanswered. */
static struct req read_pausing(struct fixture *f)
{
	shortage.end_ns = INT64_MAX;
	struct req r = request(f, VIRTIO_BLK_T_IN, 10, SECTOR);
	notify_dev(f->dev);
	assert_int_equal(event_loop_run_once(&f->loop, 5000), 1); /* the -EAGAIN came */
	assert_int_equal(used(f)->idx, 0);
	assert_int_equal(status_of(f, r), STATUS_UNSET);
	return r;
}

/* A pause returns once the request is answered, with nothing in flight: the disk saves. */
static void assert_answered_then_saves(struct fixture *f, struct req r, uint8_t status)
{
	assert_int_equal(used(f)->idx, 1);
	assert_int_equal(f->transport.interrupts[BLK_QUEUE], 1);
	assert_int_equal(status_of(f, r), status);
	assert_int_equal(save_dev(f->dev), 0);
}

static void vm_pause_waits_for_a_pausing_read_to_get_its_data_then_saves(void **state)
{
	struct fixture *f = *state;

	struct req r = read_pausing(f);
	shortage.end_ns = clock_now_ns() + SHORTAGE_MS * NS_PER_MS;
	quiesce_dev(f->dev);
	assert_answered_then_saves(f, r, VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, r), SECTOR + 1);
	assert_pattern(guest(f, r.data, SECTOR), 10 * SECTOR, SECTOR);
}

static void vm_pause_waits_for_a_read_short_for_good_to_fail_then_saves(void **state)
{
	struct fixture *f = *state;

	struct req r = read_pausing(f);
	int64_t start = clock_now_ns();
	quiesce_dev(f->dev);
	int64_t took_ms = (clock_now_ns() - start) / NS_PER_MS;
	assert_answered_then_saves(f, r, VIRTIO_BLK_S_IOERR);
	assert_int_equal(used_len_of(f, r), 1);
	assert_in_range(took_ms, RETRY_BUDGET_MS / 2, FAILED_WITHIN_S * 1000);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
#define DEVICE_TEST(name) cmocka_unit_test_setup_teardown(name, device_setup, device_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(read_short_of_data_for_a_few_ms_is_answered_with_the_data),
	    TEST(write_interrupted_for_a_few_ms_lands_in_the_image),
	    TEST(read_short_of_data_for_good_fails_after_about_a_second_of_pauses),
	    TEST(request_waiting_to_retry_owes_one_completion_until_dropped),
	    DEVICE_TEST(vm_pause_waits_for_a_pausing_read_to_get_its_data_then_saves),
	    DEVICE_TEST(vm_pause_waits_for_a_read_short_for_good_to_fail_then_saves),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
