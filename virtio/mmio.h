/* The virtio-mmio transport, modern interface (virtio 1.2 §4.2, version 2): one 4 KiB
 * register window per device in the MMIO gap, announced to the guest on its command
 * line (virtio_mmio.device=4K@ADDR:IRQ, design.md). It owns feature negotiation, the
 * status state machine, queue setup and the interrupt status; the device model behind
 * it (vdev.h) never sees a register.
 *
 * The fast paths stay in the kernel: QueueNotify writes are meant to be caught by a
 * KVM_IOEVENTFD on notify_fd (one per queue, datamatch = queue index) and the
 * interrupt is raised by writing irq_fd, which KVM_IRQFD turns into the guest's IRQ.
 * This file does not call KVM itself, so the unit tests drive it without /dev/kvm. */
#ifndef MOTE_VIRTIO_MMIO_H
#define MOTE_VIRTIO_MMIO_H

#include <stdbool.h>
#include <stdint.h>

#include "../vmm/log.h"
#include "../vmm/snapshot_stream.h"
#include "vdev.h"

#define VIRTIO_MMIO_WINDOW 0x1000
/* Register offsets (§4.2.2, Table "MMIO Device Register Layout"). */
#define VIRTIO_MMIO_MAGIC_VALUE 0x000
#define VIRTIO_MMIO_VERSION 0x004
#define VIRTIO_MMIO_DEVICE_ID 0x008
#define VIRTIO_MMIO_VENDOR_ID 0x00c
#define VIRTIO_MMIO_DEVICE_FEATURES 0x010
#define VIRTIO_MMIO_DEVICE_FEATURES_SEL 0x014
#define VIRTIO_MMIO_DRIVER_FEATURES 0x020
#define VIRTIO_MMIO_DRIVER_FEATURES_SEL 0x024
#define VIRTIO_MMIO_QUEUE_SEL 0x030
#define VIRTIO_MMIO_QUEUE_NUM_MAX 0x034
#define VIRTIO_MMIO_QUEUE_NUM 0x038
#define VIRTIO_MMIO_QUEUE_READY 0x044
#define VIRTIO_MMIO_QUEUE_NOTIFY 0x050
#define VIRTIO_MMIO_INTERRUPT_STATUS 0x060
#define VIRTIO_MMIO_INTERRUPT_ACK 0x064
#define VIRTIO_MMIO_STATUS 0x070
#define VIRTIO_MMIO_QUEUE_DESC_LOW 0x080
#define VIRTIO_MMIO_QUEUE_DESC_HIGH 0x084
#define VIRTIO_MMIO_QUEUE_DRIVER_LOW 0x090
#define VIRTIO_MMIO_QUEUE_DRIVER_HIGH 0x094
#define VIRTIO_MMIO_QUEUE_DEVICE_LOW 0x0a0
#define VIRTIO_MMIO_QUEUE_DEVICE_HIGH 0x0a4
#define VIRTIO_MMIO_SHM_SEL 0x0ac
#define VIRTIO_MMIO_SHM_LEN_LOW 0x0b0
#define VIRTIO_MMIO_SHM_LEN_HIGH 0x0b4
#define VIRTIO_MMIO_SHM_BASE_LOW 0x0b8
#define VIRTIO_MMIO_SHM_BASE_HIGH 0x0bc
#define VIRTIO_MMIO_CONFIG_GENERATION 0x0fc
#define VIRTIO_MMIO_CONFIG 0x100

#define VIRTIO_MMIO_MAGIC 0x74726976u  /* "virt" */
#define VIRTIO_MMIO_VENDOR 0x65746f6du /* "mote" */
#define VIRTIO_MMIO_INT_VRING 1u
#define VIRTIO_MMIO_INT_CONFIG 2u

struct virtio_mmio;

/* One queue's notification eventfd, with what its handler needs. */
struct virtio_mmio_notifier {
	struct virtio_mmio *mmio;
	uint16_t queue;
	int fd;
};

