/* virtio-blk (virtio 1.2 §5.2): the device model around blk_request.c. It owns the
 * image and its lock (opened by blk_open.c), the io_uring and the ring's completion
 * eventfd, the config space, and the one request queue: a notification starts the
 * chains available, a completion answers what finished, each pushing and interrupting
 * once per batch.
 *
 * Two bounds keep one guest's disk from holding up the rest of its VM. A turn starts
 * at most VIRTIO_BLK_TAKE_BUDGET chains, then asks to be served again, so the VM's
 * other devices on the event thread get theirs. And no request starts while those in
 * flight hold VIRTIO_BLK_BUSY_BYTES_MAX bytes (their chains, and the zeros a
 * WRITE_ZEROES may have to write): a pause, a snapshot or a reset, which wait for every
 * request in flight, wait for that much I/O and one request at most. The chains wait in
 * the ring until completions make room.
 *
 * Requests in flight are kept by chain head: the driver cannot offer a head the device
 * has not used yet (§2.7.13), so a head coming back while its request is busy is the
 * driver breaking the queue, and the device asks for a reset. */
#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../vmm/snapshot_stream.h"
#include "blk.h"
#include "blk_open.h"
#include "blk_overlay.h"
#include "blk_request.h"
#include "blk_ring.h"

/* §5.2.4: the config space ends before the secure erase fields, whose feature is not
 * offered. */
#define BLK_CONFIG_SIZE offsetof(struct virtio_blk_config, max_secure_erase_sectors)

/* Discards in whole 4 KiB blocks, the unit host filesystems deallocate in. */
#define BLK_DISCARD_ALIGNMENT 8

struct virtio_blk {
	struct vdev dev;
	struct blk_disk disk;
	/* disk.ring as the device drives it; lost once given up (blk_ring.h), after which
	 * the disk is out of service for good. */
	struct blk_ring ring;
	/* "virtio-blk PATH", for messages. An array, rewritten in place when the image is
	 * replaced: the bus and the ring keep pointers to it. */
	char name[sizeof("virtio-blk ") + PATH_MAX];
	struct mote_log log;
	int event_fd; /* io_uring signals it for every completion */
	bool ring_ready;
	bool broken;	     /* the driver broke the queue: nothing more is taken until a reset */
	uint64_t busy_bytes; /* chain bytes of the requests in flight */
	bool room_wanted;    /* a chain waits in the ring for busy_bytes to fall */
	struct virtio_blk_config config;
	struct virtq_chain chain;		     /* virtq_pop() scratch */
	struct blk_request requests[BLK_QUEUE_SIZE]; /* indexed by chain head */
};

static struct virtq *blk_queue(struct virtio_blk *blk)
{
	return &blk->dev.queues[0];
}

static void blk_push(struct virtio_blk *blk, const struct blk_request *req)
{
	/* Fails only when the queue was reset meanwhile: then there is no one to tell. */
	(void)virtq_push(blk_queue(blk), req->head, req->used_len);
}

/* A request in flight was answered or dropped: its bytes no longer count. */
static void blk_release(struct virtio_blk *blk, struct blk_request *req)
{
	blk->busy_bytes -= req->charged_bytes;
	req->charged_bytes = 0;
}

/* After completions: the writes that waited for those that ended start (blk_request.h,
 * waiting). One answered at once may be what another waited for, so the scan goes on
 * until a pass answers none. */
static void blk_resume_waiting(struct virtio_blk *blk)
{
	bool answered = true;

	while (answered && blk->disk.waiting > 0) {
		answered = false;
		for (unsigned i = 0; i < BLK_QUEUE_SIZE; i++) {
			struct blk_request *req = &blk->requests[i];
			if (req->waiting && blk_request_resume(&blk->disk, req)) {
				blk_push(blk, req);
				blk_release(blk, req);
				answered = true;
			}
		}
	}
}

/* After completions: a chain left in the ring for want of room may fit now. */
static void blk_serve_waiting_chain(struct virtio_blk *blk)
{
	if (blk->room_wanted && !blk->broken) {
		blk->room_wanted = false;
		vdev_serve_again(&blk->dev, 0);
	}
}

