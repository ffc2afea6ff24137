/* Initial vCPU state for the 64-bit boot protocol (boot.rst "64-bit Boot Protocol"):
 * GDT, identity page tables, long mode registers; and the boot MSRs. */
#ifndef MOTE_BOOT_CPU_SETUP_H
#define MOTE_BOOT_CPU_SETUP_H

#include <linux/kvm.h>
#include <stdint.h>

#include "../vmm/guest_memory.h"

/* Writes the GDT at LAYOUT_GDT_ADDR and page tables at LAYOUT_PML4_ADDR.. identity
 * mapping the first 4 GiB with 2 MiB pages. Shared by every vCPU; write once. */
int cpu_setup_tables(struct guest_memory *mem);

/* Fills sregs (on top of what KVM_GET_SREGS returned) for long mode with the tables
 * above: CR0 PE|PG, CR4 PAE, EFER LME|LMA, 64-bit code segment, data segments. */
void cpu_setup_sregs(struct kvm_sregs *sregs);

/* rip = entry, rsi = zero page, rsp = rbp = boot stack, rflags = 2. */
void cpu_setup_regs(struct kvm_regs *regs, uint64_t entry);

/* FPU state with a sane FCW (0x37f) and MXCSR (0x1f80). */
void cpu_setup_fpu(struct kvm_fpu *fpu);

#define CPU_SETUP_MAX_MSRS 16
/* Fills entries with the boot MSRs (SYSENTER_*, STAR/LSTAR/CSTAR/SFMASK, KERNEL_GS_BASE,
 * TSC=0, MISC_ENABLE fast strings) and returns how many. */
unsigned cpu_setup_boot_msrs(struct kvm_msr_entry *entries, unsigned max);

#endif
