/* The counting transport and the last-message log of the unit tests (fake_transport.h). */
#include <stdio.h>

#include "fake_transport.h"

static void fake_signal_used(void *transport, uint16_t q)
{
	/* A queue past the array is no interrupt a test could ask about. */
	if (q < FAKE_TRANSPORT_QUEUES)
		((struct fake_transport *)transport)->interrupts[q]++;
}

static void fake_signal_config(void *transport)
{
	((struct fake_transport *)transport)->config_changes++;
}

static void fake_needs_reset(void *transport)
{
	((struct fake_transport *)transport)->needs_reset++;
}

static void fake_serve_again(void *transport, uint16_t q)
{
	if (q < FAKE_TRANSPORT_QUEUES)
		((struct fake_transport *)transport)->serve_again[q]++;
}

static const struct vdev_transport_ops fake_transport_ops = {
    .signal_used = fake_signal_used,
    .signal_config = fake_signal_config,
    .needs_reset = fake_needs_reset,
    .serve_again = fake_serve_again,
};

void fake_transport_attach(struct vdev *dev, struct fake_transport *transport)
{
	dev->transport_ops = &fake_transport_ops;
	dev->transport = transport;
}

static void capture_log(void *opaque, enum mote_log_level level, const char *message)
{
	(void)level;
	snprintf(opaque, FAKE_LOG_TEXT, "%s", message);
}

struct mote_log fake_log(char (*text)[FAKE_LOG_TEXT])
{
	return (struct mote_log){.fn = capture_log, .opaque = *text};
}
