/* vm_setup_find_disk and vm_setup_find_net: how a restore's overrides name the disks and
 * NICs of a snapshot (by id, by TAP, or as the guest knows them). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "vmm/vm_setup.h"

/* An id wins over a guest name wherever its disk sits: a disk whose id is "vdb" is
 * that disk even when it is the guest's vda, and so is one named "vda" after it. */
static void a_disk_id_wins_over_a_guest_name(void **state)
{
	struct vm_setup setup = {.disk_count = 3};

	(void)state;
	setup.disks[0].id = "vdb";
	setup.disks[1].id = "data";
	setup.disks[2].id = "vda";
	assert_int_equal(vm_setup_find_disk(&setup, "vdb"), 0);
	assert_int_equal(vm_setup_find_disk(&setup, "vda"), 2);
	assert_int_equal(vm_setup_find_disk(&setup, "data"), 1);
	assert_int_equal(vm_setup_find_disk(&setup, "vdc"), 2); /* no such id: the guest's */
	assert_int_equal(vm_setup_find_disk(&setup, "vdd"), -1);
	setup.disks[2].id = NULL;
	assert_int_equal(vm_setup_find_disk(&setup, "vdc"), 2);
}

static void a_nic_is_found_by_id_then_tap_then_guest_name(void **state)
{
	struct vm_setup setup = {.net_count = 2};

	(void)state;
	setup.nets[0].tap = "tap0";
	setup.nets[0].id = "eth1";
	setup.nets[1].tap = "eth0";
	setup.nets[1].id = "tap0";
	assert_int_equal(vm_setup_find_net(&setup, "tap0"), 1); /* the id, not the TAP */
	assert_int_equal(vm_setup_find_net(&setup, "eth1"), 0); /* the id, not the name */
	assert_int_equal(vm_setup_find_net(&setup, "eth0"), 1); /* a TAP, before a name */
	assert_int_equal(vm_setup_find_net(&setup, "eth2"), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(a_disk_id_wins_over_a_guest_name),
	    cmocka_unit_test(a_nic_is_found_by_id_then_tap_then_guest_name),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
