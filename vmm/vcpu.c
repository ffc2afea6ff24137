#include "vcpu.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../boot/cpu_setup.h"
#include "../boot/cpuid.h"
#include "clock.h"
#include "vm.h"

/* The signal that interrupts KVM_RUN. Its handler does nothing: the point is the EINTR
 * (api.rst, "immediate_exit"). */
#define VCPU_KICK_SIGNAL SIGRTMIN

/* Local APIC register offsets and LVT delivery modes (Intel SDM vol. 3, 10.5.1). */
#define APIC_LVT_LINT0 0x350
#define APIC_LVT_LINT1 0x360
#define APIC_MODE_NMI 0x4
#define APIC_MODE_EXTINT 0x7

/* CPUID.01H:ECX bit 24 (Intel SDM vol. 2A, CPUID). */
#define CPUID_1_ECX_TSC_DEADLINE (1u << 24)

static void vcpu_kick_handler(int sig)
{
	(void)sig;
}

static int vcpu_ioctl_error(struct vcpu *vcpu, const char *what)
{
	int err = -errno;

	log_error(&vcpu->vm->log, "vCPU %u: %s: %s", vcpu->index, what, strerror(errno));
	return err;
}

static int vcpu_set_cpuid(struct vcpu *vcpu, const struct kvm_cpuid2 *supported)
{
	size_t bytes = sizeof(*supported) + supported->nent * sizeof(supported->entries[0]);
	unsigned capacity = supported->nent + CPUID_ADDED_MAX;
	struct kvm_cpuid2 *cpuid =
	    malloc(sizeof(*supported) + capacity * sizeof(supported->entries[0]));
	int ret = 0;

	if (!cpuid)
		return -ENOMEM;
	memcpy(cpuid, supported, bytes);
	cpuid->nent =
	    cpuid_adjust(cpuid->entries, cpuid->nent, capacity, vcpu->index, vcpu->vm->cpu_count);
	/* KVM emulates the TSC-deadline LAPIC timer but does not list it in the supported
	 * leaves (api.rst, KVM_CAP_TSC_DEADLINE_TIMER). Offering it spares the guest its
	 * LAPIC-against-PIT calibration, which is slow and fails under nested emulation. */
	if (vcpu->vm->kvm.tsc_deadline_timer) {
		for (unsigned i = 0; i < cpuid->nent; i++) {
			if (cpuid->entries[i].function == 1)
				cpuid->entries[i].ecx |= CPUID_1_ECX_TSC_DEADLINE;
		}
	}
	if (ioctl(vcpu->fd, KVM_SET_CPUID2, cpuid) < 0)
		ret = vcpu_ioctl_error(vcpu, "KVM_SET_CPUID2");
	free(cpuid);
	return ret;
}

static int vcpu_set_msrs(struct vcpu *vcpu)
{
	struct kvm_msrs *msrs =
	    calloc(1, sizeof(*msrs) + CPU_SETUP_MAX_MSRS * sizeof(struct kvm_msr_entry));
	int ret = 0;

	if (!msrs)
		return -ENOMEM;
	msrs->nmsrs = cpu_setup_boot_msrs(msrs->entries, CPU_SETUP_MAX_MSRS);
	int set = ioctl(vcpu->fd, KVM_SET_MSRS, msrs);
	if (set < 0) {
		ret = vcpu_ioctl_error(vcpu, "KVM_SET_MSRS");
	} else if ((unsigned)set != msrs->nmsrs) {
		/* KVM_SET_MSRS stops at the first MSR it refuses and returns its index. */
		log_error(&vcpu->vm->log, "vCPU %u: KVM refused boot MSR 0x%x", vcpu->index,
			  msrs->entries[set].index);
		ret = -EINVAL;
	}
	free(msrs);
	return ret;
}

static void lapic_set_delivery_mode(struct kvm_lapic_state *lapic, unsigned reg, uint32_t mode)
{
	uint32_t value;

	memcpy(&value, &lapic->regs[reg], sizeof(value));
	value = (value & ~0x700u) | (mode << 8);
	memcpy(&lapic->regs[reg], &value, sizeof(value));
}

