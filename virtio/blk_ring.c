/* A virtio-blk disk's io_uring as the device drives it, and how it is given up
 * (blk_ring.h). */
#include "blk_ring.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "../vmm/clock.h"

/* io_uring_submit() tries per batch when the kernel takes only part of it. */
#define BLK_SUBMIT_ATTEMPTS 8
/* How often a wait for completions submits again what a shortage left queued. */
#define BLK_RESUBMIT_MS 10
/* The pause before a wait for completions that failed for want of something goes again
 * (ring_wait_again), and between looks at the completion ring once waiting on it failed
 * for good (ring_watch). */
#define BLK_WAIT_PAUSE_MS 1

void blk_ring_submit(struct blk_ring *ring)
{
	struct io_uring *uring = &ring->disk->ring;

	/* A lost ring's queued SQEs point into buffers the driver took back: entering the
	 * ring would run them. */
	if (ring->lost)
		return;
	for (unsigned i = 0; i < BLK_SUBMIT_ATTEMPTS && io_uring_sq_ready(uring) > 0; i++) {
		int ret = io_uring_submit(uring);
		if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
			log_error(ring->log, "%s: io_uring submit: %s", ring->name, strerror(-ret));
			return;
		}
	}
}

/* Waits for the next completion, handing the kernel what is still queued first. SQEs a
 * transient shortage left unsubmitted never complete by themselves: then the wait is cut
 * short every BLK_RESUBMIT_MS to submit them again, rather than waiting forever; and at
 * deadline_ns (CLOCK_MONOTONIC) unless it is CLOCK_FOREVER. 0 with *cqe, -ETIME
 * when it is time to submit again or the deadline came, or another negative errno. */
static int ring_wait_once(struct blk_ring *ring, struct io_uring_cqe **cqe, int64_t deadline_ns)
{
	struct io_uring *uring = &ring->disk->ring;

	blk_ring_submit(ring);
	bool resubmit = io_uring_sq_ready(uring) > 0;
	if (!resubmit && deadline_ns == CLOCK_FOREVER)
		return io_uring_wait_cqe(uring, cqe);
	int64_t wait_ns = resubmit ? BLK_RESUBMIT_MS * NS_PER_MS : INT64_MAX;
	if (deadline_ns != CLOCK_FOREVER) {
		int64_t left = deadline_ns - clock_now_ns();
		if (left < wait_ns)
			wait_ns = left > 0 ? left : 0;
	}
	struct __kernel_timespec timeout = {.tv_sec = wait_ns / NS_PER_S,
					    .tv_nsec = wait_ns % NS_PER_S};
	return io_uring_wait_cqe_timeout(uring, cqe, &timeout);
}

static void ring_pause_ms(long ms)
{
	nanosleep(&(struct timespec){.tv_sec = ms / 1000, .tv_nsec = ms % 1000 * NS_PER_MS}, NULL);
}

/* Whether a wait for completions goes on after ring_wait_once() failed with err: at
 * once when a signal interrupted the wait or it was cut short to submit again; after a
 * short pause when the kernel was short of something, which completions give back
 * (io_uring_enter(2): EAGAIN, out of resources; EBUSY, overflowed completions not all
 * flushed to the ring yet: "wait for some completions and try again"). Any other error
 * does not go away by trying again. */
static bool ring_wait_again(int err)
{
	if (err == -EAGAIN || err == -EBUSY)
		ring_pause_ms(BLK_WAIT_PAUSE_MS);
	return err == -EINTR || err == -ETIME || err == -EAGAIN || err == -EBUSY;
}

void blk_ring_drop_late(struct blk_ring *ring)
{
	struct io_uring *uring = &ring->disk->ring;
	struct io_uring_cqe *cqe;
	unsigned dropped = 0;

	/* A peek enters the ring only to flush overflowed completions, submitting nothing. */
	while (io_uring_peek_cqe(uring, &cqe) == 0) {
		io_uring_cqe_seen(uring, cqe);
		dropped++;
	}
	if (dropped > 0)
		log_debug(ring->log, "%s: %u late completions of requests given up: dropped",
			  ring->name, dropped);
}

/* The next completion, the waits a signal or a shortage cut short tried again: 0 with
 * *cqe, -ETIMEDOUT once deadline_ns has come, or the negative errno of a wait that
 * failed for good. */