static void blk_break(struct virtio_blk *blk, const char *what)
{
	blk->broken = true;
	vdev_needs_reset(&blk->dev, &blk->log, what);
}

/* Whether a request more may start: while requests in flight are charged less than the
 * bound. Each is charged at least the data it moves (its chain, and what the ranges of
 * a WRITE_ZEROES or DISCARD cover: zeros to write, or on a block device a range the
 * kernel may zero), so the I/O in flight stays under the bound plus one request. */
static bool blk_has_room(const struct virtio_blk *blk)
{
	return blk->busy_bytes < VIRTIO_BLK_BUSY_BYTES_MAX;
}

static void blk_start(struct virtio_blk *blk, const struct virtq_chain *chain)
{
	if (chain->head >= BLK_QUEUE_SIZE || blk->requests[chain->head].busy) {
		blk_break(blk, "the driver offered a chain still in flight");
		return;
	}
	struct blk_request *req = &blk->requests[chain->head];
	if (blk_request_start(&blk->disk, req, chain)) {
		blk_push(blk, req);
		return;
	}
	req->charged_bytes =
	    chain->readable_len + chain->writable_len + blk_request_range_bytes(req);
	blk->busy_bytes += req->charged_bytes;
}

/* Starts the chains available, within the turn's budget and the room requests in
 * flight leave. With EVENT_IDX, once the ring looks empty the device tells the driver
 * how far it has read and looks again: a chain the driver added in between brings no
 * notification (§2.7.10). */
static void blk_take_chains(struct virtio_blk *blk)
{
	struct virtq *vq = blk_queue(blk);
	const struct blk_overlay *overlay = blk->disk.overlay;
	uint64_t copy_ups = overlay ? overlay->copy_ups : 0;
	bool rearmed = false;

	for (unsigned taken = 0; !blk->broken; taken++) {
		if (taken == VIRTIO_BLK_TAKE_BUDGET ||
		    (overlay && overlay->copy_ups - copy_ups >= VIRTIO_BLK_COPY_UP_BUDGET)) {
			vdev_serve_again(&blk->dev, 0);
			return;
		}
		if (!blk_has_room(blk)) {
			/* The chains wait in the ring until a request in flight ends. */
			blk->room_wanted = true;
			return;
		}
		int got = virtq_pop(vq, &blk->chain);
		if (got < 0) {
			blk_break(blk, "broken descriptor chain");
			return;
		}
		if (got == 0) {
			if (rearmed || !vq->event_idx)
				return;
			virtq_set_avail_event(vq);
			rearmed = true;
			continue;
		}
		rearmed = false;
		blk_start(blk, &blk->chain);
	}
}

/* Answers the request of a completion that finished it, or queues its next step. */
static void blk_take_completion(struct virtio_blk *blk, struct io_uring_cqe *cqe)
{
	struct blk_request *req = io_uring_cqe_get_data(cqe);
	int res = cqe->res;

	io_uring_cqe_seen(&blk->disk.ring, cqe);
	if (blk_request_complete(&blk->disk, req, res)) {
		blk_push(blk, req);
		blk_release(blk, req);
	}
}

/* The event-loop handler of the ring's eventfd: answers the requests that finished and
 * continues those that need more I/O (short transfers, further ranges). */
static void blk_on_completion(void *opaque)
{
	struct virtio_blk *blk = opaque;
	struct vdev *dev = &blk->dev;
	struct io_uring_cqe *cqe;
	uint64_t count;

	/* Consumed before reaping: a completion posted after this read signals again. */
	if (read(blk->event_fd, &count, sizeof(count)) < 0 && errno != EAGAIN)
		log_warn(&blk->log, "%s: completion eventfd: %s", blk->name, strerror(errno));

	pthread_mutex_lock(&dev->lock);
	if (blk->ring.lost) {
		blk_ring_drop_late(&blk->ring);
		pthread_mutex_unlock(&dev->lock);
		return;
	}
	uint16_t old_used_idx = blk_queue(blk)->used_idx;
	while (io_uring_peek_cqe(&blk->disk.ring, &cqe) == 0)
		blk_take_completion(blk, cqe);
	blk_resume_waiting(blk);
	blk_ring_submit(&blk->ring);
	if (blk_queue(blk)->used_idx != old_used_idx)
		vdev_notify_used(dev, 0, old_used_idx);
	blk_serve_waiting_chain(blk);
	pthread_mutex_unlock(&dev->lock);
}

