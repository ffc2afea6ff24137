/* Snapshots of a paused VM and VMs restored from them (mote.h: mote_vm_snapshot,
 * mote_vm_restore). A state file holds, in this order: the setup (vm_setup.h), the
 * identity of its memory (the snapshot's id; a diff's base), the VM-wide KVM state
 * (clock, PIC, IOAPIC, PIT), the devices, and each vCPU; the memory file holds guest
 * RAM and the same identity (snapshot_memory.h). A restore builds the same machine from the
 * setup, maps the memory file, then loads the clock and interrupt controllers, the
 * devices, and the vCPUs, as Firecracker does. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "file_image.h"
#include "output_file.h"
#include "snapshot_memory.h"
#include "vm.h"
#include "vm_devices.h"

#define SNAP_TAG_VM SNAP_TAG('K', 'V', 'M', 'S')
#define SNAP_TAG_MEMORY_ID SNAP_TAG('M', 'E', 'M', 'I')

/* KVM_GET_IRQCHIP's chips with the in-kernel irqchip (api.rst 4.26). */
static const uint32_t vm_irqchips[] = {KVM_IRQCHIP_PIC_MASTER, KVM_IRQCHIP_PIC_SLAVE,
				       KVM_IRQCHIP_IOAPIC};

static int vm_ioctl_error(struct mote_vm *vm, const char *what)
{
	int err = -errno;

	log_error(&vm->log, "%s: %s", what, strerror(errno));
	return err;
}

static int vm_kvm_state_save(struct mote_vm *vm, struct snap_writer *w)
{
	struct kvm_pit_state2 pit;

	/* The clock the guest stopped at; where the pause could not read it (or the VM was
	 * paused before it ran) it is read now, not saved stale or zero. */
	struct kvm_clock_data clock = vm->paused_clock;
	if (!vm->clock_saved && ioctl(vm->vm_fd, KVM_GET_CLOCK, &clock) < 0)
		return vm_ioctl_error(vm, "KVM_GET_CLOCK");
	snap_begin(w, SNAP_TAG_VM);
	snap_put_u64(w, clock.clock);
	for (unsigned i = 0; i < sizeof(vm_irqchips) / sizeof(vm_irqchips[0]); i++) {
		struct kvm_irqchip chip = {.chip_id = vm_irqchips[i]};
		if (ioctl(vm->vm_fd, KVM_GET_IRQCHIP, &chip) < 0)
			return vm_ioctl_error(vm, "KVM_GET_IRQCHIP");
		snap_put_blob(w, &chip, sizeof(chip));
	}
	if (ioctl(vm->vm_fd, KVM_GET_PIT2, &pit) < 0)
		return vm_ioctl_error(vm, "KVM_GET_PIT2");
	snap_put_blob(w, &pit, sizeof(pit));
	snap_end(w);
	return 0;
}

static int vm_kvm_state_load(struct mote_vm *vm, struct snap_reader *r)
{
	struct snap_reader s;
	struct kvm_irqchip chips[3];
	struct kvm_pit_state2 pit;

	snap_section(r, SNAP_TAG_VM, &s);
	/* flags 0: the saved value itself, not advanced by the real time since (api.rst
	 * 4.98, KVM_CLOCK_REALTIME): the guest's clock goes on from where it stopped and
	 * never backwards. */
	struct kvm_clock_data clock = {.clock = snap_get_u64(&s)};
	for (unsigned i = 0; i < 3; i++) {
		snap_get_blob(&s, &chips[i], sizeof(chips[i]));
		if (!s.error && chips[i].chip_id != vm_irqchips[i])
			snap_fail(&s, "interrupt controllers out of order");
	}
	snap_get_blob(&s, &pit, sizeof(pit));
	snap_reader_finish(&s);
	if (s.error)
		return snap_fail(r, s.failure);
	if (ioctl(vm->vm_fd, KVM_SET_CLOCK, &clock) < 0)
		return vm_ioctl_error(vm, "KVM_SET_CLOCK");
	for (unsigned i = 0; i < 3; i++) {
		if (ioctl(vm->vm_fd, KVM_SET_IRQCHIP, &chips[i]) < 0)
			return vm_ioctl_error(vm, "KVM_SET_IRQCHIP");
	}
	if (ioctl(vm->vm_fd, KVM_SET_PIT2, &pit) < 0)
		return vm_ioctl_error(vm, "KVM_SET_PIT2");
	vm->paused_clock.clock = clock.clock;
	vm->clock_saved = true;
	return 0;
}

