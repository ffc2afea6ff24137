/* Creating, running and ending one microVM. mote_vm_create() reads top to bottom in
 * the order the VM is built: files, KVM, memory, interrupt controllers, devices,
 * kernel and boot tables, vCPUs. */
#include "vm.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../boot/boot_params.h"
#include "../boot/cmdline.h"
#include "../boot/cpu_setup.h"
#include "../boot/cpuid.h"
#include "../boot/layout.h"
#include "../boot/mptable.h"
#include "clock.h"
#include "file_image.h"
#include "vm_devices.h"

#define MIB (1024ULL * 1024ULL)

int vm_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	int err;

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 512 * 1024);
	err = pthread_create(thread, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	return err;
}

/* How long a thread's end may be held by the kernel finishing its I/O: Linux's default
 * timeout of a block request, as for the disks' own waits (blk_ring.h). */
#define VM_THREAD_END_WAIT_MS 30000

void vm_thread_join_returned(pthread_t thread, const struct mote_log *log, const char *name)
{
	struct timespec until =
	    clock_timespec(clock_deadline_in(VM_THREAD_END_WAIT_MS * NS_PER_MS));

	if (pthread_clockjoin_np(thread, NULL, CLOCK_MONOTONIC, &until) == 0)
		return;
	pthread_detach(thread);
	log_error(log,
		  "%s: its end is held by the host kernel, which first finishes the disk I/O it "
		  "started (an image that does not answer): left to end on its own",
		  name);
}

void mote_config_init(struct mote_config *config)
{
	memset(config, 0, sizeof(*config));
	config->cpus = 1;
	config->mem_bytes = 128 * MIB;
	config->console = MOTE_CONSOLE_FDS;
	config->console_in_fd = STDIN_FILENO;
	config->console_out_fd = STDOUT_FILENO;
}

const char *mote_version(void)
{
	return MOTE_VERSION;
}

void vm_end(struct mote_vm *vm, enum mote_exit_reason reason, int error, const char *fmt, ...)
{
	va_list args;

	pthread_mutex_lock(&vm->lock);
	if (vm->ended) {
		pthread_mutex_unlock(&vm->lock);
		return;
	}
	vm->ended = true;
	/* A panicking kernel then reboots: report the panic, not the reboot. */
	if (vm->panic_seen && reason == MOTE_EXIT_REBOOT)
		reason = MOTE_EXIT_PANIC;
	vm->exit.reason = reason;
	vm->exit.error = error;
	if (reason == MOTE_EXIT_PANIC && vm->panic_line[0]) {
		snprintf(vm->exit.message, sizeof(vm->exit.message), "guest %.150s",
			 vm->panic_line);
	} else {
		va_start(args, fmt);
		vsnprintf(vm->exit.message, sizeof(vm->exit.message), fmt, args);
		va_end(args);
	}
	/* 0 for a VM stopped before mote_vm_run() started it. */
	vm->exit.run_ns = vm->run_start_ns ? clock_now_ns() - vm->run_start_ns : 0;
	vm->ending = true;
	pthread_cond_broadcast(&vm->ended_cond);
	pthread_cond_broadcast(&vm->pause_cond); /* parked vCPUs leave, a pause gives up */
	pthread_mutex_unlock(&vm->lock);

	for (unsigned i = 0; i < vm->cpu_count; i++)
		vcpu_kick(&vm->vcpus[i]);
	if (vm->console_stop_fd >= 0) {
		uint64_t one = 1;
		if (write(vm->console_stop_fd, &one, sizeof(one)) < 0) {
			/* The counter cannot overflow from one write; nothing to do. */
		}
	}
	pthread_mutex_lock(&vm->lock);
	vm->ending = false;
	pthread_cond_broadcast(&vm->ended_cond);
	pthread_mutex_unlock(&vm->lock);
}

bool vm_has_ended(struct mote_vm *vm)
{
	pthread_mutex_lock(&vm->lock);
	bool ended = vm->ended;
	pthread_mutex_unlock(&vm->lock);
	return ended;
}

/* Device callbacks. */

static void vm_serial_set_irq(void *opaque, bool level)
{
	struct mote_vm *vm = opaque;
	struct kvm_irq_level irq = {.irq = SERIAL_COM1_IRQ, .level = level};

	ioctl(vm->vm_fd, KVM_IRQ_LINE, &irq);
}

