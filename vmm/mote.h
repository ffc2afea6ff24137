/* libmote: a microVM monitor on Linux KVM, as a library.
 *
 * Contract for every function here: it never exits or aborts the process on bad
 * input; failures return a negative errno and describe themselves once through the
 * log callback of the configuration. There is no global state: a process may hold
 * several VMs, each driven from its own thread.
 */
#ifndef MOTE_H
#define MOTE_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* libmote is built with hidden visibility; only what carries MOTE_API is exported. */
#define MOTE_API __attribute__((visibility("default")))

#define MOTE_VERSION "0.1.0"
#define MOTE_MAX_CPUS 32

enum mote_log_level {
	MOTE_LOG_ERROR,
	MOTE_LOG_WARN,
	MOTE_LOG_INFO,
	MOTE_LOG_DEBUG,
};

/* Receives one formatted message (no trailing newline). May be called from any of
 * the VM's threads; it must not call back into the VM. */
typedef void (*mote_log_fn)(void *opaque, enum mote_log_level level, const char *message);

enum mote_console {
	MOTE_CONSOLE_NONE, /* guest serial output is discarded, no input */
	MOTE_CONSOLE_FDS,  /* output to console_out_fd, input from console_in_fd (-1: none) */
	MOTE_CONSOLE_FILE, /* output appended to console_path, no input */
};

/* Everything needed to create a VM. Strings are borrowed: they must stay valid until
 * mote_vm_create() returns. Fill with mote_config_init() first. */
#define MOTE_MAX_DISKS 16
#define MOTE_DISK_ID_MAX 20 /* bytes of a virtio-blk serial (virtio 1.2 §5.2.6) */

/* A virtio-blk disk on a raw image file. Disks appear to the guest as /dev/vda,
 * /dev/vdb, ... in the order of mote_config.disks. */
struct mote_disk {
	const char *path; /* raw image file or block device; required */
	const char *id;	  /* the serial the guest reads (GET_ID), at most 20 bytes; or NULL */
	bool read_only;	  /* guest writes fail; the image is opened read-only */
	bool root;	  /* the guest's root filesystem: root=/dev/vdX rw|ro on its cmdline */
	/* I/O bypasses the host page cache (O_DIRECT, QEMU's cache=none); -EINVAL when the
	 * image's file system refuses it. */
	bool direct;
};

#define MOTE_MAX_NETS 8
#define MOTE_NET_ID_MAX 64

/* A virtio-net NIC on a TAP device the user created (README "Networking"). NICs
 * appear to the guest as eth0, eth1, ... in the order of mote_config.nets. */
struct mote_net {
	const char *tap; /* name of an existing TAP interface; required */
	const char *id;	 /* names the NIC in messages and overrides; or NULL */
	uint8_t mac[6];	 /* the guest's MAC address, when has_mac */
	bool has_mac;	 /* false: a random locally administered unicast address */
};

/* A virtio-vsock device bridged to host Unix sockets with Firecracker's protocol: a host
 * program connects to uds_path and writes "CONNECT PORT\n" to reach the guest's PORT;
 * the guest connecting to CID 2 port P reaches a host listener on "uds_path_P". */
struct mote_vsock {
	uint32_t guest_cid;   /* 0: no vsock device; else 3..UINT32_MAX-1 */
	const char *uds_path; /* required with a cid; created, and removed at the end */
};

struct mote_config {
	const char *kernel_path; /* ELF vmlinux or bzImage; required */
	const char *initrd_path; /* optional */
	const char *cmdline;	 /* NULL: the default command line */
	unsigned cpus;		 /* 1..MOTE_MAX_CPUS */
	uint64_t mem_bytes;	 /* multiple of 2 MiB, 16 MiB..1 TiB */
	enum mote_console console;
	int console_in_fd;
	int console_out_fd;
	const char *console_path;
	unsigned disk_count; /* 0..MOTE_MAX_DISKS; at most one with root set */
	struct mote_disk disks[MOTE_MAX_DISKS];
	unsigned net_count; /* 0..MOTE_MAX_NETS */
	struct mote_net nets[MOTE_MAX_NETS];
	struct mote_vsock vsock;
	/* CLOCK_MONOTONIC time the boot timer counts from (the CLI passes its process
	 * start); 0: the moment mote_vm_create() is called. */
	int64_t start_monotonic_ns;
	mote_log_fn log;
	void *log_opaque;
};

/* The command line used when mote_config.cmdline is NULL (Firecracker's spirit). */
#define MOTE_DEFAULT_CMDLINE                                                                       \
	"console=ttyS0 reboot=k panic=1 nomodule i8042.noaux i8042.nomux i8042.dumbkbd "           \
	"swiotlb=noforce"

/* Defaults: 1 vCPU, 128 MiB, console on stdin/stdout. */
MOTE_API void mote_config_init(struct mote_config *config);

enum mote_exit_reason {
	MOTE_EXIT_POWER_OFF, /* guest asked to power off (debug port) */
	MOTE_EXIT_REBOOT,    /* guest reset: i8042 0xfe, triple fault, KVM system event */
	MOTE_EXIT_PANIC,     /* guest kernel reported a panic on its console */
	MOTE_EXIT_ERROR,     /* the monitor stopped the VM: unexpected exit, KVM failure */
};

struct mote_exit {
	enum mote_exit_reason reason;
	int error;		       /* negative errno for MOTE_EXIT_ERROR, else 0 */
	int64_t boot_complete_ns;      /* process start to guest-init's boot byte; -1: never */
	int64_t run_ns;		       /* mote_vm_run() start to the end of the VM */
	uint64_t memory_touched_bytes; /* guest RAM resident when the VM ended */
	char message[160];	       /* why, in words: the panic line, the failing exit, ... */
};

struct mote_vm;

/* Reads kernel and initrd, opens and locks the disk images, opens KVM, checks its capabilities,
 * creates guest memory, loads the kernel and builds devices and vCPUs. Nothing runs yet. Errors:
 *   -EINVAL  a configuration value is out of range;
 *   -ENOENT, -EACCES, -EISDIR, -ENOEXEC, -EFBIG  kernel, initrd or disk image unusable;
 *   -EBUSY   a disk image is locked by another process (another VM uses it);
 *   -E2BIG   the command line is too long for the kernel;
 *   -ENODEV  /dev/kvm cannot be opened;  -ENOTSUP  KVM lacks a needed capability;
 *   others   a KVM or host resource call failed (the message says which). */
MOTE_API int mote_vm_create(const struct mote_config *config, struct mote_vm **vm_out);

/* Starts every vCPU and blocks until the VM ends; fills *exit with why. Returns 0
 * when the VM ended (whatever the reason) or a negative errno when it could not run. */
MOTE_API int mote_vm_run(struct mote_vm *vm, struct mote_exit *exit);

/* Asks a running VM to stop from any thread; mote_vm_run() then returns with
 * MOTE_EXIT_ERROR and error -EINTR. Safe to call at any time. */
MOTE_API void mote_vm_stop(struct mote_vm *vm);

/* Releases everything; vm may be NULL. */
MOTE_API void mote_vm_destroy(struct mote_vm *vm);

MOTE_API const char *mote_version(void);

#ifdef __cplusplus
}
#endif

#endif
