/* The controller every front-end drives (vm_command.h). */
#include "vm_command.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vm.h"

#define MIB (1024ULL * 1024ULL)

/* How long InstanceStart waits for the running thread to take the VM into its run. */
#define VM_COMMAND_START_WAIT_MS 10000

/* Everything the library says goes to the embedder; its errors are also kept, so that a
 * failed command can say why in its own reply. */
static void vm_controller_log(void *opaque, enum mote_log_level level, const char *message)
{
	struct vm_controller *c = opaque;

	if (level == MOTE_LOG_ERROR) {
		pthread_mutex_lock(&c->error_lock);
		c->error_count++;
		snprintf(c->last_error, sizeof(c->last_error), "%s", message);
		pthread_mutex_unlock(&c->error_lock);
	}
	if (c->log)
		c->log(c->log_opaque, level, message);
}

unsigned vm_controller_error_count(struct vm_controller *c)
{
	pthread_mutex_lock(&c->error_lock);
	unsigned count = c->error_count;
	pthread_mutex_unlock(&c->error_lock);
	return count;
}

/* "what: why": why is the library's last error if it logged one since errors_before,
 * else err's description. Returns err. */
static int vm_controller_fail(struct vm_controller *c, unsigned errors_before, int err,
			      const char *what, char *fault, size_t fault_len)
{
	pthread_mutex_lock(&c->error_lock);
	if (c->error_count != errors_before)
		snprintf(fault, fault_len, "%s: %s", what, c->last_error);
	else
		snprintf(fault, fault_len, "%s: %s", what, strerror(-err));
	pthread_mutex_unlock(&c->error_lock);
	return err;
}

/* Whether opts set up any part of a VM (a snapshot would replace it); the console and
 * such front-end settings do not count. */
static bool vm_command_options_configure_a_vm(const struct cli_options *opts)
{
	struct cli_options defaults;

	cli_options_init(&defaults);
	return opts->kernel || opts->initrd || opts->cmdline || opts->disk_count ||
	       opts->net_count || opts->vsock_cid || opts->cpus != defaults.cpus ||
	       opts->mem_bytes != defaults.mem_bytes || opts->track_dirty_pages;
}

int vm_controller_init(struct vm_controller *c, struct cli_options *pending, int64_t start_ns,
		       mote_log_fn log, void *log_opaque)
{
	memset(c, 0, sizeof(*c));
	pthread_mutex_init(&c->command_lock, NULL);
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->error_lock, NULL);
	pthread_cond_init(&c->changed, NULL);
	c->phase = VM_CONTROLLER_CONFIGURING;
	c->pending = *pending;
	cli_options_init(pending);
	c->configured = vm_command_options_configure_a_vm(&c->pending);
	c->start_ns = start_ns;
	c->log = log;
	c->log_opaque = log_opaque;
	return 0;
}

void vm_controller_destroy(struct vm_controller *c)
{
	mote_vm_destroy(c->vm);
	c->vm = NULL;
	vm_setup_free(&c->ended_setup);
	cli_options_free(&c->pending);
	pthread_cond_destroy(&c->changed);
	pthread_mutex_destroy(&c->error_lock);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->command_lock);
}

void vm_command_config_from_options(const struct cli_options *opts, struct mote_config *config)
{
	mote_config_init(config);
	config->kernel_path = opts->kernel;
	config->initrd_path = opts->initrd;
	config->cmdline = opts->cmdline;
	config->cpus = opts->cpus;
	config->mem_bytes = opts->mem_bytes;
	config->console = opts->console;
	config->console_path = opts->console_path;
	config->console_max_bytes = opts->console_max_bytes;
	config->disk_count = opts->disk_count;
	for (unsigned i = 0; i < opts->disk_count; i++) {
		config->disks[i] = (struct mote_disk){
		    .path = opts->disks[i].path,
		    .id = opts->disks[i].id,
		    .read_only = opts->disks[i].read_only,
		    .root = opts->disks[i].root,
		    .direct = opts->disks[i].direct,
		    .overlay = opts->disks[i].overlay,
		};
	}
	config->net_count = opts->net_count;
	for (unsigned i = 0; i < opts->net_count; i++) {
		config->nets[i] = (struct mote_net){
		    .tap = opts->nets[i].tap,
		    .id = opts->nets[i].id,
		    .has_mac = opts->nets[i].has_mac,
		};
		memcpy(config->nets[i].mac, opts->nets[i].mac, sizeof(config->nets[i].mac));
	}
	config->vsock =
	    (struct mote_vsock){.guest_cid = opts->vsock_cid, .uds_path = opts->vsock_uds};
	config->track_dirty_pages = opts->track_dirty_pages;
	config->exit_at_boot = opts->exit_at_boot;
}

