/* The Intel MultiProcessor Specification 1.4 table: floating pointer and configuration
 * table with one processor entry per vCPU, an ISA bus, the IOAPIC and the interrupt
 * entries for ISA IRQs 0-15, so a kernel without ACPI finds every CPU. */
#ifndef MOTE_BOOT_MPTABLE_H
#define MOTE_BOOT_MPTABLE_H

#include <stdint.h>

#include "../vmm/guest_memory.h"

#define MPTABLE_IOAPIC_ID_OFFSET 0 /* IOAPIC id = cpu_count + this */

/* Writes the table at LAYOUT_MPTABLE_START; -E2BIG beyond 32 CPUs or if it would pass
 * LAYOUT_BIOS_END. APIC id of vCPU i is i. */
int mptable_write(struct guest_memory *mem, unsigned cpu_count, const struct mote_log *log);

#endif
