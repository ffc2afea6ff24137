/* Intel MultiProcessor Specification 1.4: the floating pointer (chapter 4.1) followed by
 * the configuration table (4.2) and its base entries (4.3). Linux finds the floating
 * pointer by scanning the last KiB of base memory (639-640 KiB), which is where
 * LAYOUT_MPTABLE_START puts it. The table is built in host memory and written once. */
#include "mptable.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "../vmm/mote.h"
#include "layout.h"

#define MP_SPEC_REV 4 /* 1.4 */

/* Entry types (MP spec Table 4-3). */
#define MP_PROCESSOR 0
#define MP_BUS 1
#define MP_IOAPIC 2
#define MP_INTSRC 3
#define MP_LINTSRC 4

#define MP_CPU_ENABLED 0x1
#define MP_CPU_BSP 0x2
#define MP_APIC_VERSION 0x14   /* integrated xAPIC, what KVM's LAPIC reports */
#define MP_IOAPIC_VERSION 0x11 /* 82093AA, what KVM's IOAPIC reports */
#define MP_IOAPIC_USABLE 0x1
/* Processor signature: family 6; feature flags: FPU (bit 0) and APIC (bit 9), as in
 * CPUID leaf 1 EDX (MP spec 4.3.1). */
#define MP_CPU_SIGNATURE 0x600
#define MP_CPU_FEATURES ((1U << 0) | (1U << 9))
/* Interrupt types (MP spec Table 4-10) */
#define MP_IRQ_INT 0
#define MP_IRQ_NMI 1
#define MP_IRQ_EXTINT 3
#define MP_APIC_ALL 0xff
/* KVM's IOAPIC has 24 pins (KVM_IOAPIC_NUM_PINS): 0-15 the ISA IRQs, 5-23 also carry
 * the virtio-mmio devices' interrupts. */
#define MP_IOAPIC_PINS 24

struct mp_floating_pointer {
	char signature[4]; /* "_MP_" */
	uint32_t physptr;
	uint8_t length; /* in 16-byte paragraphs */
	uint8_t spec_rev;
	uint8_t checksum;
	uint8_t feature[5]; /* all 0: a configuration table is present, virtual wire mode */
} __attribute__((packed));

struct mp_config_header {
	char signature[4]; /* "PCMP" */
	uint16_t length;   /* base table: header and entries */
	uint8_t spec_rev;
	uint8_t checksum;
	char oem_id[8];
	char product_id[12];
	uint32_t oem_table;
	uint16_t oem_table_size;
	uint16_t entry_count;
	uint32_t lapic_addr;
	uint16_t ext_length;
	uint8_t ext_checksum;
	uint8_t reserved;
} __attribute__((packed));

struct mp_processor {
	uint8_t type;
	uint8_t apic_id;
	uint8_t apic_version;
	uint8_t flags;
	uint32_t signature;
	uint32_t features;
	uint32_t reserved[2];
} __attribute__((packed));

struct mp_bus {
	uint8_t type;
	uint8_t bus_id;
	char bus_type[6];
} __attribute__((packed));

struct mp_ioapic {
	uint8_t type;
	uint8_t apic_id;
	uint8_t version;
	uint8_t flags;
	uint32_t addr;
} __attribute__((packed));

/* I/O (MP_INTSRC) and local (MP_LINTSRC) interrupt assignment entries share a layout. */
struct mp_interrupt {
	uint8_t type;
	uint8_t irq_type;
	uint16_t flags; /* 0: polarity and trigger mode conform to the bus */
	uint8_t src_bus;
	uint8_t src_irq;
	uint8_t dst_apic;
	uint8_t dst_pin;
} __attribute__((packed));

_Static_assert(sizeof(struct mp_floating_pointer) == 16, "MP spec 4.1");
_Static_assert(sizeof(struct mp_config_header) == 44, "MP spec 4.2");
_Static_assert(sizeof(struct mp_processor) == 20, "MP spec 4.3.1");
_Static_assert(sizeof(struct mp_bus) == 8, "MP spec 4.3.2");
_Static_assert(sizeof(struct mp_ioapic) == 8, "MP spec 4.3.3");
_Static_assert(sizeof(struct mp_interrupt) == 8, "MP spec 4.3.4");

#define MPTABLE_MAX_SIZE                                                                           \
	(sizeof(struct mp_floating_pointer) + sizeof(struct mp_config_header) +                    \
	 MOTE_MAX_CPUS * sizeof(struct mp_processor) + sizeof(struct mp_bus) +                     \
	 sizeof(struct mp_ioapic) + (MP_IOAPIC_PINS + 2) * sizeof(struct mp_interrupt))

/* Both structures are valid when all their bytes sum to 0 (MP spec 4.1, 4.2). */
static uint8_t mp_checksum(const uint8_t *bytes, size_t len)
{
	uint8_t sum = 0;

	for (size_t i = 0; i < len; i++)
		sum = (uint8_t)(sum + bytes[i]);
	return (uint8_t)(0x100 - sum);
}

/* Appends one entry to the table under construction; the caller sized buf. */
static void mp_put(uint8_t *buf, size_t *off, const void *entry, size_t len, uint16_t *count)
{
	memcpy(buf + *off, entry, len);
	*off += len;
	(*count)++;
}

