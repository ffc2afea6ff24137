/* What a VM was built from, kept for its snapshots: the machine (vCPUs, memory) and the
 * host resources behind its devices (images, overlays and their frozen layers, TAPs, the
 * vsock socket), in mote_config's order. A restore builds the same machine from it, with
 * the host resources the user overrides. Strings are owned. */
#ifndef MOTE_VM_SETUP_H
#define MOTE_VM_SETUP_H

#include "mote.h"
#include "snapshot_stream.h"

#define SNAP_TAG_SETUP SNAP_TAG('S', 'E', 'T', 'U')
#define VM_SETUP_MAX_LAYERS 64

struct vm_setup_disk {
	char *path;
	char *id;
	char *overlay;
	bool read_only, root, direct;
	unsigned layer_count; /* frozen overlay layers, oldest first */
	char *layers[VM_SETUP_MAX_LAYERS];
};

struct vm_setup_net {
	char *tap;
	char *id;
	uint8_t mac[6]; /* the address the guest has, random ones included */
};

struct vm_setup {
	unsigned cpus;
	uint64_t mem_bytes;
	unsigned disk_count;
	struct vm_setup_disk disks[MOTE_MAX_DISKS];
	unsigned net_count;
	struct vm_setup_net nets[MOTE_MAX_NETS];
	uint32_t vsock_cid; /* 0: none */
	char *vsock_uds_path;
	/* Read from a snapshot (vm_setup_load), not saved: its overlay disks start over as
	 * their image plus their layers. */
	bool from_snapshot;
};

/* Copies what config asks for; -ENOMEM. */
int vm_setup_from_config(struct vm_setup *setup, const struct mote_config *config);

/* Fills config's machine and devices from setup (strings borrowed from setup). */
void vm_setup_to_config(const struct vm_setup *setup, struct mote_config *config);

void vm_setup_save(const struct vm_setup *setup, struct snap_writer *w);

/* Reads a SNAP_TAG_SETUP section, checking the values whose range it needs (counts,
 * sizes, string lengths, the layers' shape); the restore then checks the whole as
 * mote_vm_create() would (vm_check_config: empty paths, an overlay that is its image,
 * two root disks), after the overrides it was given. */
void vm_setup_load(struct vm_setup *setup, struct snap_reader *r);

/* Replaces a string field (NULL clears it); -ENOMEM. */
int vm_setup_set(char **field, const char *value);

/* Appends a frozen layer to disk i; -ENOSPC beyond VM_SETUP_MAX_LAYERS, -ENOMEM. */
int vm_setup_add_layer(struct vm_setup *setup, unsigned i, const char *layer_path);

/* Records layer_path, allocated and owned from here, as disk i's newest layer; replace:
 * as its only one (the others are dropped). Room must be left unless replace. */
void vm_setup_put_layer(struct vm_setup *setup, unsigned i, char *layer_path, bool replace);

/* The index of the disk named by its id or, where no disk has that id, as the guest
 * knows it ("vda"), or -1. */
int vm_setup_find_disk(const struct vm_setup *setup, const char *name);
/* The index of the NIC named by its id, else its TAP, else as the guest knows it
 * ("eth0"), or -1. */
int vm_setup_find_net(const struct vm_setup *setup, const char *name);

void vm_setup_free(struct vm_setup *setup);

#endif
