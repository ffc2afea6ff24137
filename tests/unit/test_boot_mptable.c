/* mptable_write(): the MP spec 1.4 table as a kernel scanning the EBDA finds it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "boot/layout.h"
#include "boot/mptable.h"

#define MIB (1024ULL * 1024ULL)
#define FP_SIZE 16
#define HDR_SIZE 44
#define CPU_ENTRY_SIZE 20
#define OTHER_ENTRY_SIZE 8

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

static const uint8_t *floating_pointer(struct guest_memory *mem)
{
	return guest_memory_ptr(mem, LAYOUT_MPTABLE_START, FP_SIZE);
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static const uint8_t *config_table(struct guest_memory *mem)
{
	uint32_t physptr = rd32(floating_pointer(mem) + 4);
	const uint8_t *hdr = guest_memory_ptr(mem, physptr, HDR_SIZE);

	assert_non_null(hdr);
	return guest_memory_ptr(mem, physptr, rd16(hdr + 4));
}

static uint8_t byte_sum(const uint8_t *p, size_t len)
{
	uint8_t sum = 0;

	for (size_t i = 0; i < len; i++)
		sum = (uint8_t)(sum + p[i]);
	return sum;
}

/* The entry after the config header whose type is type, skip-th of its kind. */
static const uint8_t *entry_of_type(struct guest_memory *mem, uint8_t type, unsigned skip)
{
	const uint8_t *t = config_table(mem);
	size_t off = HDR_SIZE;
	unsigned count = rd16(t + 34);

	for (unsigned i = 0; i < count; i++) {
		const uint8_t *e = t + off;

		if (e[0] == type && skip-- == 0)
			return e;
		off += e[0] == 0 ? CPU_ENTRY_SIZE : OTHER_ENTRY_SIZE;
	}
	return NULL;
}

static unsigned count_of_type(struct guest_memory *mem, uint8_t type)
{
	unsigned n = 0;

	while (entry_of_type(mem, type, n))
		n++;
	return n;
}

static void floating_pointer_is_at_the_ebda_and_sums_to_zero(void **state)
{
	struct guest_memory *mem = *state;
	const uint8_t *fp = floating_pointer(mem);

	assert_int_equal(mptable_write(mem, 2, NULL), 0);
	assert_memory_equal(fp, "_MP_", 4);
	assert_int_equal(rd32(fp + 4), LAYOUT_MPTABLE_START + FP_SIZE);
	assert_int_equal(fp[8], 1);  /* length in paragraphs */
	assert_int_equal(fp[9], 4);  /* spec 1.4 */
	assert_int_equal(fp[11], 0); /* a configuration table follows, no default config */
	assert_int_equal(byte_sum(fp, FP_SIZE), 0);
}

static void config_table_sums_to_zero_and_names_the_lapic(void **state)
{
	struct guest_memory *mem = *state;
	const uint8_t *t;

	assert_int_equal(mptable_write(mem, 4, NULL), 0);
	t = config_table(mem);
	assert_memory_equal(t, "PCMP", 4);
	assert_int_equal(t[6], 4);
	assert_int_equal(rd32(t + 36), LAYOUT_LAPIC_ADDR);
	assert_int_equal(byte_sum(t, rd16(t + 4)), 0);
}

static void config_table_length_and_count_cover_all_entries(void **state)
{
	struct guest_memory *mem = *state;
	const uint8_t *t;

	assert_int_equal(mptable_write(mem, 4, NULL), 0);
	t = config_table(mem);
	/* 4 CPUs, bus, IOAPIC, 24 I/O interrupts, 2 local interrupts. */
	assert_int_equal(rd16(t + 34), 4 + 1 + 1 + 24 + 2);
	assert_int_equal(rd16(t + 4), HDR_SIZE + 4 * CPU_ENTRY_SIZE + 28 * OTHER_ENTRY_SIZE);
}

static void one_processor_entry_per_vcpu(void **state)
{
	struct guest_memory *mem = *state;
	const unsigned counts[] = {1, 4, 32};

	for (unsigned c = 0; c < 3; c++) {
		memset(guest_memory_ptr(mem, LAYOUT_MPTABLE_START, 0x1000), 0, 0x1000);
		assert_int_equal(mptable_write(mem, counts[c], NULL), 0);
		assert_int_equal(count_of_type(mem, 0), counts[c]);
		assert_int_equal(byte_sum(config_table(mem), rd16(config_table(mem) + 4)), 0);
		assert_int_equal(byte_sum(floating_pointer(mem), FP_SIZE), 0);
	}
}

