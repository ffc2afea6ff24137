/* guest-init's reading of the kernel command line (boot/cmdline_param.h): values
 * as the kernel's next_arg() gives them, and a word inside another's quoted value is
 * not a parameter of its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "boot/cmdline_param.h"

static void value_is(const char *line, const char *key, const char *want)
{
	char *got = cmdline_value(line, key);

	if (!want) {
		assert_null(got);
		return;
	}
	assert_non_null(got);
	assert_string_equal(got, want);
	free(got);
}

static void values_plain_quoted_and_bare(void **state)
{
	(void)state;
	value_is("console=ttyS0 mote.run=nproc panic=1", "mote.run", "nproc");
	value_is("quiet mote.run=\"echo a -- b\" panic=1", "mote.run", "echo a -- b");
	value_is("quiet mote.agent panic=1", "mote.agent", "");
	value_is("quiet mote.agent=1024", "mote.agent", "1024");
	value_is("quiet panic=1", "mote.run", NULL);
	/* A word quoted whole, as the kernel accepts it. */
	value_is("quiet \"mote.run=echo hi\" panic=1", "mote.run", "echo hi");
	/* A newline inside the quotes is part of the value. */
	value_is("mote.run=\"a\nb\"\n", "mote.run", "a\nb");
	/* A quote inside the value (not opening it) stays, as next_arg() leaves it. */
	value_is("mote.run=a\"b c\" x", "mote.run", "a\"b c\"");
}

static void a_key_inside_a_quoted_value_is_not_a_parameter(void **state)
{
	(void)state;
	/* The old scanner found mote.agent here and started the agent. */
	value_is("mote.run=\"grep -q mote.agent /proc/cmdline || echo none\"", "mote.agent", NULL);
	/* Nor is a longer key, nor a key's prefix. */
	value_is("mote.running=1 xmote.run=2", "mote.run", NULL);
}

static void the_last_of_a_repeated_key_wins(void **state)
{
	(void)state;
	value_is("mote.run=first quiet mote.run=second", "mote.run", "second");
}

static void an_open_quote_runs_to_the_end(void **state)
{
	struct cmdline_param param;
	const char *p = "a=\"x y z";

	(void)state;
	assert_true(cmdline_next(&p, &param));
	assert_int_equal(param.name_len, 1);
	assert_int_equal(param.value_len, 5);
	assert_false(cmdline_next(&p, &param));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(values_plain_quoted_and_bare),
	    cmocka_unit_test(a_key_inside_a_quoted_value_is_not_a_parameter),
	    cmocka_unit_test(the_last_of_a_repeated_key_wins),
	    cmocka_unit_test(an_open_quote_runs_to_the_end),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
