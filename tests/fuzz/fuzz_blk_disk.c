/* The virtio-blk fuzz targets' disk (fuzz_blk_disk.h). */
#include "fuzz_blk_disk.h"

#include <stdlib.h>
#include <unistd.h>

int fuzz_blk_disk_create(struct guest_memory *mem, struct event_loop *loop, uint64_t image_size,
			 bool overlay, struct virtio_blk **blk, struct virtio_mmio *mmio)
{
	char path[] = "/dev/shm/mote-fuzz-blk-XXXXXX";
	char overlay_path[] = "/dev/shm/mote-fuzz-blk-overlay-XXXXXX";
	struct virtio_blk_options options = {.path = path, .id = "fuzz"};
	int ret = -1;

	int fd = mkstemp(path);
	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)(overlay ? image_size - 1000 : image_size)) < 0)
		goto out;
	if (overlay) {
		int overlay_fd = mkstemp(overlay_path);
		if (overlay_fd < 0)
			goto out;
		close(overlay_fd);
		options.overlay = overlay_path;
	}
	if (virtio_blk_create(&options, mem, loop, NULL, blk) == 0 &&
	    fuzz_mmio_attach(mmio, virtio_blk_vdev(*blk), loop, 1) == 0)
		ret = 0;
out:
	close(fd);
	unlink(path); /* the open fds keep them */
	if (options.overlay)
		unlink(overlay_path);
	return ret;
}