/* A request in flight at a reset or a destroy, its I/O done: it ends unanswered. */
static void blk_drop_request(void *opaque, struct blk_request *req)
{
	struct virtio_blk *blk = opaque;

	blk_request_drop(&blk->disk, req);
	blk_release(blk, req);
}

/* Ends every request unanswered, once the kernel owes nothing for them any more, or once
 * the ring is given up (blk_ring.h): a request's I/O goes into guest buffers. */
static void blk_drain(struct virtio_blk *blk, bool give_up_on_stall)
{
	/* Writes that wait for others (blk_request.waiting) have no I/O: they end here,
	 * with the writes they wait for. */
	for (unsigned i = 0; i < BLK_QUEUE_SIZE && blk->disk.waiting > 0; i++) {
		struct blk_request *req = &blk->requests[i];
		if (req->waiting)
			blk_drop_request(blk, req);
	}
	blk_ring_drain(&blk->ring, give_up_on_stall, blk_drop_request, blk);
}

static uint64_t blk_features(struct vdev *dev)
{
	struct virtio_blk *blk = dev->impl;
	/* §5.2.3. No CONFIG_WCE: the cache is always writeback, and FLUSH makes it
	 * stable. No MQ: one request queue. */
	uint64_t features = (1ULL << VIRTIO_BLK_F_SIZE_MAX) | (1ULL << VIRTIO_BLK_F_SEG_MAX) |
			    (1ULL << VIRTIO_BLK_F_BLK_SIZE) | (1ULL << VIRTIO_BLK_F_FLUSH) |
			    (1ULL << VIRTIO_BLK_F_DISCARD) | (1ULL << VIRTIO_BLK_F_WRITE_ZEROES) |
			    VIRTIO_FEATURE_INDIRECT_DESC | VIRTIO_FEATURE_EVENT_IDX;

	if (blk->disk.read_only)
		features |= 1ULL << VIRTIO_BLK_F_RO;
	return features;
}

static void blk_config_read(struct vdev *dev, uint32_t offset, uint8_t *data, uint32_t len)
{
	struct virtio_blk *blk = dev->impl;

	/* The transport checked the range against config_size; this keeps the copy
	 * inside the struct whatever it did. */
	memset(data, 0, len);
	if (offset <= sizeof(blk->config) && len <= sizeof(blk->config) - offset)
		memcpy(data, (const uint8_t *)&blk->config + offset, len);
}

static void blk_config_write(struct vdev *dev, uint32_t offset, const uint8_t *data, uint32_t len)
{
	/* The only writable field, writeback, needs CONFIG_WCE, which is not offered. */
	(void)dev;
	(void)offset;
	(void)data;
	(void)len;
}

/* A disk whose ring was given up does not start again: the transport then sets
 * DEVICE_NEEDS_RESET, and the guest's requests never reach the ring. */
static int blk_activate(struct vdev *dev)
{
	struct virtio_blk *blk = dev->impl;

	if (blk->ring.lost) {
		log_debug(&blk->log, "%s: out of service (its I/O ring was given up)", blk->name);
		return -EIO;
	}
	return 0;
}

static void blk_queue_notify(struct vdev *dev, uint16_t q)
{
	struct virtio_blk *blk = dev->impl;
	uint16_t old_used_idx = blk_queue(blk)->used_idx;

	/* Not started on a lost ring (blk_activate); should a notification come all the
	 * same, nothing is taken either. */
	if (blk->ring.lost) {
		vdev_needs_reset(dev, &blk->log, "its I/O ring was given up");
		return;
	}
	if (q != 0 || blk->broken)
		return;
	blk_take_chains(blk);
	blk_ring_submit(&blk->ring);
	/* Chains answered at once: errors, GET_ID, empty transfers. */
	if (blk_queue(blk)->used_idx != old_used_idx)
		vdev_notify_used(dev, 0, old_used_idx);
}

