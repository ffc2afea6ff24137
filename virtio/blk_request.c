/* virtio-blk requests (virtio 1.2 §5.2.6) on io_uring. Nothing in a chain is trusted:
 * the header is copied out once, every length is checked against the chain and the
 * capacity before any I/O, and the image is only ever read or written through iovecs
 * that lie inside the chain's own segments (guest RAM) or the disk's zero page. */
#include <endian.h>
#include <errno.h>
#include <string.h>

#include <linux/falloc.h>

#include "blk_request.h"

#define BLK_HEADER_SIZE sizeof(struct virtio_blk_outhdr)
#define BLK_RANGE_SIZE sizeof(struct virtio_blk_discard_write_zeroes)
/* -EAGAIN or -EINTR: the host is short of something for now (a network or FUSE file
 * system's server, memory) or was interrupted, and trying again at once mostly meets the
 * same shortage. So the step goes again after a pause as long as all the pauses before it
 * together, which doubles the wait with each try, within BLK_RETRY_PAUSE_MIN_MS and
 * BLK_RETRY_PAUSE_MAX_MS. Once the pauses in a row add up to BLK_RETRY_BUDGET_MS, the
 * next -EAGAIN or -EINTR fails the request. A shortage of a few ms then costs the guest a
 * few ms, a lasting one fails the request in about a second, and a reset waits for one
 * pause at most (blk_request_drop ends the request at its completion). */
#define BLK_RETRY_PAUSE_MIN_MS 1
#define BLK_RETRY_PAUSE_MAX_MS 128
#define BLK_RETRY_BUDGET_MS 1000

/* The source of every write-zeroes fallback: each iovec points here, aligned for an
 * O_DIRECT image. Never written, and never freed: a write the kernel still carries out
 * for a disk whose ring was given up (blk_ring.h) reads zeros here after the disk is
 * gone, not whatever took its place. */
static uint8_t zero_page[BLK_ZERO_PAGE_SIZE] __attribute__((aligned(4096)));

static bool queue_current(struct blk_disk *disk, struct blk_request *req);

/* Writes the status byte. On success the driver gets data_len bytes back (IN, GET_ID);
 * on failure only the status byte means anything. */
static bool answer(struct blk_request *req, uint8_t status)
{
	uint32_t data = status == VIRTIO_BLK_S_OK ? req->data_len : 0;

	*req->status = status;
	req->used_len = data + 1;
	req->busy = false;
	return true;
}

/* blk_overlay_prepare_write for a write of req, whose span it records. */
static int overlay_prepare(struct blk_disk *disk, struct blk_request *req, uint64_t offset,
			   uint64_t len)
{
	int err = blk_overlay_prepare_write(disk->overlay, offset, len);

	if (err)
		return err;
	uint64_t start = offset, end = offset + len;
	if (req->overlay_len > 0) {
		uint64_t old_end = req->overlay_offset + req->overlay_len;
		start = req->overlay_offset < start ? req->overlay_offset : start;
		end = old_end > end ? old_end : end;
	}
	req->overlay_offset = start;
	req->overlay_len = end - start;
	return 0;
}

/* The request was answered (answered true) or dropped: its overlay writes have ended. */
static bool overlay_released(struct blk_disk *disk, struct blk_request *req, bool answered)
{
	if (answered && req->overlay_len > 0) {
		blk_overlay_write_done(disk->overlay, req->overlay_offset, req->overlay_len);
		req->overlay_len = 0;
	}
	return answered;
}

static bool in_capacity(const struct blk_disk *disk, uint64_t sector, uint64_t sectors)
{
	return sector <= disk->capacity && sectors <= disk->capacity - sector;
}

static bool is_write(const struct blk_request *req)
{
	return req->type == VIRTIO_BLK_T_OUT || req->writing_zeroes;
}

static bool queued(struct blk_disk *disk, struct io_uring_sqe *sqe, struct blk_request *req)
{
	io_uring_sqe_set_data(sqe, req);
	disk->in_flight++;
	return false;
}

/* Points req->iov at len bytes of the segments seg[0, n), after their first skip bytes.
 * False when that takes more than BLK_SEG_MAX iovecs. */
