/* vCPU state for the Linux 64-bit boot protocol (Documentation/x86/boot.rst, "64-bit
 * Boot Protocol"): long mode with paging, a GDT whose __BOOT_CS (0x10) and __BOOT_DS
 * (0x18) are 4 GiB flat, an identity map covering the kernel, zero page and command
 * line, interrupts off, %rsi = boot_params. */
#include "cpu_setup.h"

#include <errno.h>
#include <string.h>

#include "layout.h"

/* GDT slots. boot.rst fixes the code and data selectors at 0x10 and 0x18; the TSS takes
 * the otherwise unused slot 1, so the table stays four entries long (0x500..0x51f, just
 * below the IDT at LAYOUT_IDT_ADDR). In long mode a TSS descriptor is 16 bytes (SDM
 * Vol. 3A 7.2.3); the 8 bytes here are never read, because KVM takes TR's hidden part
 * from sregs and the kernel loads its own GDT and TSS before it uses either. */
#define GDT_NULL 0
#define GDT_TSS 1
#define GDT_CODE 2
#define GDT_DATA 3
#define GDT_ENTRIES 4

/* Access byte and flags nibble of a descriptor (SDM Vol. 3A 3.4.5), Firecracker's values:
 * 0xa09b: G, L (64-bit), present, code execute/read accessed.
 * 0xc093: G, D/B (32-bit), present, data read/write accessed.
 * 0x808b: G, present, system type 0xb (busy 64-bit TSS). */
#define GDT_FLAGS_CODE64 0xa09b
#define GDT_FLAGS_DATA 0xc093
#define GDT_FLAGS_TSS 0x808b
#define GDT_LIMIT_4G 0xfffff /* in 4 KiB units with G */

#define X86_CR0_PE (1ULL << 0)
#define X86_CR0_ET (1ULL << 4)
#define X86_CR0_NW (1ULL << 29)
#define X86_CR0_CD (1ULL << 30)
#define X86_CR0_PG (1ULL << 31)
#define X86_CR4_PAE (1ULL << 5)
#define EFER_LME (1ULL << 8)
#define EFER_LMA (1ULL << 10)

/* Page table entry bits (SDM Vol. 3A 4.5). */
#define PTE_PRESENT (1ULL << 0)
#define PTE_RW (1ULL << 1)
#define PTE_PS (1ULL << 7) /* in a PDE: maps a 2 MiB page */
#define PAGE_TABLE_ENTRIES 512
#define PAGE_2M 0x200000ULL
#define PAGE_4K 0x1000ULL
#define IDENTITY_PDS 4 /* 4 page directories * 512 * 2 MiB = 4 GiB */

/* MSR numbers (SDM Vol. 4, Table 2-2). */
#define MSR_IA32_TSC 0x10
#define MSR_IA32_SYSENTER_CS 0x174
#define MSR_IA32_SYSENTER_ESP 0x175
#define MSR_IA32_SYSENTER_EIP 0x176
#define MSR_IA32_MISC_ENABLE 0x1a0
#define MSR_IA32_MISC_ENABLE_FAST_STRING (1ULL << 0)
#define MSR_STAR 0xc0000081
#define MSR_LSTAR 0xc0000082
#define MSR_CSTAR 0xc0000083
#define MSR_SYSCALL_MASK 0xc0000084
#define MSR_KERNEL_GS_BASE 0xc0000102

#define FPU_FCW_DEFAULT 0x37f /* x87 state after FNINIT: all exceptions masked */
#define MXCSR_DEFAULT 0x1f80  /* SSE state after reset: all exceptions masked */
#define RFLAGS_RESERVED_1 0x2 /* bit 1 always reads as 1; IF clear: interrupts off */

static uint64_t gdt_entry(uint16_t flags, uint32_t base, uint32_t limit)
{
	return ((uint64_t)(base & 0xff000000U) << (56 - 24)) |
	       ((uint64_t)(flags & 0x0000f0ffU) << 40) |
	       ((uint64_t)(limit & 0x000f0000U) << (48 - 16)) |
	       ((uint64_t)(base & 0x00ffffffU) << 16) | (uint64_t)(limit & 0x0000ffffU);
}

/* The segment register image of a GDT descriptor, as the CPU would load it. */
static struct kvm_segment segment_from_gdt(uint64_t entry, unsigned index)
{
	struct kvm_segment seg;
	uint32_t limit = (uint32_t)(((entry >> 32) & 0x000f0000U) | (entry & 0xffffU));

	memset(&seg, 0, sizeof(seg));
	seg.base = ((entry >> 16) & 0x00ffffffULL) | ((entry >> 32) & 0xff000000ULL);
	seg.g = (entry >> 55) & 1;
	seg.limit = seg.g ? (limit << 12) | 0xfff : limit;
	seg.selector = (uint16_t)(index * 8);
	seg.type = (entry >> 40) & 0xf;
	seg.s = (entry >> 44) & 1;
	seg.dpl = (entry >> 45) & 3;
	seg.present = (entry >> 47) & 1;
	seg.avl = (entry >> 52) & 1;
	seg.l = (entry >> 53) & 1;
	seg.db = (entry >> 54) & 1;
	seg.unusable = !seg.present;
	return seg;
}

static void gdt_build(uint64_t gdt[GDT_ENTRIES])
{
	gdt[GDT_NULL] = 0;
	gdt[GDT_TSS] = gdt_entry(GDT_FLAGS_TSS, 0, GDT_LIMIT_4G);
	gdt[GDT_CODE] = gdt_entry(GDT_FLAGS_CODE64, 0, GDT_LIMIT_4G);
	gdt[GDT_DATA] = gdt_entry(GDT_FLAGS_DATA, 0, GDT_LIMIT_4G);
}

