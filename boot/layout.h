/* The x86 guest physical layout (design.md; Firecracker's, which Linux has long booted
 * with). Addresses below 1 MiB are in the first RAM region. */
#ifndef MOTE_BOOT_LAYOUT_H
#define MOTE_BOOT_LAYOUT_H

#define LAYOUT_GDT_ADDR 0x500ULL
#define LAYOUT_IDT_ADDR 0x520ULL
#define LAYOUT_ZERO_PAGE_ADDR 0x7000ULL
#define LAYOUT_BOOT_STACK_ADDR 0x8ff0ULL
#define LAYOUT_PML4_ADDR 0x9000ULL
#define LAYOUT_PDPTE_ADDR 0xa000ULL
#define LAYOUT_PDE_ADDR 0xb000ULL /* four page directories: 0xb000..0xefff map 4 GiB */
#define LAYOUT_CMDLINE_ADDR 0x20000ULL
#define LAYOUT_CMDLINE_MAX 4096ULL   /* bytes including the terminating NUL */
#define LAYOUT_EBDA_START 0x9fc00ULL /* MP table lives here; e820-reserved up to 1 MiB */
#define LAYOUT_MPTABLE_START LAYOUT_EBDA_START
#define LAYOUT_BIOS_END 0x100000ULL
#define LAYOUT_KERNEL_ADDR 0x100000ULL
#define LAYOUT_MMIO_GAP_START 0xc0000000ULL
#define LAYOUT_MMIO_GAP_END 0x100000000ULL
#define LAYOUT_IOAPIC_ADDR 0xfec00000ULL
#define LAYOUT_LAPIC_ADDR 0xfee00000ULL
/* KVM needs three pages for the TSS and one for the identity map just below the IOAPIC
 * on Intel (api.rst, KVM_SET_TSS_ADDR / KVM_SET_IDENTITY_MAP_ADDR). */
#define LAYOUT_KVM_TSS_ADDR 0xfeffd000ULL
#define LAYOUT_KVM_IDENTITY_MAP_ADDR 0xfeffc000ULL
/* The MMIO gap hands out 4 KiB device windows from here (virtio-mmio, issue 3). */
#define LAYOUT_MMIO_DEVICES_START 0xd0000000ULL

#endif
