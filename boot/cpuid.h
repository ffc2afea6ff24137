/* Guest CPUID from KVM_GET_SUPPORTED_CPUID (design.md): hypervisor bit, per-vCPU APIC
 * IDs and leaf 0xb topology, no PMU (leaf 0xa), no nested SVM/VMX. Pure functions on
 * the entry array, so tests need no KVM. */
#ifndef MOTE_BOOT_CPUID_H
#define MOTE_BOOT_CPUID_H

#include <linux/kvm.h>
#include <stdint.h>

/* Rewrites entries[0..count) in place for vCPU cpu_index of cpu_count; returns the new
 * count: the topology levels KVM leaves out are added (CPUID_ADDED_MAX at most), never
 * beyond capacity. */
#define CPUID_ADDED_MAX 4
unsigned cpuid_adjust(struct kvm_cpuid_entry2 *entries, unsigned count, unsigned capacity,
		      unsigned cpu_index, unsigned cpu_count);

/* The guest-physical address width (MAXPHYADDR) the entries describe: Fn8000_0008
 * EAX[7:0], or 36 where that leaf is missing (SDM Vol. 3A, 4.1.4). Guest RAM must end
 * below 1 << that, or the guest cannot reach it. */
unsigned cpuid_phys_addr_bits(const struct kvm_cpuid_entry2 *entries, unsigned count);

#endif