/* A booted VM logs its writes only from its first snapshot on: a diff applies on an
 * earlier snapshot of the VM, so what the guest wrote before the first one is never
 * asked for, and a slot with KVM's dirty log on is mapped with 4 KiB pages only
 * (arch/x86/kvm/mmu/mmu.c, kvm_mmu_hugepage_adjust), where without it KVM maps the
 * guest's 2 MiB host pages whole (where the host gives shmem huge pages, guest_memory.c):
 * a VM that tracks and has not been snapshotted yet runs as fast as one that does not.
 * Turning the flag on write-protects the slot, or clears its dirty bits where the CPU
 * logs writes itself (Intel's PML; kvm_mmu_slot_apply_flags in arch/x86/kvm/x86.c);
 * called with the VM paused, nothing is written meanwhile. */
static int vm_dirty_log_start(struct mote_vm *vm)
{
	if (!vm->track_dirty || vm->dirty_logging)
		return 0;
	int ret = vm_track_dirty(vm);
	if (ret)
		return ret;
	vm->dirty_logging = true;
	ret = vm_set_memory_slots(vm);
	/* Slots left with the log on before one that refused it are not read: this
	 * snapshot fails, the next tries again, and until one succeeds no diff is taken. */
	if (ret)
		vm->dirty_logging = false;
	else
		log_debug(&vm->log, "dirty-page logging on");
	return ret;
}

/* Dirty pages: KVM's log of each slot (api.rst 4.37: reading it clears it) and the
 * monitor's own writes, gathered into vm->dirty, which only a snapshot that succeeded
 * clears: a failed one loses nothing for the next. */
static int vm_collect_dirty(struct mote_vm *vm)
{
	uint64_t words = (snapshot_memory_pages(&vm->mem) + 63) / 64;

	if (!vm->dirty && !(vm->dirty = calloc(words, sizeof(uint64_t))))
		return -ENOMEM;
	for (unsigned i = 0; i < vm->mem.region_count; i++) {
		const struct guest_memory_region *region = &vm->mem.regions[i];
		uint64_t pages = region->size / GUEST_PAGE_SIZE;
		uint64_t *log = calloc((pages + 63) / 64, sizeof(uint64_t));
		if (!log)
			return -ENOMEM;
		struct kvm_dirty_log dirty_log = {.slot = i, .dirty_bitmap = log};
		if (ioctl(vm->vm_fd, KVM_GET_DIRTY_LOG, &dirty_log) < 0) {
			int err = vm_ioctl_error(vm, "KVM_GET_DIRTY_LOG");
			free(log);
			return err;
		}
		uint64_t first = (uint64_t)(region->host - vm->mem.base) / GUEST_PAGE_SIZE;
		for (uint64_t p = 0; p < pages; p++) {
			if ((log[p / 64] >> (p % 64)) & 1)
				vm->dirty[(first + p) / 64] |= 1ULL << ((first + p) % 64);
		}
		free(log);
	}
	guest_memory_collect_dirty(&vm->mem, vm->dirty);
	return 0;
}

/* Which memory the state goes with: the last file of the chain a restore is given
 * (the full memory file, then the diffs oldest first) must carry the snapshot's id. */
void vm_memory_identity_save(const struct snapshot_memory_identity *identity, struct snap_writer *w)
{
	snap_begin(w, SNAP_TAG_MEMORY_ID);
	snap_put_bool(w, identity->diff);
	snap_put_bytes(w, identity->id, SNAPSHOT_ID_SIZE);
	snap_put_bytes(w, identity->base_id, SNAPSHOT_ID_SIZE);
	snap_end(w);
}

