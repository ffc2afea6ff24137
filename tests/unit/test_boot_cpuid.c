/* cpuid_adjust() on a hand-made KVM_GET_SUPPORTED_CPUID-like array (deliberately
 * unsorted, with host values that must be replaced). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "boot/cpuid.h"

#define CAPACITY 20

struct cpuid_table {
	struct kvm_cpuid_entry2 e[CAPACITY];
	unsigned count;
};

static void add(struct cpuid_table *t, uint32_t fn, uint32_t index, uint32_t eax, uint32_t ebx,
		uint32_t ecx, uint32_t edx)
{
	struct kvm_cpuid_entry2 *e = &t->e[t->count++];

	memset(e, 0, sizeof(*e));
	e->function = fn;
	e->index = index;
	e->eax = eax;
	e->ebx = ebx;
	e->ecx = ecx;
	e->edx = edx;
}

/* A host with 2 sockets x 8 cores x 2 threads, VMX, SVM and a PMU. */
static void host_table(struct cpuid_table *t)
{
	t->count = 0;
	add(t, 0xb, 1, 5, 16, 0x201, 0x2b);
	add(t, 0x80000001, 0, 0, 0, 0x121 | (1U << 2), 0x2c100800);
	add(t, 0xa, 0, 0x07300805, 0, 0, 0x603);
	add(t, 0x1, 0, 0x000906ea, 0x2b100800, 0x7ffafbff & ~(1U << 31), 0xbfebfbff);
	add(t, 0xb, 0, 1, 2, 0x100, 0x2b);
	add(t, 0xb, 2, 0, 0, 2, 0x2b);
	add(t, 0x4, 0, 0x1c004121, 0x01c0003f, 0x3f, 0);   /* L1d */
	add(t, 0x4, 3, 0x1c03c163, 0x02c0003f, 0x2fff, 6); /* L3 */
	add(t, 0x4, 4, 0, 0, 0, 0);			   /* end of list */
	add(t, 0x1f, 0, 1, 2, 0x100, 0x2b);
	add(t, 0x1f, 1, 5, 16, 0x201, 0x2b);
	add(t, 0x0, 0, 0x16, 0x756e6547, 0x6c65746e, 0x49656e69);
	/* KVM's features: clocksource2, async PF, PV EOI, async PF as VM exit, as interrupt. */
	add(t, 0x40000001, 0, (1U << 3) | (1U << 4) | (1U << 6) | (1U << 10) | (1U << 14), 0, 0, 0);
}

static const struct kvm_cpuid_entry2 *find(const struct cpuid_table *t, uint32_t fn, uint32_t index)
{
	for (unsigned i = 0; i < t->count; i++)
		if (t->e[i].function == fn && t->e[i].index == index)
			return &t->e[i];
	fail_msg("leaf 0x%x.%u missing", fn, index);
	return NULL;
}

static void adjust(struct cpuid_table *t, unsigned cpu_index, unsigned cpu_count)
{
	host_table(t);
	t->count = cpuid_adjust(t->e, t->count, CAPACITY, cpu_index, cpu_count);
}

static void leaf1_reports_each_vcpus_initial_apic_id(void **state)
{
	struct cpuid_table t;

	(void)state;
	for (unsigned cpu = 0; cpu < 4; cpu++) {
		adjust(&t, cpu, 4);
		assert_int_equal(find(&t, 1, 0)->ebx >> 24, cpu);
	}
}

static void leaf1_logical_count_is_the_vcpu_count_and_keeps_clflush_size(void **state)
{
	struct cpuid_table t;

	(void)state;
	adjust(&t, 0, 6);
	assert_int_equal((find(&t, 1, 0)->ebx >> 16) & 0xff, 6);
	assert_int_equal(find(&t, 1, 0)->ebx & 0xffff, 0x0800);
	assert_true(find(&t, 1, 0)->edx & (1U << 28));
}

static void single_vcpu_clears_htt(void **state)
{
	struct cpuid_table t;

	(void)state;
	adjust(&t, 0, 1);
	assert_false(find(&t, 1, 0)->edx & (1U << 28));
}

