/* The device side of the device/transport seam (vdev.h). */
#include "vdev.h"

void vdev_notify_used(struct vdev *dev, uint16_t q, uint16_t old_used_idx)
{
	if (q >= dev->queue_count || !dev->transport_ops)
		return;
	if (virtq_should_notify(&dev->queues[q], old_used_idx))
		dev->transport_ops->signal_used(dev->transport, q);
}

void vdev_needs_reset(struct vdev *dev)
{
	if (dev->transport_ops)
		dev->transport_ops->needs_reset(dev->transport);
}

void vdev_serve_again(struct vdev *dev, uint16_t q)
{
	if (q < dev->queue_count && dev->transport_ops)
		dev->transport_ops->serve_again(dev->transport, q);
}
