/* libmote's entry points refuse missing arguments with -EINVAL instead of crashing: a
 * library never takes its embedder down on bad input (mote.h). These fail before any
 * KVM call, so they run without /dev/kvm. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "vmm/mote.h"

static void create_without_config_or_result_is_refused(void **state)
{
	struct mote_config config;
	struct mote_vm *vm = (struct mote_vm *)&vm;
	(void)state;
	mote_config_init(&config);
	assert_int_equal(mote_vm_create(NULL, &vm), -EINVAL);
	assert_int_equal(mote_vm_create(&config, NULL), -EINVAL);
}

static void restore_without_config_or_result_is_refused(void **state)
{
	struct mote_restore_config config;
	struct mote_vm *vm = NULL;
	(void)state;
	mote_restore_config_init(&config);
	assert_int_equal(mote_vm_restore(NULL, &vm), -EINVAL);
	assert_int_equal(mote_vm_restore(&config, NULL), -EINVAL);
}

static void commit_of_a_missing_list_is_refused_and_of_none_is_nothing(void **state)
{
	(void)state;
	assert_int_equal(mote_vm_commit_disks(NULL, 2), -EINVAL);
	assert_int_equal(mote_vm_commit_disks(NULL, 0), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(create_without_config_or_result_is_refused),
	    cmocka_unit_test(restore_without_config_or_result_is_refused),
	    cmocka_unit_test(commit_of_a_missing_list_is_refused_and_of_none_is_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