static void vm_serial_event(void *opaque, enum serial_event event, const char *line)
{
	struct mote_vm *vm = opaque;

	pthread_mutex_lock(&vm->lock);
	if (event == SERIAL_EVENT_PANIC_START && !vm->panic_seen) {
		vm->panic_seen = true;
		snprintf(vm->panic_line, sizeof(vm->panic_line), "%s",
			 strstr(line, "Kernel panic"));
	}
	bool end = event == SERIAL_EVENT_PANIC_END && vm->panic_seen;
	pthread_mutex_unlock(&vm->lock);
	/* The banner's last line is printed; no need to wait out the guest's panic timeout. */
	if (end)
		vm_end(vm, MOTE_EXIT_PANIC, 0, "guest kernel panic");
}

/* A vCPU held up by a slow console lets go when the VM pauses or ends. */
static bool vm_serial_output_should_yield(void *opaque)
{
	struct mote_vm *vm = opaque;

	/* Asked before every console write: one look under the lock, not two. */
	pthread_mutex_lock(&vm->lock);
	bool yield = vm->pause_requested || vm->ended;
	pthread_mutex_unlock(&vm->lock);
	return yield;
}

static const struct serial_ops vm_serial_ops = {
    .set_irq = vm_serial_set_irq,
    .event = vm_serial_event,
    .output_should_yield = vm_serial_output_should_yield,
};

static void vm_i8042_reset(void *opaque)
{
	vm_end(opaque, MOTE_EXIT_REBOOT, 0, "guest reset through the i8042 controller");
}

/* IRQ 1 is an edge-triggered ISA interrupt: raise and lower it. */
static void vm_i8042_pulse_irq(void *opaque)
{
	struct mote_vm *vm = opaque;
	struct kvm_irq_level irq = {.irq = I8042_KEYBOARD_IRQ, .level = 1};

	ioctl(vm->vm_fd, KVM_IRQ_LINE, &irq);
	irq.level = 0;
	ioctl(vm->vm_fd, KVM_IRQ_LINE, &irq);
}

static void vm_debug_port_event(void *opaque, enum debug_port_event event)
{
	struct mote_vm *vm = opaque;

	if (event == DEBUG_PORT_EVENT_BOOT_COMPLETE) {
		int64_t elapsed = clock_now_ns() - vm->start_ns;
		pthread_mutex_lock(&vm->lock);
		bool first = vm->boot_complete_ns < 0;
		if (first)
			vm->boot_complete_ns = elapsed;
		pthread_mutex_unlock(&vm->lock);
		if (first)
			log_info(&vm->log, "guest boot complete in " VM_MS_FMT " ms",
				 VM_MS_ARGS(elapsed));
		if (first && vm->exit_at_boot)
			vm_end(vm, MOTE_EXIT_BOOT_COMPLETE, 0, "guest boot complete; exit at boot");
	} else {
		vm_end(vm, MOTE_EXIT_POWER_OFF, 0, "guest powered off");
	}
}

/* The console thread: forwards input bytes to the UART until the VM ends. */
static void *vm_console_thread(void *arg)
{
	struct mote_vm *vm = arg;
	uint8_t buf[256];
	unsigned pending = 0, offset = 0;

	for (;;) {
		struct pollfd fds[2] = {
		    {.fd = vm->console_stop_fd, .events = POLLIN},
		    {.fd = pending ? -1 : vm->console_in_fd, .events = POLLIN},
		};
		/* While the guest has not drained its FIFO, retry every few milliseconds. */
		if (poll(fds, 2, pending ? 5 : -1) < 0 && errno != EINTR)
			break;
		if (fds[0].revents)
			break;
		if (fds[1].revents & POLLNVAL) {
			/* Not an open fd (a daemon's closed stdin): poll would return at once
			 * forever. The guest runs on without console input. */
			log_warn(&vm->log, "console input fd %d is not open: no console input",
				 vm->console_in_fd);
			break;
		}
		if (!pending && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
			ssize_t n = read(vm->console_in_fd, buf, sizeof(buf));
			if (n <= 0) {
				if (n < 0 && (errno == EINTR || errno == EAGAIN))
					continue;
				break; /* end of input: the guest keeps running without it */
			}
			pending = (unsigned)n;
			offset = 0;
		}
		if (pending) {
			unsigned taken = serial_receive(&vm->serial, buf + offset, pending);
			offset += taken;
			pending -= taken;
		}
	}
	return NULL;
}

static int vm_open_file(const char *what, const char *path, struct file_image *image,
			const struct mote_log *log)
{
	int ret = file_image_open(path, image);

	if (ret == -EFBIG)
		log_error(log, "%s %s: too large", what, path);
	else if (ret == -ENOEXEC)
		log_error(log, "%s %s: file is empty", what, path);
	else if (ret < 0)
		log_error(log, "%s %s: %s", what, path, file_open_error(ret));
	return ret;
}