static void processor_apic_ids_are_the_vcpu_index_and_only_cpu0_is_bsp(void **state)
{
	struct guest_memory *mem = *state;

	assert_int_equal(mptable_write(mem, 8, NULL), 0);
	for (unsigned i = 0; i < 8; i++) {
		const uint8_t *cpu = entry_of_type(mem, 0, i);

		assert_non_null(cpu);
		assert_int_equal(cpu[1], i);
		assert_int_equal(cpu[2], 0x14);
		assert_int_equal(cpu[3], i == 0 ? 0x3 : 0x1); /* enabled, BSP */
		assert_int_equal(rd32(cpu + 4), 0x600);
		assert_int_equal(rd32(cpu + 8), (1U << 0) | (1U << 9));
	}
}

static void isa_bus_and_ioapic_after_the_cpus(void **state)
{
	struct guest_memory *mem = *state;
	const uint8_t *bus, *ioapic;

	assert_int_equal(mptable_write(mem, 3, NULL), 0);
	bus = entry_of_type(mem, 1, 0);
	assert_non_null(bus);
	assert_int_equal(bus[1], 0);
	assert_memory_equal(bus + 2, "ISA   ", 6);
	ioapic = entry_of_type(mem, 2, 0);
	assert_non_null(ioapic);
	assert_int_equal(ioapic[1], 3 + MPTABLE_IOAPIC_ID_OFFSET);
	assert_int_equal(ioapic[2], 0x11);
	assert_int_equal(ioapic[3], 1);
	assert_int_equal(rd32(ioapic + 4), LAYOUT_IOAPIC_ADDR);
}

static void every_irq_maps_to_the_same_ioapic_pin(void **state)
{
	struct guest_memory *mem = *state;

	assert_int_equal(mptable_write(mem, 2, NULL), 0);
	assert_int_equal(count_of_type(mem, 3), 24);
	for (unsigned irq = 0; irq < 24; irq++) {
		const uint8_t *e = entry_of_type(mem, 3, irq);

		assert_int_equal(e[1], 0); /* INT */
		assert_int_equal(rd16(e + 2), 0);
		assert_int_equal(e[4], 0); /* ISA bus */
		assert_int_equal(e[5], irq);
		assert_int_equal(e[6], 2 + MPTABLE_IOAPIC_ID_OFFSET);
		assert_int_equal(e[7], irq);
	}
}

static void extint_goes_to_lint0_and_nmi_to_lint1(void **state)
{
	struct guest_memory *mem = *state;
	const uint8_t *lint0, *lint1;

	assert_int_equal(mptable_write(mem, 2, NULL), 0);
	assert_int_equal(count_of_type(mem, 4), 2);
	lint0 = entry_of_type(mem, 4, 0);
	lint1 = entry_of_type(mem, 4, 1);
	assert_int_equal(lint0[1], 3); /* ExtINT */
	assert_int_equal(lint0[6], 0xff);
	assert_int_equal(lint0[7], 0);
	assert_int_equal(lint1[1], 1); /* NMI */
	assert_int_equal(lint1[6], 0xff);
	assert_int_equal(lint1[7], 1);
}

static void table_for_32_cpus_ends_before_1mib(void **state)
{
	struct guest_memory *mem = *state;
	const uint8_t *t;

	assert_int_equal(mptable_write(mem, 32, NULL), 0);
	t = config_table(mem);
	assert_true(LAYOUT_MPTABLE_START + FP_SIZE + rd16(t + 4) <= LAYOUT_BIOS_END);
}

static void more_than_32_cpus_are_rejected(void **state)
{
	assert_int_equal(mptable_write(*state, 33, NULL), -E2BIG);
}

static void zero_cpus_are_rejected(void **state)
{
	assert_int_equal(mptable_write(*state, 0, NULL), -EINVAL);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(floating_pointer_is_at_the_ebda_and_sums_to_zero),
	    TEST(config_table_sums_to_zero_and_names_the_lapic),
	    TEST(config_table_length_and_count_cover_all_entries),
	    TEST(one_processor_entry_per_vcpu),
	    TEST(processor_apic_ids_are_the_vcpu_index_and_only_cpu0_is_bsp),
	    TEST(isa_bus_and_ioapic_after_the_cpus),
	    TEST(every_irq_maps_to_the_same_ioapic_pin),
	    TEST(extint_goes_to_lint0_and_nmi_to_lint1),
	    TEST(table_for_32_cpus_ends_before_1mib),
	    TEST(more_than_32_cpus_are_rejected),
	    TEST(zero_cpus_are_rejected),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