/* LINT0 as ExtINT (the PIC's output) and LINT1 as NMI, as the MP table announces. */
static int vcpu_set_lint(struct vcpu *vcpu)
{
	struct kvm_lapic_state lapic;

	if (ioctl(vcpu->fd, KVM_GET_LAPIC, &lapic) < 0)
		return vcpu_ioctl_error(vcpu, "KVM_GET_LAPIC");
	lapic_set_delivery_mode(&lapic, APIC_LVT_LINT0, APIC_MODE_EXTINT);
	lapic_set_delivery_mode(&lapic, APIC_LVT_LINT1, APIC_MODE_NMI);
	if (ioctl(vcpu->fd, KVM_SET_LAPIC, &lapic) < 0)
		return vcpu_ioctl_error(vcpu, "KVM_SET_LAPIC");
	return 0;
}

static int vcpu_set_boot_registers(struct vcpu *vcpu, uint64_t entry)
{
	struct kvm_sregs sregs;
	struct kvm_regs regs;
	struct kvm_fpu fpu;

	if (ioctl(vcpu->fd, KVM_GET_SREGS, &sregs) < 0)
		return vcpu_ioctl_error(vcpu, "KVM_GET_SREGS");
	cpu_setup_sregs(&sregs);
	if (ioctl(vcpu->fd, KVM_SET_SREGS, &sregs) < 0)
		return vcpu_ioctl_error(vcpu, "KVM_SET_SREGS");
	memset(&regs, 0, sizeof(regs));
	cpu_setup_regs(&regs, entry);
	if (ioctl(vcpu->fd, KVM_SET_REGS, &regs) < 0)
		return vcpu_ioctl_error(vcpu, "KVM_SET_REGS");
	memset(&fpu, 0, sizeof(fpu));
	cpu_setup_fpu(&fpu);
	if (ioctl(vcpu->fd, KVM_SET_FPU, &fpu) < 0)
		return vcpu_ioctl_error(vcpu, "KVM_SET_FPU");
	return 0;
}

int vcpu_open(struct vcpu *vcpu, struct mote_vm *vm, unsigned index)
{
	memset(vcpu, 0, sizeof(*vcpu));
	pthread_mutex_init(&vcpu->kick_lock, NULL);
	vcpu->vm = vm;
	vcpu->index = index;
	vcpu->fd = ioctl(vm->vm_fd, KVM_CREATE_VCPU, (unsigned long)index);
	if (vcpu->fd < 0) {
		vcpu->fd = -1;
		return vcpu_ioctl_error(vcpu, "KVM_CREATE_VCPU");
	}
	vcpu->run =
	    mmap(NULL, vm->kvm.vcpu_mmap_size, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu->fd, 0);
	if (vcpu->run == MAP_FAILED) {
		vcpu->run = NULL;
		return vcpu_ioctl_error(vcpu, "mapping kvm_run");
	}
	return 0;
}

int vcpu_create(struct vcpu *vcpu, struct mote_vm *vm, unsigned index,
		const struct kvm_cpuid2 *supported_cpuid, uint64_t entry)
{
	int ret = vcpu_open(vcpu, vm, index);

	if (!ret)
		ret = vcpu_set_cpuid(vcpu, supported_cpuid);
	if (!ret)
		ret = vcpu_set_msrs(vcpu);
	if (!ret)
		ret = vcpu_set_lint(vcpu);
	/* Only the BSP starts at the kernel entry; the in-kernel LAPIC holds each AP until
	 * the guest sends it INIT and SIPI. */
	if (!ret && index == 0)
		ret = vcpu_set_boot_registers(vcpu, entry);
	return ret;
}

/* rip after INIT (SDM vol. 3, 10.1.1 "Processor State After Reset"). */
#define RESET_VECTOR_RIP 0xfff0

static uint64_t vcpu_rip(struct vcpu *vcpu)
{
	struct kvm_regs regs;

	if (ioctl(vcpu->fd, KVM_GET_REGS, &regs) < 0)
		return 0;
	return regs.rip;
}

