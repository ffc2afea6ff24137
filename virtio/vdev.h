/* A virtio device model, apart from the transport that carries it (design.md: struct
 * vdev_ops). The transport (virtio-mmio today) owns the registers, feature negotiation
 * and the status state machine; the device owns its config space and its queues' work.
 *
 * Threads and locking: the transport calls every vdev_ops function with dev->lock held,
 * from a vCPU thread (register accesses) or the VM's event thread (queue notifications).
 * A device's own event callbacks (I/O completions) take dev->lock themselves. */
#ifndef MOTE_VDEV_H
#define MOTE_VDEV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../vmm/clock.h"
#include "../vmm/guest_memory.h"
#include "../vmm/log.h"
#include "virtqueue.h"

/* Device status bits (virtio 1.2 §2.1). */
#define VIRTIO_STATUS_ACKNOWLEDGE 1u
#define VIRTIO_STATUS_DRIVER 2u
#define VIRTIO_STATUS_DRIVER_OK 4u
#define VIRTIO_STATUS_FEATURES_OK 8u
#define VIRTIO_STATUS_DEVICE_NEEDS_RESET 64u
#define VIRTIO_STATUS_FAILED 128u
/* The defined ones; bits 4, 5 and 8-31 are reserved (§2.1 and §4.2.2: an 8-bit field). */
#define VIRTIO_STATUS_DEFINED                                                                      \
	(VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER | VIRTIO_STATUS_DRIVER_OK |              \
	 VIRTIO_STATUS_FEATURES_OK | VIRTIO_STATUS_DEVICE_NEEDS_RESET | VIRTIO_STATUS_FAILED)

/* Device-independent feature bits (§6). */
#define VIRTIO_FEATURE_INDIRECT_DESC (1ULL << 28)
#define VIRTIO_FEATURE_EVENT_IDX (1ULL << 29)
#define VIRTIO_FEATURE_VERSION_1 (1ULL << 32)

/* Device IDs (§5). */
#define VIRTIO_ID_NET 1
#define VIRTIO_ID_BLOCK 2
#define VIRTIO_ID_VSOCK 19

#define VDEV_MAX_QUEUES 8
/* Warnings about its driver a device logs in a VM's life, resets included: a guest that
 * breaks a rule, resets the device and breaks it again in a loop must not flood the
 * host's log. Later ones go out at debug level. */
#define VDEV_COMPLAINTS_MAX 8

struct vdev;
struct snap_reader;
struct snap_writer;

struct vdev_ops {
	/* Feature bits the device offers; the transport adds VIRTIO_FEATURE_VERSION_1. */
	uint64_t (*features)(struct vdev *dev);
	/* Device-specific config space (§4.2.2: from offset 0x100 of a virtio-mmio window).
	 * The transport has checked offset + len <= dev->config_size. */
	void (*config_read)(struct vdev *dev, uint32_t offset, uint8_t *data, uint32_t len);
	void (*config_write)(struct vdev *dev, uint32_t offset, const uint8_t *data, uint32_t len);
	/* The driver set DRIVER_OK: dev->driver_features holds what was negotiated and the
	 * queues the driver made ready are configured. 0, or a negative errno after which
	 * the transport sets DEVICE_NEEDS_RESET. */
	int (*activate)(struct vdev *dev);
	/* The driver made buffers available on queue index q (only after activate). */
	void (*queue_notify)(struct vdev *dev, uint16_t q);
	/* The driver reset the device (§2.4): stop using the queues; requests in flight are
	 * completed or cancelled before this returns, without touching the rings again. */
	void (*reset)(struct vdev *dev);