/* Waits for the requests in flight, on the vCPU that wrote the status, rather than
 * dropping them to complete later: a read landing after the reset would write into
 * buffers the driver has taken back, and Linux's virtio-mmio driver (vm_reset, 6.1)
 * writes 0 to the status and goes on without reading it back, so the reset must be
 * done when that write returns (§2.4.1: the device MUST NOT touch the rings after a
 * reset). The wait is bounded by VIRTIO_BLK_BUSY_BYTES_MAX of I/O, a flush, and a
 * pause before a retry (blk_request.c) — or, where waiting on the ring fails for good,
 * by giving the ring up (blk_ring.h); an image that stops answering holds it up. */
static void blk_reset(struct vdev *dev)
{
	struct virtio_blk *blk = dev->impl;

	blk_drain(blk, false);
	virtq_reset(blk_queue(blk));
	blk->broken = false;
	blk->room_wanted = false;
}

/* Snapshots. */

/* Answers every request in flight, waiting on io_uring itself: while the VM is paused
 * the event thread, which reaps completions, is parked. What the driver had made
 * available and the device had not taken yet stays in the ring for later: the queue is
 * served again once the event thread runs (or, restored, when every queue is). A request
 * whose file keeps answering -EAGAIN holds the pause up for about a second of pauses,
 * plus its tries' own I/O, until it fails (blk_request.c). A file that stops answering
 * (a hung network file system) holds it up for stall_ns from the last completion: then
 * -ETIMEDOUT, the requests still in flight left to complete once the VM runs again. A
 * wait on the ring that fails for good, or a lost ring, leaves requests in flight, and
 * blk_save() refuses the snapshot. */
static int blk_quiesce(struct vdev *dev, int64_t stall_ns)
{
	struct virtio_blk *blk = dev->impl;
	uint16_t old_used_idx = blk_queue(blk)->used_idx;
	int err = 0;

	while (blk->disk.in_flight > 0) {
		struct io_uring_cqe *cqe;

		err = blk_ring_wait(&blk->ring, &cqe, clock_deadline_in(stall_ns));
		if (err < 0)
			break;
		blk_take_completion(blk, cqe);
		blk_resume_waiting(blk);
	}
	if (err == -ETIMEDOUT)
		log_error(&blk->log,
			  "%s: none of its %u requests in flight completed for %lld ms: its "
			  "image does not answer",
			  blk->name, blk->disk.in_flight, (long long)(stall_ns / NS_PER_MS));
	if (blk_queue(blk)->used_idx != old_used_idx)
		vdev_notify_used(dev, 0, old_used_idx);
	blk_serve_waiting_chain(blk);
	return err == -ETIMEDOUT ? err : 0;
}

static int blk_save(struct vdev *dev, struct snap_writer *w)
{
	struct virtio_blk *blk = dev->impl;

	/* The requests given up with the ring may still be carried out by the host: a
	 * restored guest would find its disk change under it. */
	if (blk->ring.lost) {
		log_error(&blk->log, "%s: out of service since its I/O ring was given up",
			  blk->name);
		return -EIO;
	}
	/* A request in flight lives in this process only: it would be lost. */
	if (blk->disk.in_flight > 0 || blk->disk.waiting > 0) {
		log_error(&blk->log, "%s: %u requests still in flight", blk->name,
			  blk->disk.in_flight + blk->disk.waiting);
		return -EBUSY;
	}
	snap_put_bool(w, blk->broken);
	/* The size the guest knows the disk by (format 2 on). */
	snap_put_u64(w, blk->disk.capacity);
	return 0;
}

static int blk_load(struct vdev *dev, struct snap_reader *r, uint32_t status)
{
	struct virtio_blk *blk = dev->impl;

	blk->broken = vdev_load_broken(r, status);
	uint64_t capacity = snap_get_u64(r);
	/* Nothing was in flight (blk_save): every chain taken was used. Others would wait
	 * for an answer that never comes. */
	if (!r->error && blk_queue(blk)->last_avail_idx != blk_queue(blk)->used_idx)
		return snap_fail(r, "virtio-blk: requests in flight in a snapshot");
	/* The guest keeps the capacity it read at boot: a disk of another size (a replaced
	 * image, an override naming another one) would fail its requests past the end or
	 * show it blocks it never wrote. */
	if (!r->error && capacity != blk->disk.capacity) {
		log_error(&blk->log,
			  "%s: the image holds %llu sectors, the snapshot's guest knows the disk "
			  "as %llu; restore with the same image, or one of the same size",
			  blk->name, (unsigned long long)blk->disk.capacity,
			  (unsigned long long)capacity);
		return snap_fail(r, "virtio-blk: the disk's size is not the snapshot's");
	}
	return r->error;
}