void vm_memory_identity_load(struct snapshot_memory_identity *identity, struct snap_reader *r)
{
	struct snap_reader s;

	memset(identity, 0, sizeof(*identity));
	snap_section(r, SNAP_TAG_MEMORY_ID, &s);
	identity->diff = snap_get_bool(&s);
	snap_get_bytes(&s, identity->id, SNAPSHOT_ID_SIZE);
	snap_get_bytes(&s, identity->base_id, SNAPSHOT_ID_SIZE);
	static const uint8_t none[SNAPSHOT_ID_SIZE];
	if (!s.error && !identity->diff && memcmp(identity->base_id, none, SNAPSHOT_ID_SIZE))
		snap_fail(&s, "memory identity: a full snapshot that names a base");
	snap_reader_finish(&s);
	if (s.error)
		snap_fail(r, s.failure);
}

static int vm_state_build(struct mote_vm *vm, const struct snapshot_memory_identity *identity,
			  struct snap_writer *w)
{
	if (!vm->msr_list.indices) {
		int ret = vcpu_msr_list_read(vm->kvm.fd, &vm->msr_list, &vm->log);
		if (ret)
			return ret;
	}
	vm_setup_save(&vm->setup, w);
	vm_memory_identity_save(identity, w);
	int ret = vm_kvm_state_save(vm, w);
	if (!ret)
		ret = vm_devices_save(vm, w);
	for (unsigned i = 0; i < vm->cpu_count && !ret; i++)
		ret = vcpu_state_save(&vm->vcpus[i], &vm->msr_list, w);
	if (!ret && w->error) {
		ret = w->error;
		log_error(&vm->log, "building the state file: %s", strerror(-ret));
	}
	return ret;
}

static int vm_snapshot_locked(struct mote_vm *vm, const struct mote_snapshot_params *params)
{
	struct output_file state = {.fd = -1}, memory = {.fd = -1};
	int64_t start_ns = clock_now_ns();
	struct snap_writer w;
	int ret;

	if (mote_vm_get_state(vm) != MOTE_VM_PAUSED) {
		log_error(&vm->log, "snapshot: the VM must be paused first");
		return -EINVAL;
	}
	bool diff = params->type == MOTE_SNAPSHOT_DIFF;
	if (diff && !vm->track_dirty) {
		log_error(&vm->log,
			  "a diff snapshot needs dirty-page tracking (track_dirty_pages)");
		return -EINVAL;
	}
	/* A VM with a snapshot of its own logs (the log starts before the first one is
	 * written); both are checked, so that a diff can never miss pages. */
	if (diff && !(vm->has_snapshot_id && vm->dirty_logging)) {
		log_error(&vm->log, "a diff snapshot needs an earlier snapshot of this VM to "
				    "apply on: take a full one first");
		return -EINVAL;
	}
	struct snapshot_memory_identity identity = {0}; /* diff: set as the file is written */
	if (diff)
		memcpy(identity.base_id, vm->snapshot_id, SNAPSHOT_ID_SIZE);
	ret = snapshot_memory_new_id(identity.id);
	if (ret) {
		log_error(&vm->log, "snapshot: no random id: %s", strerror(-ret));
		return ret;
	}
	snap_writer_init(&w);
	ret = output_file_open(&memory, params->mem_path, &vm->log);
	/* Once a file is there to take the snapshot: a location that cannot be written
	 * leaves a booted VM without the log. */
	if (!ret)
		ret = vm_dirty_log_start(vm);
	if (!ret && vm->dirty_logging)
		ret = vm_collect_dirty(vm);
	if (!ret)
		ret = snapshot_memory_write(&vm->mem, diff ? vm->dirty : NULL, memory.fd, &identity,
					    params->mem_path, &vm->log);
	/* The disks' layers last before the state: freezing changes the running disks. */
	if (!ret)
		ret = vm_devices_freeze_disks(vm, params->state_path);
	if (!ret)
		ret = vm_state_build(vm, &identity, &w);
	if (!ret)
		ret = output_file_open(&state, params->state_path, &vm->log);
	if (!ret) {
		ret = snap_writer_write(&w, state.fd);
		if (ret)
			log_error(&vm->log, "%s: %s", state.temp, strerror(-ret));
	}
	/* Both written and synced before either is renamed, and both renamed before the
	 * directories are synced: a write that fails leaves the previous snapshot of these
	 * paths whole. Only a crash, or a rename that fails, between the two renames can
	 * part them, and a restore refuses that pair (the state names its memory's id). */
	if (!ret)
		ret = output_file_finish(&memory, &vm->log);
	if (!ret)
		ret = output_file_finish(&state, &vm->log);
	if (!ret)
		ret = output_file_rename(&memory, &vm->log);
	if (!ret)
		ret = output_file_rename(&state, &vm->log);
	for (unsigned i = 0; i < 2 && !ret; i++) {
		const char *path = i ? params->state_path : params->mem_path;
		ret = output_file_sync_directory(path);
		if (ret)
			log_error(&vm->log, OUTPUT_FILE_UNSYNCED_FMT, path, strerror(-ret));
	}
	output_file_abandon(&memory);
	output_file_abandon(&state);
	snap_writer_free(&w);
	if (!ret && vm->dirty)
		memset(vm->dirty, 0,
		       (snapshot_memory_pages(&vm->mem) + 63) / 64 * sizeof(uint64_t));
	if (!ret) {
		memcpy(vm->snapshot_id, identity.id, SNAPSHOT_ID_SIZE);
		vm->has_snapshot_id = true;
	}
	if (!ret)
		log_info(&vm->log, "%s snapshot written to %s and %s in " VM_MS_FMT " ms",
			 diff ? "diff" : "full", params->state_path, params->mem_path,
			 VM_MS_ARGS(clock_now_ns() - start_ns));
	return ret;
}