static int ring_wait(struct blk_ring *ring, struct io_uring_cqe **cqe, int64_t deadline_ns)
{
	for (;;) {
		int err = ring_wait_once(ring, cqe, deadline_ns);
		if (err == 0 || !ring_wait_again(err))
			return err;
		/* Whatever cut the wait short: a shortage that lasts must not outlive the
		 * deadline either. */
		if (clock_now_ns() >= deadline_ns)
			return -ETIMEDOUT;
	}
}

int blk_ring_wait(struct blk_ring *ring, struct io_uring_cqe **cqe, int64_t deadline_ns)
{
	if (ring->lost) {
		blk_ring_drop_late(ring);
		return -EIO;
	}
	int err = ring_wait(ring, cqe, deadline_ns);
	if (err < 0 && err != -ETIMEDOUT)
		log_error(ring->log, "%s: waiting for %u requests in flight: %s", ring->name,
			  ring->disk->in_flight, strerror(-err));
	return err;
}

static void ring_hand_over(struct blk_ring *ring, struct io_uring_cqe *cqe,
			   void (*drop)(void *opaque, struct blk_request *req), void *opaque)
{
	struct blk_request *req = io_uring_cqe_get_data(cqe);

	io_uring_cqe_seen(&ring->disk->ring, cqe);
	drop(opaque, req);
}

/* Gives the requests still owed up for good (blk_ring.h). The memory is kept mapped
 * first: from here on the device no longer knows when the kernel is done with it. */
static void ring_give_up(struct blk_ring *ring, const char *why)
{
	guest_memory_keep_mapped(ring->mem);
	ring->lost = true;
	log_error(ring->log,
		  "%s: gave up %u requests in flight (%s): the disk is out of service until the "
		  "VM ends, and its guest memory stays mapped until the process ends",
		  ring->name, ring->disk->in_flight, why);
}

/* Waiting on the ring failed for good with err. The I/O the kernel took goes on all the
 * same and posts its completions into the completion ring, which is mapped here and
 * cannot overflow (twice the submission ring's entries, and one SQE in flight per
 * request at most): so they are reaped from there without entering the ring, with a
 * pause between looks, until none is owed or the ring is given up. */
static void ring_watch(struct blk_ring *ring, int err,
		       void (*drop)(void *opaque, struct blk_request *req), void *opaque)
{
	struct io_uring *uring = &ring->disk->ring;
	int64_t last = clock_now_ns();

	log_error(ring->log,
		  "%s: waiting for %u requests in flight: %s; watching the completion ring",
		  ring->name, ring->disk->in_flight, strerror(-err));
	while (ring->disk->in_flight > 0) {
		struct io_uring_cqe *cqe;

		if (io_uring_peek_cqe(uring, &cqe) == 0) {
			ring_hand_over(ring, cqe, drop, opaque);
			last = clock_now_ns();
			continue;
		}
		if (io_uring_sq_ready(uring) == ring->disk->in_flight) {
			ring_give_up(ring, "the kernel never took them, and the ring cannot be "
					   "entered any more");
			return;
		}
		if (clock_now_ns() - last > (int64_t)ring->stall_ms * NS_PER_MS) {
			char why[64];
			snprintf(why, sizeof(why), "no completion for %u ms", ring->stall_ms);
			ring_give_up(ring, why);
			return;
		}
		ring_pause_ms(BLK_WAIT_PAUSE_MS);
	}
}

void blk_ring_drain(struct blk_ring *ring, bool give_up_on_stall,
		    void (*drop)(void *opaque, struct blk_request *req), void *opaque)
{
	int64_t stall_ns = (int64_t)ring->stall_ms * NS_PER_MS;

	if (ring->lost) {
		blk_ring_drop_late(ring);
		return;
	}
	while (ring->disk->in_flight > 0) {
		struct io_uring_cqe *cqe;
		/* Each completion starts the stall bound anew: slow storage that answers is
		 * waited for. */
		int64_t deadline = give_up_on_stall ? clock_deadline_in(stall_ns) : CLOCK_FOREVER;

		int err = ring_wait(ring, &cqe, deadline);
		/* One posted as the deadline came is taken, not given up. */
		if (err == -ETIMEDOUT && io_uring_peek_cqe(&ring->disk->ring, &cqe) == 0)
			err = 0;
		if (err == -ETIMEDOUT) {
			char why[96];
			snprintf(why, sizeof(why),
				 "no completion for %u ms: its image does not answer",
				 ring->stall_ms);
			ring_give_up(ring, why);
			return;
		}
		if (err < 0) {
			ring_watch(ring, err, drop, opaque);
			return;
		}
		ring_hand_over(ring, cqe, drop, opaque);
	}
}
