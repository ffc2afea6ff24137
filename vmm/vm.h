/* struct mote_vm: everything one microVM owns. Internal to libmote. */
#ifndef MOTE_VM_H
#define MOTE_VM_H

#include <pthread.h>
#include <stdbool.h>

#include "../devices/debug_port.h"
#include "../devices/i8042.h"
#include "../devices/serial.h"
#include "../virtio/blk.h"
#include "../virtio/net.h"
#include "../virtio/vsock.h"
#include "bus.h"
#include "event_loop.h"
#include "guest_memory.h"
#include "kvm.h"
#include "mote.h"
#include "snapshot_memory.h"
#include "vcpu.h"
#include "vcpu_state.h"
#include "vm_setup.h"
#include "vm_virtio.h"

struct mote_vm {
	struct mote_log log;
	struct kvm kvm;
	int vm_fd;
	struct guest_memory mem;
	struct bus pio;
	struct bus mmio;

	struct serial serial;
	struct i8042 i8042;
	struct debug_port debug_port;
	int console_in_fd;  /* -1: no input */
	int console_out_fd; /* owned when console_out_owned */
	bool console_out_owned;
	int console_stop_fd;	    /* eventfd that ends the console thread */
	uint64_t console_max_bytes; /* of a console file's output in this run; 0: no bound */
	pthread_t console_thread;
	bool console_thread_started;

	struct event_loop events; /* the event thread: virtqueue notifications, I/O */
	struct vm_virtio virtio;
	unsigned disk_count;
	struct virtio_blk *disks[MOTE_MAX_DISKS];
	unsigned nic_count;
	struct virtio_net *nics[MOTE_MAX_NETS];
	unsigned nic_fd_count;
	int nic_fds[MOTE_MAX_NETS]; /* their TAPs */
	struct virtio_vsock *vsock; /* or NULL */

	unsigned cpu_count;
	struct vcpu vcpus[MOTE_MAX_CPUS];
	uint64_t entry;

	int64_t start_ns;
	int64_t run_start_ns;

	/* Guarded by lock: the first vm_end() decides how the VM ended. */
	pthread_mutex_t lock;
	pthread_cond_t ended_cond;
	bool ended;
	/* vm_end() is still kicking the vCPUs and stopping the console, after it set ended:
	 * mote_vm_run() waits for it, so that a mote_vm_stop() on another thread is done with
	 * the VM before the embedder can destroy it. Guarded by lock. */
	bool ending;
	pthread_mutex_t pause_lock; /* one pause, resume or snapshot at a time */
	/* One disk update at a time (vm_disk_update.c), from opening the new image to
	 * closing the old one, while the VM runs on: taken before pause_lock, never while
	 * holding it. */
	pthread_mutex_t disk_update_lock;
	/* Pausing (vm_pause.c), guarded by lock. */
	enum mote_vm_state state;
	bool pause_requested; /* vCPUs park at their next pause point */
	unsigned parked;      /* vCPUs parked */
	pthread_cond_t pause_cond;
	bool clock_saved; /* paused_clock holds the guest clock of the pause */
	struct kvm_clock_data paused_clock;
	/* When a pause stopped serving the devices (CLOCK_MONOTONIC), for their deadlines
	 * at the resume (vm_pause.c); 0 when none did (a VM that starts paused). Under
	 * pause_lock. */
	int64_t paused_at_ns;
	struct vcpu_msr_list msr_list; /* what a snapshot saves of each vCPU; read at need */

	struct vm_setup setup; /* what the VM was built from, for its snapshots */
	bool restored;	       /* built from a snapshot: mote_vm_run() reports when it runs */
	/* mote_vm_run() has started (or is starting) the VM's threads: before that, a
	 * pause or resume only says how the VM is to start (vm_pause.c). Guarded by lock. */
	bool run_started;
	bool run_entered; /* mote_vm_run() was called: a second call is refused. By lock. */
	/* Restored, its overlays not committed yet (mote_vm_commit_disks): at the end of the
	 * restore, or with defer_disk_commit in mote_vm_run(). */
	bool disks_uncommitted;
	bool exit_at_boot; /* end the VM at the guest's boot-complete write */
	bool track_dirty;  /* asked for: diff snapshots are to be taken */
	/* KVM's dirty log is on in the memory slots and the monitor's writes are recorded:
	 * from a restore on, and from a booted VM's first snapshot (vm_dirty_log_start). */
	bool dirty_logging;
	uint64_t *dirty; /* pages written since the last snapshot, gathered (vm_snapshot.c) */
	/* The id of the snapshot last taken or restored from: a diff applies on it. */
	bool has_snapshot_id;
	uint8_t snapshot_id[SNAPSHOT_ID_SIZE];
	bool panic_seen;
	char panic_line[SERIAL_LINE_MAX];
	struct mote_exit exit;
	int64_t boot_complete_ns;
};