/* Pre-boot configuration. */

static int vm_command_machine_config(struct cli_options *opts,
				     const struct vm_command_machine_config *m, char *fault,
				     size_t fault_len)
{
	uint64_t mem_bytes = opts->mem_bytes;

	/* All or nothing: check every value before changing one. */
	if (m->has_vcpu_count && (m->vcpu_count < 1 || m->vcpu_count > MOTE_MAX_CPUS))
		return cli_error(fault, fault_len, "vcpu_count %u: must be 1 to %d", m->vcpu_count,
				 MOTE_MAX_CPUS);
	if (m->has_mem_size_mib) {
		struct cli_options probe;
		cli_options_init(&probe);
		if (m->mem_size_mib > (1ULL << 20) ||
		    cli_memory_set(&probe, m->mem_size_mib * MIB, fault, fault_len))
			return cli_error(fault, fault_len,
					 "mem_size_mib %llu: must be even, from 16 to 1048576",
					 (unsigned long long)m->mem_size_mib);
		mem_bytes = probe.mem_bytes;
	}
	if (m->has_vcpu_count)
		opts->cpus = m->vcpu_count;
	opts->mem_bytes = mem_bytes;
	if (m->has_track_dirty_pages)
		opts->track_dirty_pages = m->track_dirty_pages;
	return 0;
}

static int vm_command_copy(char **field, const char *value)
{
	char *copy = NULL;

	if (value && !(copy = strdup(value)))
		return -ENOMEM;
	free(*field);
	*field = copy;
	return 0;
}

static int vm_command_boot_source(struct cli_options *opts, const struct vm_command_boot_source *b,
				  char *fault, size_t fault_len)
{
	if (!b->kernel_image_path || !b->kernel_image_path[0])
		return cli_error(fault, fault_len, "boot source: kernel_image_path is required");
	if (vm_command_copy(&opts->kernel, b->kernel_image_path) ||
	    vm_command_copy(&opts->initrd, b->initrd_path) ||
	    vm_command_copy(&opts->cmdline, b->boot_args))
		return -ENOMEM;
	return 0;
}

static int vm_command_drive(struct cli_options *opts, const struct vm_command_drive *d, char *fault,
			    size_t fault_len)
{
	struct cli_disk disk = {
	    .read_only = d->is_read_only,
	    .root = d->is_root_device,
	    .direct = d->direct,
	    .origin = CLI_FROM_API,
	};

	if (!d->drive_id || !d->drive_id[0] || !d->path_on_host || !d->path_on_host[0])
		return cli_error(fault, fault_len, "drive: drive_id and path_on_host are required");
	if (vm_command_copy(&disk.id, d->drive_id) ||
	    vm_command_copy(&disk.path, d->path_on_host) ||
	    vm_command_copy(&disk.overlay, d->overlay)) {
		free(disk.id);
		free(disk.path);
		free(disk.overlay);
		return -ENOMEM;
	}
	return cli_disk_add(opts, &disk, fault, fault_len);
}

static int vm_command_network_interface(struct cli_options *opts,
					const struct vm_command_network_interface *n, char *fault,
					size_t fault_len)
{
	struct cli_net net = {.has_mac = n->has_guest_mac, .origin = CLI_FROM_API};

	if (!n->iface_id || !n->iface_id[0] || !n->host_dev_name || !n->host_dev_name[0])
		return cli_error(fault, fault_len,
				 "network interface: iface_id and host_dev_name are required");
	memcpy(net.mac, n->guest_mac, sizeof(net.mac));
	if (vm_command_copy(&net.id, n->iface_id) || vm_command_copy(&net.tap, n->host_dev_name)) {
		free(net.id);
		free(net.tap);
		return -ENOMEM;
	}
	return cli_net_add(opts, &net, fault, fault_len);
}