static const struct vdev_ops blk_ops = {
    .features = blk_features,
    .config_read = blk_config_read,
    .config_write = blk_config_write,
    .activate = blk_activate,
    .queue_notify = blk_queue_notify,
    .reset = blk_reset,
    .quiesce = blk_quiesce,
    .save = blk_save,
    .load = blk_load,
};

static int blk_setup_ring(struct virtio_blk *blk, const char *path)
{
	int err = io_uring_queue_init(BLK_QUEUE_SIZE, &blk->disk.ring, 0);

	if (err < 0) {
		log_error(&blk->log, "disk %s: io_uring setup: %s", path, strerror(-err));
		return err;
	}
	blk->ring_ready = true;
	blk->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (blk->event_fd < 0) {
		err = -errno;
		log_error(&blk->log, "disk %s: eventfd: %s", path, strerror(-err));
		return err;
	}
	err = io_uring_register_eventfd(&blk->disk.ring, blk->event_fd);
	if (err < 0) {
		log_error(&blk->log, "disk %s: io_uring eventfd: %s", path, strerror(-err));
		return err;
	}
	return 0;
}

static void blk_fill_config(struct virtio_blk *blk)
{
	struct virtio_blk_config *config = &blk->config;

	/* §5.2.4, little-endian. */
	config->capacity = htole64(blk->disk.capacity);
	config->seg_max = htole32(BLK_SEG_MAX);
	config->size_max = htole32(BLK_SIZE_MAX);
	config->blk_size = htole32(BLK_SECTOR_SIZE);
	config->max_discard_sectors = htole32(BLK_MAX_RANGE_SECTORS);
	config->max_discard_seg = htole32(BLK_MAX_RANGES);
	config->discard_sector_alignment = htole32(BLK_DISCARD_ALIGNMENT);
	config->max_write_zeroes_sectors = htole32(BLK_MAX_ZERO_SECTORS);
	config->max_write_zeroes_seg = htole32(BLK_MAX_ZERO_RANGES);
	/* Write zeroes with unmap punches a hole (on an overlay: writes zeros). */
	config->write_zeroes_may_unmap = 1;
}

static void blk_free(struct virtio_blk *blk)
{
	/* Unmaps the rings and closes the ring's descriptor, submitting nothing: the SQEs
	 * of a lost ring the kernel never took never run, and what it took it cancels or
	 * finishes on its own once the last mapping is gone. Nothing it still carries out
	 * points into blk: it copied the iovecs and timeouts at submission, and the zero
	 * page is static (blk_request.c). */
	if (blk->ring_ready)
		io_uring_queue_exit(&blk->disk.ring);
	if (blk->event_fd >= 0)
		close(blk->event_fd);
	if (blk->disk.direct_fd >= 0)
		close(blk->disk.direct_fd);
	if (blk->disk.overlay)
		blk_overlay_close(blk->disk.overlay); /* disk.fd is the overlay's */
	else if (blk->disk.fd >= 0)
		close(blk->disk.fd); /* and the lock with it */
	free(blk);
}

int virtio_blk_create(const struct virtio_blk_options *options, struct guest_memory *mem,
		      struct event_loop *loop, const struct mote_log *log,
		      struct virtio_blk **blk_out)
{
	if (!options || !options->path || !mem || !loop) {
		log_error(log, "virtio-blk: no image, guest memory or event loop");
		return -EINVAL;
	}
	size_t id_len = options->id ? strlen(options->id) : 0;
	if (id_len > VIRTIO_BLK_ID_MAX) {
		log_error(log, "disk %s: id \"%s\" is longer than %d bytes", options->path,
			  options->id, VIRTIO_BLK_ID_MAX);
		return -EINVAL;
	}

