/* The virtio-mmio transport in a snapshot (mmio.h: virtio_mmio_save/load): what the
 * driver wrote into the registers and each queue's serialisable state (virtqueue.h),
 * followed by the device's own state (vdev_ops.save/load). A state file is input like
 * any other: a load accepts only what the register path could have produced, so a
 * restored device never runs on state a driver could not have set up. */
#include <errno.h>
#include <string.h>

#include "mmio.h"

/* The transport's part of a saved device, read and checked before any of it is used. */
struct mmio_saved {
	uint32_t status;
	uint32_t device_features_sel;
	uint32_t driver_features_sel;
	uint32_t queue_sel;
	uint32_t interrupt_status;
	uint32_t config_generation;
	uint64_t driver_features;
	bool activated;
	struct virtio_mmio_queue_regs regs[VDEV_MAX_QUEUES];
	struct virtq queues[VDEV_MAX_QUEUES];
};

int virtio_mmio_quiesce(struct virtio_mmio *mmio, int64_t stall_ns)
{
	struct vdev *dev = mmio->dev;
	int err = 0;

	pthread_mutex_lock(&dev->lock);
	if (dev->ops->quiesce)
		err = dev->ops->quiesce(dev, stall_ns);
	pthread_mutex_unlock(&dev->lock);
	return err;
}

void virtio_mmio_resumed(struct virtio_mmio *mmio, uint64_t paused_ns)
{
	struct vdev *dev = mmio->dev;

	if (!dev->ops->resumed)
		return;
	pthread_mutex_lock(&dev->lock);
	dev->ops->resumed(dev, paused_ns);
	pthread_mutex_unlock(&dev->lock);
}

static void mmio_put_queue(struct snap_writer *w, const struct virtio_mmio_queue_regs *regs,
			   const struct virtq *q)
{
	snap_put_u32(w, regs->num);
	snap_put_u64(w, regs->desc);
	snap_put_u64(w, regs->driver);
	snap_put_u64(w, regs->device);
	snap_put_bool(w, q->ready);
	snap_put_u16(w, q->size);
	snap_put_u16(w, q->last_avail_idx);
	snap_put_u16(w, q->used_idx);
	snap_put_bool(w, q->event_idx);
	snap_put_u64(w, q->desc_addr);
	snap_put_u64(w, q->avail_addr);
	snap_put_u64(w, q->used_addr);
}

int virtio_mmio_save(struct virtio_mmio *mmio, struct snap_writer *w)
{
	struct vdev *dev = mmio->dev;
	int ret = 0;

	pthread_mutex_lock(&dev->lock);
	/* What the device is, so that a load into another one is refused. */
	snap_put_u32(w, dev->device_id);
	snap_put_u16(w, dev->queue_count);
	snap_put_u32(w, mmio->status);
	snap_put_u32(w, mmio->device_features_sel);
	snap_put_u32(w, mmio->driver_features_sel);
	snap_put_u32(w, mmio->queue_sel);
	snap_put_u32(w, mmio->interrupt_status);
	snap_put_u32(w, mmio->config_generation);
	snap_put_u64(w, mmio->driver_features);
	snap_put_bool(w, dev->activated);
	for (unsigned q = 0; q < dev->queue_count; q++)
		mmio_put_queue(w, &mmio->queue_regs[q], &dev->queues[q]);
	if (dev->ops->save)
		ret = dev->ops->save(dev, w);
	pthread_mutex_unlock(&dev->lock);
	return ret;
}

static void mmio_get_queue(struct snap_reader *r, struct virtio_mmio_queue_regs *regs,
			   struct virtq *q)
{
	regs->num = snap_get_u32(r);
	regs->desc = snap_get_u64(r);
	regs->driver = snap_get_u64(r);
	regs->device = snap_get_u64(r);
	*q = (struct virtq){0};
	q->ready = snap_get_bool(r);
	q->size = snap_get_u16(r);
	q->last_avail_idx = snap_get_u16(r);
	q->used_idx = snap_get_u16(r);
	q->event_idx = snap_get_bool(r);
	q->desc_addr = snap_get_u64(r);
	q->avail_addr = snap_get_u64(r);
	q->used_addr = snap_get_u64(r);
}

/* The status state machine of mmio.c, as a set of rules on where it can stand. */
static const char *mmio_status_problem(const struct virtio_mmio *mmio, const struct mmio_saved *s)
{
	uint64_t offered = virtio_mmio_offered_features(mmio);
	bool features_ok = s->status & VIRTIO_STATUS_FEATURES_OK;
	bool driver_ok = s->status & VIRTIO_STATUS_DRIVER_OK;
	bool failed = s->status & VIRTIO_STATUS_FAILED;

	if (s->status & ~VIRTIO_STATUS_DEFINED)
		return "virtio-mmio: unknown device status bits";
	if (driver_ok && !features_ok)
		return "virtio-mmio: DRIVER_OK without FEATURES_OK";
	/* §3.1.1: FEATURES_OK stays only for a subset of the offer with VERSION_1. */
	if (features_ok &&
	    ((s->driver_features & ~offered) || !(s->driver_features & VIRTIO_FEATURE_VERSION_1)))
		return "virtio-mmio: negotiated features the device does not offer";
	/* A driver may give up (FAILED) on a started device; it stays started. */
	if (s->activated && !driver_ok)
		return "virtio-mmio: a started device without DRIVER_OK";
	/* DRIVER_OK without a start is only a device that failed to start. */
	if (driver_ok && !failed && !s->activated &&
	    !(s->status & VIRTIO_STATUS_DEVICE_NEEDS_RESET))
		return "virtio-mmio: DRIVER_OK on a device that never started";
	if (s->interrupt_status & ~(VIRTIO_MMIO_INT_VRING | VIRTIO_MMIO_INT_CONFIG))
		return "virtio-mmio: unknown interrupt status bits";
	return NULL;
}