static bool map_segments(struct blk_request *req, const struct virtq_segment *seg, uint32_t n,
			 uint64_t skip, uint64_t len)
{
	req->iov_first = 0;
	req->iov_count = 0;
	for (uint32_t i = 0; i < n && len > 0; i++) {
		if (skip >= seg[i].len) {
			skip -= seg[i].len;
			continue;
		}
		uint64_t step = seg[i].len - skip;
		if (step > len)
			step = len;
		if (req->iov_count == BLK_SEG_MAX)
			return false;
		req->iov[req->iov_count++] =
		    (struct iovec){(uint8_t *)seg[i].host + skip, (size_t)step};
		len -= step;
		skip = 0;
	}
	return true;
}

/* A write-zeroes fallback writes from the zero page, as many pages per SQE as iovecs. */
static void map_zero_page(struct blk_request *req)
{
	uint64_t left = req->remaining;

	req->iov_first = 0;
	req->iov_count = 0;
	while (left > 0 && req->iov_count < BLK_SEG_MAX) {
		size_t step = left < BLK_ZERO_PAGE_SIZE ? (size_t)left : BLK_ZERO_PAGE_SIZE;
		req->iov[req->iov_count++] = (struct iovec){zero_page, step};
		left -= step;
	}
}

/* Drops the first n bytes of the transfer (a completion's worth). */
static void consume(struct blk_request *req, uint64_t n)
{
	if (n > req->remaining)
		n = req->remaining;
	req->offset += n;
	req->remaining -= n;
	while (n > 0 && req->iov_count > 0) {
		struct iovec *v = &req->iov[req->iov_first];
		if (n < v->iov_len) {
			v->iov_base = (uint8_t *)v->iov_base + n;
			v->iov_len -= n;
			return;
		}
		n -= v->iov_len;
		req->iov_first++;
		req->iov_count--;
	}
}

static bool is_direct_aligned(uint64_t value)
{
	return value % BLK_DIRECT_ALIGN == 0;
}

/* Zeros the first n bytes of the transfer. */
static void zero_front(struct blk_request *req, uint64_t n)
{
	for (unsigned i = req->iov_first; i < req->iov_first + req->iov_count && n > 0; i++) {
		size_t step = req->iov[i].iov_len < n ? req->iov[i].iov_len : (size_t)n;
		memset(req->iov[i].iov_base, 0, step);
		n -= step;
	}
}

/* Limits the next SQE to the first len bytes of the transfer (fewer when the iovecs hold
 * fewer), cutting the iovec that goes past them. */
static void cut_run(struct blk_request *req, uint64_t len)
{
	uint64_t left = len;
	unsigned n = 0;

	req->cut_len = 0;
	while (n < req->iov_count && left > 0) {
		struct iovec *v = &req->iov[req->iov_first + n++];
		if (v->iov_len > left) {
			req->cut_len = v->iov_len - (size_t)left;
			v->iov_len = (size_t)left;
			left = 0;
			break;
		}
		left -= v->iov_len;
	}
	req->run_count = n;
	req->run_len = len - left;
}

/* Gives the cut iovec its length back, once the SQE that used it completed. */
static void uncut_run(struct blk_request *req)
{
	if (req->cut_len > 0)
		req->iov[req->iov_first + req->run_count - 1].iov_len += req->cut_len;
	req->cut_len = 0;
}

/* Whether the next SQE may go O_DIRECT: the disk is direct, the host did not refuse this
 * request already, and offset, lengths and buffers are all aligned. */
static bool can_go_direct(const struct blk_disk *disk, const struct blk_request *req)
{
	if (disk->direct_fd < 0 || req->buffered || !is_direct_aligned(req->offset))
		return false;
	for (unsigned i = req->iov_first; i < req->iov_first + req->run_count; i++)
		if (!is_direct_aligned((uintptr_t)req->iov[i].iov_base) ||
		    !is_direct_aligned(req->iov[i].iov_len))
			return false;
	return true;
}