static void hypervisor_bit_is_set(void **state)
{
	struct cpuid_table t;

	(void)state;
	adjust(&t, 0, 1);
	assert_true(find(&t, 1, 0)->ecx & (1U << 31));
}

static void vmx_and_svm_are_hidden(void **state)
{
	struct cpuid_table t;

	(void)state;
	adjust(&t, 0, 2);
	assert_false(find(&t, 1, 0)->ecx & (1U << 5));
	assert_false(find(&t, 0x80000001, 0)->ecx & (1U << 2));
	assert_int_equal(find(&t, 0x80000001, 0)->ecx, 0x121);
}

static void kvm_async_page_faults_are_hidden_and_other_kvm_features_kept(void **state)
{
	struct cpuid_table t;

	(void)state;
	adjust(&t, 0, 2);
	assert_int_equal(find(&t, 0x40000001, 0)->eax, (1U << 3) | (1U << 6));
}

static void pmu_leaf_is_zeroed(void **state)
{
	struct cpuid_table t;
	const struct kvm_cpuid_entry2 *e;

	(void)state;
	adjust(&t, 0, 2);
	e = find(&t, 0xa, 0);
	assert_int_equal(e->eax, 0);
	assert_int_equal(e->ebx, 0);
	assert_int_equal(e->ecx, 0);
	assert_int_equal(e->edx, 0);
}

static void leaf_0xb_smt_level_has_one_thread(void **state)
{
	struct cpuid_table t;
	const struct kvm_cpuid_entry2 *e;

	(void)state;
	adjust(&t, 3, 4);
	e = find(&t, 0xb, 0);
	assert_int_equal(e->eax, 0);
	assert_int_equal(e->ebx, 1);
	assert_int_equal(e->ecx, (1 << 8) | 0);
	assert_int_equal(e->edx, 3);
}

static void leaf_0xb_core_level_counts_all_vcpus(void **state)
{
	struct cpuid_table t;
	const struct kvm_cpuid_entry2 *e;

	(void)state;
	adjust(&t, 2, 5);
	e = find(&t, 0xb, 1);
	assert_int_equal(e->eax, 3); /* 5 cores need 3 bits of APIC id */
	assert_int_equal(e->ebx, 5);
	assert_int_equal(e->ecx, (2 << 8) | 1);
	assert_int_equal(e->edx, 2);
}

static void leaf_0xb_core_shift_is_exact_for_powers_of_two(void **state)
{
	struct cpuid_table t;

	(void)state;
	adjust(&t, 0, 1);
	assert_int_equal(find(&t, 0xb, 1)->eax, 0);
	adjust(&t, 0, 32);
	assert_int_equal(find(&t, 0xb, 1)->eax, 5);
}

static void leaf_0xb_levels_past_core_are_invalid(void **state)
{
	struct cpuid_table t;
	const struct kvm_cpuid_entry2 *e;

	(void)state;
	adjust(&t, 1, 2);
	e = find(&t, 0xb, 2);
	assert_int_equal(e->eax, 0);
	assert_int_equal(e->ebx, 0);
	assert_int_equal(e->ecx, 2); /* type 0, subleaf echoed */
	assert_int_equal(e->edx, 1);
}

static void leaf_0x1f_mirrors_leaf_0xb(void **state)
{
	struct cpuid_table t;

	(void)state;
	adjust(&t, 2, 3);
	for (unsigned sub = 0; sub < 2; sub++) {
		const struct kvm_cpuid_entry2 *a = find(&t, 0xb, sub), *b = find(&t, 0x1f, sub);

		assert_int_equal(a->eax, b->eax);
		assert_int_equal(a->ebx, b->ebx);
		assert_int_equal(a->ecx, b->ecx);
		assert_int_equal(a->edx, b->edx);
	}
}

static void leaf4_core_count_matches_the_vcpus(void **state)
{
	struct cpuid_table t;

	(void)state;
	adjust(&t, 0, 4);
	assert_int_equal(find(&t, 4, 0)->eax >> 26, 3);
	assert_int_equal((find(&t, 4, 0)->eax >> 14) & 0xfff, 0); /* L1 is per core */
	assert_int_equal(find(&t, 4, 0)->eax & 0x3fff, 0x0121);
	assert_int_equal(find(&t, 4, 3)->eax >> 26, 3);
	assert_int_equal((find(&t, 4, 3)->eax >> 14) & 0xfff, 3); /* L3 is shared */
	assert_int_equal(find(&t, 4, 4)->eax, 0);
}

