/* Loading a shared library on first use (vmm/shared_lib.h): what resolves works, and
 * what is missing is refused with a message naming it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#include <cmocka.h>

#include "vmm/shared_lib.h"

static void resolved_functions_are_the_library_s_own(void **state)
{
	__typeof__(zlibVersion) *version = NULL;
	__typeof__(crc32) *checksum = NULL;
	const struct shared_lib_symbol symbols[] = {
	    {"zlibVersion", (void **)&version},
	    {"crc32", (void **)&checksum},
	};
	char error[256] = "";

	(void)state;
	void *lib = shared_lib_open("libz.so.1", symbols, 2, error, sizeof(error));
	assert_non_null(lib);
	assert_string_equal(error, "");
	/* The test links zlib too: the loaded copy is the same library. */
	assert_string_equal(version(), zlibVersion());
	assert_int_equal(checksum(0, (const Bytef *)"mote", 4), crc32(0, (const Bytef *)"mote", 4));
	shared_lib_close(lib);
}

static void a_missing_library_is_named_and_nothing_resolved(void **state)
{
	void *address = (void *)&address;
	const struct shared_lib_symbol symbols[] = {{"anything", &address}};
	char error[256] = "";

	(void)state;
	assert_null(shared_lib_open("libmote-no-such.so.9", symbols, 1, error, sizeof(error)));
	assert_non_null(strstr(error, "cannot load libmote-no-such.so.9"));
	assert_null(address);
}

static void a_missing_symbol_is_named_and_nothing_stays_resolved(void **state)
{
	void *first = NULL, *missing = NULL;
	const struct shared_lib_symbol symbols[] = {
	    {"zlibVersion", &first},
	    {"mote_no_such_function", &missing},
	};
	char error[256] = "";

	(void)state;
	assert_null(shared_lib_open("libz.so.1", symbols, 2, error, sizeof(error)));
	assert_string_equal(error, "libz.so.1 has no mote_no_such_function");
	assert_null(first);
	assert_null(missing);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(resolved_functions_are_the_library_s_own),
	    cmocka_unit_test(a_missing_library_is_named_and_nothing_resolved),
	    cmocka_unit_test(a_missing_symbol_is_named_and_nothing_stays_resolved),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
