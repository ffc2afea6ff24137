/* A VM's virtio devices as mote_config asks for them: disks, then NICs, then the vsock
 * device, each opened (images locked, TAPs attached) and given its virtio-mmio window
 * (vm_virtio.h) before anything runs, so a bad image or TAP is reported at creation. */
#ifndef MOTE_VM_DEVICES_H
#define MOTE_VM_DEVICES_H

#include "mote.h"

struct mote_vm;

/* Creates and attaches every device of config. 0 or a negative errno (message logged);
 * on error the devices created so far stay for vm_devices_destroy(). */
int vm_devices_create(struct mote_vm *vm, const struct mote_config *config);

/* Frees the devices (after the event loop stopped: no handler may run). */
void vm_devices_destroy(struct mote_vm *vm);

#endif