static bool queue_transfer(struct blk_disk *disk, struct blk_request *req)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&disk->ring);

	if (!sqe)
		return answer(req, VIRTIO_BLK_S_IOERR);
	if (req->writing_zeroes)
		map_zero_page(req);
	uint64_t len = req->remaining;
	bool from_image = false;
	if (disk->overlay && !is_write(req)) {
		bool present;
		len = blk_overlay_run(disk->overlay, req->offset, req->remaining, &present);
		from_image = !present;
	}
	cut_run(req, len);
	req->direct = !from_image && can_go_direct(disk, req);
	int fd = from_image ? disk->overlay->base_fd : req->direct ? disk->direct_fd : disk->fd;
	const struct iovec *iov = req->iov + req->iov_first;
	if (is_write(req))
		io_uring_prep_writev(sqe, fd, iov, req->run_count, req->offset);
	else
		io_uring_prep_readv(sqe, fd, iov, req->run_count, req->offset);
	return queued(disk, sqe, req);
}

/* The first transfer of a write on an overlay disk, which waits while a write it
 * covers partly a cluster of has not ended (blk_overlay_write_waits). */
static bool queue_overlay_write(struct blk_disk *disk, struct blk_request *req)
{
	if (blk_overlay_write_waits(disk->overlay, req->offset, req->remaining)) {
		req->waiting = true;
		disk->waiting++;
		return false;
	}
	return queue_transfer(disk, req);
}

bool blk_request_resume(struct blk_disk *disk, struct blk_request *req)
{
	if (!req->waiting || blk_overlay_write_waits(disk->overlay, req->offset, req->remaining))
		return false;
	req->waiting = false;
	disk->waiting--;
	return overlay_released(disk, req, queue_transfer(disk, req));
}

/* IN and OUT (§5.2.6): the data is the readable part after the header (OUT) or the
 * writable part before the status byte (IN), a whole number of sectors inside the
 * capacity. The driver may split it into segments as it likes, header and status
 * included (there is no fixed layout in virtio 1.x, §2.7.4). */
static bool start_transfer(struct blk_disk *disk, struct blk_request *req,
			   const struct virtq_chain *chain, uint64_t sector)
{
	uint64_t len;
	bool mapped;

	/* Data on the wrong side (device-writable for a write, readable for a read) would
	 * move nothing and be answered as done. */
	if (req->type == VIRTIO_BLK_T_OUT ? chain->writable_len > 1
					  : chain->readable_len > BLK_HEADER_SIZE)
		return answer(req, VIRTIO_BLK_S_IOERR);
	if (req->type == VIRTIO_BLK_T_OUT) {
		/* §5.2.6.2: a read-only device fails writes and writes nothing. */
		if (disk->read_only)
			return answer(req, VIRTIO_BLK_S_IOERR);
		len = chain->readable_len - BLK_HEADER_SIZE;
		mapped = map_segments(req, chain->seg, chain->readable_count, BLK_HEADER_SIZE, len);
	} else {
		len = chain->writable_len - 1;
		mapped = map_segments(req, chain->seg + chain->readable_count,
				      chain->count - chain->readable_count, 0, len);
		/* A chain is at most 2^32 bytes and the header takes 16 of them. */
		req->data_len = (uint32_t)len;
	}
	if (len % BLK_SECTOR_SIZE || len > VIRTIO_BLK_REQUEST_MAX_BYTES ||
	    !in_capacity(disk, sector, len / BLK_SECTOR_SIZE) || !mapped)
		return answer(req, VIRTIO_BLK_S_IOERR);
	if (len == 0)
		return answer(req, VIRTIO_BLK_S_OK);
	req->offset = sector * BLK_SECTOR_SIZE;
	req->remaining = len;
	if (disk->overlay && is_write(req)) {
		if (overlay_prepare(disk, req, req->offset, len) != 0)
			return answer(req, VIRTIO_BLK_S_IOERR);
		return queue_overlay_write(disk, req);
	}
	return queue_transfer(disk, req);
}

