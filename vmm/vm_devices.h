/* A VM's virtio devices as mote_config asks for them: disks, then NICs, then the vsock
 * device, each opened (images locked, TAPs attached) and given its virtio-mmio window
 * (vm_virtio.h) before anything runs, so a bad image or TAP is reported at creation. */
#ifndef MOTE_VM_DEVICES_H
#define MOTE_VM_DEVICES_H

#include "mote.h"
#include "snapshot_stream.h"

struct mote_vm;

/* Creates and attaches every device of config. 0 or a negative errno (message logged);
 * on error the devices created so far stay for vm_devices_destroy(). */
int vm_devices_create(struct mote_vm *vm, const struct mote_config *config);

/* The devices' state in a snapshot: the serial port, the i8042 and every virtio
 * transport with its device, in the order they were attached, each in a section of its
 * own after a list of the virtio devices' kinds. Save runs on a paused VM whose devices
 * were quiesced (vm_virtio_quiesce): 0, or a device's negative errno (-EBUSY: a request
 * still in flight), message logged. Load runs on a VM rebuilt from the snapshot's setup,
 * after its interrupt controllers were loaded: -EINVAL with r failed (snap_fail) when
 * the devices differ in number or kind, a section is cut short or a value is out of
 * range; another negative errno (message logged) when a device cannot start again. */
int vm_devices_save(struct mote_vm *vm, struct snap_writer *w);
int vm_devices_load(struct mote_vm *vm, struct snap_reader *r);

/* The last step of a restore, once everything loaded (mote_vm_commit_disks): the
 * restored overlays of every disk of every VM in vms take their names, all or none
 * (virtio_blk_commit_overlays), so that a restore that fails leaves the overlays named
 * as they were. 0 or a negative errno, logged. */
int vm_devices_commit_restores(struct mote_vm *const *vms, unsigned count);

/* After a restore loaded everything, before the event thread starts: devices resume
 * their backends (vsock resets the guest's connections), and every live queue is
 * served once and every pending interrupt raised again. */
void vm_devices_restored(struct mote_vm *vm);

/* Freezes each overlay disk's blocks written since the last snapshot into
 * "<state_path>.<disk>.layer" and records the layer in the VM's setup. <disk> is the
 * guest's name, vda, vdb, ...; the path recorded is absolute; ".N" is appended when the
 * disk's layers already include the name. A disk whose layers are at
 * VM_SETUP_MAX_LAYERS gets one layer of everything its overlay holds instead, which then
 * is its only one. For a paused VM. 0, or the first disk's error (logged): that disk is
 * unchanged, those before it keep their new layers (consistent: their layers go with
 * the setup). */
int vm_devices_freeze_disks(struct mote_vm *vm, const char *state_path);

/* Where a snapshot at state_path would put disk's frozen layer (*path_out, to free), or
 * NULL for a disk without an overlay; 0 or a negative errno. */
int vm_devices_layer_path(struct mote_vm *vm, unsigned disk, const char *state_path,
			  char **path_out);

/* Frees the devices (after the event loop stopped: no handler may run). */
void vm_devices_destroy(struct mote_vm *vm);

#endif
