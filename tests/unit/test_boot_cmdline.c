/* cmdline_init/append/check: words joined by single spaces, never cut. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "boot/cmdline.h"

static void base_is_kept_as_given(void **state)
{
	struct cmdline cl;

	(void)state;
	cmdline_init(&cl, "console=ttyS0 panic=1");
	assert_string_equal(cl.buf, "console=ttyS0 panic=1");
	assert_int_equal(cl.len, strlen("console=ttyS0 panic=1"));
	assert_int_equal(cmdline_check(&cl, 2047), 0);
}

static void null_base_is_empty(void **state)
{
	struct cmdline cl;

	(void)state;
	cmdline_init(&cl, NULL);
	assert_string_equal(cl.buf, "");
	assert_int_equal(cl.len, 0);
}

static void appended_pieces_are_separated_by_one_space(void **state)
{
	struct cmdline cl;

	(void)state;
	cmdline_init(&cl, "console=ttyS0");
	cmdline_append(&cl, "virtio_mmio.device=4K@0xd0000000:5");
	cmdline_append(&cl, "root=/dev/vda");
	assert_string_equal(cl.buf,
			    "console=ttyS0 virtio_mmio.device=4K@0xd0000000:5 root=/dev/vda");
	assert_int_equal(cl.len, strlen(cl.buf));
}

static void append_to_empty_line_has_no_leading_space(void **state)
{
	struct cmdline cl;

	(void)state;
	cmdline_init(&cl, "");
	cmdline_append(&cl, "root=/dev/vda");
	assert_string_equal(cl.buf, "root=/dev/vda");
}

static void append_after_trailing_space_adds_no_second_space(void **state)
{
	struct cmdline cl;

	(void)state;
	cmdline_init(&cl, "quiet ");
	cmdline_append(&cl, "ro");
	assert_string_equal(cl.buf, "quiet ro");
}

static void empty_piece_changes_nothing(void **state)
{
	struct cmdline cl;

	(void)state;
	cmdline_init(&cl, "quiet");
	cmdline_append(&cl, "");
	cmdline_append(&cl, NULL);
	assert_string_equal(cl.buf, "quiet");
}

static void line_longer_than_max_len_is_e2big(void **state)
{
	struct cmdline cl;

	(void)state;
	cmdline_init(&cl, "0123456789");
	assert_int_equal(cmdline_check(&cl, 10), 0);
	assert_int_equal(cmdline_check(&cl, 9), -E2BIG);
}

static void piece_that_does_not_fit_is_not_cut_and_overflows(void **state)
{
	struct cmdline cl;
	char piece[100];

	(void)state;
	memset(piece, 'x', sizeof(piece) - 1);
	piece[sizeof(piece) - 1] = '\0';
	cmdline_init(&cl, "a");
	while (!cl.overflow)
		cmdline_append(&cl, piece);
	assert_int_equal(cl.len, strlen(cl.buf));
	assert_true(cl.len < sizeof(cl.buf));
	/* Only whole pieces: "a" then n * " xxx...". */
	assert_int_equal((cl.len - 1) % 100, 0);
	assert_int_equal(cmdline_check(&cl, sizeof(cl.buf)), -E2BIG);
}

static void line_exactly_filling_the_buffer_is_accepted(void **state)
{
	struct cmdline cl;
	char *piece = malloc(sizeof(cl.buf));

	(void)state;
	assert_non_null(piece);
	memset(piece, 'y', sizeof(cl.buf) - 3);
	piece[sizeof(cl.buf) - 3] = '\0';
	cmdline_init(&cl, "a");
	cmdline_append(&cl, piece); /* "a " + piece + NUL = 4096 */
	assert_int_equal(cl.overflow, 0);
	assert_int_equal(cl.len, sizeof(cl.buf) - 1);
	cmdline_append(&cl, "z");
	assert_int_equal(cl.overflow, 1);
	assert_int_equal(cl.len, sizeof(cl.buf) - 1);
	free(piece);
}

static void base_too_long_for_the_buffer_overflows(void **state)
{
	struct cmdline cl;
	char *base = malloc(sizeof(cl.buf) + 1);

	(void)state;
	assert_non_null(base);
	memset(base, 'b', sizeof(cl.buf));
	base[sizeof(cl.buf)] = '\0';
	cmdline_init(&cl, base);
	assert_int_equal(cmdline_check(&cl, SIZE_MAX), -E2BIG);
	free(base);
}

/* The kernel's parameters end at a "--" word (kernel-parameters.rst), not at a "--"
 * inside a quoted value, which mote once cut the line at. */
static void kernel_part_ends_at_a_double_dash_word_outside_quotes(void **state)
{
	size_t end;

	(void)state;
	assert_int_equal(cmdline_kernel_part("console=ttyS0 -- init args", &end), 0);
	assert_int_equal(end, strlen("console=ttyS0 "));
	assert_int_equal(cmdline_kernel_part("quiet mote.run=\"ls -- /tmp\" panic=1", &end), 0);
	assert_int_equal(end, strlen("quiet mote.run=\"ls -- /tmp\" panic=1"));
	assert_int_equal(cmdline_kernel_part("a=\"x y\" --", &end), 0);
	assert_int_equal(end, strlen("a=\"x y\" "));
	assert_int_equal(cmdline_kernel_part("--", &end), 0);
	assert_int_equal(end, 0);
	assert_int_equal(cmdline_kernel_part("a \"--\" b", &end), 0);
	assert_int_equal(end, 2);
	/* Not words of their own: "--x", "x--", a tab-separated "--" is one. */
	assert_int_equal(cmdline_kernel_part("--x x-- y", &end), 0);
	assert_int_equal(end, strlen("--x x-- y"));
	assert_int_equal(cmdline_kernel_part("quiet\t--\tz", &end), 0);
	assert_int_equal(end, strlen("quiet\t"));
	assert_int_equal(cmdline_kernel_part("", &end), 0);
	assert_int_equal(end, 0);
}

/* A quote never closed would swallow what mote appends (the virtio devices). */
static void a_quote_left_open_is_einval_unless_init_has_it(void **state)
{
	size_t end;

	(void)state;
	assert_int_equal(cmdline_kernel_part("mote.run=\"echo hi", &end), -EINVAL);
	assert_int_equal(cmdline_kernel_part("quiet mote.run=\"a -- b", &end), -EINVAL);
	/* After the "--", the line is init's: its quotes are not the kernel's. */
	assert_int_equal(cmdline_kernel_part("quiet -- \"open", &end), 0);
	assert_int_equal(end, strlen("quiet "));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(base_is_kept_as_given),
	    cmocka_unit_test(kernel_part_ends_at_a_double_dash_word_outside_quotes),
	    cmocka_unit_test(a_quote_left_open_is_einval_unless_init_has_it),
	    cmocka_unit_test(null_base_is_empty),
	    cmocka_unit_test(appended_pieces_are_separated_by_one_space),
	    cmocka_unit_test(append_to_empty_line_has_no_leading_space),
	    cmocka_unit_test(append_after_trailing_space_adds_no_second_space),
	    cmocka_unit_test(empty_piece_changes_nothing),
	    cmocka_unit_test(line_longer_than_max_len_is_e2big),
	    cmocka_unit_test(piece_that_does_not_fit_is_not_cut_and_overflows),
	    cmocka_unit_test(line_exactly_filling_the_buffer_is_accepted),
	    cmocka_unit_test(base_too_long_for_the_buffer_overflows),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
