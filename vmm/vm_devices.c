/* The VM's virtio devices (vm_devices.h). */
#include "vm_devices.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "../virtio/net_tap.h"
#include "clock.h"
#include "vm.h"

/* The disks, in the order given: /dev/vda, /dev/vdb, ... for the guest. The setup has
 * them in the same order; a restored one has their frozen layers too. */
static int vm_create_disks(struct mote_vm *vm, const struct mote_config *config)
{
	for (unsigned i = 0; i < config->disk_count; i++) {
		const struct mote_disk *disk = &config->disks[i];
		const struct vm_setup_disk *setup = &vm->setup.disks[i];
		struct virtio_blk_options options = {
		    .path = disk->path,
		    .read_only = disk->read_only,
		    .id = disk->id,
		    .direct = disk->direct,
		    .overlay = disk->overlay,
		    .overlay_restore = vm->setup.from_snapshot,
		    .layer_count = setup->layer_count,
		    .layers = (const char *const *)setup->layers,
		};
		int ret =
		    virtio_blk_create(&options, &vm->mem, &vm->events, &vm->log, &vm->disks[i]);
		if (ret)
			return ret;
		vm->disk_count++;
		ret = vm_virtio_attach(vm, virtio_blk_vdev(vm->disks[i]));
		if (ret)
			return ret;
	}
	return 0;
}

/* A NIC without a configured address gets a random locally administered unicast one
 * (IEEE 802: bit 1 of the first byte set, bit 0 clear), as Cloud Hypervisor does, so
 * the guest's address is known to the host from the start. */
static void vm_random_mac(uint8_t mac[6])
{
	if (getrandom(mac, 6, GRND_NONBLOCK) != 6) {
		/* No entropy yet: any local address is fine, two VMs just must differ. */
		uint64_t mixed =
		    (uint64_t)clock_now_ns() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid();
		memcpy(mac, &mixed, 6);
	}
	mac[0] = (uint8_t)((mac[0] & ~1u) | 2u);
}

/* The NICs, in the order given: eth0, eth1, ... for the guest. */
static int vm_create_nics(struct mote_vm *vm, const struct mote_config *config)
{
	for (unsigned i = 0; i < config->net_count; i++) {
		const struct mote_net *nic = &config->nets[i];
		int fd = net_tap_open(nic->tap, &vm->log);
		if (fd < 0) {
			/* A TAP that is missing, not ours or not a TAP is a host resource the
			 * user named, like a disk image (exit code 4): not missing KVM
			 * (-ENODEV). A name that cannot be one (-EINVAL) is a bad value. */
			if (fd == -ENODEV)
				return -ENOENT;
			if (fd == -EPERM)
				return -EACCES;
			return fd;
		}
		vm->nic_fds[vm->nic_fd_count++] = fd;
		struct virtio_net_options options = {
		    .tap_fd = fd,
		    .has_mac = true,
		    .set_offloads = net_tap_set_offloads,
		    .name = nic->id ? nic->id : nic->tap,
		};
		if (nic->has_mac)
			memcpy(options.mac, nic->mac, sizeof(options.mac));
		else
			vm_random_mac(options.mac);
		/* A snapshot's guest keeps its address, random or not. */
		memcpy(vm->setup.nets[i].mac, options.mac, sizeof(options.mac));
		int ret =
		    virtio_net_create(&options, &vm->mem, &vm->events, &vm->log, &vm->nics[i]);
		if (ret)
			return ret;
		vm->nic_count++;
		ret = vm_virtio_attach(vm, virtio_net_vdev(vm->nics[i]));
		if (ret)
			return ret;
	}
	return 0;
}

/* The vsock device: its socket is created here, so a path already taken fails now. */
static int vm_create_vsock(struct mote_vm *vm, const struct mote_config *config)
{
	if (config->vsock.guest_cid == 0)
		return 0;
	struct virtio_vsock_options options = {
	    .guest_cid = config->vsock.guest_cid,
	    .uds_path = config->vsock.uds_path,
	};
	int ret = virtio_vsock_create(&options, &vm->mem, &vm->events, &vm->log, &vm->vsock);
	return ret ? ret : vm_virtio_attach(vm, virtio_vsock_vdev(vm->vsock));
}