/* Reads the transport's fields and checks them; the queues' rings are checked when
 * they are applied (virtq_restore). */
static int mmio_read_saved(struct virtio_mmio *mmio, struct snap_reader *r, struct mmio_saved *s)
{
	const struct vdev *dev = mmio->dev;

	uint32_t device_id = snap_get_u32(r);
	uint16_t queue_count = snap_get_u16(r);
	if (!r->error && (device_id != dev->device_id || queue_count != dev->queue_count))
		return snap_fail(r, "virtio-mmio: the saved device is of another kind");
	s->status = snap_get_u32(r);
	s->device_features_sel = snap_get_u32(r);
	s->driver_features_sel = snap_get_u32(r);
	s->queue_sel = snap_get_u32(r);
	s->interrupt_status = snap_get_u32(r);
	s->config_generation = snap_get_u32(r);
	s->driver_features = snap_get_u64(r);
	s->activated = snap_get_bool(r);
	for (unsigned q = 0; q < dev->queue_count; q++)
		mmio_get_queue(r, &s->regs[q], &s->queues[q]);
	if (r->error)
		return -EINVAL;
	const char *problem = mmio_status_problem(mmio, s);
	if (problem)
		return snap_fail(r, problem);
	for (unsigned q = 0; q < dev->queue_count; q++) {
		const struct virtq *saved = &s->queues[q];
		/* The register path hands the queue the negotiated EVENT_IDX only. */
		if (saved->ready && saved->size > dev->queue_max_size)
			return snap_fail(r, "virtio-mmio: a queue larger than the device allows");
		if (saved->event_idx && (!(s->status & VIRTIO_STATUS_FEATURES_OK) ||
					 !(s->driver_features & VIRTIO_FEATURE_EVENT_IDX)))
			return snap_fail(r,
					 "virtio-mmio: EVENT_IDX on a queue without the feature");
	}
	return 0;
}

static int mmio_apply(struct virtio_mmio *mmio, const struct mmio_saved *s, struct snap_reader *r)
{
	struct vdev *dev = mmio->dev;

	for (unsigned q = 0; q < dev->queue_count; q++) {
		/* Reattaches the queue to this VM's guest memory. */
		if (virtq_restore(&dev->queues[q], dev->mem, &s->queues[q]) != 0)
			return snap_fail(r, "virtio-mmio: a queue's size, rings or indices are "
					    "out of range");
	}
	mmio->status = s->status;
	mmio->dev->needs_reset = s->status & VIRTIO_STATUS_DEVICE_NEEDS_RESET;
	mmio->device_features_sel = s->device_features_sel;
	mmio->driver_features_sel = s->driver_features_sel;
	mmio->queue_sel = s->queue_sel;
	mmio->interrupt_status = s->interrupt_status;
	mmio->config_generation = s->config_generation;
	mmio->driver_features = s->driver_features;
	memcpy(mmio->queue_regs, s->regs, sizeof(mmio->queue_regs));
	/* mmio.c gives the device the driver's features when FEATURES_OK is accepted. */
	dev->driver_features = (s->status & VIRTIO_STATUS_FEATURES_OK) ? s->driver_features : 0;
	return 0;
}

static int mmio_load_device(struct virtio_mmio *mmio, struct snap_reader *r)
{
	struct vdev *dev = mmio->dev;

	if (!dev->ops->load)
		return 0;
	int ret = dev->ops->load(dev, r, mmio->status);
	/* A device that refused a value without saying so to the reader. */
	if (ret == -EINVAL)
		snap_fail(r, "virtio device state out of range");
	if (!ret && r->error)
		ret = -EINVAL;
	return ret;
}

int virtio_mmio_load(struct virtio_mmio *mmio, struct snap_reader *r)
{
	struct vdev *dev = mmio->dev;
	struct mmio_saved saved;

	pthread_mutex_lock(&dev->lock);
	int ret = mmio_read_saved(mmio, r, &saved);
	/* From power-on, whatever the transport went through before. */
	virtio_mmio_reset(mmio);
	if (!ret)
		ret = mmio_apply(mmio, &saved, r);
	if (!ret)
		ret = mmio_load_device(mmio, r);
	if (!ret && saved.activated) {
		/* The device starts as it did at DRIVER_OK: a new backend (a TAP opened by
		 * this process) learns what the driver negotiated. */
		ret = dev->ops->activate(dev);
		if (ret)
			log_error(mmio->log, "%s: the restored device could not start: %s",
				  dev->name, strerror(-ret));
		else
			dev->activated = true;
	}
	if (ret)
		virtio_mmio_reset(mmio);
	pthread_mutex_unlock(&dev->lock);
	return ret;
}

void virtio_mmio_restored(struct virtio_mmio *mmio)
{
	struct vdev *dev = mmio->dev;

	pthread_mutex_lock(&dev->lock);
	if (dev->ops->restored)
		dev->ops->restored(dev);
	if (vdev_running(dev)) {
		for (unsigned q = 0; q < dev->queue_count; q++)
			if (dev->queues[q].ready)
				virtio_mmio_eventfd_signal(mmio->notifiers[q].fd);
	}
	if (mmio->interrupt_status)
		virtio_mmio_eventfd_signal(mmio->irq_fd);
	pthread_mutex_unlock(&dev->lock);
}