static void mp_put_interrupt(uint8_t *buf, size_t *off, uint16_t *count, uint8_t type,
			     uint8_t irq_type, uint8_t src_irq, uint8_t dst_apic, uint8_t dst_pin)
{
	struct mp_interrupt e = {
	    .type = type,
	    .irq_type = irq_type,
	    .src_bus = 0,
	    .src_irq = src_irq,
	    .dst_apic = dst_apic,
	    .dst_pin = dst_pin,
	};

	mp_put(buf, off, &e, sizeof(e), count);
}

int mptable_write(struct guest_memory *mem, unsigned cpu_count, const struct mote_log *log)
{
	uint8_t buf[MPTABLE_MAX_SIZE];
	struct mp_floating_pointer fp;
	struct mp_config_header hdr;
	const size_t table_start = sizeof(fp);
	size_t off = table_start + sizeof(hdr);
	uint16_t count = 0;
	uint8_t ioapic_id = (uint8_t)(cpu_count + MPTABLE_IOAPIC_ID_OFFSET);
	int err;

	if (cpu_count == 0 || cpu_count > MOTE_MAX_CPUS) {
		log_error(log, "MP table: %u CPUs, must be 1 to %d", cpu_count, MOTE_MAX_CPUS);
		return cpu_count ? -E2BIG : -EINVAL;
	}
	memset(buf, 0, sizeof(buf));

	for (unsigned i = 0; i < cpu_count; i++) {
		struct mp_processor cpu = {
		    .type = MP_PROCESSOR,
		    .apic_id = (uint8_t)i,
		    .apic_version = MP_APIC_VERSION,
		    .flags = MP_CPU_ENABLED | (i == 0 ? MP_CPU_BSP : 0),
		    .signature = MP_CPU_SIGNATURE,
		    .features = MP_CPU_FEATURES,
		};
		mp_put(buf, &off, &cpu, sizeof(cpu), &count);
	}

	struct mp_bus bus = {.type = MP_BUS, .bus_id = 0};
	memcpy(bus.bus_type, "ISA   ", sizeof(bus.bus_type));
	mp_put(buf, &off, &bus, sizeof(bus), &count);

	struct mp_ioapic ioapic = {
	    .type = MP_IOAPIC,
	    .apic_id = ioapic_id,
	    .version = MP_IOAPIC_VERSION,
	    .flags = MP_IOAPIC_USABLE,
	    .addr = (uint32_t)LAYOUT_IOAPIC_ADDR,
	};
	mp_put(buf, &off, &ioapic, sizeof(ioapic), &count);

	/* IRQ n on IOAPIC pin n: KVM's default GSI routing (irq_comm.c) does the same,
	 * including the PIT on GSI 0. All on the ISA bus, so edge-triggered and active high
	 * (MP spec 4.3.4, "conforms to the bus"): what an irqfd delivers. */
	for (unsigned irq = 0; irq < MP_IOAPIC_PINS; irq++)
		mp_put_interrupt(buf, &off, &count, MP_INTSRC, MP_IRQ_INT, (uint8_t)irq, ioapic_id,
				 (uint8_t)irq);
	/* Virtual wire mode (MP spec 3.6.2.2): the 8259 reaches the LAPICs through LINT0,
	 * NMIs through LINT1. */
	mp_put_interrupt(buf, &off, &count, MP_LINTSRC, MP_IRQ_EXTINT, 0, MP_APIC_ALL, 0);
	mp_put_interrupt(buf, &off, &count, MP_LINTSRC, MP_IRQ_NMI, 0, MP_APIC_ALL, 1);

	if (LAYOUT_MPTABLE_START + off > LAYOUT_BIOS_END) {
		log_error(log, "MP table: %zu bytes at 0x%llx pass 1 MiB", off,
			  (unsigned long long)LAYOUT_MPTABLE_START);
		return -E2BIG;
	}

	memset(&hdr, 0, sizeof(hdr));
	memcpy(hdr.signature, "PCMP", 4);
	hdr.length = (uint16_t)(off - table_start);
	hdr.spec_rev = MP_SPEC_REV;
	memcpy(hdr.oem_id, "MOTE    ", sizeof(hdr.oem_id));
	memcpy(hdr.product_id, "MICROVM     ", sizeof(hdr.product_id));
	hdr.entry_count = count;
	hdr.lapic_addr = (uint32_t)LAYOUT_LAPIC_ADDR;
	memcpy(buf + table_start, &hdr, sizeof(hdr));
	buf[table_start + offsetof(struct mp_config_header, checksum)] =
	    mp_checksum(buf + table_start, hdr.length);

	memset(&fp, 0, sizeof(fp));
	memcpy(fp.signature, "_MP_", 4);
	fp.physptr = (uint32_t)(LAYOUT_MPTABLE_START + table_start);
	fp.length = 1;
	fp.spec_rev = MP_SPEC_REV;
	fp.checksum = mp_checksum((const uint8_t *)&fp, sizeof(fp));
	memcpy(buf, &fp, sizeof(fp));

	err = guest_memory_write(mem, LAYOUT_MPTABLE_START, buf, off);
	if (err)
		log_error(log, "MP table: 0x%llx+%zu is outside guest RAM",
			  (unsigned long long)LAYOUT_MPTABLE_START, off);
	return err;
}
