/* One vCPU: its KVM fd, the shared kvm_run page and the thread that runs it. */
#ifndef MOTE_VCPU_H
#define MOTE_VCPU_H

#include <linux/kvm.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct mote_vm;

struct vcpu {
	struct mote_vm *vm;
	unsigned index;
	int fd;
	struct kvm_run *run;
	pthread_t thread;
	bool thread_started;
	/* Whether thread may be signalled: set once it is started, cleared by the thread
	 * itself as it ends, so that no kick (from vm_end or a pause on another thread)
	 * reaches a thread that vcpu_join may have joined. Guarded by kick_lock. */
	pthread_mutex_t kick_lock;
	bool kickable;
};

/* KVM_CREATE_VCPU and maps kvm_run: a vCPU with KVM's reset state, for a restore to
 * fill (vcpu_state.h). */
int vcpu_open(struct vcpu *vcpu, struct mote_vm *vm, unsigned index);

/* vcpu_open(), then sets CPUID (per-vCPU APIC id), boot MSRs, LAPIC
 * LINT0/LINT1, and for vCPU 0 the long-mode registers at entry. APs wait for the
 * guest's INIT/SIPI in the in-kernel LAPIC. */
int vcpu_create(struct vcpu *vcpu, struct mote_vm *vm, unsigned index,
		const struct kvm_cpuid2 *supported_cpuid, uint64_t entry);

int vcpu_start(struct vcpu *vcpu);

/* Makes a running KVM_RUN return soon (immediate_exit + signal); any thread. */
void vcpu_kick(struct vcpu *vcpu);

/* How often a thread waiting for vCPUs (vcpu_join, a pause) kicks them again: a kick
 * that came just before a blocking system call (a write to a slow console) is not felt
 * by it. */
#define VCPU_REKICK_MS 10

/* The CLOCK_MONOTONIC deadline of one wait between kicks: VCPU_REKICK_MS from now
 * (vm->pause_cond waits on that clock). */
struct timespec vcpu_rekick_deadline(void);

/* Waits for the vCPU's thread to return, kicking it again every VCPU_REKICK_MS, and
 * joins it: one whose end the kernel still holds 30 s later (vm_thread_join_returned)
 * is left to end on its own. */
void vcpu_join(struct vcpu *vcpu);
void vcpu_destroy(struct vcpu *vcpu);

#endif
