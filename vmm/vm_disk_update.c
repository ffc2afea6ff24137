/* A running VM's disk pointed at another image (mote.h: mote_vm_update_disk), as
 * Firecracker's PATCH /drives/{id} does: a data disk swapped in after boot, or a disk
 * grown in place and the guest told its new size. The new image is opened while the VM
 * runs, so an image that cannot be had (or a slow file system) costs the guest nothing;
 * the VM is paused only for the swap itself, so that no request is in flight on the old
 * image; the old image is synced and closed once the VM runs again. The setup records
 * the new path for snapshots and GET /vm/config. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vm.h"

/* With pause_lock held: the swap, in a pause unless the VM is paused already. 0 once
 * the disk has the new image, whatever became of the VM meanwhile. */
static int vm_swap_disk_image(struct mote_vm *vm, unsigned index, struct virtio_blk_replacement *r,
			      char **recorded)
{
	enum mote_vm_state state = mote_vm_get_state(vm);
	bool paused_here = false;
	int ret = 0;

	if (state == MOTE_VM_ENDED) {
		ret = -EINVAL;
	} else if (state != MOTE_VM_PAUSED) {
		/* Before mote_vm_run() starts the VM, this only has it start paused until
		 * the resume below undoes that: no thread touches the disk meanwhile. */
		ret = vm_pause_locked(vm);
		paused_here = ret == 0;
		if (ret == -EINTR)
			log_error(&vm->log, "updating a disk: the VM ended meanwhile");
	}
	if (!ret)
		ret = virtio_blk_swap_image(vm->disks[index], r);
	if (!ret) {
		free(vm->setup.disks[index].path);
		vm->setup.disks[index].path = *recorded;
		*recorded = NULL;
	}
	if (paused_here && vm_resume_locked(vm) != 0 && !vm_has_ended(vm))
		log_error(&vm->log, "updating a disk: the VM stays paused (resume it to go on)");
	return ret;
}

int mote_vm_update_disk(struct mote_vm *vm, const char *disk, const char *path)
{
	if (!disk || !path || !path[0]) {
		log_error(&vm->log, "updating a disk: the disk and an image path are required");
		return -EINVAL;
	}
	/* The ids and guest names searched never change; the paths do, under pause_lock. */
	int index = vm_setup_find_disk(&vm->setup, disk);
	if (index < 0) {
		log_error(&vm->log, "updating a disk: the VM has no disk \"%s\"", disk);
		return -ENOENT;
	}
	if (mote_vm_get_state(vm) == MOTE_VM_ENDED)
		return -EINVAL;
	char *recorded = strdup(path);
	if (!recorded)
		return -ENOMEM;

	struct virtio_blk_replacement replacement;
	pthread_mutex_lock(&vm->disk_update_lock);
	int ret = virtio_blk_open_replacement(vm->disks[index], path, &replacement);
	if (!ret) {
		/* One pause, resume or snapshot at a time; a snapshot must not read the
		 * setup half changed. */
		pthread_mutex_lock(&vm->pause_lock);
		ret = vm_swap_disk_image(vm, (unsigned)index, &replacement, &recorded);
		pthread_mutex_unlock(&vm->pause_lock);
	}
	virtio_blk_replacement_close(&replacement);
	pthread_mutex_unlock(&vm->disk_update_lock);
	free(recorded);
	return ret;
}