int vm_devices_create(struct mote_vm *vm, const struct mote_config *config)
{
	unsigned wanted = config->disk_count + config->net_count + (config->vsock.guest_cid != 0);

	if (wanted > VM_VIRTIO_MAX_DEVICES) {
		log_error(&vm->log,
			  "%u disks, network interfaces and vsock: at most %d virtio devices",
			  wanted, VM_VIRTIO_MAX_DEVICES);
		return -EINVAL;
	}
	int ret = vm_create_disks(vm, config);
	if (!ret)
		ret = vm_create_nics(vm, config);
	if (!ret)
		ret = vm_create_vsock(vm, config);
	return ret;
}

void vm_devices_destroy(struct mote_vm *vm)
{
	for (unsigned i = 0; i < vm->disk_count; i++)
		virtio_blk_destroy(vm->disks[i]);
	vm->disk_count = 0;
	for (unsigned i = 0; i < vm->nic_count; i++)
		virtio_net_destroy(vm->nics[i]);
	vm->nic_count = 0;
	/* After the devices: they never close their backend fd. */
	for (unsigned i = 0; i < vm->nic_fd_count; i++)
		close(vm->nic_fds[i]);
	vm->nic_fd_count = 0;
	virtio_vsock_destroy(vm->vsock); /* removes its socket */
	vm->vsock = NULL;
}

/* Device state in a snapshot: a list of the virtio devices first, so that a state file
 * of another machine is refused before anything is loaded, then the legacy devices,
 * then each virtio transport with its device in attach order, every one in a section of
 * its own. The debug port keeps no state (its two values are events). */
#define SNAP_TAG_DEVICES SNAP_TAG('D', 'E', 'V', 'S')
#define SNAP_TAG_SERIAL SNAP_TAG('U', 'A', 'R', 'T')
#define SNAP_TAG_I8042 SNAP_TAG('I', '8', '0', '4')
#define SNAP_TAG_VIRTIO SNAP_TAG('V', 'M', 'M', 'O')

int vm_devices_save(struct mote_vm *vm, struct snap_writer *w)
{
	const struct vm_virtio *virtio = &vm->virtio;
	int ret = 0;

	snap_begin(w, SNAP_TAG_DEVICES);
	snap_put_u32(w, virtio->count);
	for (unsigned i = 0; i < virtio->count; i++)
		snap_put_u32(w, virtio->transports[i].dev->device_id);
	snap_end(w);
	snap_begin(w, SNAP_TAG_SERIAL);
	serial_save(&vm->serial, w);
	snap_end(w);
	snap_begin(w, SNAP_TAG_I8042);
	i8042_save(&vm->i8042, w);
	snap_end(w);
	for (unsigned i = 0; i < virtio->count && !ret; i++) {
		snap_begin(w, SNAP_TAG_VIRTIO);
		snap_put_u32(w, i);
		ret = virtio_mmio_save(&vm->virtio.transports[i], w);
		snap_end(w);
	}
	return ret;
}

/* Ends the load of section s of r: its failure, or bytes left unread, fail r. */
static int vm_devices_section_end(struct snap_reader *r, struct snap_reader *s, int ret)
{
	if (!ret || s->error)
		snap_reader_finish(s);
	if (s->error)
		return snap_fail(r, s->failure);
	return ret;
}

/* The rebuilt VM must have the devices of the snapshot: same count, same kinds. */
static int vm_devices_load_list(struct mote_vm *vm, struct snap_reader *r)
{
	struct snap_reader s;

	snap_section(r, SNAP_TAG_DEVICES, &s);
	uint32_t count = snap_get_u32(&s);
	if (!s.error && count != vm->virtio.count)
		snap_fail(&s, "devices: the snapshot has another number of virtio devices");
	for (unsigned i = 0; i < vm->virtio.count && !s.error; i++) {
		if (snap_get_u32(&s) != vm->virtio.transports[i].dev->device_id && !s.error)
			snap_fail(&s, "devices: the snapshot has virtio devices of other kinds");
	}
	return vm_devices_section_end(r, &s, 0);
}