static void other_leaves_are_untouched_and_none_dropped(void **state)
{
	struct cpuid_table t;
	const struct kvm_cpuid_entry2 *e;

	(void)state;
	adjust(&t, 0, 4);
	assert_int_equal(t.count, 14); /* the 13, and leaf 0x1f's ending subleaf 2 added */
	assert_int_equal((find(&t, 0x1f, 2)->ecx >> 8) & 0xff, 0);
	e = find(&t, 0, 0);
	assert_int_equal(e->eax, 0x16);
	assert_int_equal(e->ebx, 0x756e6547);
}

/* What KVM_GET_SUPPORTED_CPUID really gives on an AMD host (Linux 6.1): leaf 0xb with
 * subleaf 0 only, zeroed; no leaf 0x1f; the AMD topology leaves with the host's values,
 * Fn8000_001E zeroed. */
static void kvm_amd_table(struct cpuid_table *t)
{
	t->count = 0;
	add(t, 0x0, 0, 0x10, 0x68747541, 0x444d4163, 0x69746e65); /* AuthenticAMD */
	add(t, 0x1, 0, 0x00a00f11, 0x00100800, 0x7ed8320b, 0x178bfbff);
	add(t, 0xb, 0, 0, 0, 0, 0);
	t->e[t->count - 1].flags = KVM_CPUID_FLAG_SIGNIFCANT_INDEX;
	add(t, 0x80000008, 0, 0x3030, 0, 0x0000700f, 0);	  /* 16 cores, 7 id bits */
	add(t, 0x8000001d, 0, 0x00004121, 0x01c0003f, 0x3f, 0);	  /* L1d, 2 sharing */
	add(t, 0x8000001d, 3, 0x0003c163, 0x03c0003f, 0x7fff, 1); /* L3, 16 sharing */
	add(t, 0x8000001d, 4, 0, 0, 0, 0);
	add(t, 0x8000001e, 0, 0, 0, 0, 0);
}

static void the_core_level_kvm_leaves_out_is_added(void **state)
{
	struct cpuid_table t;

	(void)state;
	for (unsigned cpu = 0; cpu < 4; cpu++) {
		kvm_amd_table(&t);
		unsigned before = t.count;
		t.count = cpuid_adjust(t.e, t.count, CAPACITY, cpu, 4);
		/* Leaf 0xb gains subleaves 1 and 2; leaf 0x1f is not there and stays away. */
		assert_int_equal(t.count, before + 2);
		const struct kvm_cpuid_entry2 *smt = find(&t, 0xb, 0), *core = find(&t, 0xb, 1),
					      *end = find(&t, 0xb, 2);
		assert_int_equal(smt->ebx, 1);
		assert_int_equal((smt->ecx >> 8) & 0xff, 1);
		assert_int_equal(core->eax, 2); /* 4 cores: the package id is APIC id >> 2 */
		assert_int_equal(core->ebx, 4);
		assert_int_equal(core->ecx, (2 << 8) | 1);
		assert_int_equal(core->edx, cpu);
		assert_int_equal(core->flags & KVM_CPUID_FLAG_SIGNIFCANT_INDEX,
				 KVM_CPUID_FLAG_SIGNIFCANT_INDEX);
		assert_int_equal((end->ecx >> 8) & 0xff, 0);
		assert_int_equal(end->ebx, 0);
	}
	/* Never past the capacity given. */
	kvm_amd_table(&t);
	unsigned full = t.count;
	assert_int_equal(cpuid_adjust(t.e, t.count, full + 1, 0, 4), full + 1);
	kvm_amd_table(&t);
	assert_int_equal(cpuid_adjust(t.e, t.count, full, 0, 4), full);
}

