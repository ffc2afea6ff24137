/* The device the virtio-vsock fuzz targets share: virtio-vsock with its socket in a
 * directory of its own, behind virtio-mmio as fuzz_mmio_driver.h brings devices up, and
 * the AF_UNIX sockets of the host programs on its other side. */
#ifndef MOTE_TESTS_FUZZ_VSOCK_DEVICE_H
#define MOTE_TESTS_FUZZ_VSOCK_DEVICE_H

#include <stdbool.h>

#include "fuzz_mmio_driver.h"
#include "virtio/vsock.h"

#define FUZZ_VSOCK_GUEST_CID 3

/* Once per process: a new directory under /tmp, removed at exit with every socket in it,
 * and the device of guest CID FUZZ_VSOCK_GUEST_CID, with timeouts of timeout_ms,
 * listening there on *uds_path, its sockets watched on loop, attached to mmio with its
 * three queues' notifiers on loop. 0, or -1 (the host's failure, not an input's). */
int fuzz_vsock_device_create(struct guest_memory *mem, struct event_loop *loop, unsigned timeout_ms,
			     struct virtio_vsock **vsock, struct virtio_mmio *mmio,
			     const char **uds_path);

/* A non-blocking AF_UNIX stream socket connected to path or, with listen_there,
 * listening there: its fd, or -1. */
int fuzz_unix_socket(const char *path, bool listen_there);

#endif