int vm_check_config(const struct mote_config *config, const struct mote_log *log)
{
	if (!config->kernel_path || !config->kernel_path[0]) {
		log_error(log, "no kernel given");
		return -EINVAL;
	}
	if (config->cpus < 1 || config->cpus > MOTE_MAX_CPUS) {
		log_error(log, "%u vCPUs: must be 1 to %d", config->cpus, MOTE_MAX_CPUS);
		return -EINVAL;
	}
	if (config->console == MOTE_CONSOLE_FILE && !config->console_path) {
		log_error(log, "console file not named");
		return -EINVAL;
	}
	size_t kernel_end;
	if (config->cmdline && cmdline_kernel_part(config->cmdline, &kernel_end) != 0) {
		/* The kernel would take the rest of the line, the devices mote announces on
		 * it included, as one value: the guest would boot without them. */
		log_error(log, "command line: a double quote is never closed");
		return -EINVAL;
	}
	if (config->disk_count > MOTE_MAX_DISKS) {
		log_error(log, "%u disks: at most %d", config->disk_count, MOTE_MAX_DISKS);
		return -EINVAL;
	}
	unsigned roots = 0;
	for (unsigned i = 0; i < config->disk_count; i++) {
		const struct mote_disk *disk = &config->disks[i];
		if (!disk->path || !disk->path[0]) {
			log_error(log, "disk %u: no image path", i);
			return -EINVAL;
		}
		if (disk->id && strlen(disk->id) > MOTE_DISK_ID_MAX) {
			log_error(log, "disk %s: id longer than %d bytes", disk->path,
				  MOTE_DISK_ID_MAX);
			return -EINVAL;
		}
		if (disk->overlay && (!disk->overlay[0] || disk->read_only ||
				      strcmp(disk->overlay, disk->path) == 0)) {
			log_error(log,
				  "disk %s: an overlay must be a file of its own, on a disk that "
				  "is not read-only",
				  disk->path);
			return -EINVAL;
		}
		roots += disk->root;
	}
	if (roots > 1) {
		log_error(log, "%u disks marked as root: at most one", roots);
		return -EINVAL;
	}
	if (config->net_count > MOTE_MAX_NETS) {
		log_error(log, "%u network interfaces: at most %d", config->net_count,
			  MOTE_MAX_NETS);
		return -EINVAL;
	}
	for (unsigned i = 0; i < config->net_count; i++) {
		if (!config->nets[i].tap || !config->nets[i].tap[0]) {
			log_error(log, "network interface %u: no TAP named", i);
			return -EINVAL;
		}
	}
	if (config->vsock.guest_cid != 0 &&
	    (config->vsock.guest_cid < 3 || config->vsock.guest_cid == UINT32_MAX ||
	     !config->vsock.uds_path || !config->vsock.uds_path[0])) {
		log_error(log, "vsock: the guest CID must be 3 to %u, with a socket path",
			  UINT32_MAX - 1);
		return -EINVAL;
	}
	return 0;
}