static const char *vcpu_exit_name(uint32_t reason)
{
	static const char *const names[] = {
	    [KVM_EXIT_UNKNOWN] = "UNKNOWN",
	    [KVM_EXIT_EXCEPTION] = "EXCEPTION",
	    [KVM_EXIT_IO] = "IO",
	    [KVM_EXIT_HYPERCALL] = "HYPERCALL",
	    [KVM_EXIT_DEBUG] = "DEBUG",
	    [KVM_EXIT_HLT] = "HLT",
	    [KVM_EXIT_MMIO] = "MMIO",
	    [KVM_EXIT_IRQ_WINDOW_OPEN] = "IRQ_WINDOW_OPEN",
	    [KVM_EXIT_SHUTDOWN] = "SHUTDOWN",
	    [KVM_EXIT_FAIL_ENTRY] = "FAIL_ENTRY",
	    [KVM_EXIT_INTR] = "INTR",
	    [KVM_EXIT_SET_TPR] = "SET_TPR",
	    [KVM_EXIT_TPR_ACCESS] = "TPR_ACCESS",
	    [KVM_EXIT_NMI] = "NMI",
	    [KVM_EXIT_INTERNAL_ERROR] = "INTERNAL_ERROR",
	    [KVM_EXIT_SYSTEM_EVENT] = "SYSTEM_EVENT",
	};

	if (reason < sizeof(names) / sizeof(names[0]) && names[reason])
		return names[reason];
	return "unnamed";
}

static void vcpu_handle_io(struct vcpu *vcpu)
{
	struct kvm_run *run = vcpu->run;
	uint8_t *data = (uint8_t *)run + run->io.data_offset;
	bool is_write = run->io.direction == KVM_EXIT_IO_OUT;

	/* String I/O (rep outsb and friends) arrives as count back-to-back elements. */
	for (uint32_t i = 0; i < run->io.count; i++) {
		bus_dispatch(&vcpu->vm->pio, run->io.port, data, run->io.size, is_write);
		data += run->io.size;
	}
}

static void vcpu_handle_system_event(struct vcpu *vcpu)
{
	struct mote_vm *vm = vcpu->vm;

	switch (vcpu->run->system_event.type) {
	case KVM_SYSTEM_EVENT_SHUTDOWN:
		vm_end(vm, MOTE_EXIT_POWER_OFF, 0, "guest powered off (vCPU %u)", vcpu->index);
		break;
	case KVM_SYSTEM_EVENT_RESET:
		vm_end(vm, MOTE_EXIT_REBOOT, 0, "guest reset (vCPU %u)", vcpu->index);
		break;
	case KVM_SYSTEM_EVENT_CRASH:
		vm_end(vm, MOTE_EXIT_PANIC, 0, "guest reported a crash (vCPU %u)", vcpu->index);
		break;
	default:
		vm_end(vm, MOTE_EXIT_ERROR, -EIO, "vCPU %u: unknown system event %u", vcpu->index,
		       vcpu->run->system_event.type);
		break;
	}
}

