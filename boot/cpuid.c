/* Guest CPUID adjustments on top of KVM_GET_SUPPORTED_CPUID. The topology told to the
 * guest is one package of cpu_count cores with one thread each, APIC id = vCPU index,
 * matching the MP table (mptable.c). Entries are matched on function and index, never
 * on their position: KVM does not promise an order. */
#include "cpuid.h"

/* Intel SDM Vol. 2A, CPUID; AMD APM Vol. 3, Appendix E. */
#define CPUID_LEAF_FEATURES 0x1
#define CPUID_LEAF_CACHE_PARAMS 0x4
#define CPUID_LEAF_PMU 0xa
#define CPUID_LEAF_TOPOLOGY 0xb
#define CPUID_LEAF_TOPOLOGY_V2 0x1f
#define CPUID_LEAF_EXT_FEATURES 0x80000001
#define CPUID_LEAF_KVM_FEATURES 0x40000001 /* Documentation/virt/kvm/x86/cpuid.rst */

#define LEAF1_ECX_VMX (1U << 5)
#define LEAF1_ECX_HYPERVISOR (1U << 31)
#define LEAF1_EDX_HTT (1U << 28)
#define EXT1_ECX_SVM (1U << 2)
#define KVM_FEATURE_BIT_ASYNC_PF (1U << 4)
#define KVM_FEATURE_BIT_ASYNC_PF_VMEXIT (1U << 10)
#define KVM_FEATURE_BIT_ASYNC_PF_INT (1U << 14)

/* Leaf 0xb/0x1f ECX[15:8] level types. */
#define TOPOLOGY_LEVEL_INVALID 0
#define TOPOLOGY_LEVEL_SMT 1
#define TOPOLOGY_LEVEL_CORE 2

static unsigned ceil_log2(unsigned n)
{
	unsigned shift = 0;

	while ((1U << shift) < n)
		shift++;
	return shift;
}

/* Leaf 1 (SDM "Feature Information"): EBX[31:24] initial APIC id, EBX[23:16] the
 * maximum number of addressable logical processors in the package (valid when EDX.HTT
 * is set). ECX[31] is reserved for hypervisors to announce themselves; ECX[5] VMX goes
 * because mote offers no nested virtualisation. */
static void cpuid_leaf_features(struct kvm_cpuid_entry2 *e, unsigned cpu_index, unsigned cpu_count)
{
	e->ebx = (e->ebx & 0x0000ffffU) | ((cpu_index & 0xffU) << 24) | ((cpu_count & 0xffU) << 16);
	if (cpu_count > 1)
		e->edx |= LEAF1_EDX_HTT;
	else
		e->edx &= ~LEAF1_EDX_HTT;
	e->ecx |= LEAF1_ECX_HYPERVISOR;
	e->ecx &= ~LEAF1_ECX_VMX;
}

/* Leaf 4 (SDM "Deterministic Cache Parameters"): EAX[31:26] is the number of core ids
 * in the package minus one, EAX[25:14] the logical processors sharing this cache minus
 * one: a thread's own L1/L2, an L3 shared by the whole package. Subleaves with cache
 * type (EAX[4:0]) 0 terminate the list and stay zero. */
static void cpuid_leaf_cache(struct kvm_cpuid_entry2 *e, unsigned cpu_count)
{
	unsigned level = (e->eax >> 5) & 0x7;
	unsigned sharing = level >= 3 ? cpu_count - 1 : 0;
	unsigned cores = cpu_count - 1 > 63 ? 63 : cpu_count - 1;

	if ((e->eax & 0x1f) == 0)
		return;
	e->eax = (e->eax & 0x00003fffU) | ((sharing & 0xfffU) << 14) | (cores << 26);
}

/* Leaves 0xb and 0x1f (SDM "Extended Topology Enumeration", "V2 Extended Topology"):
 * subleaf 0 is the SMT level (one thread, so the x2APIC id shifts by 0 to reach the
 * core id), subleaf 1 the core level (shift enough bits for cpu_count cores to get the
 * package id), every further subleaf invalid. EDX is the x2APIC id on all of them. */
static void cpuid_leaf_topology(struct kvm_cpuid_entry2 *e, unsigned cpu_index, unsigned cpu_count)
{
	switch (e->index) {
	case 0:
		e->eax = 0;
		e->ebx = 1;
		e->ecx = (TOPOLOGY_LEVEL_SMT << 8) | e->index;
		break;
	case 1:
		e->eax = ceil_log2(cpu_count);
		e->ebx = cpu_count;
		e->ecx = (TOPOLOGY_LEVEL_CORE << 8) | e->index;
		break;
	default:
		e->eax = 0;
		e->ebx = 0;
		e->ecx = (TOPOLOGY_LEVEL_INVALID << 8) | (e->index & 0xffU);
		break;
	}
	e->edx = cpu_index;
}

unsigned cpuid_adjust(struct kvm_cpuid_entry2 *entries, unsigned count, unsigned capacity,
		      unsigned cpu_index, unsigned cpu_count)
{
	(void)capacity; /* nothing is added */
	if (cpu_count == 0)
		cpu_count = 1;

	for (unsigned i = 0; i < count; i++) {
		struct kvm_cpuid_entry2 *e = &entries[i];

		switch (e->function) {
		case CPUID_LEAF_FEATURES:
			cpuid_leaf_features(e, cpu_index, cpu_count);
			break;
		case CPUID_LEAF_CACHE_PARAMS:
			cpuid_leaf_cache(e, cpu_count);
			break;
		case CPUID_LEAF_PMU:
			/* SDM "Architectural Performance Monitoring Leaf": version 0 in EAX
			 * means no PMU, so the guest does not program counters KVM would
			 * have to emulate or virtualise. */
			e->eax = 0;
			e->ebx = 0;
			e->ecx = 0;
			e->edx = 0;
			break;
		case CPUID_LEAF_TOPOLOGY:
		case CPUID_LEAF_TOPOLOGY_V2:
			cpuid_leaf_topology(e, cpu_index, cpu_count);
			break;
		case CPUID_LEAF_EXT_FEATURES:
			/* AMD APM Vol. 3 E.4.2, Fn8000_0001 ECX[2] SVM: no nested SVM. */
			e->ecx &= ~EXT1_ECX_SVM;
			break;
		case CPUID_LEAF_KVM_FEATURES:
			/* Async page faults (cpuid.rst, msr.rst MSR_KVM_ASYNC_PF_EN) let the
			 * host tell the guest that a page is not there yet so it can run
			 * another task. mote's guest memory is never swapped, and a restored
			 * guest's memory is faulted in lazily from the page cache, where the
			 * protocol only adds exits and injected events; restored guests with
			 * it on crashed their nested host here. */
			e->eax &= ~(KVM_FEATURE_BIT_ASYNC_PF | KVM_FEATURE_BIT_ASYNC_PF_VMEXIT |
				    KVM_FEATURE_BIT_ASYNC_PF_INT);
			break;
		default:
			break;
		}
	}
	return count;
}