/* The file path names, existing or not: its directory resolved, and its name; NULL when
 * the directory cannot be resolved (then the write fails anyway) or out of memory. */
static char *vm_file_identity(const char *path)
{
	char *dir_copy = strdup(path), *name_copy = strdup(path), *identity = NULL;

	if (dir_copy && name_copy) {
		char *dir = realpath(dirname(dir_copy), NULL);
		if (dir && asprintf(&identity, "%s/%s", dir, basename(name_copy)) < 0)
			identity = NULL;
		free(dir);
	}
	free(dir_copy);
	free(name_copy);
	return identity;
}

/* Whether a and b name one file: the same inode when both exist, else the same resolved
 * directory and name (a file about to be created). */
static bool vm_same_file(const char *a, const char *b)
{
	struct stat sa, sb;

	if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
		return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
	char *ia = vm_file_identity(a), *ib = vm_file_identity(b);
	bool same = ia && ib && strcmp(ia, ib) == 0;
	free(ia);
	free(ib);
	return same || strcmp(a, b) == 0;
}

/* Whether target is one of disk d's files (an image, an overlay, a frozen layer), or the
 * layer this snapshot is about to freeze for it: writing there would destroy it, or the
 * snapshot's own layer would be replaced by its memory file. 0, 1 or a negative errno. */
static int vm_target_is_disk_file(struct mote_vm *vm, unsigned d, const char *state_path,
				  const char *target)
{
	const struct vm_setup_disk *disk = &vm->setup.disks[d];
	const char *files[2 + VM_SETUP_MAX_LAYERS] = {disk->path, disk->overlay};

	for (unsigned l = 0; l < disk->layer_count; l++)
		files[2 + l] = disk->layers[l];
	for (unsigned f = 0; f < 2 + disk->layer_count; f++) {
		if (files[f] && vm_same_file(target, files[f]))
			return 1;
	}
	char *next_layer;
	int ret = vm_devices_layer_path(vm, d, state_path, &next_layer);
	if (ret)
		return ret;
	bool same = next_layer && vm_same_file(target, next_layer);
	free(next_layer);
	return same;
}

/* A target that exists must be a regular file, and not the file the VM's console goes
 * to: the rename would put the snapshot in place of a host program's socket (a vsock
 * listener at "<uds>_<port>"), a FIFO or a device, or the console's output would go on
 * into a file no name reaches. */