static bool transfer_done(struct blk_disk *disk, struct blk_request *req, int res)
{
	if (res == -EINVAL && req->direct) {
		/* The host wants a stricter alignment than BLK_DIRECT_ALIGN. */
		req->buffered = true;
		return queue_transfer(disk, req);
	}
	if (res < 0)
		return answer(req, VIRTIO_BLK_S_IOERR);
	if (res > 0) {
		consume(req, (uint64_t)res);
	} else if (is_write(req)) {
		return answer(req, VIRTIO_BLK_S_IOERR); /* no progress: never loop on it */
	} else {
		/* End of file inside the capacity: the image is not a whole number of
		 * sectors (the capacity rounds up) or it shrank. Those bytes read as zero. */
		zero_front(req, req->run_len);
		consume(req, req->run_len);
	}
	if (req->remaining > 0)
		return queue_transfer(disk, req); /* a short transfer: the rest */
	if (!req->writing_zeroes)
		return answer(req, VIRTIO_BLK_S_OK);
	req->writing_zeroes = false;
	req->range_next++;
	return queue_current(disk, req);
}

/* FLUSH is fdatasync. IOSQE_IO_DRAIN starts it only after every SQE submitted before it
 * has completed, so it covers every write the driver has seen completed, and more
 * (§5.2.6.2: a write is stable once a flush sent after its completion completed). */
static bool queue_flush(struct blk_disk *disk, struct blk_request *req)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&disk->ring);

	if (!sqe)
		return answer(req, VIRTIO_BLK_S_IOERR);
	io_uring_prep_fsync(sqe, disk->fd, IORING_FSYNC_DATASYNC);
	io_uring_sqe_set_flags(sqe, IOSQE_IO_DRAIN);
	return queued(disk, sqe, req);
}

/* §5.2.6: the ID is a NUL-padded string of up to 20 bytes, unterminated at 20. */
static bool get_id(struct blk_disk *disk, struct blk_request *req, const struct virtq_chain *chain)
{
	uint64_t room = chain->writable_len - 1;
	size_t n = room < VIRTIO_BLK_ID_MAX ? (size_t)room : VIRTIO_BLK_ID_MAX;

	if (virtq_chain_write(chain, 0, disk->id, n) != 0)
		return answer(req, VIRTIO_BLK_S_IOERR);
	req->data_len = (uint32_t)n;
	return answer(req, VIRTIO_BLK_S_OK);
}

/* DISCARD and WRITE_ZEROES carry their ranges as the data after the header (§5.2.6).
 * All of them are checked before the first is carried out. */
static bool start_ranges(struct blk_disk *disk, struct blk_request *req,
			 const struct virtq_chain *chain)
{
	bool discard = req->type == VIRTIO_BLK_T_DISCARD;
	uint64_t len = chain->readable_len - BLK_HEADER_SIZE;
	uint64_t count = len / BLK_RANGE_SIZE;
	uint32_t max_sectors = discard ? BLK_MAX_RANGE_SECTORS : BLK_MAX_ZERO_SECTORS;

	if (disk->read_only)
		return answer(req, VIRTIO_BLK_S_IOERR);
	if (len == 0 || len % BLK_RANGE_SIZE ||
	    count > (discard ? BLK_MAX_RANGES : BLK_MAX_ZERO_RANGES))
		return answer(req, VIRTIO_BLK_S_IOERR);
	for (unsigned i = 0; i < count; i++) {
		struct virtio_blk_discard_write_zeroes range;

		if (virtq_chain_read(chain, BLK_HEADER_SIZE + i * BLK_RANGE_SIZE, &range,
				     sizeof(range)) != 0)
			return answer(req, VIRTIO_BLK_S_IOERR);
		uint64_t sector = le64toh(range.sector);
		uint32_t sectors = le32toh(range.num_sectors);
		uint32_t flags = le32toh(range.flags);
		/* §5.2.6.2: unknown flags, and unmap on a discard, are unsupported. */
		if ((flags & ~VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP) || (discard && flags))
			return answer(req, VIRTIO_BLK_S_UNSUPP);
		if (sectors > max_sectors || !in_capacity(disk, sector, sectors))
			return answer(req, VIRTIO_BLK_S_IOERR);
		/* Unmap lets the device deallocate, provided reads return zeroes. */
		bool punch = discard || (flags & VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP);
		req->range[i] = (struct blk_range){
		    .offset = sector * BLK_SECTOR_SIZE,
		    .len = (uint64_t)sectors * BLK_SECTOR_SIZE,
		    .mode =
			(punch ? FALLOC_FL_PUNCH_HOLE : FALLOC_FL_ZERO_RANGE) | FALLOC_FL_KEEP_SIZE,
		};
	}
	req->range_count = (unsigned)count;
	/* An overlay is never deallocated (blk_overlay.h), and a discard only allows
	 * deallocation (§5.2.6.2): there it is done at once. */
	if (disk->overlay && discard)
		return answer(req, VIRTIO_BLK_S_OK);
	return queue_current(disk, req);
}

