/* Opening a TAP interface for virtio-net (net_tap.h). */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <net/if.h>

#include <linux/if_tun.h>
#include <linux/virtio_net.h>

#include "net_tap.h"

/* Reports the ioctl that failed with errno and returns it negated. */
static int tap_ioctl_error(const struct mote_log *log, const char *ifname, const char *what)
{
	int err = errno;

	log_error(log, "TAP %s: %s: %s", ifname, what, strerror(err));
	return -err;
}

/* TUNSETIFF attaches to an existing TAP, but creates a fresh one when the name is free
 * and the caller may (CAP_NET_ADMIN): such a TAP would be down, unconfigured and gone
 * at close. The user's TAPs are persistent, so a TAP that is not was made just now. */
static int tap_attach(int fd, const char *ifname, const struct mote_log *log)
{
	struct ifreq ifr = {.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR};

	memcpy(ifr.ifr_name, ifname, strlen(ifname));
	if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
		int err = errno;
		switch (err) {
		case EINVAL:
			log_error(log, "%s is not a single-queue TAP interface", ifname);
			return -EMEDIUMTYPE;
		case EPERM:
		case EACCES:
			log_error(log,
				  "TAP %s: permission denied (it belongs to another user or group; "
				  "create it with `ip tuntap add dev %s mode tap user USER`)",
				  ifname, ifname);
			return -err;
		case EBUSY:
			log_error(log, "TAP %s is in use by another process", ifname);
			return -EBUSY;
		default:
			log_error(log, "TAP %s: TUNSETIFF: %s", ifname, strerror(err));
			return -err;
		}
	}
	if (ioctl(fd, TUNGETIFF, &ifr) != 0)
		return tap_ioctl_error(log, ifname, "TUNGETIFF");
	if (!(ifr.ifr_flags & IFF_PERSIST)) {
		log_error(log, "no TAP interface %s (create it first)", ifname);
		return -ENODEV;
	}
	return 0;
}

/* The header the guest's driver uses with VERSION_1: num_buffers always there (§5.1.6),
 * little-endian whatever the host. */
static int tap_set_vnet_header(int fd, const char *ifname, const struct mote_log *log)
{
	int size = sizeof(struct virtio_net_hdr_mrg_rxbuf);
	int le = 1;

	if (ioctl(fd, TUNSETVNETHDRSZ, &size) != 0)
		return tap_ioctl_error(log, ifname, "TUNSETVNETHDRSZ");
	/* A little-endian host's TAP is little-endian already; only a big-endian one needs
	 * the switch, which every kernel with TUNSETVNETLE has. */
	if (ioctl(fd, TUNSETVNETLE, &le) != 0 && __BYTE_ORDER != __LITTLE_ENDIAN)
		return tap_ioctl_error(log, ifname, "TUNSETVNETLE");
	return 0;
}

int net_tap_open(const char *ifname, const struct mote_log *log)
{
	if (!ifname || !*ifname || strlen(ifname) >= IFNAMSIZ) {
		log_error(log, "TAP name \"%s\" is empty or longer than %d bytes",
			  ifname ? ifname : "", IFNAMSIZ - 1);
		return -EINVAL;
	}
	int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		int err = errno;
		if (err == ENOENT)
			log_error(log, "TAP %s: no /dev/net/tun (is the tun module loaded?)",
				  ifname);
		else
			log_error(log, "TAP %s: cannot open /dev/net/tun: %s", ifname,
				  strerror(err));
		return -err;
	}
	/* Checked first so that a missing TAP is an error, not a new interface. */
	if (if_nametoindex(ifname) == 0) {
		log_error(log, "no TAP interface %s (create it first)", ifname);
		close(fd);
		return -ENODEV;
	}
	int err = tap_attach(fd, ifname, log);
	if (!err)
		err = tap_set_vnet_header(fd, ifname, log);
	if (err) {
		close(fd);
		return err;
	}
	if (ioctl(fd, TUNSETOFFLOAD, 0UL) != 0) {
		err = tap_ioctl_error(log, ifname, "TUNSETOFFLOAD");
		close(fd);
		return err;
	}
	return fd;
}

unsigned net_tap_offload_flags(uint64_t driver_features)
{
	unsigned flags = 0;

	/* The kernel refuses segmentation without checksum offload (and so does §5.1.3.1
	 * for the driver), and ECN without segmentation. */
	if (!(driver_features & (1ULL << VIRTIO_NET_F_GUEST_CSUM)))
		return 0;
	flags |= TUN_F_CSUM;
	if (driver_features & (1ULL << VIRTIO_NET_F_GUEST_TSO4))
		flags |= TUN_F_TSO4;
	if (driver_features & (1ULL << VIRTIO_NET_F_GUEST_TSO6))
		flags |= TUN_F_TSO6;
	if ((flags & (TUN_F_TSO4 | TUN_F_TSO6)) &&
	    (driver_features & (1ULL << VIRTIO_NET_F_GUEST_ECN)))
		flags |= TUN_F_TSO_ECN;
	return flags;
}

int net_tap_set_offloads(int tap_fd, uint64_t driver_features)
{
	unsigned long flags = net_tap_offload_flags(driver_features);

	return ioctl(tap_fd, TUNSETOFFLOAD, flags) == 0 ? 0 : -errno;
}