static int vm_check_target_kind(struct mote_vm *vm, const char *target)
{
	struct stat st, console;

	if (stat(target, &st) != 0)
		return 0;
	if (!S_ISREG(st.st_mode)) {
		log_error(&vm->log, "snapshot: %s exists and is not a regular file", target);
		return -EINVAL;
	}
	if (vm->console_out_fd >= 0 && fstat(vm->console_out_fd, &console) == 0 &&
	    console.st_dev == st.st_dev && console.st_ino == st.st_ino) {
		log_error(&vm->log, "snapshot: %s is the VM's console output", target);
		return -EINVAL;
	}
	return 0;
}

/* A snapshot's two files must be two, and neither may be a file of the VM's disks, its
 * vsock socket (the rename would put a file where clients connect), its console file or
 * anything else than a regular file. */
static int vm_check_snapshot_targets(struct mote_vm *vm, const struct mote_snapshot_params *params)
{
	const char *targets[] = {params->state_path, params->mem_path};

	if (vm_same_file(params->state_path, params->mem_path)) {
		log_error(&vm->log, "snapshot: %s is named as both the state and the memory file",
			  params->state_path);
		return -EINVAL;
	}
	for (unsigned t = 0; t < 2; t++) {
		for (unsigned d = 0; d < vm->setup.disk_count; d++) {
			int ret = vm_target_is_disk_file(vm, d, params->state_path, targets[t]);
			if (ret < 0)
				return ret;
			if (ret) {
				log_error(&vm->log,
					  "snapshot: %s is a file of the VM's disk %s; writing "
					  "the snapshot there would destroy it",
					  targets[t], vm->setup.disks[d].path);
				return -EINVAL;
			}
		}
		if (vm->setup.vsock_uds_path &&
		    vm_same_file(targets[t], vm->setup.vsock_uds_path)) {
			log_error(&vm->log, "snapshot: %s is the VM's vsock socket", targets[t]);
			return -EINVAL;
		}
		int ret = vm_check_target_kind(vm, targets[t]);
		if (ret)
			return ret;
	}
	return 0;
}

int mote_vm_snapshot(struct mote_vm *vm, const struct mote_snapshot_params *params)
{
	if (!params || !params->state_path || !params->state_path[0] || !params->mem_path ||
	    !params->mem_path[0]) {
		log_error(&vm->log, "snapshot: a state file and a memory file are required");
		return -EINVAL;
	}
	if (params->type != MOTE_SNAPSHOT_FULL && params->type != MOTE_SNAPSHOT_DIFF) {
		log_error(&vm->log, "snapshot type %d: not one of enum mote_snapshot_type",
			  (int)params->type);
		return -EINVAL;
	}
	/* The targets are checked under the lock too: another snapshot's freeze changes the
	 * disks' layers, which the check reads. */
	pthread_mutex_lock(&vm->pause_lock);
	int ret = vm_check_snapshot_targets(vm, params);
	if (!ret)
		ret = vm_snapshot_locked(vm, params);
	pthread_mutex_unlock(&vm->pause_lock);
	return ret;
}

/* Restore. */

void mote_restore_config_init(struct mote_restore_config *config)
{
	memset(config, 0, sizeof(*config));
	config->console = MOTE_CONSOLE_FDS;
	config->console_in_fd = STDIN_FILENO;
	config->console_out_fd = STDOUT_FILENO;
}

/* The whole state file in memory, at most a header and SNAP_MAX_PAYLOAD. */
static int vm_read_state_file(const char *path, uint8_t **data, size_t *len,
			      const struct mote_log *log)
{
	struct stat st;
	int fd = file_open_read(path);

	*data = NULL;
	if (fd < 0) {
		log_error(log, "state file %s: %s", path, file_open_error(fd));
		return fd;
	}
	/* file_open_read() opened a regular file, or nothing. */
	int ret = 0;
	if (fstat(fd, &st) < 0) {
		ret = -errno;
		log_error(log, "state file %s: %s", path, strerror(-ret));
	} else if ((uint64_t)st.st_size > SNAP_HEADER_SIZE + (uint64_t)SNAP_MAX_PAYLOAD) {
		log_error(log, "state file %s: too large for a mote snapshot", path);
		ret = -EPROTO;
	} else if (!(*data = malloc(st.st_size ? (size_t)st.st_size : 1))) {
		ret = -ENOMEM;
	} else {
		size_t got = 0;
		while (got < (size_t)st.st_size) {
			ssize_t n = read(fd, *data + got, (size_t)st.st_size - got);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				ret = n < 0 ? -errno : -EIO;
				log_error(log, "state file %s: %s", path, strerror(-ret));
				break;
			}
			got += (size_t)n;
		}
		*len = got;
	}
	close(fd);
	if (ret) {
		free(*data);
		*data = NULL;
	}
	return ret;
}