/* Registers the guest's memory with KVM, a slot per region, with KVM's dirty log on in
 * each while dirty_logging; again with that changed, it turns the log on (api.rst 4.35:
 * a slot's flags may change in place). 0 or -errno, logged. */
int vm_set_memory_slots(struct mote_vm *vm);

/* Starts dirty-page tracking of the monitor's own writes; KVM's side is the slots' flag
 * (vm_set_memory_slots). For a restored VM at its build, for a booted one at its first
 * snapshot (vm_snapshot.c). 0 or -ENOMEM, logged. */
int vm_track_dirty(struct mote_vm *vm);

/* A VM with nothing built yet: every fd -1, locks ready, cpus vCPUs to come. NULL
 * without memory. */
struct mote_vm *vm_new(const struct mote_log *log, unsigned cpus, int64_t start_ns);

/* What a new and a restored VM share: the setup record, KVM, guest memory (mem_fd -1:
 * fresh memfd; else the memory file to map, owned from here), the KVM VM with its slots,
 * interrupt controllers and timer, the console, the event loop and every device. */
int vm_build(struct mote_vm *vm, const struct mote_config *config, int mem_fd);

/* Checks config's values; -EINVAL with a message. */
int vm_check_config(const struct mote_config *config, const struct mote_log *log);

/* The state file's section that names the memory a snapshot goes with (vm_snapshot.c):
 * its id and, for a diff, its base's. The load fails r for a full snapshot that names a
 * base. */
void vm_memory_identity_save(const struct snapshot_memory_identity *identity,
			     struct snap_writer *w);
void vm_memory_identity_load(struct snapshot_memory_identity *identity, struct snap_reader *r);

/* Ends the VM (first caller wins) and kicks every vCPU out of KVM_RUN. Thread-safe. */
void vm_end(struct mote_vm *vm, enum mote_exit_reason reason, int error, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

bool vm_has_ended(struct mote_vm *vm);

/* For vCPU threads: whether to stop at the pause point, and parking there until the VM
 * is resumed or ends. */
bool vm_pause_requested(struct mote_vm *vm);
void vm_park_vcpu(struct mote_vm *vm);

/* While mote_vm_run() starts the VM's threads (run_started, the state still CREATED),
 * waits until it runs or ended: a pause, a resume or a Ctrl-Alt-Del then acts on it,
 * rather than being refused in a window its caller cannot see. */
void vm_wait_started(struct mote_vm *vm);

/* mote_vm_pause() and mote_vm_resume() with pause_lock held by the caller. */
int vm_pause_locked(struct mote_vm *vm);
int vm_resume_locked(struct mote_vm *vm);

/* "12.345": ns as milliseconds with three decimals, for messages. */
#define VM_MS_FMT "%lld.%03lld"
#define VM_MS_ARGS(ns) (long long)((ns) / 1000000), (long long)((ns) / 1000 % 1000)

/* Starts a monitor thread with a small stack. glibc's default is 8 MiB, and with
 * transparent huge pages on, the first touch of such a stack costs a 2 MiB page of RSS;
 * mote's threads need a few KiB (ASan builds: more, still far below 2 MiB). */
int vm_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg);

/* Joins a monitor thread that has returned from its function (it said so last). Its end
 * can still be held by the host kernel, which first finishes the io_uring requests the
 * thread submitted and carries out on workers of the thread's own (a buffered read of a
 * disk image that does not answer): after VM_THREAD_END_WAIT_MS the thread is detached,
 * to end whenever the kernel lets it, and that is logged, naming it. */
void vm_thread_join_returned(pthread_t thread, const struct mote_log *log, const char *name);

#endif
