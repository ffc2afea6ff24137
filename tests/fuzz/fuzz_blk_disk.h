/* The disk the virtio-blk fuzz targets share: a virtio-blk device on a temporary image
 * in /dev/shm, behind virtio-mmio, as fuzz_mmio_driver.h brings devices up. */
#ifndef MOTE_TESTS_FUZZ_BLK_DISK_H
#define MOTE_TESTS_FUZZ_BLK_DISK_H

#include <stdbool.h>
#include <stdint.h>

#include "fuzz_mmio_driver.h"
#include "virtio/blk.h"

/* Creates a zeroed image of image_size bytes and the disk on it in mem, its queue's
 * notifier on loop, attached to mmio. With overlay, the disk has a copy-on-write
 * overlay over an image of an odd size (1000 bytes short: the last cluster of the
 * overlay is partly past the image's end). The files are unlinked once open. 0, or -1
 * (the host's failure, not an input's). */
int fuzz_blk_disk_create(struct guest_memory *mem, struct event_loop *loop, uint64_t image_size,
			 bool overlay, struct virtio_blk **blk, struct virtio_mmio *mmio);

#endif
