/* One virtio-blk request (virtio 1.2 §5.2.6), from the descriptor chain the driver
 * offered to the status byte the device writes back, with its I/O on io_uring. Split out
 * of blk.c, which owns the queue, the config space and the ring's completion eventfd;
 * this file owns what a request means and how it is carried out.
 *
 * Each request has at most one SQE in flight at a time: a short transfer, a multi-range
 * discard or a write-zeroes fallback is continued from its completion, and a step the
 * host answered -EAGAIN or -EINTR goes again from the completion of the timeout that
 * paused it. So the device knows exactly how many completions it still owes
 * (blk_disk.in_flight), which is what a reset waits for. No locking here: the caller
 * holds the device's lock. */
#ifndef MOTE_VIRTIO_BLK_REQUEST_H
#define MOTE_VIRTIO_BLK_REQUEST_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include <liburing.h>
#include <linux/virtio_blk.h>

#include "blk.h"
#include "blk_overlay.h"
#include "virtqueue.h"

/* The wire format (virtio 1.2 §5.2.3-§5.2.6) is Linux's: <linux/virtio_blk.h>. */
#define BLK_SECTOR_SIZE 512
/* Requests in flight at most: one per descriptor of the largest queue we offer. */
#define BLK_QUEUE_SIZE 256
/* Data segments per IN/OUT request (config seg_max; the header and status byte come on
 * top, as Linux counts them): as many as a chain of the whole queue holds, so that a
 * 1 MiB request of scattered 4 KiB pages needs few chains. Also bounds the iovecs of
 * one SQE, below IOV_MAX. */
#define BLK_SEG_MAX (BLK_QUEUE_SIZE - 2)
/* Bytes per data segment (config size_max). With seg_max it bounds the data of one IN
 * or OUT request, which Linux's driver never exceeds (it sets its queue's segment size
 * and count from them), to VIRTIO_BLK_REQUEST_MAX_BYTES: what a reset or a pause may
 * have to wait for per request. */
#define BLK_SIZE_MAX (64u * 1024u)
_Static_assert(VIRTIO_BLK_REQUEST_MAX_BYTES / BLK_SIZE_MAX == BLK_SEG_MAX &&
		   VIRTIO_BLK_REQUEST_MAX_BYTES % BLK_SIZE_MAX == 0,
	       "the request bound is what the config space advertises");
/* Ranges per DISCARD request (config max_discard_seg) and sectors per range
 * (max_discard_sectors): 1 GiB. A discard only punches holes, or is skipped. */
#define BLK_MAX_RANGES 16
#define BLK_MAX_RANGE_SECTORS (1u << 21)
/* WRITE_ZEROES (max_write_zeroes_seg and max_write_zeroes_sectors): one range of up to
 * a largest write's bytes, since where the file system cannot zero a range (tmpfs) or
 * on an overlay, the zeros are written. Linux's driver sends one range a request. */
#define BLK_MAX_ZERO_RANGES 1
/* On an overlay a write waits only at its start (blk_request.waiting), before it set
 * any cluster of its own pending; a second range would start mid-request, and could
 * wait for its own first range or for a write that waits for it. */
_Static_assert(BLK_MAX_ZERO_RANGES == 1, "an overlay write of several ranges could wait on itself");
#define BLK_MAX_ZERO_SECTORS (VIRTIO_BLK_REQUEST_MAX_BYTES / BLK_SECTOR_SIZE)
#define BLK_ZERO_PAGE_SIZE 4096
/* O_DIRECT wants offsets, lengths and buffer addresses aligned to the logical block
 * size of the host's device: 512 bytes almost everywhere. A transfer the host still
 * refuses (-EINVAL) is done again through the page cache. Linux's virtio-blk driver
 * aligns its buffers to 512 bytes (the block layer's default dma_alignment). */
#define BLK_DIRECT_ALIGN 512

/* What a request needs of the disk it runs on. */
struct blk_disk {
	struct io_uring ring;
	int fd; /* the file written: the image, or its overlay */
	/* The same file opened O_DIRECT, for transfers whose offset and buffers are
	 * aligned to BLK_DIRECT_ALIGN; -1 when the disk is not direct. */
	int direct_fd;
	/* The copy-on-write overlay (blk_overlay.h), or NULL. With one, reads of clusters
	 * never written go to overlay->base_fd (through the page cache, which the VMs
	 * sharing the image share too), everything else to fd; nothing is deallocated. */
	struct blk_overlay *overlay;
	uint64_t capacity; /* in 512-byte sectors */
	bool read_only;
	char id[VIRTIO_BLK_ID_MAX]; /* GET_ID answer, NUL-padded */
	unsigned in_flight;	    /* SQEs queued or submitted and not yet reaped */
	/* Requests waiting for other writes to end (blk_request.waiting). Some write is
	 * always in flight while one waits: each waits, at its start, for writes started
	 * before it, in flight or waiting themselves. */
	unsigned waiting;
};

