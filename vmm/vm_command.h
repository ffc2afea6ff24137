/* The one command path of mote (design.md: every front-end sends the same commands to
 * one controller). A vm_controller owns the pending configuration before boot and the VM
 * after it; `mote run` and `mote restore` (flags, config file) and the control API
 * (api_server.h) all act on it through vm_controller_execute(), so a command means the
 * same whichever front-end sent it.
 *
 * Threads: commands may come from any thread, one at a time (they are serialised); the
 * VM itself runs on the thread that calls vm_controller_run(). */
#ifndef MOTE_VM_COMMAND_H
#define MOTE_VM_COMMAND_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cli_options.h"
#include "mote.h"
#include "vm_setup.h"

enum vm_command_kind {
	/* Pre-boot only: they change the pending configuration. */
	VM_COMMAND_MACHINE_CONFIG,
	VM_COMMAND_BOOT_SOURCE,
	VM_COMMAND_DRIVE,
	VM_COMMAND_NETWORK_INTERFACE,
	VM_COMMAND_VSOCK,
	/* Builds the VM from the pending configuration; vm_controller_run() runs it. */
	VM_COMMAND_INSTANCE_START,
	/* Builds the VM from a snapshot; only on a controller nothing was configured on. */
	VM_COMMAND_SNAPSHOT_LOAD,
	/* On a VM. */
	VM_COMMAND_DRIVE_UPDATE,
	VM_COMMAND_SEND_CTRL_ALT_DEL,
	VM_COMMAND_PAUSE,
	VM_COMMAND_RESUME,
	VM_COMMAND_SNAPSHOT_CREATE,
};

/* Strings in commands are borrowed for the call; the controller copies what it keeps. */
struct vm_command_machine_config {
	bool has_vcpu_count, has_mem_size_mib, has_track_dirty_pages; /* what to change */
	unsigned vcpu_count;
	uint64_t mem_size_mib;
	bool track_dirty_pages;
};

struct vm_command_boot_source {
	const char *kernel_image_path; /* required */
	const char *initrd_path;       /* NULL: none */
	const char *boot_args;	       /* NULL: the default command line */
};

/* Adds a disk, or replaces the one with this drive_id. */
struct vm_command_drive {
	const char *drive_id; /* required: the disk's id (its virtio serial) */
	const char *path_on_host;
	const char *overlay; /* copy-on-write overlay file, or NULL */
	bool is_read_only, is_root_device, direct;
};

/* Points a built VM's disk at another image (mote_vm_update_disk). */
struct vm_command_drive_update {
	const char *drive_id; /* required: the disk's id, or its guest name */
	const char *path_on_host;
};

/* Adds a NIC, or replaces the one with this iface_id. */
struct vm_command_network_interface {
	const char *iface_id; /* required */
	const char *host_dev_name;
	bool has_guest_mac;
	uint8_t guest_mac[6];
};

struct vm_command_vsock {
	uint64_t guest_cid;
	const char *uds_path;
};

struct vm_command_snapshot_create {
	const char *snapshot_path;
	const char *mem_file_path;
	enum mote_snapshot_type type;
};

/* restore's strings borrowed; its console, log and start time are the controller's.
 * restore.paused false means the VM runs as soon as it is loaded (resume_vm). */
struct vm_command_snapshot_load {
	struct mote_restore_config restore;
};

struct vm_command {
	enum vm_command_kind kind;
	union {
		struct vm_command_machine_config machine_config;
		struct vm_command_boot_source boot_source;
		struct vm_command_drive drive;
		struct vm_command_drive_update drive_update;
		struct vm_command_network_interface network_interface;
		struct vm_command_vsock vsock;
		struct vm_command_snapshot_create snapshot_create;
		struct vm_command_snapshot_load snapshot_load;
	};
};

enum vm_controller_phase {
	VM_CONTROLLER_CONFIGURING, /* no VM yet: configuration, InstanceStart or a snapshot */
	VM_CONTROLLER_HAS_VM,	   /* a VM exists (created, running or paused) */
	VM_CONTROLLER_ENDED,	   /* the VM ran and ended, or the controller was stopped */
};

#define VM_CONTROLLER_MESSAGE_MAX 256