/* Handles one exit; false when the VM must end. */
static bool vcpu_handle_exit(struct vcpu *vcpu)
{
	struct kvm_run *run = vcpu->run;
	struct mote_vm *vm = vcpu->vm;

	switch (run->exit_reason) {
	case KVM_EXIT_IO:
		vcpu_handle_io(vcpu);
		return true;
	case KVM_EXIT_MMIO:
		bus_dispatch(&vm->mmio, run->mmio.phys_addr, run->mmio.data,
			     run->mmio.len <= 8 ? run->mmio.len : 8, run->mmio.is_write);
		return true;
	case KVM_EXIT_INTR:
		return true;
	case KVM_EXIT_HLT:
		/* With the in-kernel LAPIC KVM handles HLT itself; reaching user space means
		 * the vCPU halted for good, as a guest without a power-off method does. */
		vm_end(vm, MOTE_EXIT_POWER_OFF, 0, "vCPU %u halted", vcpu->index);
		return false;
	case KVM_EXIT_SHUTDOWN: {
		/* A triple fault: Linux's `reboot=t`, or a guest that crashed hard. On AMD, KVM
		 * INITs the vCPU before this exit (svm.c, shutdown_interception: the VMCB is
		 * undefined after SHUTDOWN), so rip reads as the reset vector 0xfff0 and where
		 * the guest faulted is lost. */
		uint64_t rip = vcpu_rip(vcpu);
		const char *note = rip == RESET_VECTOR_RIP
				       ? " (the reset vector: KVM reset the vCPU, "
					 "as on AMD; where it faulted is lost)"
				       : "";
		vm_end(vm, MOTE_EXIT_REBOOT, 0,
		       "vCPU %u: triple fault (guest reset) at rip 0x%llx%s", vcpu->index,
		       (unsigned long long)rip, note);
		return false;
	}
	case KVM_EXIT_SYSTEM_EVENT:
		vcpu_handle_system_event(vcpu);
		return false;
	case KVM_EXIT_FAIL_ENTRY:
		vm_end(vm, MOTE_EXIT_ERROR, -EIO,
		       "vCPU %u: KVM_RUN entry failed, hardware reason 0x%llx, rip 0x%llx",
		       vcpu->index,
		       (unsigned long long)run->fail_entry.hardware_entry_failure_reason,
		       (unsigned long long)vcpu_rip(vcpu));
		return false;
	case KVM_EXIT_INTERNAL_ERROR:
		vm_end(vm, MOTE_EXIT_ERROR, -EIO,
		       "vCPU %u: KVM internal error, suberror %u, rip 0x%llx", vcpu->index,
		       run->internal.suberror, (unsigned long long)vcpu_rip(vcpu));
		return false;
	default:
		vm_end(vm, MOTE_EXIT_ERROR, -EIO, "vCPU %u: unexpected exit %s (%u) at rip 0x%llx",
		       vcpu->index, vcpu_exit_name(run->exit_reason), run->exit_reason,
		       (unsigned long long)vcpu_rip(vcpu));
		return false;
	}
}

/* Re-entries a pause allows for completing exits (see below): an access KVM splits (an
 * MMIO access across a page, a 16-byte one, string I/O) takes one exit per piece, and a
 * rep string instruction on MMIO (`rep movsb` from a device window) one per element
 * until KVM's emulator goes back to the guest, every 1024 elements (the restart bound in
 * arch/x86/kvm/emulate.c). Above that, so that a guest cannot leave a vCPU parked in the
 * middle of an instruction, whose state a snapshot would then take half done. */
#define VCPU_PAUSE_COMPLETIONS 2048

/* A pause was asked for: KVM completes the I/O or MMIO access of the last exit only on
 * the next KVM_RUN (api.rst, "KVM_RUN": the state is consistent only after re-entry), so
 * the vCPU re-enters with immediate_exit set, which returns at once with EINTR once
 * nothing is left to complete. Completing one piece of a split access can bring the
 * exit for the next piece instead: that is handled and the vCPU re-enters again. Then
 * it waits in vm_park_vcpu() until resumed or ended. */
static bool vcpu_pause_point(struct vcpu *vcpu)
{
	__atomic_store_n(&vcpu->run->immediate_exit, 1, __ATOMIC_SEQ_CST);
	unsigned i;
	for (i = 0; i < VCPU_PAUSE_COMPLETIONS; i++) {
		if (ioctl(vcpu->fd, KVM_RUN, 0) != 0)
			break; /* EINTR: nothing left pending */
		if (!vcpu_handle_exit(vcpu))
			return false;
	}
	if (i == VCPU_PAUSE_COMPLETIONS)
		log_warn(&vcpu->vm->log,
			 "vCPU %u: still completing an access after %u exits; parked anyway",
			 vcpu->index, VCPU_PAUSE_COMPLETIONS);
	vcpu->run->immediate_exit = 0;
	vm_park_vcpu(vcpu->vm);
	/* Output a slow console held back when the pause came goes out now, not with the
	 * guest's next byte. */
	if (!vm_has_ended(vcpu->vm))
		serial_flush_output(&vcpu->vm->serial);
	return true;
}