static int vm_apply_overrides(struct vm_setup *setup, const struct mote_restore_config *config,
			      const struct mote_log *log)
{
	int ret = 0;

	if (config->disk_override_count > MOTE_MAX_DISKS ||
	    config->net_override_count > MOTE_MAX_NETS ||
	    config->mem_diff_count > MOTE_MAX_MEM_DIFFS) {
		log_error(log, "restore: too many overrides or diff files");
		return -EINVAL;
	}
	for (unsigned i = 0; i < config->disk_override_count && !ret; i++) {
		const struct mote_disk_override *o = &config->disk_overrides[i];
		int d = o->disk ? vm_setup_find_disk(setup, o->disk) : -1;
		if (d < 0) {
			log_error(log, "restore: the snapshot has no disk named %s",
				  o->disk ? o->disk : "(none)");
			return -EINVAL;
		}
		if (o->path)
			ret = vm_setup_set(&setup->disks[d].path, o->path);
		if (!ret && o->overlay)
			ret = vm_setup_set(&setup->disks[d].overlay, o->overlay);
	}
	for (unsigned i = 0; i < config->net_override_count && !ret; i++) {
		const struct mote_net_override *o = &config->net_overrides[i];
		int n = o->nic ? vm_setup_find_net(setup, o->nic) : -1;
		if (n < 0 || !o->tap || !o->tap[0]) {
			log_error(log,
				  "restore: the snapshot has no network interface named %s, "
				  "or no TAP given for it",
				  o->nic ? o->nic : "(none)");
			return -EINVAL;
		}
		ret = vm_setup_set(&setup->nets[n].tap, o->tap);
	}
	if (!ret && config->vsock_uds_path) {
		if (!setup->vsock_cid) {
			log_error(log, "restore: the snapshot has no vsock device");
			return -EINVAL;
		}
		ret = vm_setup_set(&setup->vsock_uds_path, config->vsock_uds_path);
	}
	return ret;
}

/* The memory files of a restore, opened and checked before anything is built. */
struct vm_memory_files {
	int mem_fd;
	unsigned diff_count;
	int diff_fds[MOTE_MAX_MEM_DIFFS];
	struct snapshot_memory_identity diffs[MOTE_MAX_MEM_DIFFS];
};

static void vm_memory_files_close(struct vm_memory_files *files)
{
	if (files->mem_fd >= 0)
		close(files->mem_fd);
	files->mem_fd = -1;
	while (files->diff_count)
		close(files->diff_fds[--files->diff_count]);
}

/* Opens the memory file and the diffs and checks that they are the chain that ends at
 * the snapshot whose memory identity the state file holds: the full file first, each
 * diff applying on the file before it, the last one carrying the snapshot's id. With
 * verify, the full file's content is read and compared with its checksum too. 0, or a
 * negative errno (-EINVAL for files that do not fit) with a message; files then holds
 * what was opened, for vm_memory_files_close. */