/* Queue registers as the driver wrote them, applied when it sets QueueReady. */
struct virtio_mmio_queue_regs {
	uint32_t num;
	uint64_t desc, driver, device;
};

struct virtio_mmio {
	struct vdev *dev;
	uint64_t base;
	uint32_t irq;
	int irq_fd; /* written to raise the interrupt (KVM_IRQFD) */
	struct virtio_mmio_notifier notifiers[VDEV_MAX_QUEUES];
	const struct mote_log *log;
	bool complained; /* one message per reset for a misbehaving driver (vdev_complain) */

	/* Register state; a snapshot saves it as is. Guarded by dev->lock. */
	uint32_t status;
	uint32_t device_features_sel;
	uint32_t driver_features_sel;
	uint32_t queue_sel;
	uint32_t interrupt_status;
	uint32_t config_generation;
	uint64_t driver_features;
	struct virtio_mmio_queue_regs queue_regs[VDEV_MAX_QUEUES];
};

/* Attaches the transport to dev (whose name, id, queues, config size and ops are set)
 * and creates irq_fd and one notify fd per queue. 0 or a negative errno. */
int virtio_mmio_init(struct virtio_mmio *mmio, struct vdev *dev, uint64_t base, uint32_t irq,
		     const struct mote_log *log);

/* The bus handler for the register window (bus_access_fn; opaque is the virtio_mmio).
 * Runs on vCPU threads. */
void virtio_mmio_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len, bool is_write);

/* The event-loop handler of one notify fd (opaque is a struct virtio_mmio_notifier):
 * consumes the eventfd and hands the queue to the device when it is live. */
void virtio_mmio_notify_handler(void *opaque);

/* Snapshots (mmio_state.c; the device's own part through vdev_ops). Each takes
 * dev->lock; the VM is paused, or restored and not yet started. */

/* Has the device finish what it has in flight, unless it stalls for stall_ns
 * (vdev_ops.quiesce): 0 or -ETIMEDOUT. */
int virtio_mmio_quiesce(struct virtio_mmio *mmio, int64_t stall_ns);

/* Tells the device the VM runs again after paused_ns stopped (vdev_ops.resumed). */
void virtio_mmio_resumed(struct virtio_mmio *mmio, uint64_t paused_ns);

/* Appends the transport's state (registers the driver wrote, each queue's serialisable
 * state) and then the device's (vdev_ops.save) to w, inside a section the caller opened.
 * 0 or the device's negative errno. */
int virtio_mmio_save(struct virtio_mmio *mmio, struct snap_writer *w);

/* Loads what virtio_mmio_save() wrote into a transport whose device was built with the
 * same options (its own state is replaced). Everything is checked as the register path
 * checks it: status bits a driver can reach, negotiated features a subset of those
 * offered, queue sizes powers of two up to the device's maximum, rings aligned and in
 * guest RAM. A device the driver had started is activated again. -EINVAL with r failed
 * (snap_fail) for a value out of range or a different device; another negative errno
 * (message logged) when the device cannot start. On failure the transport and device
 * are back at power-on. */
int virtio_mmio_load(struct virtio_mmio *mmio, struct snap_reader *r);

/* After every device was loaded: the device's backend starts (vdev_ops.restored), and
 * since queue notifications and interrupts sent before the snapshot did not come along
 * (eventfds are the old process's), every ready queue of a live device is served once
 * and a pending interrupt is raised again; spurious ones are harmless (§2.7.10). */
void virtio_mmio_restored(struct virtio_mmio *mmio);

/* For mmio_state.c, with dev->lock held: back to power-on (§2.4); the features offered
 * (the device's and VERSION_1); one signal on an eventfd (-1: none). */
void virtio_mmio_reset(struct virtio_mmio *mmio);
uint64_t virtio_mmio_offered_features(const struct virtio_mmio *mmio);
void virtio_mmio_eventfd_signal(int fd);

/* Closes the fds; the device itself belongs to its creator. */
void virtio_mmio_destroy(struct virtio_mmio *mmio);

#endif
