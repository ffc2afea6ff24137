/* A running VM's disk pointed at another image (mote.h: mote_vm_update_disk), as
 * Firecracker's PATCH /drives/{id} does: a base image swapped in after boot, or a disk
 * grown in place and the guest told its new size. The VM is paused around the swap, so
 * that no request is in flight on the old image, and its setup records the new path for
 * its snapshots and GET /vm/config. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vm.h"

int mote_vm_update_disk(struct mote_vm *vm, const char *disk, const char *path)
{
	if (!disk || !path || !path[0]) {
		log_error(&vm->log, "updating a disk: the disk and an image path are required");
		return -EINVAL;
	}
	/* One pause, resume or snapshot at a time: this is a pause and a resume, and a
	 * snapshot must not read the setup half changed. */
	pthread_mutex_lock(&vm->pause_lock);
	int index = vm_setup_find_disk(&vm->setup, disk);
	char *recorded = NULL;
	bool paused_here = false;
	int ret = 0;

	if (index < 0) {
		log_error(&vm->log, "updating a disk: the VM has no disk \"%s\"", disk);
		ret = -ENOENT;
	} else if (!(recorded = strdup(path))) {
		ret = -ENOMEM;
	} else if (mote_vm_get_state(vm) == MOTE_VM_ENDED) {
		ret = -EINVAL;
	} else if (mote_vm_get_state(vm) != MOTE_VM_PAUSED) {
		/* Before mote_vm_run() starts the VM, this only has it start paused until
		 * the resume below undoes that: no thread touches the disk meanwhile. */
		ret = vm_pause_locked(vm);
		paused_here = ret == 0;
	}
	if (!ret)
		ret = virtio_blk_replace_image(vm->disks[index], path);
	if (!ret) {
		free(vm->setup.disks[index].path);
		vm->setup.disks[index].path = recorded;
		recorded = NULL;
	}
	if (paused_here) {
		int resumed = vm_resume_locked(vm);
		if (!ret)
			ret = resumed;
	}
	pthread_mutex_unlock(&vm->pause_lock);
	free(recorded);
	return ret;
}
