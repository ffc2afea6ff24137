/* A VM's virtio devices (design.md "Virtio", "Interrupts"): each gets a 4 KiB
 * virtio-mmio window in the MMIO gap and its own IRQ, its queue notifications reach the
 * VM's event thread through KVM_IOEVENTFD, its interrupt goes through KVM_IRQFD, and a
 * virtio_mmio.device=4K@ADDR:IRQ entry on the guest command line announces it. */
#ifndef MOTE_VM_VIRTIO_H
#define MOTE_VM_VIRTIO_H

#include "../boot/cmdline.h"
#include "../virtio/mmio.h"
#include "event_loop.h"

/* IRQs 5..23 (the serial port has 4; the MP table announces all 24 IOAPIC pins). */
#define VM_VIRTIO_FIRST_IRQ 5
#define VM_VIRTIO_MAX_DEVICES 19

struct mote_vm;

struct vm_virtio {
	unsigned count;
	struct virtio_mmio transports[VM_VIRTIO_MAX_DEVICES];
};

/* Gives dev the next window and IRQ and wires it to KVM and to the event loop. Devices
 * are numbered in the order they are attached. 0 or a negative errno (message logged). */
int vm_virtio_attach(struct mote_vm *vm, struct vdev *dev);

/* Appends every attached device's virtio_mmio.device= entry. */
void vm_virtio_announce(const struct mote_vm *vm, struct cmdline *cmdline);

/* Has every device finish what it has in flight (the VM is paused: no vCPU runs, the
 * event thread is stopped), unless one's I/O stalls for stall_ns: 0, or the first
 * stalled device's -ETIMEDOUT, the devices after it not asked. */
int vm_virtio_quiesce(struct mote_vm *vm, int64_t stall_ns);

/* Tells every device the VM runs again after a pause of paused_ns (vdev_ops.resumed);
 * the event thread is still parked. */
void vm_virtio_resumed(struct mote_vm *vm, uint64_t paused_ns);

/* Closes the transports' eventfds (after the event loop and vCPUs stopped). */
void vm_virtio_destroy(struct mote_vm *vm);

#endif