int vm_devices_load(struct mote_vm *vm, struct snap_reader *r)
{
	struct snap_reader s;
	int ret = vm_devices_load_list(vm, r);

	if (!ret) {
		snap_section(r, SNAP_TAG_SERIAL, &s);
		ret = vm_devices_section_end(r, &s, serial_load(&vm->serial, &s));
	}
	if (!ret) {
		snap_section(r, SNAP_TAG_I8042, &s);
		ret = vm_devices_section_end(r, &s, i8042_load(&vm->i8042, &s));
	}
	for (unsigned i = 0; i < vm->virtio.count && !ret; i++) {
		snap_section(r, SNAP_TAG_VIRTIO, &s);
		if (snap_get_u32(&s) != i && !s.error)
			snap_fail(&s, "devices: virtio devices out of order");
		int loaded = s.error ? -EINVAL : virtio_mmio_load(&vm->virtio.transports[i], &s);
		ret = vm_devices_section_end(r, &s, loaded);
	}
	return ret;
}

int vm_devices_commit_restores(struct mote_vm *const *vms, unsigned count)
{
	unsigned total = 0;

	for (unsigned i = 0; i < count; i++)
		total += vms[i]->disk_count;
	struct virtio_blk **disks = calloc(total ? total : 1, sizeof(*disks));
	if (!disks)
		return -ENOMEM;
	unsigned n = 0;
	for (unsigned i = 0; i < count; i++)
		for (unsigned d = 0; d < vms[i]->disk_count; d++)
			disks[n++] = vms[i]->disks[d];
	int ret = virtio_blk_commit_overlays(disks, n);
	free(disks);
	return ret;
}

void vm_devices_restored(struct mote_vm *vm)
{
	for (unsigned i = 0; i < vm->virtio.count; i++)
		virtio_mmio_restored(&vm->virtio.transports[i]);
}

static bool vm_disk_has_layer(const struct vm_setup_disk *disk, const char *path)
{
	for (unsigned l = 0; l < disk->layer_count; l++) {
		if (strcmp(disk->layers[l], path) == 0)
			return true;
	}
	return false;
}

/* Where disk i's layer of a snapshot at state_path goes: "<state_path>.vdX.layer", made
 * absolute, since the state file records it for restores that may run elsewhere. When
 * the disk's layers already include that name (a snapshot taken again at the same path),
 * ".N" is added: a layer is never overwritten while a snapshot may still need it. */
static int vm_layer_path(struct mote_vm *vm, const struct vm_setup_disk *disk, unsigned i,
			 const char *state_path, char **path_out)
{
	char cwd[PATH_MAX] = "";

	*path_out = NULL;
	if (state_path[0] != '/' && !getcwd(cwd, sizeof(cwd))) {
		int err = -errno;
		log_error(&vm->log, "snapshot %s: the current directory: %s", state_path,
			  strerror(errno));
		return err;
	}
	const char *slash = cwd[0] ? "/" : "";
	char name = (char)('a' + i);
	/* At most VM_SETUP_MAX_LAYERS names are taken: one of these is free. */
	for (unsigned n = 1; n <= VM_SETUP_MAX_LAYERS + 1; n++) {
		char *path;
		int len =
		    n == 1
			? asprintf(&path, "%s%s%s.vd%c.layer", cwd, slash, state_path, name)
			: asprintf(&path, "%s%s%s.vd%c.layer.%u", cwd, slash, state_path, name, n);
		if (len < 0)
			return -ENOMEM;
		if (!vm_disk_has_layer(disk, path)) {
			*path_out = path;
			return 0;
		}
		free(path);
	}
	return -EEXIST;
}

int vm_devices_layer_path(struct mote_vm *vm, unsigned disk, const char *state_path,
			  char **path_out)
{
	*path_out = NULL;
	if (!vm->setup.disks[disk].overlay)
		return 0;
	return vm_layer_path(vm, &vm->setup.disks[disk], disk, state_path, path_out);
}

int vm_devices_freeze_disks(struct mote_vm *vm, const char *state_path)
{
	for (unsigned i = 0; i < vm->disk_count; i++) {
		const struct vm_setup_disk *disk = &vm->setup.disks[i];
		if (!disk->overlay)
			continue;
		/* A full chain starts over from one layer holding all the overlay holds. */
		bool whole = disk->layer_count == VM_SETUP_MAX_LAYERS;
		char *layer;
		int ret = vm_layer_path(vm, disk, i, state_path, &layer);
		if (!ret)
			ret = virtio_blk_freeze_overlay(vm->disks[i], layer, whole);
		if (ret) {
			free(layer);
			return ret;
		}
		vm_setup_put_layer(&vm->setup, i, layer, whole);
	}
	return 0;
}
