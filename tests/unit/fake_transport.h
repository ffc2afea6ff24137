/* The transport a device model sees in the unit tests: it counts the device's
 * used-buffer interrupts per queue, its needs-reset requests, its requests to be
 * served again (which the test's driver answers by notifying the queue), and its
 * configuration change notifications. A test attaches it in place of virtio-mmio, so a
 * device runs with no KVM and no registers. And the log a test gives the device: it
 * keeps the last message, for a test to read. */
#ifndef MOTE_TESTS_FAKE_TRANSPORT_H
#define MOTE_TESTS_FAKE_TRANSPORT_H

#include "virtio/vdev.h"
#include "vmm/log.h"

#define FAKE_TRANSPORT_QUEUES 3 /* the most any device under test has (virtio-vsock) */
#define FAKE_LOG_TEXT 512

/* What the device told its transport. */
struct fake_transport {
	int interrupts[FAKE_TRANSPORT_QUEUES];	/* signal_used calls, by queue */
	int needs_reset;			/* needs_reset calls */
	int serve_again[FAKE_TRANSPORT_QUEUES]; /* serve_again calls, by queue */
	int config_changes;			/* signal_config calls */
};

/* Makes transport the one dev signals; the counts are left as they are. */
void fake_transport_attach(struct vdev *dev, struct fake_transport *transport);

/* A log that copies each message into *text, replacing the one before. */
struct mote_log fake_log(char (*text)[FAKE_LOG_TEXT]);

#endif