static void *vcpu_thread(void *arg)
{
	struct vcpu *vcpu = arg;
	struct mote_vm *vm = vcpu->vm;
	sigset_t kick;

	sigemptyset(&kick);
	sigaddset(&kick, VCPU_KICK_SIGNAL);
	pthread_sigmask(SIG_UNBLOCK, &kick, NULL);

	while (!vm_has_ended(vm)) {
		if (vm_pause_requested(vm)) {
			if (!vcpu_pause_point(vcpu))
				break;
			continue;
		}
		if (ioctl(vcpu->fd, KVM_RUN, 0) < 0) {
			if (errno == EINTR || errno == EAGAIN) {
				vcpu->run->immediate_exit = 0;
				continue;
			}
			vm_end(vm, MOTE_EXIT_ERROR, -errno, "vCPU %u: KVM_RUN: %s", vcpu->index,
			       strerror(errno));
			break;
		}
		if (!vcpu_handle_exit(vcpu))
			break;
	}
	pthread_mutex_lock(&vcpu->kick_lock);
	vcpu->kickable = false;
	pthread_mutex_unlock(&vcpu->kick_lock);
	return NULL;
}

int vcpu_start(struct vcpu *vcpu)
{
	struct sigaction action;

	/* Installing the same no-op handler again is harmless and keeps no global flag. */
	memset(&action, 0, sizeof(action));
	action.sa_handler = vcpu_kick_handler;
	sigemptyset(&action.sa_mask);
	sigaction(VCPU_KICK_SIGNAL, &action, NULL);

	/* Held across the start: the thread cannot end (and clear kickable) before it is
	 * set, and a kick meanwhile waits to see vcpu->thread written. */
	pthread_mutex_lock(&vcpu->kick_lock);
	int err = vm_thread_start(&vcpu->thread, vcpu_thread, vcpu);
	if (!err) {
		vcpu->thread_started = true;
		vcpu->kickable = true;
	}
	pthread_mutex_unlock(&vcpu->kick_lock);
	if (err) {
		log_error(&vcpu->vm->log, "vCPU %u: starting its thread: %s", vcpu->index,
			  strerror(err));
		return -err;
	}
	return 0;
}

void vcpu_kick(struct vcpu *vcpu)
{
	pthread_mutex_lock(&vcpu->kick_lock);
	if (vcpu->kickable) {
		__atomic_store_n(&vcpu->run->immediate_exit, 1, __ATOMIC_SEQ_CST);
		pthread_kill(vcpu->thread, VCPU_KICK_SIGNAL);
	}
	pthread_mutex_unlock(&vcpu->kick_lock);
}

struct timespec vcpu_rekick_deadline(void)
{
	return clock_timespec(clock_now_ns() + VCPU_REKICK_MS * NS_PER_MS);
}

void vcpu_join(struct vcpu *vcpu)
{
	if (!vcpu->thread_started)
		return;
	/* Kicked until it has returned from its function (it clears kickable last). */
	for (;;) {
		pthread_mutex_lock(&vcpu->kick_lock);
		bool returned = !vcpu->kickable;
		pthread_mutex_unlock(&vcpu->kick_lock);
		if (returned)
			break;
		struct timespec until = vcpu_rekick_deadline();
		if (pthread_clockjoin_np(vcpu->thread, NULL, CLOCK_MONOTONIC, &until) == 0) {
			vcpu->thread_started = false;
			return;
		}
		vcpu_kick(vcpu);
	}
	char name[32];
	snprintf(name, sizeof(name), "vCPU %u", vcpu->index);
	vm_thread_join_returned(vcpu->thread, &vcpu->vm->log, name);
	vcpu->thread_started = false;
}

void vcpu_destroy(struct vcpu *vcpu)
{
	pthread_mutex_destroy(&vcpu->kick_lock);
	if (vcpu->run)
		munmap(vcpu->run, vcpu->vm->kvm.vcpu_mmap_size);
	if (vcpu->fd >= 0)
		close(vcpu->fd);
	vcpu->run = NULL;
	vcpu->fd = -1;
}
