/* A virtio-blk disk's io_uring (blk_disk.ring) as the device drives it: handing the
 * kernel the SQEs blk_request.c queued, waiting for completions on a thread where the
 * event thread cannot reap them (a pause, a reset, a destroy), and giving the ring up
 * when waiting on it failed for good and cannot be finished. Split out of blk.c, which
 * owns the queue and what each completion means.
 *
 * Waiting on the ring can fail for good (io_uring_enter(2): EBADF, EBADFD, EOPNOTSUPP,
 * ENXIO, EINVAL, EFAULT; EBADR once a completion was lost) while the I/O the kernel took
 * goes on into and out of guest memory. A reset or a destroy returns only once the
 * kernel owes nothing, or once the ring is lost: when no completion came for
 * BLK_RING_STALL_MS, or only SQEs the kernel never took are left (they would run
 * whenever the ring is entered again), the requests still owed are given up for good.
 * A lost ring is never entered again, its late completions are dropped unread, the
 * guest memory stays mapped until the process ends (guest_memory_keep_mapped), and the
 * disk stays out of service for the rest of the VM's life (blk.c). The library never
 * ends the process over it: it is embedded in others. Waiting fails for good only on a
 * ring that is not sound: a bug elsewhere closed its descriptor, or the kernel ran out
 * of memory. At a destroy, a sound ring is given up the same way when the image stops
 * answering (a hung network file system, a suspended device-mapper device): no
 * completion for BLK_RING_STALL_MS, each completion starting the bound anew (slow
 * storage that answers is waited for), so that the destroy returns; nothing of the
 * guest's runs any more. A guest's reset waits on a sound ring for as long as the file
 * does: a read landing after it would write into buffers the driver has taken back,
 * and a write send the image what the guest put there since. A pause's wait has a
 * deadline of its own (blk_ring_wait), after which the pause is abandoned and the ring
 * kept: the I/O may still complete while the VM runs.
 *
 * No locking here: the caller holds the device's lock, or no other thread uses the
 * device any more (a destroy). */
#ifndef MOTE_VIRTIO_BLK_RING_H
#define MOTE_VIRTIO_BLK_RING_H

#include <stdbool.h>
#include <stdint.h>

#include "../vmm/clock.h"
#include "../vmm/guest_memory.h"
#include "../vmm/log.h"
#include "blk_request.h"

/* How long a drain gives the next completion before it gives the ring up: a destroy's,
 * waiting on the ring; a reset's or a destroy's that can no longer wait on the ring and
 * watches it. Linux's default timeout of a block request
 * (/sys/block/DEV/queue/io_timeout, 30 s), after which a disk's own I/O is considered
 * lost. */
#define BLK_RING_STALL_MS 30000

struct blk_ring {
	struct blk_disk *disk; /* the ring, and the completions it owes (in_flight) */
	const char *name;      /* the device's, for messages */
	const struct mote_log *log;
	struct guest_memory *mem; /* what the disk's I/O reads into and writes from */
	unsigned stall_ms;	  /* BLK_RING_STALL_MS, or shorter in a test */
	/* Given up: never entered again, and no request owed ever ends (each keeps the
	 * state it was given up in). Set for good. */
	bool lost;
};

/* Hands the kernel the SQEs queued on the ring. Submission stops early at an SQE the
 * kernel refuses (it completes with an error) or on a transient shortage, so this goes
 * on within a bound; what is left goes with the next call. Nothing on a lost ring. */
void blk_ring_submit(struct blk_ring *ring);

/* The next completion while the disk owes some, for a pause: submits what is queued
 * first, and retries a wait a signal or a shortage cut short. 0 with *cqe, for the
 * caller to take (and mark seen); -ETIMEDOUT, not logged, when none came by deadline_ns
 * (CLOCK_MONOTONIC, or CLOCK_FOREVER: vmm/clock.h); the negative errno of a wait
 * that failed for good, logged; -EIO at once on a lost ring, after dropping its late
 * completions. */
int blk_ring_wait(struct blk_ring *ring, struct io_uring_cqe **cqe, int64_t deadline_ns);

/* Reaps every completion the disk owes, marks each seen and hands its request to
 * drop(opaque, req), which ends it unanswered: after a reset the device must not touch
 * the rings (virtio 1.2 §2.4), at a destroy there are none. Returns once the disk owes
 * nothing, or once the ring is lost (given up here, with one error logged, or before);
 * with give_up_on_stall, at most stall_ms after the last completion. */
void blk_ring_drain(struct blk_ring *ring, bool give_up_on_stall,
		    void (*drop)(void *opaque, struct blk_request *req), void *opaque);

/* The completions that still arrive on a lost ring: each is marked seen unread, and its
 * request left as it was given up (its buffers went back to the driver). */
void blk_ring_drop_late(struct blk_ring *ring);

#endif