/* A byte range of the image and the fallocate mode that discards or zeroes it. */
struct blk_range {
	uint64_t offset;
	uint64_t len;
	int mode;
};

struct blk_request {
	bool busy;		/* started and not yet answered (or dropped) */
	uint64_t charged_bytes; /* what it counts for in the device's bytes in flight (blk.c) */
	uint16_t head;
	uint32_t type;	 /* VIRTIO_BLK_T_* */
	uint8_t *status; /* the chain's last writable byte; NULL if it has none */
	uint32_t used_len;

	/* The transfer in progress: iov[iov_first, iov_first + iov_count) still holds
	 * remaining bytes, going to or from the image at offset. */
	uint64_t offset;
	uint64_t remaining;
	uint32_t data_len; /* IN: bytes the driver reads back on success */
	unsigned iov_first;
	unsigned iov_count;
	/* What the SQE in flight carries: the first run_len bytes of the rest, in
	 * iov[iov_first, iov_first + run_count), the last of those cut short by cut_len
	 * bytes until its completion. The whole rest, but for a read on an overlay disk,
	 * which goes in runs of clusters that are all in the overlay or all in the image. */
	uint64_t run_len;
	unsigned run_count;
	size_t cut_len;
	bool direct;   /* the SQE in flight went to disk->direct_fd */
	bool buffered; /* the host refused this transfer O_DIRECT: no more tries */

	/* A step the host answered -EAGAIN or -EINTR goes again after a pause
	 * (blk_request.c, BLK_RETRY_*): pausing while the SQE in flight is its timeout, of
	 * length pause (which the kernel reads at submission); paused_ms adds up the pauses
	 * since the last answer that was neither. */
	bool pausing;
	uint32_t paused_ms;
	struct __kernel_timespec pause;

	/* DISCARD and WRITE_ZEROES: range[range_next] is the one in progress. */
	unsigned range_count;
	unsigned range_next;
	bool writing_zeroes; /* the filesystem refused to zero range[range_next] */

	/* On an overlay disk: the span of the writes prepared (blk_overlay_prepare_write),
	 * which end (blk_overlay_write_done) when the request is answered or dropped. For
	 * several ranges (WRITE_ZEROES) their union: it must cover every range. */
	uint64_t overlay_offset;
	uint64_t overlay_len;
	/* A write with no SQE yet: it covers partly a cluster whose first write has not
	 * ended (blk_overlay_write_waits), and starts with blk_request_resume. */
	bool waiting;

	struct iovec iov[BLK_SEG_MAX];
	struct blk_range range[BLK_MAX_RANGES];
};

/* Checks the chain and starts its request in req (slot of a free request). Returns true
 * when the request is already answered — an error, GET_ID, an empty transfer — and the
 * caller pushes req->head with req->used_len; false when its I/O is queued on
 * disk->ring, for the caller to submit, or when it waits (req->waiting) for writes in
 * flight to end, for the caller to resume after their completions. The chain's
 * segments must stay mapped until the request is answered (they are guest RAM); the
 * chain itself may be reused at once. */
bool blk_request_start(struct blk_disk *disk, struct blk_request *req,
		       const struct virtq_chain *chain);

/* Takes the completion of req's SQE with result res (bytes or a negative errno).
 * Returns true when the request is answered (status written, push req->head with
 * req->used_len), false when it queued more I/O or waits (req->waiting). */
bool blk_request_complete(struct blk_disk *disk, struct blk_request *req, int res);

/* The bytes a started WRITE_ZEROES or DISCARD covers (its ranges'); 0 for any other
 * request, whose data is its chain. */
uint64_t blk_request_range_bytes(const struct blk_request *req);

/* req waits (req->waiting): starts its I/O if the writes it waited for have ended.
 * Returns true when that answered it at once (an error), false when its I/O is queued
 * or it still waits. */
bool blk_request_resume(struct blk_disk *disk, struct blk_request *req);

/* Takes the completion of req's SQE during a reset, or a req that waits: the request
 * ends there, without an answer and without more I/O. */
void blk_request_drop(struct blk_disk *disk, struct blk_request *req);

#endif
