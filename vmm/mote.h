/* libmote: a microVM monitor on Linux KVM, as a library.
 *
 * Contract for every function here: it never exits or aborts the process on bad
 * input; failures return a negative errno and describe themselves once through the
 * log callback of the configuration. There is no global state: a process may hold
 * several VMs, each driven from its own thread.
 *
 * One thing is process-wide, as in every KVM monitor: a vCPU thread in KVM_RUN is
 * interrupted (to pause or stop it) with a signal, SIGRTMIN, sent to that thread alone.
 * mote_vm_run() installs a handler for it that does nothing, so the embedding program
 * must not use SIGRTMIN for anything else. SIGPIPE is left alone: the library never
 * raises it (its writes to pipes the embedder hands it are made with SIGPIPE held back),
 * whatever the program's disposition for it.
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

/* The default bound of a console file's growth in one run (mote_config). */
#define MOTE_CONSOLE_FILE_DEFAULT_MAX (1ULL << 30)

enum mote_console {
	MOTE_CONSOLE_NONE, /* guest serial output is discarded, no input */
	/* Output to console_out_fd (a pipe whose reader left: the output is dropped, with
	 * no SIGPIPE for the process), input from console_in_fd (-1: none; an fd that is
	 * not open: a warning, and no input). */
	MOTE_CONSOLE_FDS,
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
	/* Copy-on-write overlay file (README "Snapshots"): the guest's writes go there and
	 * path is opened read-only and never changed; reads of blocks never written come
	 * from path. Created when missing, kept across runs; a sparse file of path's size
	 * (rounded up to 4 KiB) on a file system that reports holes (SEEK_DATA). Not with
	 * read_only, and not path itself (-EINVAL). NULL: writes go to path itself. */
	const char *overlay;
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
	/* MOTE_CONSOLE_FILE: at most this many bytes of the guest's output are appended to
	 * console_path in one run, then a note, and the rest is dropped: a guest that
	 * prints for ever cannot fill the host's disk. 0: MOTE_CONSOLE_FILE_DEFAULT_MAX. */
	uint64_t console_max_bytes;
	unsigned disk_count; /* 0..MOTE_MAX_DISKS; at most one with root set */
	struct mote_disk disks[MOTE_MAX_DISKS];
	unsigned net_count; /* 0..MOTE_MAX_NETS */
	struct mote_net nets[MOTE_MAX_NETS];
	struct mote_vsock vsock;
	/* Dirty-page tracking (KVM's dirty log plus the pages the monitor writes), which
	 * diff snapshots need. It starts at the VM's first snapshot (a diff applies on an
	 * earlier one); from then on KVM maps the guest's memory with 4 KiB pages and
	 * logs the first write to a page after each snapshot (a fault, unless the CPU logs
	 * writes itself). */
	bool track_dirty_pages;
	/* End the VM at guest-init's boot-complete write to the debug port, as QEMU's
	 * isa-debug-exit does: for boot-latency measurement, where what comes after the
	 * guest is up is not wanted. The exit reason is MOTE_EXIT_BOOT_COMPLETE. */
	bool exit_at_boot;
	/* CLOCK_MONOTONIC time the boot timer counts from (the CLI passes its process
	 * start); 0: the moment mote_vm_create() is called. */
	int64_t start_monotonic_ns;
	mote_log_fn log;
	void *log_opaque;
};

/* The command line used when mote_config.cmdline is NULL (Firecracker's spirit).
 * noreplace-smp: a kernel that boots with one CPU otherwise rewrites every lock prefix
 * in its text, one text_poke() each (arch/x86/kernel/alternative.c), which was a
 * seventh of a nested boot; with more CPUs it changes nothing. */
#define MOTE_DEFAULT_CMDLINE                                                                       \
	"console=ttyS0 reboot=k panic=1 nomodule i8042.noaux i8042.nomux i8042.dumbkbd "           \
	"swiotlb=noforce noreplace-smp"

/* Defaults: 1 vCPU, 128 MiB, console on stdin/stdout. */
MOTE_API void mote_config_init(struct mote_config *config);