	struct virtio_blk *blk = calloc(1, sizeof(*blk));
	if (!blk)
		return -ENOMEM;
	blk->disk.fd = -1;
	blk->disk.direct_fd = -1;
	blk->event_fd = -1;
	if (log)
		blk->log = *log;
	snprintf(blk->name, sizeof(blk->name), "virtio-blk %s", options->path);
	memcpy(blk->disk.id, options->id ? options->id : "", id_len);

	int err = options->overlay ? blk_open_overlay(&blk->disk, options, &blk->log)
				   : blk_open_image(&blk->disk, options, &blk->log);
	if (!err && options->direct)
		err = blk_open_direct(&blk->disk, options, &blk->log);
	if (!err)
		err = blk_setup_ring(blk, options->path);
	if (err) {
		blk_free(blk);
		return err;
	}
	blk_fill_config(blk);
	blk->dev = (struct vdev){
	    .name = blk->name,
	    .device_id = VIRTIO_ID_BLOCK,
	    .queue_count = 1,
	    .queue_max_size = BLK_QUEUE_SIZE,
	    .config_size = BLK_CONFIG_SIZE,
	    .ops = &blk_ops,
	    .impl = blk,
	    .mem = mem,
	};
	blk->ring = (struct blk_ring){
	    .disk = &blk->disk,
	    .name = blk->name,
	    .log = &blk->log,
	    .mem = blk->dev.mem,
	    .stall_ms = options->ring_stall_ms ? options->ring_stall_ms : BLK_RING_STALL_MS,
	};
	pthread_mutex_init(&blk->dev.lock, NULL);

	/* Last: the loop cannot forget an fd, and the handler may run from here on. */
	err = event_loop_add(loop, blk->event_fd, blk_on_completion, blk);
	if (err) {
		log_error(log, "disk %s: watching completions: %s", options->path, strerror(-err));
		pthread_mutex_destroy(&blk->dev.lock);
		blk_free(blk);
		return err;
	}
	*blk_out = blk;
	return 0;
}

struct vdev *virtio_blk_vdev(struct virtio_blk *blk)
{
	return &blk->dev;
}

int virtio_blk_commit_overlays(struct virtio_blk *const *disks, unsigned count)
{
	struct blk_overlay **overlays = calloc(count ? count : 1, sizeof(*overlays));

	if (!overlays)
		return -ENOMEM;
	for (unsigned i = 0; i < count; i++)
		overlays[i] = disks[i] ? disks[i]->disk.overlay : NULL;
	int err = blk_overlay_commit(overlays, count);
	free(overlays);
	return err;
}

int virtio_blk_freeze_overlay(struct virtio_blk *blk, const char *layer_path, bool whole)
{
	if (!blk->disk.overlay) {
		log_error(&blk->log, "%s: no overlay to freeze", blk->name);
		return -EINVAL;
	}
	pthread_mutex_lock(&blk->dev.lock);
	int ret = -EBUSY;
	if (blk->disk.in_flight == 0 && blk->disk.waiting == 0)
		ret = blk_overlay_freeze(blk->disk.overlay, layer_path, whole);
	else
		log_error(&blk->log, "%s: %u requests in flight: pause the VM first", blk->name,
			  blk->disk.in_flight + blk->disk.waiting);
	pthread_mutex_unlock(&blk->dev.lock);
	return ret;
}

/* With the device's lock held: -EIO, logged, when the disk is out of service for good
 * (its ring given up), which no other image brings back. */
static int blk_refuse_when_lost(struct virtio_blk *blk)
{
	if (!blk->ring.lost)
		return 0;
	log_error(&blk->log, "%s: out of service (its I/O ring was given up)", blk->name);
	return -EIO;
}

/* Whether path names the file fd has open (a symlink to it included). */
static bool blk_is_open_file(int fd, const char *path)
{
	struct stat open_st, path_st;

	return fstat(fd, &open_st) == 0 && stat(path, &path_st) == 0 &&
	       open_st.st_dev == path_st.st_dev && open_st.st_ino == path_st.st_ino;
}

int virtio_blk_open_replacement(struct virtio_blk *blk, const char *path,
				struct virtio_blk_replacement *r)
{
	struct virtio_blk_options options = {
	    .path = path,
	    .read_only = blk->disk.read_only,
	    .direct = blk->disk.direct_fd >= 0,
	};
	struct blk_disk fresh = {.fd = -1, .direct_fd = -1};
	int err;