static int vm_memory_files_open(struct vm_memory_files *files,
				const struct mote_restore_config *config, uint64_t guest_bytes,
				const struct snapshot_memory_identity *state,
				const struct mote_log *log)
{
	struct snapshot_memory_identity previous = {0}, identity;
	const char *previous_path = NULL;

	files->mem_fd = -1;
	files->diff_count = 0;
	for (unsigned i = 0; i <= config->mem_diff_count; i++) {
		const char *path = i == 0 ? config->mem_path : config->mem_diff_paths[i - 1];
		int fd = snapshot_memory_open(path, i > 0, log);
		if (fd < 0)
			return fd;
		if (i == 0)
			files->mem_fd = fd;
		else
			files->diff_fds[files->diff_count++] = fd;
		int ret = snapshot_memory_read_identity(fd, guest_bytes, &identity, path, log);
		if (!ret)
			ret = snapshot_memory_check_chain(&identity, path, i ? &previous : NULL,
							  previous_path, log);
		if (ret)
			return ret;
		/* A diff is checked as it is applied (vm_restore_state), on the very bytes
		 * that go into the guest: one read, and none that changed after a check. */
		if (i == 0 && config->verify_memory &&
		    (ret = snapshot_memory_verify(fd, &identity, path, log)) != 0)
			return ret;
		if (i > 0)
			files->diffs[i - 1] = identity;
		previous = identity;
		previous_path = path;
	}
	if (memcmp(previous.id, state->id, SNAPSHOT_ID_SIZE) != 0) {
		log_error(log, "%s is not the memory of the snapshot in %s: %s", previous_path,
			  config->state_path,
			  state->diff ? "it is a diff snapshot; give the full memory file, then "
					"its diffs oldest first, its own last"
				      : "give the memory file written with it");
		return -EINVAL;
	}
	return 0;
}

/* Everything after the setup: memory diffs, KVM state, devices, vCPUs. */
static int vm_restore_state(struct mote_vm *vm, const struct mote_restore_config *config,
			    const struct vm_memory_files *files, struct snap_reader *payload)
{
	int ret = 0;

	for (unsigned i = 0; i < files->diff_count && !ret; i++)
		ret = snapshot_memory_apply_diff(&vm->mem, files->diff_fds[i], &files->diffs[i],
						 config->verify_memory, config->mem_diff_paths[i],
						 &vm->log);
	/* Every vCPU exists before the interrupt controllers are loaded: KVM_SET_IRQCHIP
	 * asks each existing vCPU to rescan the IOAPIC for the level-triggered vectors whose
	 * EOI it must forward; a vCPU created afterwards never learns them, its EOIs never
	 * clear the IOAPIC's remote IRR, and the devices' interrupts stop (seen as restored
	 * guests whose virtio devices fall silent). Firecracker creates its vCPUs first too. */
	for (unsigned i = 0; i < vm->cpu_count && !ret; i++)
		ret = vcpu_open(&vm->vcpus[i], vm, i);
	if (!ret)
		ret = vm_kvm_state_load(vm, payload);
	if (!ret)
		ret = vm_devices_load(vm, payload);
	for (unsigned i = 0; i < vm->cpu_count && !ret; i++)
		ret = vcpu_state_load(&vm->vcpus[i], payload);
	/* The guest was stopped by the host for as long as the snapshot lay on disk: tell it
	 * (api.rst 4.81), so that its watchdogs do not report soft lockups. EINVAL: the
	 * guest had not set up kvm-clock. */
	for (unsigned i = 0; i < vm->cpu_count && !ret; i++)
		(void)ioctl(vm->vcpus[i].fd, KVM_KVMCLOCK_CTRL, 0);
	if (!ret)
		ret = snap_reader_finish(payload);
	if (payload->error) {
		log_error(&vm->log, "state file %s: %s", config->state_path,
			  payload->failure ? payload->failure : "malformed");
		return -EPROTO;
	}
	return ret;
}

