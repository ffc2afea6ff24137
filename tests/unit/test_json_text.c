/* json_text: the checks on JSON text cJSON does not make. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "vmm/json_text.h"

static bool utf8(const char *text)
{
	return json_text_is_utf8(text, strlen(text));
}

/* RFC 3629 §4 and its examples (§7), with the edges of each range. */
static void well_formed_utf8_is_told_from_the_rest(void **state)
{
	(void)state;
	assert_true(utf8(""));
	assert_true(utf8("/plain/ascii"));
	assert_true(utf8("caf\xc3\xa9"));	       /* U+00E9 */
	assert_true(utf8("\xe2\x82\xac"));	       /* U+20AC */
	assert_true(utf8("\xf0\x9f\x98\x80"));	       /* U+1F600 */
	assert_true(utf8("\xf4\x8f\xbf\xbf"));	       /* U+10FFFF, the last */
	assert_true(utf8("\xed\x9f\xbf\xee\x80\x80")); /* either side of the surrogates */
	assert_false(utf8("\xff"));
	assert_false(utf8("\x80"));		/* a continuation alone */
	assert_false(utf8("\xc3"));		/* cut short */
	assert_false(utf8("\xe2\x82"));		/* cut short */
	assert_false(utf8("\xc0\xaf"));		/* overlong '/' */
	assert_false(utf8("\xc1\xbf"));		/* overlong */
	assert_false(utf8("\xe0\x80\xaf"));	/* overlong */
	assert_false(utf8("\xf0\x80\x80\xaf")); /* overlong */
	assert_false(utf8("\xed\xa0\x80"));	/* U+D800, a surrogate */
	assert_false(utf8("\xf4\x90\x80\x80")); /* past U+10FFFF */
	assert_false(utf8("\xf5\x80\x80\x80"));
	assert_false(utf8("\xc3\x28")); /* a second byte that is not a continuation */
	/* The length given is what counts, not a NUL. */
	assert_false(json_text_is_utf8("ok\xc3\xa9", 3));
	assert_true(json_text_is_utf8("ok\xc3\xa9", 4));
}

/* Each stray byte becomes '?', well-formed sequences stay, and nothing moves: the
 * JSON around them (quotes, backslashes) is untouched. */
static void stray_bytes_become_question_marks(void **state)
{
	char text[] = "{\"path\": \"/a\xff\xc3\xa9\xc0\xaf\\\"\xe2\x82\"}";

	(void)state;
	json_text_make_utf8(text);
	assert_string_equal(text, "{\"path\": \"/a?\xc3\xa9??\\\"??\"}");
	assert_true(utf8(text));
	char clean[] = "caf\xc3\xa9";
	json_text_make_utf8(clean);
	assert_string_equal(clean, "caf\xc3\xa9");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(well_formed_utf8_is_told_from_the_rest),
	    cmocka_unit_test(stray_bytes_become_question_marks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
