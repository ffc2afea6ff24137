/* cpu_setup_*: GDT, identity page tables and the long-mode register state. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "boot/cpu_setup.h"
#include "boot/layout.h"

#define MIB (1024ULL * 1024ULL)
#define GIB (1024ULL * MIB)

static int setup(void **state)
{
	struct guest_memory *mem = calloc(1, sizeof(*mem));

	assert_non_null(mem);
	assert_int_equal(guest_memory_create(mem, 128 * MIB, NULL), 0);
	*state = mem;
	return 0;
}

static int teardown(void **state)
{
	guest_memory_destroy(*state);
	free(*state);
	return 0;
}

static uint64_t rd64(struct guest_memory *mem, uint64_t addr)
{
	uint64_t v;
	const void *p = guest_memory_ptr(mem, addr, sizeof(v));

	assert_non_null(p);
	memcpy(&v, p, sizeof(v));
	return v;
}

/* Walks the guest's 4-level tables for a virtual address, as the MMU would. */
static uint64_t translate(struct guest_memory *mem, uint64_t cr3, uint64_t va)
{
	uint64_t pml4e = rd64(mem, (cr3 & ~0xfffULL) + ((va >> 39) & 0x1ff) * 8);
	uint64_t pdpte, pde;

	assert_true(pml4e & 1);
	pdpte = rd64(mem, (pml4e & 0x000ffffffffff000ULL) + ((va >> 30) & 0x1ff) * 8);
	assert_true(pdpte & 1);
	assert_false(pdpte & 0x80); /* no 1 GiB pages: not every CPU has them */
	pde = rd64(mem, (pdpte & 0x000ffffffffff000ULL) + ((va >> 21) & 0x1ff) * 8);
	assert_true(pde & 1);
	assert_true(pde & 2);
	assert_true(pde & 0x80);
	return (pde & 0x000fffffffe00000ULL) | (va & 0x1fffff);
}

static void page_tables_identity_map_the_first_4gib(void **state)
{
	struct guest_memory *mem = *state;

	assert_int_equal(cpu_setup_tables(mem), 0);
	for (uint64_t va = 0; va < 4 * GIB; va += 2 * MIB)
		assert_int_equal(translate(mem, LAYOUT_PML4_ADDR, va + 0x1234), va + 0x1234);
	assert_int_equal(translate(mem, LAYOUT_PML4_ADDR, 4 * GIB - 1), 4 * GIB - 1);
}

static void page_tables_map_nothing_beyond_4gib(void **state)
{
	struct guest_memory *mem = *state;

	assert_int_equal(cpu_setup_tables(mem), 0);
	for (unsigned i = 4; i < 512; i++)
		assert_int_equal(rd64(mem, LAYOUT_PDPTE_ADDR + i * 8), 0);
	for (unsigned i = 1; i < 512; i++)
		assert_int_equal(rd64(mem, LAYOUT_PML4_ADDR + i * 8), 0);
}

static void page_tables_replace_stale_entries(void **state)
{
	struct guest_memory *mem = *state;

	memset(guest_memory_ptr(mem, LAYOUT_PML4_ADDR, 0x6000), 0xff, 0x6000);
	assert_int_equal(cpu_setup_tables(mem), 0);
	assert_int_equal(rd64(mem, LAYOUT_PML4_ADDR + 8), 0);
	assert_int_equal(rd64(mem, LAYOUT_PDPTE_ADDR + 4 * 8), 0);
}

static void gdt_has_boot_protocol_code_and_data_selectors(void **state)
{
	struct guest_memory *mem = *state;

	assert_int_equal(cpu_setup_tables(mem), 0);
	assert_int_equal(rd64(mem, LAYOUT_GDT_ADDR), 0);
	/* boot.rst: __BOOT_CS 0x10, __BOOT_DS 0x18, 4 GiB flat. */
	assert_int_equal(rd64(mem, LAYOUT_GDT_ADDR + 0x10), 0x00af9b000000ffffULL);
	assert_int_equal(rd64(mem, LAYOUT_GDT_ADDR + 0x18), 0x00cf93000000ffffULL);
	assert_int_equal(rd64(mem, LAYOUT_GDT_ADDR + 0x08), 0x008f8b000000ffffULL);
}

static void gdt_ends_before_the_idt_and_the_idt_is_empty(void **state)
{
	struct guest_memory *mem = *state;
	struct kvm_sregs sregs;

	memset(&sregs, 0, sizeof(sregs));
	cpu_setup_sregs(&sregs);
	assert_true(sregs.gdt.base + sregs.gdt.limit < LAYOUT_IDT_ADDR);
	memset(guest_memory_ptr(mem, LAYOUT_IDT_ADDR, 8), 0xff, 8);
	assert_int_equal(cpu_setup_tables(mem), 0);
	assert_int_equal(rd64(mem, LAYOUT_IDT_ADDR), 0);
}

static void sregs_select_long_mode_with_the_identity_tables(void **state)
{
	struct kvm_sregs sregs;

	(void)state;
	memset(&sregs, 0, sizeof(sregs));
	sregs.cr0 = 0x60000010; /* KVM's reset value: CD, NW, ET */
	cpu_setup_sregs(&sregs);
	assert_int_equal(sregs.cr0, 0x80000011ULL);
	assert_true(sregs.cr4 & (1 << 5));
	assert_int_equal(sregs.cr3, LAYOUT_PML4_ADDR);
	assert_int_equal(sregs.efer & 0x500, 0x500);
	assert_int_equal(sregs.gdt.base, LAYOUT_GDT_ADDR);
	assert_int_equal(sregs.gdt.limit, 31);
	assert_int_equal(sregs.idt.base, LAYOUT_IDT_ADDR);
	assert_int_equal(sregs.idt.limit, 7);
}