int mote_vm_restore(const struct mote_restore_config *config, struct mote_vm **vm_out)
{
	if (!config || !vm_out)
		return -EINVAL;
	struct mote_log log = {config->log, config->log_opaque};
	struct snapshot_memory_identity memory_identity;
	struct vm_memory_files files = {.mem_fd = -1};
	struct snap_reader payload;
	struct vm_setup setup;
	struct mote_config vm_config;
	const char *why = NULL;
	uint8_t *file;
	size_t len = 0;

	*vm_out = NULL;
	if (!config->state_path || !config->mem_path) {
		log_error(&log, "restore: a state file and a memory file are required");
		return -EINVAL;
	}
	int ret = vm_read_state_file(config->state_path, &file, &len, &log);
	if (ret)
		return ret;
	if (snap_reader_open(&payload, file, len, &why) != 0) {
		log_error(&log, "state file %s: %s", config->state_path, why);
		free(file);
		return -EPROTO;
	}
	vm_setup_load(&setup, &payload);
	vm_memory_identity_load(&memory_identity, &payload);
	if (payload.error) {
		log_error(&log, "state file %s: %s", config->state_path, payload.failure);
		vm_setup_free(&setup);
		free(file);
		return -EPROTO;
	}
	ret = vm_apply_overrides(&setup, config, &log);
	mote_config_init(&vm_config);
	vm_setup_to_config(&setup, &vm_config);
	vm_config.kernel_path = "(snapshot)";
	vm_config.track_dirty_pages = config->track_dirty_pages;
	vm_config.console = config->console;
	vm_config.console_in_fd = config->console_in_fd;
	vm_config.console_out_fd = config->console_out_fd;
	vm_config.console_path = config->console_path;
	vm_config.console_max_bytes = config->console_max_bytes;
	vm_config.log = config->log;
	vm_config.log_opaque = config->log_opaque;
	if (!ret)
		ret = vm_check_config(&vm_config, &log);
	if (!ret)
		ret = vm_memory_files_open(&files, config, setup.mem_bytes, &memory_identity, &log);
	struct mote_vm *vm = NULL;
	if (!ret && !(vm = vm_new(&log, setup.cpus, config->start_monotonic_ns)))
		ret = -ENOMEM;
	if (!ret) {
		*vm_out = vm;
		/* The VM's setup is the snapshot's, with its disks' frozen layers; vm_config
		 * borrows its strings, so it moves over whole. */
		vm->setup = setup;
		memset(&setup, 0, sizeof(setup));
		ret = vm_build(vm, &vm_config, files.mem_fd);
		files.mem_fd = -1; /* vm_build's now */
	}
	if (!ret)
		ret = vm_restore_state(vm, config, &files, &payload);
	if (!ret) {
		vm->disks_uncommitted = true;
		if (!config->defer_disk_commit)
			ret = mote_vm_commit_disks(&vm, 1);
	}
	if (!ret) {
		memcpy(vm->snapshot_id, memory_identity.id, SNAPSHOT_ID_SIZE);
		vm->has_snapshot_id = true;
		vm_devices_restored(vm);
		vm->state = config->paused ? MOTE_VM_PAUSED : MOTE_VM_CREATED;
		vm->restored = true;
		log_debug(&vm->log, "restored from %s", config->state_path);
	}
	vm_memory_files_close(&files);
	vm_setup_free(&setup);
	free(file);
	if (ret) {
		mote_vm_destroy(vm);
		*vm_out = NULL;
	}
	return ret;
}

int mote_vm_commit_disks(struct mote_vm *const *vms, unsigned count)
{
	if (!vms && count > 0)
		return -EINVAL;
	struct mote_vm **uncommitted = calloc(count ? count : 1, sizeof(*uncommitted));
	unsigned n = 0;

	if (!uncommitted)
		return -ENOMEM;
	for (unsigned i = 0; i < count; i++) {
		bool listed = false;
		for (unsigned j = 0; j < n && !listed; j++)
			listed = uncommitted[j] == vms[i];
		/* Once each: its pause_lock is taken below. */
		if (vms[i] && vms[i]->disks_uncommitted && !listed)
			uncommitted[n++] = vms[i];
	}
	/* Under each VM's pause_lock, in order: a snapshot freezes the same overlays. */
	for (unsigned i = 0; i < n; i++)
		pthread_mutex_lock(&uncommitted[i]->pause_lock);
	int ret = 0;
	/* A VM stopped before it ran never will: none commits (all or none). */
	for (unsigned i = 0; i < n && !ret; i++)
		if (vm_has_ended(uncommitted[i])) {
			log_info(&uncommitted[i]->log,
				 "the VM was stopped before it ran: its disks "
				 "keep their overlays as they were");
			ret = -EINTR;
		}
	if (!ret && n)
		ret = vm_devices_commit_restores(uncommitted, n);
	for (unsigned i = 0; i < n && !ret; i++)
		uncommitted[i]->disks_uncommitted = false;
	for (unsigned i = n; i-- > 0;)
		pthread_mutex_unlock(&uncommitted[i]->pause_lock);
	free(uncommitted);
	return ret;
}
