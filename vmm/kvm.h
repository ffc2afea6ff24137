/* The /dev/kvm system handle: API version and the capabilities mote relies on. */
#ifndef MOTE_KVM_H
#define MOTE_KVM_H

#include <linux/kvm.h>
#include <stdbool.h>
#include <stddef.h>

#include "log.h"

struct kvm {
	int fd;
	size_t vcpu_mmap_size;
	int max_vcpus;
	bool tsc_deadline_timer;	    /* KVM_CAP_TSC_DEADLINE_TIMER */
	struct kvm_cpuid2 *supported_cpuid; /* kvm_supported_cpuid's, once asked; or NULL */
};

/* Opens /dev/kvm and checks KVM_GET_API_VERSION == 12 and every capability in
 * kvm.c's table, naming the first one missing. -ENODEV when /dev/kvm cannot be
 * opened, -ENOTSUP for a wrong version or a missing capability. */
int kvm_open(struct kvm *kvm, const struct mote_log *log);

void kvm_close(struct kvm *kvm);

/* KVM_GET_SUPPORTED_CPUID, asked once and kept until kvm_close: a boot reads it for the
 * address-width check and again for every vCPU. NULL, with a message, on failure. */
const struct kvm_cpuid2 *kvm_supported_cpuid(struct kvm *kvm, const struct mote_log *log);

#endif