struct vm_controller {
	pthread_mutex_t command_lock; /* one command at a time; held while one runs */
	pthread_mutex_t lock;	      /* the fields below; held briefly */
	pthread_cond_t changed;	      /* phase or vm changed */
	enum vm_controller_phase phase;
	struct mote_vm *vm;
	bool configured;	    /* a resource was set: Firecracker's snapshot/load refuses */
	bool runner_waiting;	    /* vm_controller_run() waits for a VM to run */
	bool held;		    /* commands wait: the first one has not run (hold_first) */
	struct cli_options pending; /* the configuration InstanceStart builds from */
	int64_t start_ns;	    /* CLOCK_MONOTONIC of process start, for the boot timer */
	mote_log_fn log;	    /* the embedder's */
	void *log_opaque;
	pthread_mutex_t error_lock;
	unsigned error_count; /* errors the library logged, to tell whose they are */
	char last_error[VM_CONTROLLER_MESSAGE_MAX];
	/* The setup of the VM that ended, copied before vm_controller_run() destroys it:
	 * the configuration GETs go on reporting what the VM ran with, as Firecracker
	 * does. Under command_lock, like every use of c->vm's setup. */
	bool has_ended_setup;
	bool ended_track_dirty;
	struct vm_setup ended_setup;
};

/* Takes over pending (its strings; pending is left initialised and empty). When pending
 * sets up any part of the VM (kernel, disks, sizes, ...; not the console), snapshot load
 * is refused, as Firecracker refuses it after configuration. log receives every message
 * of the VM. Returns 0. */
int vm_controller_init(struct vm_controller *c, struct cli_options *pending, int64_t start_ns,
		       mote_log_fn log, void *log_opaque);

/* Destroys the VM if one is left, and frees everything. */
void vm_controller_destroy(struct vm_controller *c);

/* Runs one command. 0, or a negative errno with a one-line reason in fault (what failed,
 * and the library's own message when it gave one):
 *   -EINVAL  a bad value, or a command the controller's phase does not allow
 *            (configuration after boot, pause before it, ...);
 *   -EPROTO  snapshot/load: the state file is damaged, not mote's or of another version;
 *   others   what the library returned (mote.h). */
int vm_controller_execute(struct vm_controller *c, const struct vm_command *command, char *fault,
			  size_t fault_len);

/* The front-end's own first command (the command line's InstanceStart or snapshot
 * load) is to run before any other: commands from other threads (the API) wait from now
 * until vm_controller_execute_first() ran it, or vm_controller_stop(). */
void vm_controller_hold_first(struct vm_controller *c);
int vm_controller_execute_first(struct vm_controller *c, const struct vm_command *command,
				char *fault, size_t fault_len);

/* Waits until the VM exists (built by a command from any thread), runs it until it ends,
 * fills *exit, and destroys it. -EINTR when vm_controller_stop() came first; else what
 * mote_vm_run() returned. */
int vm_controller_run(struct vm_controller *c, struct mote_exit *exit);

/* From any thread (a signal thread): stops the VM, or ends the wait for one. */
void vm_controller_stop(struct vm_controller *c);

/* mote_vm_commit_disks() for the VMs of several controllers at once, none of them
 * running yet, each held against commands meanwhile. 0 or a negative errno (logged);
 * -EINTR when a controller has no VM or one was stopped: then nothing is committed. */
int vm_controller_commit_disks(struct vm_controller *const *cs, unsigned count);

/* How many errors the library has logged through the controller: a caller compares the
 * count around a command to know whether the library already said why it failed. */
unsigned vm_controller_error_count(struct vm_controller *c);

/* What GET / and GET /machine-config report (the machine is vm_controller_with_config's). */
struct vm_controller_description {
	/* Firecracker's InstanceInfo.state: "Not started", "Running" or "Paused"; mote adds
	 * "Ended" for the moment between the VM's end and the process's. */
	const char *state;
	unsigned vcpu_count;
	uint64_t mem_size_mib;
	bool track_dirty_pages;
};

void vm_controller_describe(struct vm_controller *c, struct vm_controller_description *out);

/* Calls fn with the VM's configuration while no command can change it (strings valid
 * only during the call): once there is a VM, its own setup (for a restored VM, the
 * snapshot's, with the overrides it was loaded with) and the boot source it was started
 * from, if any, and still the same after the VM ended; before, the configuration
 * InstanceStart would use. */
void vm_controller_with_config(struct vm_controller *c,
			       void (*fn)(const struct mote_config *config, void *opaque),
			       void *opaque);

/* Fills config from opts (strings borrowed from opts); used by InstanceStart. */
void vm_command_config_from_options(const struct cli_options *opts, struct mote_config *config);

#endif