/* Zeros a range by writing zeros: where the file system cannot zero it, and on an
 * overlay, whose holes would read from the image rather than as zeros. */
static bool write_zeros(struct blk_disk *disk, struct blk_request *req,
			const struct blk_range *range)
{
	if (disk->overlay && overlay_prepare(disk, req, range->offset, range->len))
		return answer(req, VIRTIO_BLK_S_IOERR);
	req->writing_zeroes = true;
	req->offset = range->offset;
	req->remaining = range->len;
	return disk->overlay ? queue_overlay_write(disk, req) : queue_transfer(disk, req);
}

/* The next non-empty range, or the answer when none is left. */
static bool queue_range(struct blk_disk *disk, struct blk_request *req)
{
	while (req->range_next < req->range_count && req->range[req->range_next].len == 0)
		req->range_next++;
	if (req->range_next == req->range_count)
		return answer(req, VIRTIO_BLK_S_OK);

	const struct blk_range *range = &req->range[req->range_next];
	if (disk->overlay)
		return write_zeros(disk, req, range);
	struct io_uring_sqe *sqe = io_uring_get_sqe(&disk->ring);
	if (!sqe)
		return answer(req, VIRTIO_BLK_S_IOERR);
	io_uring_prep_fallocate(sqe, disk->fd, range->mode, (off_t)range->offset,
				(off_t)range->len);
	return queued(disk, sqe, req);
}

static bool range_done(struct blk_disk *disk, struct blk_request *req, int res)
{
	const struct blk_range *range = &req->range[req->range_next];

	if (req->type == VIRTIO_BLK_T_WRITE_ZEROES && (res == -EOPNOTSUPP || res == -EINVAL)) {
		/* The filesystem cannot zero or punch this range (tmpfs has no
		 * ZERO_RANGE): write zeros, since reads must return zeroes (§5.2.6.2). */
		return write_zeros(disk, req, range);
	}
	/* A discard only allows deallocation (§5.2.6.2); one the host cannot do is done. */
	if (req->type == VIRTIO_BLK_T_DISCARD && res == -EOPNOTSUPP)
		res = 0;
	if (res < 0)
		return answer(req, VIRTIO_BLK_S_IOERR);
	req->range_next++;
	return queue_range(disk, req);
}

/* Queues again whatever step the request is at: after a pause, or a range done. */
static bool queue_current(struct blk_disk *disk, struct blk_request *req)
{
	switch (req->type) {
	case VIRTIO_BLK_T_IN:
	case VIRTIO_BLK_T_OUT:
		return queue_transfer(disk, req);
	case VIRTIO_BLK_T_FLUSH:
		return queue_flush(disk, req);
	default:
		return req->writing_zeroes ? queue_transfer(disk, req) : queue_range(disk, req);
	}
}

/* Pauses req before its step goes again (BLK_RETRY_*). An IORING_OP_TIMEOUT with a count
 * of 0 is a plain timer that completes with -ETIME (io_uring_prep_timeout(3)); it is the
 * request's one SQE in flight meanwhile, so a reset or a pause of the VM waits for it as
 * for any other, and nothing but the ring's own completion wakes the device. */
static bool queue_pause(struct blk_disk *disk, struct blk_request *req)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&disk->ring);
	uint32_t ms = req->paused_ms;

	if (!sqe)
		return answer(req, VIRTIO_BLK_S_IOERR);
	if (ms < BLK_RETRY_PAUSE_MIN_MS)
		ms = BLK_RETRY_PAUSE_MIN_MS;
	if (ms > BLK_RETRY_PAUSE_MAX_MS)
		ms = BLK_RETRY_PAUSE_MAX_MS;
	req->paused_ms += ms;
	req->pause = (struct __kernel_timespec){.tv_nsec = (long long)ms * 1000000};
	req->pausing = true;
	io_uring_prep_timeout(sqe, &req->pause, 0, 0);
	return queued(disk, sqe, req);
}