int cpu_setup_tables(struct guest_memory *mem)
{
	uint64_t gdt[GDT_ENTRIES];
	uint64_t idt = 0;
	uint64_t table[PAGE_TABLE_ENTRIES];
	int err;

	gdt_build(gdt);
	err = guest_memory_write(mem, LAYOUT_GDT_ADDR, gdt, sizeof(gdt));
	/* An empty IDT: any exception before the kernel installs its own is a triple
	 * fault, which ends the VM visibly instead of running garbage handlers. */
	if (!err)
		err = guest_memory_write(mem, LAYOUT_IDT_ADDR, &idt, sizeof(idt));

	memset(table, 0, sizeof(table));
	table[0] = LAYOUT_PDPTE_ADDR | PTE_PRESENT | PTE_RW;
	if (!err)
		err = guest_memory_write(mem, LAYOUT_PML4_ADDR, table, sizeof(table));

	memset(table, 0, sizeof(table));
	for (unsigned i = 0; i < IDENTITY_PDS; i++)
		table[i] = (LAYOUT_PDE_ADDR + i * PAGE_4K) | PTE_PRESENT | PTE_RW;
	if (!err)
		err = guest_memory_write(mem, LAYOUT_PDPTE_ADDR, table, sizeof(table));

	for (unsigned pd = 0; !err && pd < IDENTITY_PDS; pd++) {
		for (unsigned i = 0; i < PAGE_TABLE_ENTRIES; i++)
			table[i] = ((uint64_t)pd * PAGE_TABLE_ENTRIES + i) * PAGE_2M | PTE_PRESENT |
				   PTE_RW | PTE_PS;
		err = guest_memory_write(mem, LAYOUT_PDE_ADDR + pd * PAGE_4K, table, sizeof(table));
	}
	return err;
}

void cpu_setup_sregs(struct kvm_sregs *sregs)
{
	uint64_t gdt[GDT_ENTRIES];
	struct kvm_segment code, data;

	gdt_build(gdt);
	code = segment_from_gdt(gdt[GDT_CODE], GDT_CODE);
	data = segment_from_gdt(gdt[GDT_DATA], GDT_DATA);

	sregs->gdt.base = LAYOUT_GDT_ADDR;
	sregs->gdt.limit = sizeof(gdt) - 1;
	sregs->idt.base = LAYOUT_IDT_ADDR;
	sregs->idt.limit = sizeof(uint64_t) - 1;

	sregs->cs = code;
	sregs->ds = data;
	sregs->es = data;
	sregs->fs = data;
	sregs->gs = data;
	sregs->ss = data;
	sregs->tr = segment_from_gdt(gdt[GDT_TSS], GDT_TSS);

	sregs->cr3 = LAYOUT_PML4_ADDR;
	sregs->cr4 |= X86_CR4_PAE;
	/* KVM's reset CR0 has CD and NW set (SDM Vol. 3A 9.1.1); the guest should run with
	 * caching on from its first instruction. ET is hardwired to 1 on every 64-bit CPU. */
	sregs->cr0 =
	    (sregs->cr0 | X86_CR0_PE | X86_CR0_PG | X86_CR0_ET) & ~(X86_CR0_CD | X86_CR0_NW);
	sregs->efer |= EFER_LME | EFER_LMA;
}

void cpu_setup_regs(struct kvm_regs *regs, uint64_t entry)
{
	memset(regs, 0, sizeof(*regs));
	regs->rflags = RFLAGS_RESERVED_1;
	regs->rip = entry;
	regs->rsp = LAYOUT_BOOT_STACK_ADDR;
	regs->rbp = LAYOUT_BOOT_STACK_ADDR;
	/* boot.rst 64-bit protocol: "%rsi must hold the base address of the struct
	 * boot_params". */
	regs->rsi = LAYOUT_ZERO_PAGE_ADDR;
}

void cpu_setup_fpu(struct kvm_fpu *fpu)
{
	memset(fpu, 0, sizeof(*fpu));
	fpu->fcw = FPU_FCW_DEFAULT;
	fpu->mxcsr = MXCSR_DEFAULT;
}

unsigned cpu_setup_boot_msrs(struct kvm_msr_entry *entries, unsigned max)
{
	/* The syscall MSRs start at 0 so nothing from a previous boot survives a reset;
	 * fast strings is the BIOS default Linux expects (it only reads MISC_ENABLE). */
	static const struct {
		uint32_t index;
		uint64_t data;
	} boot_msrs[] = {
	    {MSR_IA32_SYSENTER_CS, 0},
	    {MSR_IA32_SYSENTER_ESP, 0},
	    {MSR_IA32_SYSENTER_EIP, 0},
	    {MSR_STAR, 0},
	    {MSR_CSTAR, 0},
	    {MSR_KERNEL_GS_BASE, 0},
	    {MSR_SYSCALL_MASK, 0},
	    {MSR_LSTAR, 0},
	    {MSR_IA32_TSC, 0},
	    {MSR_IA32_MISC_ENABLE, MSR_IA32_MISC_ENABLE_FAST_STRING},
	};
	unsigned n = sizeof(boot_msrs) / sizeof(boot_msrs[0]);

	if (n > max)
		n = max;
	for (unsigned i = 0; i < n; i++) {
		memset(&entries[i], 0, sizeof(entries[i]));
		entries[i].index = boot_msrs[i].index;
		entries[i].data = boot_msrs[i].data;
	}
	return n;
}
