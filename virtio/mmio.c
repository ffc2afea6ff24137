/* The virtio-mmio transport (mmio.h; virtio 1.2 §4.2). */
#include "mmio.h"

#include <errno.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

void virtio_mmio_eventfd_signal(int fd)
{
	uint64_t one = 1;

	if (fd >= 0 && write(fd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is saturated, so the interrupt is pending anyway. */
	}
}

static void mmio_raise(struct virtio_mmio *mmio, uint32_t cause)
{
	mmio->interrupt_status |= cause;
	virtio_mmio_eventfd_signal(mmio->irq_fd);
}

/* The driver broke a rule: the device stops and asks for a reset (§2.1.2), and a driver
 * that already runs it hears about it through a config-change interrupt. why is logged
 * (once per reset); NULL when the device has said it already (vdev_needs_reset). */
static void mmio_needs_reset(struct virtio_mmio *mmio, const char *why)
{
	if (why && !mmio->complained)
		vdev_complain(mmio->dev, mmio->log, "%s: %s; the device needs a reset",
			      mmio->dev->name, why);
	mmio->complained = true;
	mmio->dev->needs_reset = true;
	if (mmio->status & VIRTIO_STATUS_DEVICE_NEEDS_RESET)
		return;
	mmio->status |= VIRTIO_STATUS_DEVICE_NEEDS_RESET;
	if (mmio->status & VIRTIO_STATUS_DRIVER_OK)
		mmio_raise(mmio, VIRTIO_MMIO_INT_CONFIG);
}

/* Transport operations the device calls (with dev->lock held). */

static void mmio_signal_used(void *transport, uint16_t q)
{
	(void)q; /* virtio-mmio has one interrupt for every queue */
	mmio_raise(transport, VIRTIO_MMIO_INT_VRING);
}

static void mmio_signal_config(void *transport)
{
	struct virtio_mmio *mmio = transport;

	/* The generation changes whenever the config does (§2.5.1). A driver that runs the
	 * device is interrupted; one still at its probe, which may have read the config
	 * already, finds the cause latched in InterruptStatus and is interrupted when it
	 * sets DRIVER_OK (mmio_write_status); with no driver yet, the one to come reads
	 * the config afresh. The latch is InterruptStatus itself, which snapshots keep. */
	mmio->config_generation++;
	if (mmio->status & VIRTIO_STATUS_DRIVER_OK)
		mmio_raise(mmio, VIRTIO_MMIO_INT_CONFIG);
	else if (mmio->status)
		mmio->interrupt_status |= VIRTIO_MMIO_INT_CONFIG;
}

static void mmio_device_needs_reset(void *transport)
{
	mmio_needs_reset(transport, NULL);
}

/* Through the queue's notifier, which the event thread serves: the same path as a
 * QueueNotify, after the other fds ready in this round. */
static void mmio_serve_again(void *transport, uint16_t q)
{
	struct virtio_mmio *mmio = transport;

	virtio_mmio_eventfd_signal(mmio->notifiers[q].fd);
}

static const struct vdev_transport_ops mmio_transport_ops = {
    .signal_used = mmio_signal_used,
    .signal_config = mmio_signal_config,
    .needs_reset = mmio_device_needs_reset,
    .serve_again = mmio_serve_again,
};

uint64_t virtio_mmio_offered_features(const struct virtio_mmio *mmio)
{
	return mmio->dev->ops->features(mmio->dev) | VIRTIO_FEATURE_VERSION_1;
}

/* Back to the state after power-on (§2.4): the device forgets its queues and what was
 * negotiated. */
void virtio_mmio_reset(struct virtio_mmio *mmio)
{
	struct vdev *dev = mmio->dev;

	dev->ops->reset(dev);
	for (unsigned q = 0; q < dev->queue_count; q++)
		virtq_reset(&dev->queues[q]);
	dev->activated = false;
	dev->needs_reset = false;
	dev->driver_features = 0;
	mmio->status = 0;
	mmio->device_features_sel = 0;
	mmio->driver_features_sel = 0;
	mmio->queue_sel = 0;
	mmio->interrupt_status = 0;
	mmio->driver_features = 0;
	memset(mmio->queue_regs, 0, sizeof(mmio->queue_regs));
	mmio->complained = false;
}

/* FEATURES_OK is kept only for a subset of what was offered that includes VERSION_1;
 * otherwise the driver reads it back unset and gives up (§2.2.2, §3.1.1). */
static bool mmio_features_acceptable(const struct virtio_mmio *mmio)
{
	uint64_t offered = virtio_mmio_offered_features(mmio);

	return (mmio->driver_features & ~offered) == 0 &&
	       (mmio->driver_features & VIRTIO_FEATURE_VERSION_1);
}

static void mmio_write_status(struct virtio_mmio *mmio, uint32_t value)
{
	struct vdev *dev = mmio->dev;

	if (value == 0) {
		virtio_mmio_reset(mmio);
		return;
	}
	/* DEVICE_NEEDS_RESET is the device's bit (§2.1): what the driver writes there
	 * changes nothing, so the bit always says whether the device stopped. Reserved
	 * bits are not kept either: a driver that sets one reads it back clear, and no
	 * status is held that a snapshot's loader (mmio_state.c) would refuse. */
	value = (value & VIRTIO_STATUS_DEFINED & ~VIRTIO_STATUS_DEVICE_NEEDS_RESET) |
		(mmio->status & VIRTIO_STATUS_DEVICE_NEEDS_RESET);
	uint32_t added = value & ~mmio->status;

	/* §2.1.2: the driver never clears a bit; a write that tries is ignored. */
	if (mmio->status & ~value) {
		mmio_needs_reset(mmio, "the driver cleared a device status bit");
		return;
	}
	if (added & VIRTIO_STATUS_FEATURES_OK) {
		if (!mmio_features_acceptable(mmio))
			value &= ~VIRTIO_STATUS_FEATURES_OK;
		else
			dev->driver_features = mmio->driver_features;
	}
	if ((added & VIRTIO_STATUS_DRIVER_OK) && !(value & VIRTIO_STATUS_FEATURES_OK)) {
		mmio->status = value & ~VIRTIO_STATUS_DRIVER_OK;
		mmio_needs_reset(mmio, "DRIVER_OK before FEATURES_OK");
		return;
	}
	mmio->status = value;
	if ((added & VIRTIO_STATUS_DRIVER_OK) && !(value & VIRTIO_STATUS_FAILED)) {
		if (dev->ops->activate(dev) < 0) {
			mmio_needs_reset(mmio, "the device could not start");
		} else {
			dev->activated = true;
			/* A config change during the driver's probe (mmio_signal_config). */
			if (mmio->interrupt_status & VIRTIO_MMIO_INT_CONFIG)
				mmio_raise(mmio, VIRTIO_MMIO_INT_CONFIG);
		}
	}
}

static bool mmio_queue_selected(const struct virtio_mmio *mmio)
{
	return mmio->queue_sel < mmio->dev->queue_count;
}

static void mmio_set_half(uint64_t *value, bool high, uint32_t half)
{
	if (high)
		*value = (*value & 0xffffffffULL) | ((uint64_t)half << 32);
	else
		*value = (*value & ~0xffffffffULL) | half;
}

/* QueueReady = 1 hands the ring addresses to the virtqueue, which checks them. */
static void mmio_write_queue_ready(struct virtio_mmio *mmio, uint32_t value)
{
	struct vdev *dev = mmio->dev;
	struct virtq *q = &dev->queues[mmio->queue_sel];
	const struct virtio_mmio_queue_regs *regs = &mmio->queue_regs[mmio->queue_sel];

	if (!value && q->ready && dev->activated) {
		/* A live device may hold the queue's buffers (requests in flight, a stash of
		 * receive buffers) and has no way to give them up one queue at a time
		 * (mote offers no VIRTIO_F_RING_RESET). Left as it is, with the device
		 * waiting for the reset that gives everything back. */
		mmio_needs_reset(mmio, "the driver disabled a queue the running device uses");
		return;
	}
	if (!value) {
		virtq_reset(q);
		return;
	}
	/* Again on a ready queue: its indices stay (§4.2.2.3, the queue's registers change
	 * only while it is not ready). */
	if (q->ready)
		return;
	if (regs->num > dev->queue_max_size ||
	    virtq_configure(q, dev->mem, (uint16_t)regs->num, regs->desc, regs->driver,
			    regs->device, dev->driver_features & VIRTIO_FEATURE_EVENT_IDX) < 0)
		mmio_needs_reset(mmio, "the driver set up a queue outside the rules");
}

static void mmio_write_queue_reg(struct virtio_mmio *mmio, uint64_t offset, uint32_t value)
{
	struct virtio_mmio_queue_regs *regs = &mmio->queue_regs[mmio->queue_sel];

	/* §4.2.2.3: queue registers change only while the queue is not ready. */
	if (mmio->dev->queues[mmio->queue_sel].ready)
		return;
	switch (offset) {
	case VIRTIO_MMIO_QUEUE_NUM:
		regs->num = value;
		break;
	case VIRTIO_MMIO_QUEUE_DESC_LOW:
	case VIRTIO_MMIO_QUEUE_DESC_HIGH:
		mmio_set_half(&regs->desc, offset == VIRTIO_MMIO_QUEUE_DESC_HIGH, value);
		break;
	case VIRTIO_MMIO_QUEUE_DRIVER_LOW:
	case VIRTIO_MMIO_QUEUE_DRIVER_HIGH:
		mmio_set_half(&regs->driver, offset == VIRTIO_MMIO_QUEUE_DRIVER_HIGH, value);
		break;
	case VIRTIO_MMIO_QUEUE_DEVICE_LOW:
	case VIRTIO_MMIO_QUEUE_DEVICE_HIGH:
		mmio_set_half(&regs->device, offset == VIRTIO_MMIO_QUEUE_DEVICE_HIGH, value);
		break;
	}
}

static uint32_t mmio_read_register(struct virtio_mmio *mmio, uint64_t offset)
{
	struct vdev *dev = mmio->dev;

	switch (offset) {
	case VIRTIO_MMIO_MAGIC_VALUE:
		return VIRTIO_MMIO_MAGIC;
	case VIRTIO_MMIO_VERSION:
		return 2;
	case VIRTIO_MMIO_DEVICE_ID:
		return dev->device_id;
	case VIRTIO_MMIO_VENDOR_ID:
		return VIRTIO_MMIO_VENDOR;
	case VIRTIO_MMIO_DEVICE_FEATURES:
		if (mmio->device_features_sel > 1)
			return 0;
		return (uint32_t)(virtio_mmio_offered_features(mmio) >>
				  (32 * mmio->device_features_sel));
	case VIRTIO_MMIO_QUEUE_NUM_MAX:
		return mmio_queue_selected(mmio) ? dev->queue_max_size : 0;
	case VIRTIO_MMIO_QUEUE_READY:
		return mmio_queue_selected(mmio) && dev->queues[mmio->queue_sel].ready;
	case VIRTIO_MMIO_INTERRUPT_STATUS:
		return mmio->interrupt_status;
	case VIRTIO_MMIO_STATUS:
		return mmio->status;
	case VIRTIO_MMIO_SHM_LEN_LOW:
	case VIRTIO_MMIO_SHM_LEN_HIGH:
		return 0xffffffffu; /* no shared memory regions (§4.2.2: length -1) */
	case VIRTIO_MMIO_CONFIG_GENERATION:
		return mmio->config_generation;
	default:
		return 0; /* write-only and reserved registers read as zero */
	}
}

static void mmio_write_register(struct virtio_mmio *mmio, uint64_t offset, uint32_t value)
{
	switch (offset) {
	case VIRTIO_MMIO_DEVICE_FEATURES_SEL:
		mmio->device_features_sel = value;
		break;
	case VIRTIO_MMIO_DRIVER_FEATURES:
		/* Features are fixed once FEATURES_OK is set (§3.1.1). */
		if (!(mmio->status & VIRTIO_STATUS_FEATURES_OK) && mmio->driver_features_sel <= 1)
			mmio_set_half(&mmio->driver_features, mmio->driver_features_sel == 1,
				      value);
		break;
	case VIRTIO_MMIO_DRIVER_FEATURES_SEL:
		mmio->driver_features_sel = value;
		break;
	case VIRTIO_MMIO_QUEUE_SEL:
		mmio->queue_sel = value;
		break;
	case VIRTIO_MMIO_QUEUE_READY:
		if (mmio_queue_selected(mmio))
			mmio_write_queue_ready(mmio, value);
		break;
	case VIRTIO_MMIO_QUEUE_NOTIFY:
		/* Normally KVM's ioeventfd takes this write; when it reaches us, hand it to
		 * the event thread the same way, so queues are only ever served there. */
		if (value < mmio->dev->queue_count)
			virtio_mmio_eventfd_signal(mmio->notifiers[value].fd);
		break;
	case VIRTIO_MMIO_INTERRUPT_ACK:
		mmio->interrupt_status &= ~value;
		break;
	case VIRTIO_MMIO_STATUS:
		mmio_write_status(mmio, value);
		break;
	case VIRTIO_MMIO_QUEUE_NUM:
	case VIRTIO_MMIO_QUEUE_DESC_LOW:
	case VIRTIO_MMIO_QUEUE_DESC_HIGH:
	case VIRTIO_MMIO_QUEUE_DRIVER_LOW:
	case VIRTIO_MMIO_QUEUE_DRIVER_HIGH:
	case VIRTIO_MMIO_QUEUE_DEVICE_LOW:
	case VIRTIO_MMIO_QUEUE_DEVICE_HIGH:
		if (mmio_queue_selected(mmio))
			mmio_write_queue_reg(mmio, offset, value);
		break;
	default:
		break; /* read-only and reserved registers ignore writes */
	}
}

/* Device config space: any width the driver likes, inside config_size. */
static void mmio_access_config(struct virtio_mmio *mmio, uint64_t offset, uint8_t *data,
			       uint32_t len, bool is_write)
{
	struct vdev *dev = mmio->dev;

	if (offset > dev->config_size || len > dev->config_size - offset) {
		if (!is_write)
			memset(data, 0, len);
		return;
	}
	if (is_write)
		dev->ops->config_write(dev, (uint32_t)offset, data, len);
	else
		dev->ops->config_read(dev, (uint32_t)offset, data, len);
}

void virtio_mmio_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len, bool is_write)
{
	struct virtio_mmio *mmio = opaque;
	struct vdev *dev = mmio->dev;
	uint32_t value;

	pthread_mutex_lock(&dev->lock);
	if (offset >= VIRTIO_MMIO_CONFIG) {
		mmio_access_config(mmio, offset - VIRTIO_MMIO_CONFIG, data, len, is_write);
	} else if (len != 4 || offset % 4) {
		/* §4.2.2.2: control registers are accessed 32 bits wide and aligned only. */
		if (!is_write)
			memset(data, 0, len);
	} else if (is_write) {
		memcpy(&value, data, sizeof(value));
		mmio_write_register(mmio, offset, value);
	} else {
		value = mmio_read_register(mmio, offset);
		memcpy(data, &value, sizeof(value));
	}
	pthread_mutex_unlock(&dev->lock);
}