static void amd_topology_leaves_describe_one_package_of_the_vcpus(void **state)
{
	struct cpuid_table t;

	(void)state;
	for (unsigned cpu = 0; cpu < 4; cpu++) {
		kvm_amd_table(&t);
		t.count = cpuid_adjust(t.e, t.count, CAPACITY, cpu, 4);
		const struct kvm_cpuid_entry2 *sizes = find(&t, 0x80000008, 0);
		assert_int_equal(sizes->ecx & 0xff, 3);	       /* NC: 4 cores */
		assert_int_equal((sizes->ecx >> 12) & 0xf, 2); /* ApicIdSize */
		assert_int_equal(sizes->eax, 0x3030);	       /* address sizes kept */
		const struct kvm_cpuid_entry2 *apic = find(&t, 0x8000001e, 0);
		assert_int_equal(apic->eax, cpu);
		assert_int_equal(apic->ebx & 0xff, cpu);      /* core id */
		assert_int_equal((apic->ebx >> 8) & 0xff, 0); /* one thread a core */
		assert_int_equal((find(&t, 0x8000001d, 0)->eax >> 14) & 0xfff, 0);
		assert_int_equal((find(&t, 0x8000001d, 3)->eax >> 14) & 0xfff, 3);
		assert_int_equal(find(&t, 0x8000001d, 3)->eax & 0x3fff, 0x0163);
	}
}

/* Intel has no such leaves: Fn8000_0008 ECX is reserved there and stays as it was. */
static void amd_leaves_are_left_alone_on_intel(void **state)
{
	struct cpuid_table t;

	(void)state;
	host_table(&t);
	add(&t, 0x80000008, 0, 0x3027, 0, 0, 0);
	t.count = cpuid_adjust(t.e, t.count, CAPACITY, 1, 4);
	assert_int_equal(find(&t, 0x80000008, 0)->ecx, 0);
}

/* The address width comes from Fn8000_0008 EAX[7:0] on Intel and AMD alike; without
 * that leaf (or with it zero) the SDM's default of 36 bits. */
static void phys_addr_bits_come_from_leaf_0x80000008(void **state)
{
	struct cpuid_table t;

	(void)state;
	host_table(&t);
	assert_int_equal(cpuid_phys_addr_bits(t.e, t.count), 36);
	add(&t, 0x80000008, 0, 0x3027, 0, 0, 0);
	assert_int_equal(cpuid_phys_addr_bits(t.e, t.count), 39);
	kvm_amd_table(&t);
	assert_int_equal(cpuid_phys_addr_bits(t.e, t.count), 48);
	t.e[3].eax = 0;
	assert_int_equal(t.e[3].function, 0x80000008);
	assert_int_equal(cpuid_phys_addr_bits(t.e, t.count), 36);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(leaf1_reports_each_vcpus_initial_apic_id),
	    cmocka_unit_test(leaf1_logical_count_is_the_vcpu_count_and_keeps_clflush_size),
	    cmocka_unit_test(single_vcpu_clears_htt),
	    cmocka_unit_test(hypervisor_bit_is_set),
	    cmocka_unit_test(vmx_and_svm_are_hidden),
	    cmocka_unit_test(kvm_async_page_faults_are_hidden_and_other_kvm_features_kept),
	    cmocka_unit_test(pmu_leaf_is_zeroed),
	    cmocka_unit_test(leaf_0xb_smt_level_has_one_thread),
	    cmocka_unit_test(leaf_0xb_core_level_counts_all_vcpus),
	    cmocka_unit_test(leaf_0xb_core_shift_is_exact_for_powers_of_two),
	    cmocka_unit_test(leaf_0xb_levels_past_core_are_invalid),
	    cmocka_unit_test(leaf_0x1f_mirrors_leaf_0xb),
	    cmocka_unit_test(leaf4_core_count_matches_the_vcpus),
	    cmocka_unit_test(other_leaves_are_untouched_and_none_dropped),
	    cmocka_unit_test(the_core_level_kvm_leaves_out_is_added),
	    cmocka_unit_test(amd_topology_leaves_describe_one_package_of_the_vcpus),
	    cmocka_unit_test(amd_leaves_are_left_alone_on_intel),
	    cmocka_unit_test(phys_addr_bits_come_from_leaf_0x80000008),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
