/* The device side of the device/transport seam (vdev.h). */
#include "vdev.h"

#include <stdarg.h>
#include <stdio.h>

#include "../vmm/snapshot_stream.h"

#define VDEV_COMPLAINT_TEXT 512

void vdev_notify_used(struct vdev *dev, uint16_t q, uint16_t old_used_idx)
{
	if (q >= dev->queue_count || !dev->transport_ops)
		return;
	if (virtq_should_notify(&dev->queues[q], old_used_idx))
		dev->transport_ops->signal_used(dev->transport, q);
}

void vdev_complain(struct vdev *dev, const struct mote_log *log, const char *fmt, ...)
{
	char message[VDEV_COMPLAINT_TEXT];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(message, sizeof(message), fmt, ap);
	va_end(ap);
	if (dev->complaints >= VDEV_COMPLAINTS_MAX) {
		log_debug(log, "%s", message);
		return;
	}
	dev->complaints++;
	log_warn(log, "%s%s", message,
		 dev->complaints == VDEV_COMPLAINTS_MAX
		     ? " (further warnings about this driver are logged at debug level)"
		     : "");
}

void vdev_needs_reset(struct vdev *dev, const struct mote_log *log, const char *what)
{
	vdev_complain(dev, log, "%s: %s; the device needs a reset", dev->name, what);
	dev->needs_reset = true;
	if (dev->transport_ops)
		dev->transport_ops->needs_reset(dev->transport);
}

bool vdev_load_broken(struct snap_reader *r, uint32_t status)
{
	const uint32_t started_and_told =
	    VIRTIO_STATUS_DRIVER_OK | VIRTIO_STATUS_DEVICE_NEEDS_RESET;
	bool broken = snap_get_bool(r);

	if (broken && (status & started_and_told) != started_and_told)
		snap_fail(r, "virtio: a device broken without asking its driver for a reset");
	return broken;
}

void vdev_serve_again(struct vdev *dev, uint16_t q)
{
	if (q < dev->queue_count && dev->transport_ops)
		dev->transport_ops->serve_again(dev->transport, q);
}