static bool request_start(struct blk_disk *disk, struct blk_request *req,
			  const struct virtq_chain *chain)
{
	struct virtio_blk_outhdr header;

	req->busy = true;
	req->head = chain->head;
	req->type = 0;
	req->status = NULL;
	req->used_len = 0;
	req->offset = 0;
	req->remaining = 0;
	req->data_len = 0;
	req->iov_first = 0;
	req->iov_count = 0;
	req->run_len = 0;
	req->run_count = 0;
	req->cut_len = 0;
	req->direct = false;
	req->buffered = false;
	req->pausing = false;
	req->paused_ms = 0;
	req->range_count = 0;
	req->range_next = 0;
	req->writing_zeroes = false;
	req->overlay_offset = 0;
	req->overlay_len = 0;
	req->waiting = false;

	/* The status byte is the chain's last writable byte (§5.2.6). A chain without one
	 * cannot be answered: it goes back with nothing written (used length 0), which
	 * no driver can take for a success, and the device carries on. */
	if (chain->count == chain->readable_count) {
		req->busy = false;
		return true;
	}
	const struct virtq_segment *last = &chain->seg[chain->count - 1];
	req->status = (uint8_t *)last->host + last->len - 1;

	/* The 16-byte header must be readable, whole. */
	if (virtq_chain_read(chain, 0, &header, sizeof(header)) != 0)
		return answer(req, VIRTIO_BLK_S_IOERR);
	req->type = le32toh(header.type);
	uint64_t sector = le64toh(header.sector);

	switch (req->type) {
	case VIRTIO_BLK_T_IN:
	case VIRTIO_BLK_T_OUT:
		return start_transfer(disk, req, chain, sector);
	case VIRTIO_BLK_T_FLUSH:
		return queue_flush(disk, req);
	case VIRTIO_BLK_T_GET_ID:
		return get_id(disk, req, chain);
	case VIRTIO_BLK_T_DISCARD:
	case VIRTIO_BLK_T_WRITE_ZEROES:
		return start_ranges(disk, req, chain);
	default:
		return answer(req, VIRTIO_BLK_S_UNSUPP);
	}
}

bool blk_request_start(struct blk_disk *disk, struct blk_request *req,
		       const struct virtq_chain *chain)
{
	return overlay_released(disk, req, request_start(disk, req, chain));
}

static bool request_complete(struct blk_disk *disk, struct blk_request *req, int res)
{
	disk->in_flight--;
	if (req->pausing) {
		/* Whatever the timeout answered (-ETIME once it expired), the pause is over. */
		req->pausing = false;
		return queue_current(disk, req);
	}
	uncut_run(req);
	if (res == -EAGAIN || res == -EINTR) {
		if (req->paused_ms < BLK_RETRY_BUDGET_MS)
			return queue_pause(disk, req);
	} else {
		req->paused_ms = 0;
	}
	if (req->type == VIRTIO_BLK_T_IN || req->type == VIRTIO_BLK_T_OUT || req->writing_zeroes)
		return transfer_done(disk, req, res);
	if (req->type == VIRTIO_BLK_T_FLUSH)
		return answer(req, res < 0 ? VIRTIO_BLK_S_IOERR : VIRTIO_BLK_S_OK);
	return range_done(disk, req, res);
}

bool blk_request_complete(struct blk_disk *disk, struct blk_request *req, int res)
{
	return overlay_released(disk, req, request_complete(disk, req, res));
}

uint64_t blk_request_range_bytes(const struct blk_request *req)
{
	uint64_t bytes = 0;

	if (req->type == VIRTIO_BLK_T_WRITE_ZEROES || req->type == VIRTIO_BLK_T_DISCARD)
		for (unsigned i = 0; i < req->range_count; i++)
			bytes += req->range[i].len;
	return bytes;
}

void blk_request_drop(struct blk_disk *disk, struct blk_request *req)
{
	if (req->waiting) {
		req->waiting = false;
		disk->waiting--;
	} else {
		disk->in_flight--;
		uncut_run(req);
	}
	req->pausing = false;
	req->busy = false;
	overlay_released(disk, req, true);
}
