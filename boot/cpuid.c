/* Guest CPUID adjustments on top of KVM_GET_SUPPORTED_CPUID. The topology told to the
 * guest is one package of cpu_count cores with one thread each, APIC id = vCPU index,
 * matching the MP table (mptable.c): in leaves 1, 4, 0xb and 0x1f, and on AMD in
 * Fn8000_0008, Fn8000_001D and Fn8000_001E, which Linux reads there instead. Entries
 * are matched on function and index, never on their position: KVM does not promise an
 * order. */
#include "cpuid.h"

#include <stdbool.h>
#include <stddef.h>

/* Intel SDM Vol. 2A, CPUID; AMD APM Vol. 3, Appendix E. */
#define CPUID_LEAF_FEATURES 0x1
#define CPUID_LEAF_CACHE_PARAMS 0x4
#define CPUID_LEAF_PMU 0xa
#define CPUID_LEAF_TOPOLOGY 0xb
#define CPUID_LEAF_TOPOLOGY_V2 0x1f
#define CPUID_LEAF_VENDOR 0x0
#define CPUID_LEAF_EXT_FEATURES 0x80000001
#define CPUID_LEAF_AMD_SIZES 0x80000008
#define CPUID_LEAF_AMD_CACHE_TOPOLOGY 0x8000001d
#define CPUID_LEAF_AMD_EXT_APIC_ID 0x8000001e
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

/* A cache leaf's EAX (leaf 4, AMD's Fn8000_001D) with EAX[25:14], the logical
 * processors sharing the cache minus one, set: a thread's own L1/L2, an L3 shared by
 * the whole package. EAX[7:5] is the cache level. */
static uint32_t cache_shared_by(uint32_t eax, unsigned cpu_count)
{
	unsigned level = (eax >> 5) & 0x7;
	unsigned sharing = level >= 3 ? cpu_count - 1 : 0;

	return (eax & ~0x03ffc000U) | ((sharing & 0xfffU) << 14);
}

/* Leaf 4 (SDM "Deterministic Cache Parameters"): EAX[31:26] is the number of core ids
 * in the package minus one, EAX[25:14] the sharing (cache_shared_by). Subleaves with
 * cache type (EAX[4:0]) 0 terminate the list and stay zero. */
static void cpuid_leaf_cache(struct kvm_cpuid_entry2 *e, unsigned cpu_count)
{
	unsigned cores = cpu_count - 1 > 63 ? 63 : cpu_count - 1;

	if ((e->eax & 0x1f) == 0)
		return;
	e->eax = (cache_shared_by(e->eax, cpu_count) & 0x03ffffffU) | (cores << 26);
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

/* AMD APM Vol. 3, E.4.7, Fn8000_0008 ECX: NC (bits 7:0) is the number of cores in the
 * package minus one, ApicIdSize (15:12) the APIC id bits that number them. Linux takes
 * its core count and the package id's shift from them on AMD (amd_detect_cmp). */
static void cpuid_leaf_amd_sizes(struct kvm_cpuid_entry2 *e, unsigned cpu_count)
{
	e->ecx = (e->ecx & ~0xf0ffU) | (ceil_log2(cpu_count) << 12) | ((cpu_count - 1) & 0xffU);
}

/* Fn8000_001D (E.4.15), AMD's leaf 4: the sharing as there (no core count here). */
static void cpuid_leaf_amd_cache(struct kvm_cpuid_entry2 *e, unsigned cpu_count)
{
	if ((e->eax & 0x1f) == 0)
		return;
	e->eax = cache_shared_by(e->eax, cpu_count);
}

/* Fn8000_001E (E.4.16): EAX the extended APIC id; EBX[7:0] the core id and EBX[15:8]
 * threads per core minus one; ECX node 0, one node per package. KVM reports it zeroed. */
static void cpuid_leaf_amd_apic_id(struct kvm_cpuid_entry2 *e, unsigned cpu_index)
{
	e->eax = cpu_index;
	e->ebx = cpu_index & 0xffU;
	e->ecx = 0;
	e->edx = 0;
}

static struct kvm_cpuid_entry2 *cpuid_find(struct kvm_cpuid_entry2 *entries, unsigned count,
					   uint32_t function, uint32_t index)
{
	for (unsigned i = 0; i < count; i++)
		if (entries[i].function == function && entries[i].index == index)
			return &entries[i];
	return NULL;
}

unsigned cpuid_phys_addr_bits(const struct kvm_cpuid_entry2 *entries, unsigned count)
{
	for (unsigned i = 0; i < count; i++)
		if (entries[i].function == CPUID_LEAF_AMD_SIZES && (entries[i].eax & 0xffU) != 0)
			return entries[i].eax & 0xffU;
	return 36;
}

/* "AuthenticAMD" or "HygonGenuine" in leaf 0: the Fn8000_00xx topology leaves apply. */
static bool cpuid_is_amd(struct kvm_cpuid_entry2 *entries, unsigned count)
{
	const struct kvm_cpuid_entry2 *e = cpuid_find(entries, count, CPUID_LEAF_VENDOR, 0);

	return e && ((e->ebx == 0x68747541 && e->edx == 0x69746e65 && e->ecx == 0x444d4163) ||
		     (e->ebx == 0x6f677948 && e->edx == 0x6e65476e && e->ecx == 0x656e6975));
}

/* KVM reports only subleaf 0 of leaves 0xb and 0x1f, zeroed (Linux 6.1, cpuid.c: "a
 * valid topology is indicated by the presence of subleaf 1"): the core level (1) and
 * the invalid level that ends the list (2) are added, where the leaf is there at all
 * and capacity allows. Returns the new count. */
static unsigned cpuid_add_topology_levels(struct kvm_cpuid_entry2 *entries, unsigned count,
					  unsigned capacity, uint32_t function)
{
	if (!cpuid_find(entries, count, function, 0))
		return count;
	for (uint32_t index = 1; index <= 2 && count < capacity; index++) {
		if (cpuid_find(entries, count, function, index))
			continue;
		entries[count] = (struct kvm_cpuid_entry2){
		    .function = function,
		    .index = index,
		    .flags = KVM_CPUID_FLAG_SIGNIFCANT_INDEX,
		};
		count++;
	}
	return count;
}

unsigned cpuid_adjust(struct kvm_cpuid_entry2 *entries, unsigned count, unsigned capacity,
		      unsigned cpu_index, unsigned cpu_count)
{
	if (cpu_count == 0)
		cpu_count = 1;
	count = cpuid_add_topology_levels(entries, count, capacity, CPUID_LEAF_TOPOLOGY);
	count = cpuid_add_topology_levels(entries, count, capacity, CPUID_LEAF_TOPOLOGY_V2);
	bool amd = cpuid_is_amd(entries, count);

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
		case CPUID_LEAF_AMD_SIZES:
			if (amd)
				cpuid_leaf_amd_sizes(e, cpu_count);
			break;
		case CPUID_LEAF_AMD_CACHE_TOPOLOGY:
			if (amd)
				cpuid_leaf_amd_cache(e, cpu_count);
			break;
		case CPUID_LEAF_AMD_EXT_APIC_ID:
			if (amd)
				cpuid_leaf_amd_apic_id(e, cpu_index);
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