void virtio_mmio_notify_handler(void *opaque)
{
	struct virtio_mmio_notifier *notifier = opaque;
	struct virtio_mmio *mmio = notifier->mmio;
	struct vdev *dev = mmio->dev;
	uint64_t count;

	if (read(notifier->fd, &count, sizeof(count)) < 0) {
		/* EAGAIN: another wakeup consumed it; the queue is served below anyway. */
	}
	pthread_mutex_lock(&dev->lock);
	if (vdev_running(dev) && dev->queues[notifier->queue].ready)
		dev->ops->queue_notify(dev, notifier->queue);
	pthread_mutex_unlock(&dev->lock);
}

int virtio_mmio_init(struct virtio_mmio *mmio, struct vdev *dev, uint64_t base, uint32_t irq,
		     const struct mote_log *log)
{
	memset(mmio, 0, sizeof(*mmio));
	mmio->dev = dev;
	mmio->base = base;
	mmio->irq = irq;
	mmio->log = log;
	mmio->irq_fd = -1;
	for (unsigned q = 0; q < VDEV_MAX_QUEUES; q++)
		mmio->notifiers[q] =
		    (struct virtio_mmio_notifier){.mmio = mmio, .queue = q, .fd = -1};
	if (dev->queue_count == 0 || dev->queue_count > VDEV_MAX_QUEUES)
		return -EINVAL;

	mmio->irq_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (mmio->irq_fd < 0)
		return -errno;
	for (unsigned q = 0; q < dev->queue_count; q++) {
		mmio->notifiers[q].fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (mmio->notifiers[q].fd < 0) {
			int err = -errno;
			virtio_mmio_destroy(mmio);
			return err;
		}
	}
	dev->transport_ops = &mmio_transport_ops;
	dev->transport = mmio;
	return 0;
}

void virtio_mmio_destroy(struct virtio_mmio *mmio)
{
	if (mmio->irq_fd >= 0)
		close(mmio->irq_fd);
	mmio->irq_fd = -1;
	for (unsigned q = 0; q < VDEV_MAX_QUEUES; q++) {
		if (mmio->notifiers[q].fd >= 0)
			close(mmio->notifiers[q].fd);
		mmio->notifiers[q].fd = -1;
	}
}
