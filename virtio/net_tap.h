/* The host side of virtio-net: a TAP interface the user created beforehand, e.g.
 * `ip tuntap add dev tap0 mode tap user $USER` (mote never creates one). Its fd carries
 * one Ethernet frame per read and per write, each behind the same 12-byte header the
 * guest uses (struct virtio_net_hdr_mrg_rxbuf, virtio 1.2 §5.1.6), so frames go between
 * guest memory and the TAP without being rewritten. */
#ifndef MOTE_VIRTIO_NET_TAP_H
#define MOTE_VIRTIO_NET_TAP_H

#include <stdint.h>

#include "../vmm/log.h"

/* Attaches to the existing TAP interface ifname: /dev/net/tun with IFF_TAP | IFF_NO_PI |
 * IFF_VNET_HDR, nonblocking and close-on-exec, a 12-byte little-endian vnet header, and
 * no offloads until net_tap_set_offloads() (a TAP keeps them from its previous user).
 * Returns the fd, or a negative errno with a message on log naming the interface:
 * -EINVAL (empty or too long a name), -EMEDIUMTYPE (an interface that is not a
 * single-queue TAP), -ENOENT (no
 * /dev/net/tun: is the tun module loaded?), -ENODEV (no such interface), -EPERM or
 * -EACCES (the TAP belongs to another user or group), -EBUSY (another process has it
 * open), others from the host. */
int net_tap_open(const char *ifname, const struct mote_log *log);

/* The TUN_F_* flags for TUNSETOFFLOAD that let the TAP hand over only what the driver
 * accepted (§5.1.6.4): TUN_F_CSUM for VIRTIO_NET_F_GUEST_CSUM and, on top of it only,
 * TUN_F_TSO4/TSO6 for GUEST_TSO4/TSO6 and TUN_F_TSO_ECN for GUEST_ECN with either. */
unsigned net_tap_offload_flags(uint64_t driver_features);

/* Sets the TAP's offloads from the negotiated features (net_tap_offload_flags()).
 * 0 or a negative errno. Fits virtio_net_options.set_offloads. */
int net_tap_set_offloads(int tap_fd, uint64_t driver_features);

#endif
