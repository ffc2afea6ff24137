/* The setup a snapshot records (vm_setup.h). */
#include "vm_setup.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int vm_setup_set(char **field, const char *value)
{
	char *copy = NULL;

	if (value && !(copy = strdup(value)))
		return -ENOMEM;
	free(*field);
	*field = copy;
	return 0;
}

int vm_setup_from_config(struct vm_setup *setup, const struct mote_config *config)
{
	int ret = 0;

	memset(setup, 0, sizeof(*setup));
	setup->cpus = config->cpus;
	setup->mem_bytes = config->mem_bytes;
	setup->disk_count = config->disk_count;
	for (unsigned i = 0; i < config->disk_count && !ret; i++) {
		const struct mote_disk *from = &config->disks[i];
		struct vm_setup_disk *disk = &setup->disks[i];
		disk->read_only = from->read_only;
		disk->root = from->root;
		disk->direct = from->direct;
		ret = vm_setup_set(&disk->path, from->path);
		if (!ret)
			ret = vm_setup_set(&disk->id, from->id);
		if (!ret)
			ret = vm_setup_set(&disk->overlay, from->overlay);
	}
	setup->net_count = config->net_count;
	for (unsigned i = 0; i < config->net_count && !ret; i++) {
		memcpy(setup->nets[i].mac, config->nets[i].mac, 6);
		ret = vm_setup_set(&setup->nets[i].tap, config->nets[i].tap);
		if (!ret)
			ret = vm_setup_set(&setup->nets[i].id, config->nets[i].id);
	}
	setup->vsock_cid = config->vsock.guest_cid;
	if (!ret && config->vsock.guest_cid)
		ret = vm_setup_set(&setup->vsock_uds_path, config->vsock.uds_path);
	if (ret)
		vm_setup_free(setup);
	return ret;
}

void vm_setup_to_config(const struct vm_setup *setup, struct mote_config *config)
{
	config->cpus = setup->cpus;
	config->mem_bytes = setup->mem_bytes;
	config->disk_count = setup->disk_count;
	for (unsigned i = 0; i < setup->disk_count; i++) {
		const struct vm_setup_disk *disk = &setup->disks[i];
		config->disks[i] = (struct mote_disk){
		    .path = disk->path,
		    .id = disk->id,
		    .overlay = disk->overlay,
		    .read_only = disk->read_only,
		    .root = disk->root,
		    .direct = disk->direct,
		};
	}
	config->net_count = setup->net_count;
	for (unsigned i = 0; i < setup->net_count; i++) {
		config->nets[i] = (struct mote_net){
		    .tap = setup->nets[i].tap, .id = setup->nets[i].id, .has_mac = true};
		memcpy(config->nets[i].mac, setup->nets[i].mac, 6);
	}
	config->vsock.guest_cid = setup->vsock_cid;
	config->vsock.uds_path = setup->vsock_uds_path;
}

void vm_setup_save(const struct vm_setup *setup, struct snap_writer *w)
{
	snap_begin(w, SNAP_TAG_SETUP);
	snap_put_u32(w, setup->cpus);
	snap_put_u64(w, setup->mem_bytes);
	snap_put_u32(w, setup->disk_count);
	for (unsigned i = 0; i < setup->disk_count; i++) {
		const struct vm_setup_disk *disk = &setup->disks[i];
		snap_put_str(w, disk->path);
		snap_put_str(w, disk->id);
		snap_put_str(w, disk->overlay);
		snap_put_bool(w, disk->read_only);
		snap_put_bool(w, disk->root);
		snap_put_bool(w, disk->direct);
		snap_put_u32(w, disk->layer_count);
		for (unsigned l = 0; l < disk->layer_count; l++)
			snap_put_str(w, disk->layers[l]);
	}
	snap_put_u32(w, setup->net_count);
	for (unsigned i = 0; i < setup->net_count; i++) {
		snap_put_str(w, setup->nets[i].tap);
		snap_put_str(w, setup->nets[i].id);
		snap_put_bytes(w, setup->nets[i].mac, 6);
	}
	snap_put_u32(w, setup->vsock_cid);
	snap_put_str(w, setup->vsock_uds_path);
	snap_end(w);
}

/* A string field: NULL stays NULL; a copy otherwise. */
static char *setup_get_str(struct snap_reader *r)
{
	char buf[PATH_MAX];

	if (!snap_get_str(r, buf, sizeof(buf)))
		return NULL;
	char *copy = strdup(buf);
	if (!copy)
		snap_fail(r, "out of memory");
	return copy;
}