static int vm_setup_console(struct mote_vm *vm, const struct mote_config *config)
{
	switch (config->console) {
	case MOTE_CONSOLE_NONE:
		break;
	case MOTE_CONSOLE_FDS:
		vm->console_in_fd = config->console_in_fd;
		vm->console_out_fd = config->console_out_fd;
		break;
	case MOTE_CONSOLE_FILE:
		vm->console_out_fd =
		    open(config->console_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (vm->console_out_fd < 0) {
			int err = -errno;
			log_error(&vm->log, "console file %s: %s", config->console_path,
				  strerror(errno));
			return err;
		}
		vm->console_out_owned = true;
		vm->console_max_bytes = config->console_max_bytes ? config->console_max_bytes
								  : MOTE_CONSOLE_FILE_DEFAULT_MAX;
		break;
	default:
		log_error(&vm->log, "console kind %d: not one of enum mote_console",
			  config->console);
		return -EINVAL;
	}
	vm->console_stop_fd = eventfd(0, EFD_CLOEXEC);
	if (vm->console_stop_fd < 0) {
		int err = -errno;
		log_error(&vm->log, "eventfd: %s", strerror(errno));
		return err;
	}
	return 0;
}

int vm_set_memory_slots(struct mote_vm *vm)
{
	for (unsigned i = 0; i < vm->mem.region_count; i++) {
		const struct guest_memory_region *r = &vm->mem.regions[i];
		struct kvm_userspace_memory_region slot = {
		    .slot = i,
		    .flags = vm->dirty_logging ? KVM_MEM_LOG_DIRTY_PAGES : 0,
		    .guest_phys_addr = r->guest_addr,
		    .memory_size = r->size,
		    .userspace_addr = (uint64_t)(uintptr_t)r->host,
		};
		if (ioctl(vm->vm_fd, KVM_SET_USER_MEMORY_REGION, &slot) < 0) {
			int err = -errno;
			log_error(&vm->log, "KVM_SET_USER_MEMORY_REGION slot %u: %s", i,
				  strerror(errno));
			return err;
		}
	}
	return 0;
}

/* The VM fd, its memory slots and the in-kernel interrupt controllers and timer. */
static int vm_create_kvm_vm(struct mote_vm *vm)
{
	struct kvm_pit_config pit = {.flags = KVM_PIT_SPEAKER_DUMMY};

	vm->vm_fd = ioctl(vm->kvm.fd, KVM_CREATE_VM, 0);
	if (vm->vm_fd < 0) {
		vm->vm_fd = -1;
		log_error(&vm->log, "KVM_CREATE_VM: %s", strerror(errno));
		return -errno;
	}
	/* Intel needs these two regions reserved before the first vCPU (api.rst). */
	if (ioctl(vm->vm_fd, KVM_SET_TSS_ADDR, (unsigned long)LAYOUT_KVM_TSS_ADDR) < 0) {
		log_error(&vm->log, "KVM_SET_TSS_ADDR: %s", strerror(errno));
		return -errno;
	}
	uint64_t identity = LAYOUT_KVM_IDENTITY_MAP_ADDR;
	if (ioctl(vm->vm_fd, KVM_SET_IDENTITY_MAP_ADDR, &identity) < 0) {
		log_error(&vm->log, "KVM_SET_IDENTITY_MAP_ADDR: %s", strerror(errno));
		return -errno;
	}
	int ret = vm_set_memory_slots(vm);
	if (ret)
		return ret;
	if (ioctl(vm->vm_fd, KVM_CREATE_IRQCHIP, 0) < 0) {
		log_error(&vm->log, "KVM_CREATE_IRQCHIP: %s", strerror(errno));
		return -errno;
	}
	if (ioctl(vm->vm_fd, KVM_CREATE_PIT2, &pit) < 0) {
		log_error(&vm->log, "KVM_CREATE_PIT2: %s", strerror(errno));
		return -errno;
	}
	return 0;
}

static int vm_register_devices(struct mote_vm *vm)
{
	int ret;

	serial_init(&vm->serial, vm->console_out_fd, &vm_serial_ops, vm);
	serial_set_output_limit(&vm->serial, vm->console_max_bytes);
	i8042_init(&vm->i8042, vm_i8042_reset, vm);
	i8042_connect_irq(&vm->i8042, vm_i8042_pulse_irq);
	debug_port_init(&vm->debug_port, vm_debug_port_event, vm);

	ret = bus_register(&vm->pio, SERIAL_COM1_ADDR, SERIAL_REG_COUNT, serial_access, &vm->serial,
			   "serial", &vm->log);
	if (!ret)
		ret = bus_register(&vm->pio, I8042_DATA_PORT, 1, i8042_data_access, &vm->i8042,
				   "i8042 data", &vm->log);
	if (!ret)
		ret = bus_register(&vm->pio, I8042_COMMAND_PORT, 1, i8042_command_access,
				   &vm->i8042, "i8042 command", &vm->log);
	if (!ret)
		ret = bus_register(&vm->pio, DEBUG_PORT_ADDR, DEBUG_PORT_LEN, debug_port_access,
				   &vm->debug_port, "debug port", &vm->log);
	return ret;
}

/* The guest's command line: the base (the user's or the default), then what the
 * devices need. Parameters after a "--" word go to init, not the kernel
 * (kernel-parameters.rst), so ours go before it; a "--" inside a quoted value
 * (mote.run="ls -- /") is no such word. vm_check_config() refused a quote left open. */
static void vm_build_cmdline(const struct mote_vm *vm, const struct mote_config *config,
			     struct cmdline *cmdline)
{
	const char *base = config->cmdline ? config->cmdline : MOTE_DEFAULT_CMDLINE;
	size_t kernel_end;
	char root[32];

	(void)cmdline_kernel_part(base, &kernel_end);
	const char *init_args = base[kernel_end] ? base + kernel_end : NULL;
	if (init_args) {
		char head[sizeof(cmdline->buf)];
		snprintf(head, sizeof(head), "%.*s", (int)kernel_end, base);
		cmdline_init(cmdline, head);
	} else {
		cmdline_init(cmdline, base);
	}
	vm_virtio_announce(vm, cmdline);
	for (unsigned i = 0; i < config->disk_count; i++) {
		if (!config->disks[i].root)
			continue;
		snprintf(root, sizeof(root), "root=/dev/vd%c %s", 'a' + i,
			 config->disks[i].read_only ? "ro" : "rw");
		cmdline_append(cmdline, root);
	}
	if (init_args)
		cmdline_append(cmdline, init_args);
}

/* Kernel, initrd, command line, zero page, MP table and the boot page tables. */
static int vm_load_guest(struct mote_vm *vm, const struct mote_config *config,
			 struct file_image *kernel_file, const struct file_image *initrd_file)
{
	struct kernel_image_info kernel;
	struct boot_setup setup = {0};
	struct cmdline *cmdline;
	int ret;

	/* Read with pread() straight into guest memory: mapping the whole file to copy
	 * from it put all of a 17 MiB vmlinux in mote's RSS for 10 MiB of kernel, and was
	 * slower (populating the mapping, then unmapping it). */
	const struct kernel_source source = {.fd = kernel_file->fd, .size = kernel_file->size};
	ret = kernel_load(&vm->mem, &source, &kernel, &vm->log);
	file_image_release(kernel_file);
	if (ret)
		return ret;
	vm->entry = kernel.entry;

	if (initrd_file->size) {
		ret = boot_initrd_place(&vm->mem, &kernel, initrd_file->size, &setup.initrd_addr,
					&vm->log);
		if (ret)
			return ret;
		void *dst = guest_memory_ptr(&vm->mem, setup.initrd_addr, initrd_file->size);
		ret = dst ? file_image_read_all(initrd_file, dst) : -EFAULT;
		if (ret) {
			log_error(&vm->log, "reading the initrd: %s", strerror(-ret));
			return ret;
		}
		setup.initrd_size = initrd_file->size;
	}

	cmdline = malloc(sizeof(*cmdline));
	if (!cmdline)
		return -ENOMEM;
	vm_build_cmdline(vm, config, cmdline);
	ret = cmdline_check(cmdline,
			    kernel.cmdline_size ? kernel.cmdline_size : LAYOUT_CMDLINE_MAX - 1);
	if (ret) {
		log_error(&vm->log, "kernel command line of %zu bytes is too long (limit %u)",
			  cmdline->len,
			  kernel.cmdline_size ? kernel.cmdline_size
					      : (unsigned)LAYOUT_CMDLINE_MAX - 1);
	} else {
		setup.cmdline = cmdline->buf;
		ret = boot_params_write(&vm->mem, &kernel, &setup, &vm->log);
	}
	free(cmdline);
	if (!ret)
		ret = mptable_write(&vm->mem, vm->cpu_count, &vm->log);
	if (!ret)
		ret = cpu_setup_tables(&vm->mem);
	return ret;
}

static int vm_create_vcpus(struct mote_vm *vm)
{
	const struct kvm_cpuid2 *cpuid;
	int ret = 0;

	if ((int)vm->cpu_count > vm->kvm.max_vcpus) {
		log_error(&vm->log, "%u vCPUs requested, KVM allows %d", vm->cpu_count,
			  vm->kvm.max_vcpus);
		return -EINVAL;
	}
	cpuid = kvm_supported_cpuid(&vm->kvm, &vm->log);
	if (!cpuid)
		return -ENOTSUP;
	for (unsigned i = 0; i < vm->cpu_count && !ret; i++)
		ret = vcpu_create(&vm->vcpus[i], vm, i, cpuid, vm->entry);
	return ret;
}

struct mote_vm *vm_new(const struct mote_log *log, unsigned cpus, int64_t start_ns)
{
	struct mote_vm *vm = calloc(1, sizeof(*vm));

	if (!vm)
		return NULL;
	vm->log = *log;
	vm->start_ns = start_ns ? start_ns : clock_now_ns();
	vm->boot_complete_ns = -1;
	vm->kvm.fd = -1;
	vm->vm_fd = -1;
	vm->mem.memfd = -1;
	vm->mem.source_fd = -1;
	vm->console_in_fd = -1;
	vm->console_out_fd = -1;
	vm->console_stop_fd = -1;
	vm->events.epoll_fd = -1;
	vm->events.stop_fd = -1;
	vm->cpu_count = cpus;
	for (unsigned i = 0; i < MOTE_MAX_CPUS; i++)
		vm->vcpus[i].fd = -1;
	pthread_mutex_init(&vm->lock, NULL);
	pthread_cond_init(&vm->ended_cond, NULL);
	pthread_mutex_init(&vm->pause_lock, NULL);
	pthread_mutex_init(&vm->disk_update_lock, NULL);
	/* Timed waits on it (vm_pause.c) count on the monotonic clock: a step of the wall
	 * clock must not stretch a pause's re-kick interval. */
	pthread_condattr_t monotonic;
	pthread_condattr_init(&monotonic);
	pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
	pthread_cond_init(&vm->pause_cond, &monotonic);
	pthread_condattr_destroy(&monotonic);
	bus_init(&vm->pio, "port I/O");
	bus_init(&vm->mmio, "MMIO");
	return vm;
}

int vm_track_dirty(struct mote_vm *vm)
{
	int ret = guest_memory_track_dirty(&vm->mem);

	if (ret)
		log_error(&vm->log, "dirty-page tracking: %s", strerror(-ret));
	return ret;
}

/* Guest RAM must end within the physical address width the guest's CPUID will state
 * (the host's, from KVM): past it the guest cannot map its own memory. Checked for
 * restores too, whose memory size comes from a snapshot perhaps taken elsewhere. */
static int vm_check_address_width(struct mote_vm *vm, bool restore)
{
	const struct kvm_cpuid2 *cpuid = kvm_supported_cpuid(&vm->kvm, &vm->log);

	if (!cpuid)
		return -ENOTSUP;
	unsigned bits = cpuid_phys_addr_bits(cpuid->entries, cpuid->nent);
	uint64_t end = guest_memory_end(&vm->mem);
	if (bits < 64 && end > (1ULL << bits)) {
		log_error(&vm->log,
			  "%llu MiB of guest memory would end at 0x%llx, past this CPU's "
			  "%u-bit physical address space; %s",
			  (unsigned long long)(vm->mem.size >> 20), (unsigned long long)end, bits,
			  restore ? "restore the snapshot on a host with a wider one"
				  : "give less memory");
		/* Booting, the setting is wrong; restoring, the host cannot. */
		return restore ? -ENOTSUP : -EINVAL;
	}
	return 0;
}

int vm_build(struct mote_vm *vm, const struct mote_config *config, int mem_fd)
{
	/* A restore brings the setup of its snapshot, frozen disk layers and all. */
	bool restore = mem_fd >= 0;
	int ret = vm->setup.cpus ? 0 : vm_setup_from_config(&vm->setup, config);

	if (ret)
		log_error(&vm->log, "recording the VM's setup: %s", strerror(-ret));
	vm->track_dirty = config->track_dirty_pages;
	vm->exit_at_boot = config->exit_at_boot;
	if (!ret)
		ret = kvm_open(&vm->kvm, &vm->log);
	if (!ret && mem_fd >= 0) {
		ret = guest_memory_create_from_file(&vm->mem, config->mem_bytes, mem_fd, &vm->log);
		mem_fd = -1; /* the guest memory's now, even when that failed */
	} else if (!ret) {
		ret = guest_memory_create(&vm->mem, config->mem_bytes, &vm->log);
	}
	if (mem_fd >= 0)
		close(mem_fd); /* an earlier step failed: it is still ours to close */
	if (!ret)
		ret = vm_check_address_width(vm, restore);
	/* Restored, the VM's writes since its snapshot are a diff's from the start. */
	vm->dirty_logging = vm->track_dirty && restore;
	if (!ret && vm->dirty_logging)
		ret = vm_track_dirty(vm);
	if (!ret)
		ret = vm_create_kvm_vm(vm);
	if (!ret)
		ret = vm_setup_console(vm, config);
	if (!ret) {
		ret = event_loop_init(&vm->events);
		vm->events.log = &vm->log;
		if (ret)
			log_error(&vm->log, "setting up the event thread: %s", strerror(-ret));
	}
	if (!ret)
		ret = vm_register_devices(vm);
	if (!ret)
		ret = vm_devices_create(vm, config);
	return ret;
}

int mote_vm_create(const struct mote_config *config, struct mote_vm **vm_out)
{
	if (!config || !vm_out)
		return -EINVAL;
	struct file_image kernel_file = {.fd = -1}, initrd_file = {.fd = -1};
	struct mote_log log = {config->log, config->log_opaque};
	struct mote_vm *vm;
	int ret;

	*vm_out = NULL;
	ret = vm_check_config(config, &log);
	if (ret)
		return ret;
	vm = vm_new(&log, config->cpus, config->start_monotonic_ns);
	if (!vm)
		return -ENOMEM;
	*vm_out = vm;

	ret = vm_open_file("kernel", config->kernel_path, &kernel_file, &vm->log);
	if (!ret && config->initrd_path)
		ret = vm_open_file("initrd", config->initrd_path, &initrd_file, &vm->log);
	if (!ret)
		ret = vm_build(vm, config, -1);
	if (!ret)
		ret = vm_load_guest(vm, config, &kernel_file, &initrd_file);
	if (!ret)
		ret = vm_create_vcpus(vm);

	file_image_release(&kernel_file);
	file_image_release(&initrd_file);
	if (ret) {
		mote_vm_destroy(vm);
		*vm_out = NULL;
	}
	return ret;
}

/* Until a vm_end() at work (a mote_vm_stop() on another thread) is done with the VM,
 * and with until_ended until the VM ended: mote_vm_run() returns after such a stop, so
 * the embedder may destroy the VM next. */
static void vm_wait_end(struct mote_vm *vm, bool until_ended)
{
	pthread_mutex_lock(&vm->lock);
	while ((until_ended && !vm->ended) || vm->ending)
		pthread_cond_wait(&vm->ended_cond, &vm->lock);
	pthread_mutex_unlock(&vm->lock);
}

/* Why and how the VM ended, for mote_vm_run()'s caller. */
static void vm_exit_report(struct mote_vm *vm, struct mote_exit *exit)
{
	*exit = vm->exit;
	exit->boot_complete_ns = vm->boot_complete_ns;
	exit->memory_touched_bytes = guest_memory_resident_bytes(&vm->mem);
}

/* mote_vm_run() returns ret before it started anything: the VM may be run again (after
 * its disks are committed, say). */
static int vm_run_not_started(struct mote_vm *vm, int ret)
{
	vm_wait_end(vm, false);
	pthread_mutex_lock(&vm->lock);
	vm->run_entered = false;
	pthread_mutex_unlock(&vm->lock);
	return ret;
}

int mote_vm_run(struct mote_vm *vm, struct mote_exit *exit)
{
	int ret = 0;
	struct mote_exit unwanted;

	if (!exit)
		exit = &unwanted;

	/* A VM runs once: a second call, from another thread or after the first returned,
	 * would start a second set of threads over the first's. A call that failed before
	 * it started anything does not count. */
	pthread_mutex_lock(&vm->lock);
	bool entered = vm->run_entered;
	vm->run_entered = true;
	pthread_mutex_unlock(&vm->lock);
	if (entered) {
		log_error(&vm->log, "this VM was run already: create or restore another");
		return -EALREADY;
	}
	vm->run_start_ns = clock_now_ns();
	if (vm->disks_uncommitted) {
		/* Before anything runs: the guest must not write to an overlay that would
		 * not take its name. A VM stopped before it ran never will (the commit
		 * refuses it), and its overlays stay as they were. */
		ret = mote_vm_commit_disks(&vm, 1);
		if (ret && vm_has_ended(vm)) {
			vm_wait_end(vm, true);
			vm_exit_report(vm, exit);
			return 0;
		}
		if (ret)
			return vm_run_not_started(vm, ret);
	}
	if (vm->console_in_fd >= 0) {
		int err = vm_thread_start(&vm->console_thread, vm_console_thread, vm);
		if (err) {
			log_error(&vm->log, "starting the console thread: %s", strerror(err));
			return vm_run_not_started(vm, -err);
		}
		vm->console_thread_started = true;
	}
	/* A VM restored to stay paused parks its vCPUs before they first run; its event
	 * thread starts with mote_vm_resume(). */
	pthread_mutex_lock(&vm->lock);
	bool start_paused = vm->state == MOTE_VM_PAUSED;
	vm->pause_requested = start_paused;
	vm->run_started = true;
	pthread_mutex_unlock(&vm->lock);
	/* A restored VM's clock goes on from the snapshot's, however long the VM waited
	 * since its restore (for the other copies of a fork, say): flags 0, the value as
	 * saved (api.rst 4.98). One that starts paused gets it at its resume. */
	if (!start_paused && vm->restored && vm->clock_saved) {
		struct kvm_clock_data clock = {.clock = vm->paused_clock.clock};
		if (ioctl(vm->vm_fd, KVM_SET_CLOCK, &clock) < 0)
			log_warn(&vm->log, "KVM_SET_CLOCK: %s", strerror(errno));
		vm->clock_saved = false;
	}
	if (!start_paused) {
		ret = event_loop_start(&vm->events);
		if (ret)
			log_error(&vm->log, "starting the event thread: %s", strerror(-ret));
	}
	for (unsigned i = 0; i < vm->cpu_count && !ret; i++)
		ret = vcpu_start(&vm->vcpus[i]);
	if (ret)
		vm_end(vm, MOTE_EXIT_ERROR, ret, "could not start every vCPU");
	/* The restore benchmark's VMM-side figure: from the request (the process start for
	 * `mote restore`) to every vCPU thread started. */
	if (!ret && vm->restored && !start_paused)
		log_info(&vm->log, "restored VM running " VM_MS_FMT " ms after the request",
			 VM_MS_ARGS(clock_now_ns() - vm->start_ns));
	if (!start_paused) {
		pthread_mutex_lock(&vm->lock);
		vm->state = MOTE_VM_RUNNING;
		pthread_cond_broadcast(&vm->pause_cond); /* vm_wait_started() */
		pthread_mutex_unlock(&vm->lock);
	}

	vm_wait_end(vm, true);

	/* vm_end() kicked the vCPUs it knew were started; one that this thread was still
	 * starting at that moment may have entered KVM_RUN unkicked. Kick them all again:
	 * every thread is known to be started now. */
	for (unsigned i = 0; i < vm->cpu_count; i++)
		vcpu_kick(&vm->vcpus[i]);
	for (unsigned i = 0; i < vm->cpu_count; i++)
		vcpu_join(&vm->vcpus[i]);
	/* What the guest printed last (its panic trace, say) while a vCPU was held up by
	 * the console: out within a second if the console takes it. */
	serial_drain_output(&vm->serial, 1000);
	/* A pause or snapshot still going on owns the event thread until it gives up. */
	pthread_mutex_lock(&vm->pause_lock);
	event_loop_stop(&vm->events);
	pthread_mutex_unlock(&vm->pause_lock);
	if (vm->console_thread_started)
		pthread_join(vm->console_thread, NULL);
	vm->console_thread_started = false;

	vm_exit_report(vm, exit);
	return ret;
}

void mote_vm_stop(struct mote_vm *vm)
{
	vm_end(vm, MOTE_EXIT_ERROR, -EINTR, "stopped by the host");
}

int mote_vm_send_ctrl_alt_del(struct mote_vm *vm)
{
	/* Under the pause lock: a pause (and a snapshot reading the keyboard's state) waits
	 * until the keys are in, rather than finding them arrive in a paused VM. */
	pthread_mutex_lock(&vm->pause_lock);
	vm_wait_started(vm);
	int ret = mote_vm_get_state(vm) == MOTE_VM_RUNNING ? i8042_send_ctrl_alt_del(&vm->i8042)
							   : -EINVAL;
	pthread_mutex_unlock(&vm->pause_lock);
	if (ret == -ENOSPC)
		log_error(&vm->log, "Ctrl-Alt-Del: the guest has not read the keys sent before");
	return ret;
}

void mote_vm_destroy(struct mote_vm *vm)
{
	if (!vm)
		return;
	for (unsigned i = 0; i < MOTE_MAX_CPUS; i++) {
		if (vm->vcpus[i].vm)
			vcpu_destroy(&vm->vcpus[i]);
	}
	/* Devices before memory: a disk waits for its requests in flight, which still
	 * write into guest RAM. */
	event_loop_stop(&vm->events);
	vm_devices_destroy(vm);
	vm_virtio_destroy(vm);
	event_loop_destroy(&vm->events);
	if (vm->vm_fd >= 0)
		close(vm->vm_fd);
	guest_memory_destroy(&vm->mem);
	kvm_close(&vm->kvm);
	if (vm->serial.ops)
		serial_destroy(&vm->serial);
	if (vm->console_out_owned)
		close(vm->console_out_fd);
	if (vm->console_stop_fd >= 0)
		close(vm->console_stop_fd);
	vcpu_msr_list_free(&vm->msr_list);
	vm_setup_free(&vm->setup);
	free(vm->dirty);
	pthread_cond_destroy(&vm->ended_cond);
	pthread_mutex_destroy(&vm->lock);
	pthread_cond_destroy(&vm->pause_cond);
	pthread_mutex_destroy(&vm->pause_lock);
	pthread_mutex_destroy(&vm->disk_update_lock);
	free(vm);
}