	/* Snapshots (issue 5). Each hook is optional: NULL means the device has nothing
	 * to do there. Called with dev->lock held, while the VM is paused (no vCPU runs,
	 * the event thread is parked) or not yet started (a restore).
	 *
	 * quiesce: finish every request in flight synchronously and push it to the used
	 * ring (interrupting as usual), so that nothing the guest sees depends on host
	 * state a snapshot cannot hold. The device takes no new work by itself; it goes
	 * on normally once the event thread runs again. 0, or -ETIMEDOUT (logged) when
	 * none of the requests in flight completed for stall_ns (CLOCK_FOREVER,
	 * vmm/clock.h: no bound): they complete as usual once the event thread runs
	 * again. Slow I/O that progresses is waited for; I/O that stopped is not.
	 *
	 * save: the device's own state (not the transport's, nor its queues') after a
	 * quiesce, appended to the transport's section. 0 or a negative errno (-EBUSY:
	 * something is still in flight; -EIO: the device is out of service, e.g. a disk
	 * whose ring was given up), with a message logged.
	 *
	 * load: reads what save wrote into a device just built with the same options,
	 * whose queues the transport has already loaded (ready, indices, addresses) and
	 * which is not activated yet; status is the device status loaded with them (a
	 * device holds work only once DRIVER_OK was set, and breaks only then, setting
	 * DEVICE_NEEDS_RESET). Every value is checked: anything out of range marks
	 * r failed (snap_fail) and returns -EINVAL; the transport then resets the device,
	 * so a half-loaded state never runs. Other negative errnos for host failures,
	 * with a message logged.
	 *
	 * restored: every device of the VM is loaded and the transport activated again
	 * where the driver had set DRIVER_OK; the backend may start (vsock resets the
	 * guest's connections, which lived in the process that took the snapshot).
	 *
	 * resumed: the VM is about to run again after a pause that stopped it for
	 * paused_ns: a deadline the device keeps for its guest (an answer it awaits)
	 * moves on by as much, since the guest could do nothing meanwhile. Called before
	 * the event thread starts again. */
	int (*quiesce)(struct vdev *dev, int64_t stall_ns);
	int (*save)(struct vdev *dev, struct snap_writer *w);
	int (*load)(struct vdev *dev, struct snap_reader *r, uint32_t status);
	void (*restored)(struct vdev *dev);
	void (*resumed)(struct vdev *dev, uint64_t paused_ns);
};

/* What a device asks of its transport. */
struct vdev_transport_ops {
	void (*signal_used)(void *transport, uint16_t q); /* a used-buffer interrupt */
	void (*signal_config)(void *transport);		  /* a config-change interrupt */
	void (*needs_reset)(void *transport);		  /* the driver broke a rule */
	/* Serve queue q again soon, from the thread that serves notifications, as if the
	 * driver had notified it: for a device that stopped before the ring was empty so
	 * that the VM's other queues get their turn. */
	void (*serve_again)(void *transport, uint16_t q);
};

struct vdev {
	/* Set by the device before the transport is attached. */
	const char *name; /* for messages, e.g. "virtio-blk rootfs" */
	uint32_t device_id;
	uint16_t queue_count;	 /* at most VDEV_MAX_QUEUES */
	uint16_t queue_max_size; /* power of two, at most VIRTQ_MAX_SIZE */
	uint32_t config_size;	 /* bytes of device config space */
	const struct vdev_ops *ops;
	void *impl; /* the device's own state */
	struct guest_memory *mem;

	/* Negotiation results and queues, written by the transport. */
	uint64_t driver_features;
	bool activated;
	/* DEVICE_NEEDS_RESET is set, by the device (vdev_needs_reset) or by the transport
	 * for a driver that broke one of its rules: the device takes nothing more from its
	 * queues until the driver resets it (§2.1.2). Work that comes from the backend (a
	 * frame on the TAP, a host connection's bytes) must check it, since no queue
	 * notification gates it. */
	bool needs_reset;
	unsigned complaints; /* warnings logged about the driver (vdev_complain) */
	struct virtq queues[VDEV_MAX_QUEUES];

	pthread_mutex_t lock;
	const struct vdev_transport_ops *transport_ops;
	void *transport;
};

/* Called by devices, with dev->lock held. */

/* Interrupts the driver for queue q if it asked for it (virtq_should_notify) about the
 * chains pushed since old_used_idx. */
void vdev_notify_used(struct vdev *dev, uint16_t q, uint16_t old_used_idx);

/* The driver broke the protocol: a warning saying what it did (vdev_complain, through
 * log, which may be NULL), and the device stops and waits for a reset (§2.1.2). */
void vdev_needs_reset(struct vdev *dev, const struct mote_log *log, const char *what);

/* Logs a warning about the driver's behaviour through log, as a warning for the first
 * VDEV_COMPLAINTS_MAX of the device's life (the last one says that later ones are not),
 * then at debug level. */
void vdev_complain(struct vdev *dev, const struct mote_log *log, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Whether the device may use its queues: the driver started it (DRIVER_OK) and it does
 * not wait for a reset. */
static inline bool vdev_running(const struct vdev *dev)
{
	return dev->activated && !dev->needs_reset;
}

/* A device's "broken" flag from a state file, loaded with the device status status: a
 * device breaks only once started, and breaking sets DEVICE_NEEDS_RESET, which only a
 * reset clears; so a flag without both marks r failed (a device that drops every
 * request while its driver is never told to reset it). */
bool vdev_load_broken(struct snap_reader *r, uint32_t status);

/* The device left chains in queue q's ring (its budget for one turn is spent, or it
 * waits for room): the transport notifies it again later, through the same checks as
 * the driver's notifications (a queue reset or a device needing a reset meanwhile is
 * not served). */
void vdev_serve_again(struct vdev *dev, uint16_t q);

#endif