	*r = (struct virtio_blk_replacement){
	    .path = path, .fd = -1, .direct_fd = -1, .log = blk->log};
	pthread_mutex_lock(&blk->dev.lock);
	err = blk_refuse_when_lost(blk);
	pthread_mutex_unlock(&blk->dev.lock);
	if (err)
		return err;
	if (blk->disk.overlay) {
		log_error(&blk->log,
			  "%s: has an overlay, which is of its image: the image stays (restore a "
			  "snapshot with another one instead)",
			  blk->name);
		return -EINVAL;
	}
	if (blk_is_open_file(blk->disk.fd, path)) {
		/* The same image, grown or shrunk: its lock is held already, and a second
		 * one on it would conflict with it. */
		r->same_file = true;
		return blk_image_capacity(blk->disk.fd, path, &r->capacity, &blk->log);
	}
	err = blk_open_image(&fresh, &options, &blk->log);
	if (!err && options.direct)
		err = blk_open_direct(&fresh, &options, &blk->log);
	r->fd = fresh.fd >= 0 ? fresh.fd : -1;
	r->direct_fd = fresh.direct_fd;
	r->capacity = fresh.capacity;
	if (err)
		virtio_blk_replacement_close(r);
	return err;
}

int virtio_blk_swap_image(struct virtio_blk *blk, struct virtio_blk_replacement *r)
{
	pthread_mutex_lock(&blk->dev.lock);
	int err = blk_refuse_when_lost(blk);
	if (!err && (blk->disk.in_flight || blk->disk.waiting)) {
		log_error(&blk->log, "%s: %u requests still in flight: the image stays", blk->name,
			  blk->disk.in_flight + blk->disk.waiting);
		err = -EBUSY;
	}
	if (err) {
		pthread_mutex_unlock(&blk->dev.lock);
		return err;
	}
	uint64_t old_capacity = blk->disk.capacity;
	if (!r->same_file) {
		/* The old image's descriptors go to r, to be closed once the VM runs. */
		int fd = blk->disk.fd, direct_fd = blk->disk.direct_fd;
		blk->disk.fd = r->fd;
		blk->disk.direct_fd = r->direct_fd;
		r->fd = fd;
		r->direct_fd = direct_fd;
		r->sync = !blk->disk.read_only;
		memcpy(r->left_name, blk->name, sizeof(r->left_name));
		snprintf(blk->name, sizeof(blk->name), "virtio-blk %s", r->path);
	}
	blk->disk.capacity = r->capacity;
	if (blk->disk.capacity != old_capacity) {
		/* A configuration change notification (virtio 1.2 §2.3), with the
		 * generation changed (§2.5), which signal_config does: Linux's driver then
		 * rereads the capacity (virtblk_config_changed). */
		blk->config.capacity = htole64(blk->disk.capacity);
		if (blk->dev.transport_ops)
			blk->dev.transport_ops->signal_config(blk->dev.transport);
	}
	log_info(&blk->log, "%s: the disk's image from now on, %llu sectors", blk->name,
		 (unsigned long long)blk->disk.capacity);
	pthread_mutex_unlock(&blk->dev.lock);
	return 0;
}

void virtio_blk_replacement_close(struct virtio_blk_replacement *r)
{
	/* An image the guest wrote leaves with what it was told had landed on it, as a
	 * disk that is unplugged: what it did not flush is made durable here. */
	if (r->sync && r->fd >= 0 && fdatasync(r->fd) != 0)
		log_error(&r->log,
			  "%s, replaced: fdatasync: %s: what the guest wrote last may not be on it",
			  r->left_name, strerror(errno));
	if (r->direct_fd >= 0)
		close(r->direct_fd);
	if (r->fd >= 0)
		close(r->fd); /* and its lock with it */
	r->fd = -1;
	r->direct_fd = -1;
	r->sync = false;
}

void virtio_blk_destroy(struct virtio_blk *blk)
{
	if (!blk)
		return;
	/* Nothing of the guest's runs any more: an image that stopped answering is given
	 * up after the stall bound (blk_ring.h), its guest memory kept mapped. */
	blk_drain(blk, true);
	pthread_mutex_destroy(&blk->dev.lock);
	blk_free(blk);
}