enum mote_exit_reason {
	MOTE_EXIT_POWER_OFF,	 /* guest asked to power off (debug port) */
	MOTE_EXIT_REBOOT,	 /* guest reset: i8042 0xfe, triple fault, KVM system event */
	MOTE_EXIT_PANIC,	 /* guest kernel reported a panic on its console */
	MOTE_EXIT_ERROR,	 /* the monitor stopped the VM: unexpected exit, KVM failure */
	MOTE_EXIT_BOOT_COMPLETE, /* guest-init reported boot complete, with exit_at_boot */
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
 *   -EINVAL  config or vm_out NULL, or a configuration value out of range (guest
 *            memory that would end past the CPU's physical address width too);
 *   -ENOENT, -EACCES, -EISDIR, -ENOEXEC, -EFBIG  kernel, initrd or disk image unusable
 *            (-EMEDIUMTYPE too: a kernel, initrd, disk image or overlay that is a FIFO,
 *            socket or device; a disk image may be a block device);
 *   -EBUSY   a disk image is locked by another process (another VM uses it), or the
 *            vsock socket's directory stayed locked by another process for 2 s;
 *   -EADDRINUSE, -EEXIST, -ENAMETOOLONG  the vsock socket path is served by another
 *            process, is not a socket, or does not fit a sockaddr_un; -ESTALE a
 *            stale socket there in a directory that cannot be locked to replace it;
 *   -E2BIG   the command line is too long for the kernel;
 *   -EMEDIUMTYPE  a TAP name that is an interface of another kind (or a multi-queue
 *            TAP); -ENOENT a TAP that does not exist;
 *   -ENODEV  /dev/kvm cannot be opened;  -ENOTSUP  KVM lacks a needed capability;
 *   others   a KVM or host resource call failed (the message says which). */
MOTE_API int mote_vm_create(const struct mote_config *config, struct mote_vm **vm_out);

/* Starts every vCPU and blocks until the VM ends; fills *exit with why (exit may be
 * NULL). Returns 0 when the VM ended (whatever the reason) or a negative errno when it
 * could not run: -EALREADY when mote_vm_run() was called for this VM before (a VM runs
 * once; a call that failed before the VM started, as a deferred disk commit can, does
 * not count). */
MOTE_API int mote_vm_run(struct mote_vm *vm, struct mote_exit *exit);

/* Asks a running VM to stop from any thread; mote_vm_run() then returns with
 * MOTE_EXIT_ERROR and error -EINTR. Safe to call at any time before mote_vm_destroy().
 * mote_vm_run() returns only after a stop already at work on the VM is done with it;
 * still, destroy the VM only once no other thread can be calling into it. */
MOTE_API void mote_vm_stop(struct mote_vm *vm);

/* Where a VM is in its life. */
enum mote_vm_state {
	MOTE_VM_CREATED, /* built, mote_vm_run() not called yet */
	MOTE_VM_RUNNING,
	MOTE_VM_PAUSED, /* every vCPU parked, devices quiet: ready for a snapshot */
	MOTE_VM_ENDED,	/* mote_vm_run() returned or is returning */
};

/* Thread-safe. */
MOTE_API enum mote_vm_state mote_vm_get_state(struct mote_vm *vm);

/* From any thread while mote_vm_run() runs: takes every vCPU out of KVM_RUN and parks it,
 * lets the devices finish the requests they have in flight and stops them taking new
 * work, and stops the guest's clock. Returns once all of that is done. 0 (also when
 * already paused); -EINVAL when the VM is not running; -EINTR when it ended meanwhile;
 * -ETIMEDOUT, logged, when a vCPU or the device thread had not stopped within 30 s, or
 * a disk's I/O made no progress for 30 s (an image on a host file system that stopped
 * answering): the pause is abandoned and the VM runs on, the I/O completing whenever it
 * does. Call it from a thread that outlives the VM's disk I/O (the control API's does):
 * io_uring ties a request to the thread that submitted it, and the pause submits what
 * the disks had queued, which an abandoned pause leaves in flight.
 * Before mote_vm_run() starts the VM, it only makes it start paused (0); while
 * mote_vm_run() is starting it, it waits until the VM runs. */
MOTE_API int mote_vm_pause(struct mote_vm *vm);

/* Continues a paused VM exactly where it stopped. 0 (also when running); -EINVAL when the
 * VM is neither paused nor running. Before mote_vm_run() starts the VM, it only undoes
 * a pause's choice to start it paused. */
MOTE_API int mote_vm_resume(struct mote_vm *vm);

/* Presses Ctrl-Alt-Del on the i8042 keyboard: Linux reboots, which ends the VM with
 * MOTE_EXIT_REBOOT. -EINVAL when the VM is not running. */
MOTE_API int mote_vm_send_ctrl_alt_del(struct mote_vm *vm);

/* Points the disk named disk (its id or, where no disk has that id, its guest name
 * "vda", "vdb", ...) at the image path from now on, as Firecracker's PATCH /drives/{id}
 * does, on a VM that mote_vm_run() runs (or is about to run), paused or not. The new
 * image is opened, checked and locked as mote_vm_create() does, with the disk's
 * read_only and direct, while the VM runs on; the VM is then paused for the swap alone
 * (when it runs), and the old image is synced (when the guest could write it), closed
 * and unlocked once it runs again. When the new image's size differs, the guest is told
 * with a virtio configuration change and sees the new size at once. path naming the
 * disk's image itself (resized in place, say) only does that. What the guest cached of
 * the old image stays in its page cache: update a disk the guest is not using
 * (unmounted), as with a disk swapped under any running kernel. Snapshots taken
 * afterwards record path. Updates of a VM's disks take turns. As it pauses the VM,
 * call it from a thread that outlives the VM's disk I/O, as mote_vm_pause() asks.
 * 0 once the disk has the new image (should the old image's sync fail, or the VM then
 * fail to resume, which stays paused, that is logged as an error); -ENOENT when there
 * is no such disk; -EINVAL for a disk with an overlay (its image stays, the overlay
 * being of it), a VM that ended, or a bad argument; -EIO for a disk out of service;
 * -ENOMEM; else the errors of opening the image (-ENOENT, -EACCES, -EBUSY locked by
 * another process, ...), of mote_vm_pause() (-EINTR when the VM ended meanwhile,
 * -ETIMEDOUT), or -EBUSY when the disk's I/O could not be brought to rest, all logged
 * but a VM that had ended, after which the disk goes on with its image. */
MOTE_API int mote_vm_update_disk(struct mote_vm *vm, const char *disk, const char *path);

enum mote_snapshot_type {
	MOTE_SNAPSHOT_FULL, /* every non-zero page of guest memory */
	MOTE_SNAPSHOT_DIFF, /* only pages written since the previous snapshot, taken or
			     * restored from (there must be one); needs track_dirty_pages */
};

struct mote_snapshot_params {
	const char *state_path; /* vCPUs, interrupt controllers, clock, devices; required */
	/* Guest memory: raw, page-aligned, sparse, then (a diff) its page bitmap, then a
	 * trailer naming the snapshot (layout in vmm/snapshot_memory.h); required. */
	const char *mem_path;
	enum mote_snapshot_type type;
};

/* Saves a paused VM to two files (and each overlay disk's layer of blocks written since
 * the previous snapshot to "<state_path>.<disk>.layer"). Files appear complete or not
 * at all: they are written under temporary names and renamed. The VM stays paused and
 * intact whatever happens: a full disk or read-only directory is an error to report,
 * after which it can be resumed. Errors: -EINVAL not paused, a type that is not one of
 * mote_snapshot_type, a diff without dirty tracking or without an earlier snapshot, or
 * paths that would destroy the VM's own files (its disks' images, overlays and layers,
 * the layer this snapshot freezes, its vsock socket, its console file) or anything that
 * exists and is not a regular file; -ENOSPC, -EACCES, -EROFS, ... from the host. */
MOTE_API int mote_vm_snapshot(struct mote_vm *vm, const struct mote_snapshot_params *params);

#define MOTE_MAX_MEM_DIFFS 64

/* A disk's files replaced at restore; disk names the disk by its id or as the guest
 * knows it ("vda"). */
struct mote_disk_override {
	const char *disk;
	const char *path;    /* NULL: the snapshot's */
	const char *overlay; /* the fresh overlay this copy writes to; NULL: the snapshot's */
};

/* A NIC's TAP replaced at restore; nic names it by its id or as the guest knows it
 * ("eth0"). */
struct mote_net_override {
	const char *nic;
	const char *tap;
};

/* Bringing a snapshot back in a new VM. Fill with mote_restore_config_init() first;
 * strings are borrowed until mote_vm_restore() returns. */
struct mote_restore_config {
	const char *state_path; /* required */
	const char *mem_path;	/* the full memory file; mapped copy-on-write, never changed */
	/* Diff memory files, oldest first, laid over mem_path in order. */
	unsigned mem_diff_count;
	const char *mem_diff_paths[MOTE_MAX_MEM_DIFFS];
	unsigned disk_override_count;
	struct mote_disk_override disk_overrides[MOTE_MAX_DISKS];
	unsigned net_override_count;
	struct mote_net_override net_overrides[MOTE_MAX_NETS];
	const char *vsock_uds_path; /* NULL: the snapshot's */
	bool track_dirty_pages;	    /* for diff snapshots of the restored VM */
	/* mote_vm_run() starts the VM paused. Until it has started it, mote_vm_resume()
	 * and mote_vm_pause() only choose how it starts (running, or paused again). */
	bool paused;
	/* Read every page of the memory files and compare each file's content with the
	 * checksum written with it: a file changed or damaged since the snapshot is refused
	 * instead of giving the guest garbage. The full file is read before anything is
	 * built (it is then mapped, and must stay as it is); each diff as it is copied into
	 * guest memory, so what is checked is what the guest gets. It
	 * costs a read of all the data the files hold (the pages then sit in the host's
	 * page cache). Without it the files are mapped lazily and only their identities
	 * are checked. */
	bool verify_memory;
	/* Each overlay disk's rebuilt overlay takes the overlay's name later, not at the
	 * end of the restore: with mote_vm_commit_disks(), or when mote_vm_run() starts the
	 * VM. For an embedder that restores several VMs of which all or none must run
	 * (`mote restore --copies`): until then, destroying a VM leaves every overlay file
	 * as it was. A commit in mote_vm_run() that fails makes it return that error
	 * without running the VM; a VM stopped (mote_vm_stop) before it ran does not
	 * commit. */
	bool defer_disk_commit;
	enum mote_console console;
	int console_in_fd;
	int console_out_fd;
	const char *console_path;
	/* MOTE_CONSOLE_FILE: at most this many bytes of the guest's output are appended to
	 * console_path in one run, then a note, and the rest is dropped: a guest that
	 * prints for ever cannot fill the host's disk. 0: MOTE_CONSOLE_FILE_DEFAULT_MAX. */
	uint64_t console_max_bytes;
	int64_t start_monotonic_ns; /* as in mote_config */
	mote_log_fn log;
	void *log_opaque;
};

/* Defaults: console on stdin/stdout, the snapshot's host resources, runs at once. */
MOTE_API void mote_restore_config_init(struct mote_restore_config *config);

/* Builds a VM from a snapshot: checks the state file strictly (version, checksum, every
 * value), maps the memory file MAP_PRIVATE (lazily, pages shared with every other VM
 * restored from it until written), then sets the clock, the devices and the vCPUs. Run
 * it with mote_vm_run(). Open vsock connections are gone (the guest sees a transport
 * reset); its listeners stay. Errors: -EINVAL bad configuration; -EPROTO a state file
 * that is damaged or not mote's, or of another version; -EINVAL memory files that are
 * not this snapshot's: of another size or snapshot, diffs missing or out of order, or
 * (verify_memory) content that does not match its checksum; -ENOTSUP memory that this
 * CPU's physical address width cannot hold; -ENOENT, -EACCES, -EISDIR, -EMEDIUMTYPE a
 * state, memory or layer file that is missing, unreadable, or not a regular file;
 * others as mote_vm_create().
 * Each overlay disk's overlay is rebuilt from its layers under a temporary name and
 * takes the overlay's name last of all (or when the VM first runs, with
 * defer_disk_commit): a restore that fails leaves every overlay file as it was. */
MOTE_API int mote_vm_restore(const struct mote_restore_config *config, struct mote_vm **vm_out);

/* Gives the rebuilt overlays of VMs restored with defer_disk_commit, and not run yet,
 * their names: every overlay of every VM in vms, all or none. Other VMs in vms are
 * skipped. 0, or a negative errno (logged) after which every overlay file is as it was:
 * -EINTR when one of the VMs was stopped (mote_vm_stop) before it ran, others from the
 * host. The VMs can then be committed again or destroyed. Not while another call uses
 * one of them. */
MOTE_API int mote_vm_commit_disks(struct mote_vm *const *vms, unsigned count);

/* Merging a full memory file and diffs taken after it into one full memory file. */
struct mote_memory_merge_params {
	const char *mem_path; /* the full memory file; read, never changed */
	/* Diff memory files, oldest first, each taken right after the file before it;
	 * read, never changed. */
	const char *const *diff_paths;
	unsigned diff_count;
	/* The merged full memory file. It may name an input: it is written under a
	 * temporary name and renamed, so VMs restored from the old file keep it. */
	const char *out_path;
	mote_log_fn log;
	void *log_opaque;
};

/* Writes out_path: the guest memory that restoring mem_path with diff_paths gives, as a
 * full memory file of the last diff's snapshot. A restore of that snapshot's state file
 * then needs only out_path, so a chain of diffs never grows past MOTE_MAX_MEM_DIFFS.
 * Every input is checked as a restore with verify_memory checks it: their identities
 * must form the chain, and each file's content must match its checksum. It holds the
 * merged memory in this process meanwhile (at most the guest's size). Errors: -EINVAL
 * files that are not such a chain, or damaged (nothing is written); -ENOENT, -EACCES,
 * -ENOSPC, ... from the host. */
MOTE_API int mote_memory_merge(const struct mote_memory_merge_params *params);

/* Releases everything; vm may be NULL. Not while mote_vm_run() runs for vm in another
 * thread (it would use what is freed): call mote_vm_stop() and destroy once run has
 * returned, as with free() of anything another thread still uses. It waits for the
 * disks' I/O in flight; a disk whose image stopped answering (no completion for 30 s) is
 * given up instead, its guest memory left mapped until the process ends (the kernel
 * may still write into it), and destroy returns. mote_vm_run() waits 30 s for each
 * thread of the VM whose end the kernel holds until such I/O is done, then leaves it to
 * end on its own. Not bounded: a guest's reset of such a disk, on its vCPU (the driver
 * takes its buffers back once the reset returns), and the device thread copying an
 * overlay's cluster up from such a file; the VM's end waits for either. */
MOTE_API void mote_vm_destroy(struct mote_vm *vm);

/* Puts the calling process under a seccomp filter that refuses, with EPERM, the
 * system calls a monitor never makes and that code a hostile guest took over in it would
 * want: starting programs or processes (execve, fork, clone of anything but a thread),
 * ptrace and other processes' memory, signals to any other process, sockets of any
 * family but AF_UNIX, typing into a terminal (TIOCSTI, TIOCLINUX), and changes to the
 * host kernel's state (modules, kexec, mounts, namespaces, BPF, perf events,
 * userfaultfd, keys, the clock, swap, reboot); a system call of another ABI (int 0x80,
 * x32) ends the process (README: "Host protection"). Everything
 * libmote does stays allowed, so call it at any point, VMs running or not; `mote run`
 * and `mote restore` call it before they build a VM (`--no-seccomp` to leave it out).
 * It covers every thread of the process, those it starts later and any process it
 * might still start, and cannot be undone. It is a deny list, not an allow list:
 * opening files, and anything an io_uring request does, stay possible. 0, or a negative
 * errno: -EINVAL or -ENOSYS when the kernel has no seccomp filters, -ESRCH when a thread
 * of the process could not take it (another filter of its own forbids that), -ENOMEM. In a
 * program built with AddressSanitizer, LeakSanitizer's check at the end then fails (it
 * needs ptrace and a process of its own). */
MOTE_API int mote_restrict_syscalls(void);

MOTE_API const char *mote_version(void);

#ifdef __cplusplus
}
#endif

#endif
