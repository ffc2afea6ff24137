/* Wiring virtio devices into a VM (vm_virtio.h). */
#include "vm_virtio.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>

#include "../boot/layout.h"
#include "vm.h"

/* Interrupts skip user space: KVM raises the IRQ when irq_fd is written. */
static int vm_virtio_irqfd(struct mote_vm *vm, const struct virtio_mmio *mmio)
{
	struct kvm_irqfd irqfd = {.fd = (uint32_t)mmio->irq_fd, .gsi = mmio->irq};

	if (ioctl(vm->vm_fd, KVM_IRQFD, &irqfd) < 0) {
		log_error(&vm->log, "%s: KVM_IRQFD for IRQ %u: %s", mmio->dev->name, mmio->irq,
			  strerror(errno));
		return -errno;
	}
	return 0;
}

/* A QueueNotify write of queue index q completes inside KVM and wakes the event
 * thread; it never becomes an MMIO exit. */
static int vm_virtio_ioeventfd(struct mote_vm *vm, const struct virtio_mmio *mmio, uint16_t q)
{
	struct kvm_ioeventfd ioeventfd = {
	    .datamatch = q,
	    .addr = mmio->base + VIRTIO_MMIO_QUEUE_NOTIFY,
	    .len = 4,
	    .fd = mmio->notifiers[q].fd,
	    .flags = KVM_IOEVENTFD_FLAG_DATAMATCH,
	};

	if (ioctl(vm->vm_fd, KVM_IOEVENTFD, &ioeventfd) < 0) {
		log_error(&vm->log, "%s: KVM_IOEVENTFD for queue %u: %s", mmio->dev->name, q,
			  strerror(errno));
		return -errno;
	}
	return 0;
}

int vm_virtio_attach(struct mote_vm *vm, struct vdev *dev)
{
	struct vm_virtio *virtio = &vm->virtio;
	int ret;

	if (virtio->count == VM_VIRTIO_MAX_DEVICES) {
		log_error(&vm->log, "%s: at most %d virtio devices", dev->name,
			  VM_VIRTIO_MAX_DEVICES);
		return -ENOSPC;
	}
	unsigned index = virtio->count;
	struct virtio_mmio *mmio = &virtio->transports[index];
	uint64_t base = LAYOUT_MMIO_DEVICES_START + (uint64_t)index * VIRTIO_MMIO_WINDOW;

	ret = virtio_mmio_init(mmio, dev, base, VM_VIRTIO_FIRST_IRQ + index, &vm->log);
	if (ret) {
		log_error(&vm->log, "%s: setting up its transport: %s", dev->name, strerror(-ret));
		return ret;
	}
	virtio->count++;
	ret = bus_register(&vm->mmio, base, VIRTIO_MMIO_WINDOW, virtio_mmio_access, mmio, dev->name,
			   &vm->log);
	if (!ret)
		ret = vm_virtio_irqfd(vm, mmio);
	for (uint16_t q = 0; q < dev->queue_count && !ret; q++) {
		ret = vm_virtio_ioeventfd(vm, mmio, q);
		if (!ret)
			ret = event_loop_add(&vm->events, mmio->notifiers[q].fd,
					     virtio_mmio_notify_handler, &mmio->notifiers[q]);
		if (ret == -ENOSPC)
			log_error(&vm->log, "%s: too many event sources", dev->name);
	}
	return ret;
}

void vm_virtio_announce(const struct mote_vm *vm, struct cmdline *cmdline)
{
	char entry[64];

	for (unsigned i = 0; i < vm->virtio.count; i++) {
		const struct virtio_mmio *mmio = &vm->virtio.transports[i];
		snprintf(entry, sizeof(entry), "virtio_mmio.device=4K@0x%" PRIx64 ":%u", mmio->base,
			 mmio->irq);
		cmdline_append(cmdline, entry);
	}
}

int vm_virtio_quiesce(struct mote_vm *vm, int64_t stall_ns)
{
	for (unsigned i = 0; i < vm->virtio.count; i++) {
		int err = virtio_mmio_quiesce(&vm->virtio.transports[i], stall_ns);
		if (err)
			return err;
	}
	return 0;
}

void vm_virtio_resumed(struct mote_vm *vm, uint64_t paused_ns)
{
	for (unsigned i = 0; i < vm->virtio.count; i++)
		virtio_mmio_resumed(&vm->virtio.transports[i], paused_ns);
}

void vm_virtio_destroy(struct mote_vm *vm)
{
	for (unsigned i = 0; i < vm->virtio.count; i++)
		virtio_mmio_destroy(&vm->virtio.transports[i]);
	vm->virtio.count = 0;
}