void vm_setup_load(struct vm_setup *setup, struct snap_reader *r)
{
	struct snap_reader s;

	memset(setup, 0, sizeof(*setup));
	snap_section(r, SNAP_TAG_SETUP, &s);
	setup->cpus = snap_get_u32(&s);
	setup->mem_bytes = snap_get_u64(&s);
	if (!s.error && (setup->cpus < 1 || setup->cpus > MOTE_MAX_CPUS))
		snap_fail(&s, "setup: vCPU count out of range");
	if (!s.error && (setup->mem_bytes < (16ULL << 20) || setup->mem_bytes > (1ULL << 40) ||
			 setup->mem_bytes % (2ULL << 20)))
		snap_fail(&s, "setup: memory size out of range");
	setup->disk_count = snap_get_u32(&s);
	if (setup->disk_count > MOTE_MAX_DISKS) {
		setup->disk_count = 0;
		snap_fail(&s, "setup: too many disks");
	}
	for (unsigned i = 0; i < setup->disk_count && !s.error; i++) {
		struct vm_setup_disk *disk = &setup->disks[i];
		disk->path = setup_get_str(&s);
		disk->id = setup_get_str(&s);
		disk->overlay = setup_get_str(&s);
		disk->read_only = snap_get_bool(&s);
		disk->root = snap_get_bool(&s);
		disk->direct = snap_get_bool(&s);
		unsigned layers = snap_get_u32(&s);
		if (layers > VM_SETUP_MAX_LAYERS) {
			snap_fail(&s, "setup: too many disk layers");
			break;
		}
		for (unsigned l = 0; l < layers && !s.error; l++)
			disk->layers[disk->layer_count++] = setup_get_str(&s);
		if (!s.error && !disk->path)
			snap_fail(&s, "setup: a disk without an image");
		if (!s.error && disk->id && strlen(disk->id) > MOTE_DISK_ID_MAX)
			snap_fail(&s, "setup: a disk id too long");
		for (unsigned l = 0; l < disk->layer_count && !s.error; l++) {
			if (!disk->layers[l])
				snap_fail(&s, "setup: a disk layer without a path");
		}
		if (!s.error && disk->layer_count && !disk->overlay)
			snap_fail(&s, "setup: disk layers without an overlay");
		if (!s.error && disk->overlay && disk->read_only)
			snap_fail(&s, "setup: an overlay on a read-only disk");
	}
	setup->net_count = snap_get_u32(&s);
	if (setup->net_count > MOTE_MAX_NETS) {
		setup->net_count = 0;
		snap_fail(&s, "setup: too many network interfaces");
	}
	for (unsigned i = 0; i < setup->net_count && !s.error; i++) {
		setup->nets[i].tap = setup_get_str(&s);
		setup->nets[i].id = setup_get_str(&s);
		snap_get_bytes(&s, setup->nets[i].mac, 6);
		if (!s.error && !setup->nets[i].tap)
			snap_fail(&s, "setup: a network interface without a TAP");
	}
	setup->vsock_cid = snap_get_u32(&s);
	setup->vsock_uds_path = setup_get_str(&s);
	if (!s.error && setup->vsock_cid &&
	    (setup->vsock_cid < 3 || setup->vsock_cid == UINT32_MAX || !setup->vsock_uds_path))
		snap_fail(&s, "setup: bad vsock CID or socket path");
	snap_reader_finish(&s);
	if (s.error)
		snap_fail(r, s.failure);
	setup->from_snapshot = true;
}

int vm_setup_add_layer(struct vm_setup *setup, unsigned i, const char *layer_path)
{
	struct vm_setup_disk *disk = &setup->disks[i];

	if (disk->layer_count == VM_SETUP_MAX_LAYERS)
		return -ENOSPC;
	char *copy = strdup(layer_path);
	if (!copy)
		return -ENOMEM;
	disk->layers[disk->layer_count++] = copy;
	return 0;
}

void vm_setup_put_layer(struct vm_setup *setup, unsigned i, char *layer_path, bool replace)
{
	struct vm_setup_disk *disk = &setup->disks[i];

	for (unsigned l = 0; replace && l < disk->layer_count; l++)
		free(disk->layers[l]);
	if (replace)
		disk->layer_count = 0;
	disk->layers[disk->layer_count++] = layer_path;
}

int vm_setup_find_disk(const struct vm_setup *setup, const char *name)
{
	/* Ids first, over every disk: a disk whose id is "vdb" is that disk, wherever it
	 * sits, and not the guest's second one. */
	for (unsigned i = 0; i < setup->disk_count; i++)
		if (setup->disks[i].id && strcmp(setup->disks[i].id, name) == 0)
			return (int)i;
	for (unsigned i = 0; i < setup->disk_count; i++) {
		char guest_name[16];
		snprintf(guest_name, sizeof(guest_name), "vd%c", 'a' + i);
		if (strcmp(guest_name, name) == 0)
			return (int)i;
	}
	return -1;
}

int vm_setup_find_net(const struct vm_setup *setup, const char *name)
{
	/* Ids, then TAP names, then the guest's names, each over every NIC. */
	for (unsigned i = 0; i < setup->net_count; i++)
		if (setup->nets[i].id && strcmp(setup->nets[i].id, name) == 0)
			return (int)i;
	for (unsigned i = 0; i < setup->net_count; i++)
		if (strcmp(setup->nets[i].tap, name) == 0)
			return (int)i;
	for (unsigned i = 0; i < setup->net_count; i++) {
		char guest_name[16];
		snprintf(guest_name, sizeof(guest_name), "eth%u", i);
		if (strcmp(guest_name, name) == 0)
			return (int)i;
	}
	return -1;
}

void vm_setup_free(struct vm_setup *setup)
{
	for (unsigned i = 0; i < MOTE_MAX_DISKS; i++) {
		struct vm_setup_disk *disk = &setup->disks[i];
		free(disk->path);
		free(disk->id);
		free(disk->overlay);
		for (unsigned l = 0; l < disk->layer_count; l++)
			free(disk->layers[l]);
	}
	for (unsigned i = 0; i < MOTE_MAX_NETS; i++) {
		free(setup->nets[i].tap);
		free(setup->nets[i].id);
	}
	free(setup->vsock_uds_path);
	memset(setup, 0, sizeof(*setup));
}