static void code_segment_is_64_bit_flat_at_selector_0x10(void **state)
{
	struct kvm_sregs sregs;

	(void)state;
	memset(&sregs, 0, sizeof(sregs));
	cpu_setup_sregs(&sregs);
	assert_int_equal(sregs.cs.selector, 0x10);
	assert_int_equal(sregs.cs.base, 0);
	assert_int_equal(sregs.cs.limit, 0xffffffff);
	assert_int_equal(sregs.cs.type, 0xb);
	assert_int_equal(sregs.cs.present, 1);
	assert_int_equal(sregs.cs.s, 1);
	assert_int_equal(sregs.cs.l, 1);
	assert_int_equal(sregs.cs.db, 0);
	assert_int_equal(sregs.cs.g, 1);
	assert_int_equal(sregs.cs.dpl, 0);
	assert_int_equal(sregs.cs.unusable, 0);
}

static void data_segments_are_flat_at_selector_0x18(void **state)
{
	struct kvm_sregs sregs;
	const struct kvm_segment *segs[] = {&sregs.ds, &sregs.es, &sregs.fs, &sregs.gs, &sregs.ss};

	(void)state;
	memset(&sregs, 0, sizeof(sregs));
	cpu_setup_sregs(&sregs);
	for (unsigned i = 0; i < 5; i++) {
		assert_int_equal(segs[i]->selector, 0x18);
		assert_int_equal(segs[i]->base, 0);
		assert_int_equal(segs[i]->limit, 0xffffffff);
		assert_int_equal(segs[i]->type, 0x3);
		assert_int_equal(segs[i]->present, 1);
		assert_int_equal(segs[i]->s, 1);
		assert_int_equal(segs[i]->db, 1);
		assert_int_equal(segs[i]->l, 0);
	}
}

static void task_register_is_a_busy_tss(void **state)
{
	struct kvm_sregs sregs;

	(void)state;
	memset(&sregs, 0, sizeof(sregs));
	cpu_setup_sregs(&sregs);
	assert_int_equal(sregs.tr.selector, 0x08);
	assert_int_equal(sregs.tr.type, 0xb);
	assert_int_equal(sregs.tr.s, 0);
	assert_int_equal(sregs.tr.present, 1);
}

static void regs_enter_the_kernel_with_boot_params_in_rsi(void **state)
{
	struct kvm_regs regs;

	(void)state;
	memset(&regs, 0xff, sizeof(regs));
	cpu_setup_regs(&regs, 0x1000200);
	assert_int_equal(regs.rip, 0x1000200);
	assert_int_equal(regs.rsi, LAYOUT_ZERO_PAGE_ADDR);
	assert_int_equal(regs.rsp, LAYOUT_BOOT_STACK_ADDR);
	assert_int_equal(regs.rbp, LAYOUT_BOOT_STACK_ADDR);
	assert_int_equal(regs.rflags, 2); /* IF clear */
	assert_int_equal(regs.rax, 0);
	assert_int_equal(regs.rdi, 0);
}

static void fpu_has_reset_control_words(void **state)
{
	struct kvm_fpu fpu;

	(void)state;
	memset(&fpu, 0xff, sizeof(fpu));
	cpu_setup_fpu(&fpu);
	assert_int_equal(fpu.fcw, 0x37f);
	assert_int_equal(fpu.mxcsr, 0x1f80);
	assert_int_equal(fpu.fsw, 0);
}

static uint64_t msr_value(const struct kvm_msr_entry *e, unsigned n, uint32_t index)
{
	for (unsigned i = 0; i < n; i++)
		if (e[i].index == index)
			return e[i].data;
	fail_msg("MSR 0x%x missing", index);
	return 0;
}

static void boot_msrs_clear_syscall_state_and_enable_fast_strings(void **state)
{
	struct kvm_msr_entry e[CPU_SETUP_MAX_MSRS];
	const uint32_t zeroed[] = {0x174,      0x175,	   0x176,      0xc0000081, 0xc0000082,
				   0xc0000083, 0xc0000084, 0xc0000102, 0x10};
	unsigned n;

	(void)state;
	n = cpu_setup_boot_msrs(e, CPU_SETUP_MAX_MSRS);
	assert_int_equal(n, 10);
	for (unsigned i = 0; i < sizeof(zeroed) / sizeof(zeroed[0]); i++)
		assert_int_equal(msr_value(e, n, zeroed[i]), 0);
	assert_int_equal(msr_value(e, n, 0x1a0), 1);
}

static void boot_msrs_never_exceed_the_array(void **state)
{
	struct kvm_msr_entry e[4];

	(void)state;
	assert_int_equal(cpu_setup_boot_msrs(e, 4), 4);
	assert_int_equal(cpu_setup_boot_msrs(e, 0), 0);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(page_tables_identity_map_the_first_4gib),
	    TEST(page_tables_map_nothing_beyond_4gib),
	    TEST(page_tables_replace_stale_entries),
	    TEST(gdt_has_boot_protocol_code_and_data_selectors),
	    TEST(gdt_ends_before_the_idt_and_the_idt_is_empty),
	    cmocka_unit_test(sregs_select_long_mode_with_the_identity_tables),
	    cmocka_unit_test(code_segment_is_64_bit_flat_at_selector_0x10),
	    cmocka_unit_test(data_segments_are_flat_at_selector_0x18),
	    cmocka_unit_test(task_register_is_a_busy_tss),
	    cmocka_unit_test(regs_enter_the_kernel_with_boot_params_in_rsi),
	    cmocka_unit_test(fpu_has_reset_control_words),
	    cmocka_unit_test(boot_msrs_clear_syscall_state_and_enable_fast_strings),
	    cmocka_unit_test(boot_msrs_never_exceed_the_array),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