static int vm_command_configure(struct vm_controller *c, const struct vm_command *command,
				char *fault, size_t fault_len)
{
	struct cli_options *opts = &c->pending;

	switch (command->kind) {
	case VM_COMMAND_MACHINE_CONFIG:
		return vm_command_machine_config(opts, &command->machine_config, fault, fault_len);
	case VM_COMMAND_BOOT_SOURCE:
		return vm_command_boot_source(opts, &command->boot_source, fault, fault_len);
	case VM_COMMAND_DRIVE:
		return vm_command_drive(opts, &command->drive, fault, fault_len);
	case VM_COMMAND_NETWORK_INTERFACE:
		return vm_command_network_interface(opts, &command->network_interface, fault,
						    fault_len);
	case VM_COMMAND_VSOCK:
		return cli_vsock_set(opts, command->vsock.guest_cid, command->vsock.uds_path, fault,
				     fault_len);
	default:
		return cli_error(fault, fault_len, "not a configuration command");
	}
}

/* Starting a VM. */

static void vm_command_sleep_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* A VM handed to vm_controller_run() stays CREATED until mote_vm_run() started it: a
 * command waits for that (or the VM's end), at most VM_COMMAND_START_WAIT_MS, rather
 * than finding it "not started" in a window its sender cannot see. */
static void vm_command_wait_running(struct mote_vm *vm)
{
	for (unsigned waited = 0;
	     mote_vm_get_state(vm) == MOTE_VM_CREATED && waited < VM_COMMAND_START_WAIT_MS;
	     waited++)
		vm_command_sleep_ms(1);
}

/* Hands a built VM to vm_controller_run() and waits until it runs (or ended), so that the
 * command's caller can pause it as soon as it has the reply. A VM restored paused is
 * ready at once. -EINTR (the VM destroyed) when the controller was stopped meanwhile. */
static int vm_controller_adopt(struct vm_controller *c, struct mote_vm *vm, const char *what,
			       char *fault, size_t fault_len)
{
	pthread_mutex_lock(&c->lock);
	bool stopped = c->phase == VM_CONTROLLER_ENDED;
	/* Before vm_controller_run() (the CLI's own first command), nobody runs it yet. */
	bool runner = c->runner_waiting;
	if (!stopped) {
		c->vm = vm;
		c->phase = VM_CONTROLLER_HAS_VM;
		pthread_cond_broadcast(&c->changed);
	}
	pthread_mutex_unlock(&c->lock);
	if (stopped) {
		mote_vm_destroy(vm);
		snprintf(fault, fault_len, "%s: mote was stopped meanwhile", what);
		return -EINTR;
	}
	if (runner)
		vm_command_wait_running(vm);
	return 0;
}

static int vm_command_instance_start(struct vm_controller *c, char *fault, size_t fault_len)
{
	struct mote_config config;
	struct mote_vm *vm;

	if (!c->pending.kernel)
		return cli_error(fault, fault_len,
				 "InstanceStart: no kernel configured (boot source "
				 "kernel_image_path)");
	vm_command_config_from_options(&c->pending, &config);
	config.start_monotonic_ns = c->start_ns;
	config.log = vm_controller_log;
	config.log_opaque = c;
	unsigned errors = vm_controller_error_count(c);
	int ret = mote_vm_create(&config, &vm);
	if (ret)
		return vm_controller_fail(c, errors, ret, "InstanceStart", fault, fault_len);
	return vm_controller_adopt(c, vm, "InstanceStart", fault, fault_len);
}

static int vm_command_snapshot_load(struct vm_controller *c,
				    const struct vm_command_snapshot_load *load, char *fault,
				    size_t fault_len)
{
	struct mote_restore_config restore = load->restore;
	struct mote_vm *vm;

	if (c->configured)
		return cli_error(fault, fault_len,
				 "snapshot load: only on a mote with nothing configured (it would "
				 "replace the configuration given)");
	if (!restore.state_path || !restore.mem_path)
		return cli_error(fault, fault_len,
				 "snapshot load: a state file and a memory file are required");
	restore.console = c->pending.console;
	restore.console_in_fd = STDIN_FILENO;
	restore.console_out_fd = STDOUT_FILENO;
	restore.console_path = c->pending.console_path;
	restore.console_max_bytes = c->pending.console_max_bytes;
	restore.start_monotonic_ns = c->start_ns;
	restore.log = vm_controller_log;
	restore.log_opaque = c;
	unsigned errors = vm_controller_error_count(c);
	int ret = mote_vm_restore(&restore, &vm);
	if (ret)
		return vm_controller_fail(c, errors, ret, "snapshot load", fault, fault_len);
	return vm_controller_adopt(c, vm, "snapshot load", fault, fault_len);
}

/* Commands on the VM. */

static int vm_command_on_vm(struct vm_controller *c, const struct vm_command *command, char *fault,
			    size_t fault_len)
{
	unsigned errors = vm_controller_error_count(c);
	const char *what;
	int ret;

	switch (command->kind) {
	case VM_COMMAND_DRIVE_UPDATE:
		what = "drive update";
		ret = mote_vm_update_disk(c->vm, command->drive_update.drive_id,
					  command->drive_update.path_on_host);
		break;
	case VM_COMMAND_SEND_CTRL_ALT_DEL:
		what = "SendCtrlAltDel";
		/* GET / calls a built VM running: the keys wait until it is. */
		vm_command_wait_running(c->vm);
		ret = mote_vm_send_ctrl_alt_del(c->vm);
		break;
	case VM_COMMAND_PAUSE:
		what = "pause";
		ret = mote_vm_pause(c->vm);
		break;
	case VM_COMMAND_RESUME:
		what = "resume";
		ret = mote_vm_resume(c->vm);
		break;
	case VM_COMMAND_SNAPSHOT_CREATE: {
		const struct vm_command_snapshot_create *s = &command->snapshot_create;
		struct mote_snapshot_params params = {
		    .state_path = s->snapshot_path,
		    .mem_path = s->mem_file_path,
		    .type = s->type,
		};
		what = "snapshot create";
		/* Firecracker's rule (snapshot/create: "should be in the Paused state"). */
		if (mote_vm_get_state(c->vm) != MOTE_VM_PAUSED)
			return cli_error(fault, fault_len,
					 "snapshot create: the VM must be paused first");
		ret = mote_vm_snapshot(c->vm, &params);
		break;
	}
	default:
		return cli_error(fault, fault_len, "unknown command %d", (int)command->kind);
	}
	if (ret == -EINVAL && vm_controller_error_count(c) == errors) {
		/* The library refuses a state it is not in without logging. */
		return cli_error(fault, fault_len, "%s: not possible while the VM is %s", what,
				 mote_vm_get_state(c->vm) == MOTE_VM_PAUSED  ? "paused"
				 : mote_vm_get_state(c->vm) == MOTE_VM_ENDED ? "ended"
									     : "not started");
	}
	return ret ? vm_controller_fail(c, errors, ret, what, fault, fault_len) : 0;
}

static bool vm_command_is_configuration(enum vm_command_kind kind)
{
	return kind == VM_COMMAND_MACHINE_CONFIG || kind == VM_COMMAND_BOOT_SOURCE ||
	       kind == VM_COMMAND_DRIVE || kind == VM_COMMAND_NETWORK_INTERFACE ||
	       kind == VM_COMMAND_VSOCK;
}

static int vm_controller_execute_locked(struct vm_controller *c, const struct vm_command *command,
					char *fault, size_t fault_len)
{
	pthread_mutex_lock(&c->lock);
	enum vm_controller_phase phase = c->phase;
	pthread_mutex_unlock(&c->lock);

	if (phase == VM_CONTROLLER_ENDED)
		return cli_error(fault, fault_len, "the VM has ended");
	if (vm_command_is_configuration(command->kind)) {
		if (phase != VM_CONTROLLER_CONFIGURING)
			return cli_error(fault, fault_len,
					 "the VM is built: configuration is pre-boot only");
		int ret = vm_command_configure(c, command, fault, fault_len);
		if (ret == -ENOMEM)
			snprintf(fault, fault_len, "out of memory");
		if (!ret)
			c->configured = true;
		return ret;
	}
	if (command->kind == VM_COMMAND_INSTANCE_START ||
	    command->kind == VM_COMMAND_SNAPSHOT_LOAD) {
		if (phase != VM_CONTROLLER_CONFIGURING)
			return cli_error(fault, fault_len, "%s: the VM is already built",
					 command->kind == VM_COMMAND_INSTANCE_START
					     ? "InstanceStart"
					     : "snapshot load");
		if (command->kind == VM_COMMAND_INSTANCE_START)
			return vm_command_instance_start(c, fault, fault_len);
		return vm_command_snapshot_load(c, &command->snapshot_load, fault, fault_len);
	}
	if (phase != VM_CONTROLLER_HAS_VM)
		return cli_error(fault, fault_len, "the VM is not started");
	return vm_command_on_vm(c, command, fault, fault_len);
}

static int vm_controller_execute_now(struct vm_controller *c, const struct vm_command *command,
				     char *fault, size_t fault_len)
{
	fault[0] = '\0';
	pthread_mutex_lock(&c->command_lock);
	int ret = vm_controller_execute_locked(c, command, fault, fault_len);
	pthread_mutex_unlock(&c->command_lock);
	if (ret && !fault[0])
		snprintf(fault, fault_len, "%s", strerror(-ret));
	return ret;
}

int vm_controller_execute(struct vm_controller *c, const struct vm_command *command, char *fault,
			  size_t fault_len)
{
	pthread_mutex_lock(&c->lock);
	while (c->held)
		pthread_cond_wait(&c->changed, &c->lock);
	pthread_mutex_unlock(&c->lock);
	return vm_controller_execute_now(c, command, fault, fault_len);
}

void vm_controller_hold_first(struct vm_controller *c)
{
	pthread_mutex_lock(&c->lock);
	c->held = c->phase != VM_CONTROLLER_ENDED;
	pthread_mutex_unlock(&c->lock);
}

int vm_controller_execute_first(struct vm_controller *c, const struct vm_command *command,
				char *fault, size_t fault_len)
{
	int ret = vm_controller_execute_now(c, command, fault, fault_len);

	pthread_mutex_lock(&c->lock);
	c->held = false;
	pthread_cond_broadcast(&c->changed);
	pthread_mutex_unlock(&c->lock);
	return ret;
}

/* Copies the setup of vm, which has ended, for the configuration GETs (vm_command.h:
 * vm_controller_with_config); the caller holds command_lock. The frozen disk layers are
 * left out: no GET reports them. */
static void vm_controller_keep_setup(struct vm_controller *c, const struct mote_vm *vm)
{
	struct mote_config config;

	mote_config_init(&config);
	vm_setup_to_config(&vm->setup, &config);
	c->has_ended_setup = vm_setup_from_config(&c->ended_setup, &config) == 0;
	c->ended_track_dirty = vm->track_dirty;
	if (!c->has_ended_setup)
		vm_controller_log(c, MOTE_LOG_WARN,
				  "keeping the ended VM's configuration: out of memory (the "
				  "configuration GETs report the one given instead)");
}

int vm_controller_run(struct vm_controller *c, struct mote_exit *exit)
{
	pthread_mutex_lock(&c->lock);
	c->runner_waiting = true;
	while (c->phase == VM_CONTROLLER_CONFIGURING)
		pthread_cond_wait(&c->changed, &c->lock);
	c->runner_waiting = false;
	struct mote_vm *vm = c->vm;
	pthread_mutex_unlock(&c->lock);
	if (!vm)
		return -EINTR;

	int ret = mote_vm_run(vm, exit);

	/* A command still at work on the VM finishes (it fails: the VM ended) before the
	 * VM goes away; later ones find the phase ended. */
	pthread_mutex_lock(&c->command_lock);
	vm_controller_keep_setup(c, vm);
	pthread_mutex_lock(&c->lock);
	c->phase = VM_CONTROLLER_ENDED;
	c->vm = NULL;
	pthread_cond_broadcast(&c->changed);
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_unlock(&c->command_lock);
	mote_vm_destroy(vm);
	return ret;
}

int vm_controller_commit_disks(struct vm_controller *const *cs, unsigned count)
{
	struct mote_vm **vms = calloc(count ? count : 1, sizeof(*vms));

	if (!vms)
		return -ENOMEM;
	/* In order, and never taken two at a time elsewhere: no lock-order cycle. */
	for (unsigned i = 0; i < count; i++) {
		pthread_mutex_lock(&cs[i]->command_lock);
		pthread_mutex_lock(&cs[i]->lock);
		vms[i] = cs[i]->vm;
		pthread_mutex_unlock(&cs[i]->lock);
	}
	int ret = 0;
	for (unsigned i = 0; i < count && !ret; i++)
		if (!vms[i])
			ret = -EINTR; /* stopped, or ended already: none may run */
	if (!ret)
		ret = mote_vm_commit_disks(vms, count);
	for (unsigned i = count; i-- > 0;)
		pthread_mutex_unlock(&cs[i]->command_lock);
	free(vms);
	return ret;
}

void vm_controller_stop(struct vm_controller *c)
{
	pthread_mutex_lock(&c->lock);
	if (c->vm)
		mote_vm_stop(c->vm);
	else
		c->phase = VM_CONTROLLER_ENDED;
	c->held = false; /* the commands waiting find the phase ended, or the VM stopped */
	pthread_cond_broadcast(&c->changed);
	pthread_mutex_unlock(&c->lock);
}

/* The machine's part of a description: the VM's own once there is one, and after its
 * end (a restored VM's are the snapshot's, not the defaults the process started with). */
static void vm_controller_describe_machine(const struct mote_config *config, void *opaque)
{
	struct vm_controller_description *out = opaque;

	out->vcpu_count = config->cpus;
	out->mem_size_mib = config->mem_bytes / MIB;
	out->track_dirty_pages = config->track_dirty_pages;
}

void vm_controller_describe(struct vm_controller *c, struct vm_controller_description *out)
{
	pthread_mutex_lock(&c->lock);
	out->state = "Not started";
	if (c->phase == VM_CONTROLLER_ENDED) {
		out->state = "Ended";
	} else if (c->vm) {
		switch (mote_vm_get_state(c->vm)) {
		case MOTE_VM_CREATED:
			/* Built, and vm_controller_run() is to start it: a pause meanwhile
			 * makes it start paused (mote_vm_pause), as for a running VM. */
		case MOTE_VM_RUNNING:
			out->state = "Running";
			break;
		case MOTE_VM_PAUSED:
			out->state = "Paused";
			break;
		case MOTE_VM_ENDED:
			out->state = "Ended";
			break;
		}
	}
	pthread_mutex_unlock(&c->lock);
	vm_controller_with_config(c, vm_controller_describe_machine, out);
}

void vm_controller_with_config(struct vm_controller *c,
			       void (*fn)(const struct mote_config *config, void *opaque),
			       void *opaque)
{
	struct mote_config config;

	/* command_lock: the pending options, c->vm and the ended VM's setup change only
	 * under it. */
	pthread_mutex_lock(&c->command_lock);
	vm_command_config_from_options(&c->pending, &config);
	if (c->vm) {
		vm_setup_to_config(&c->vm->setup, &config);
		config.track_dirty_pages = c->vm->track_dirty;
	} else if (c->has_ended_setup) {
		vm_setup_to_config(&c->ended_setup, &config);
		config.track_dirty_pages = c->ended_track_dirty;
	}
	fn(&config, opaque);
	pthread_mutex_unlock(&c->command_lock);
}
