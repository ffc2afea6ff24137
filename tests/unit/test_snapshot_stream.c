/* The snapshot state-file stream: what is written reads back, and a damaged file is an
 * error at the first field that does not fit, never garbage. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "vmm/snapshot_stream.h"

#define TAG_A SNAP_TAG('T', 'S', 'T', 'A')
#define TAG_B SNAP_TAG('T', 'S', 'T', 'B')

struct file {
	uint8_t *data;
	size_t len;
};

/* Writes a two-section state file through a real fd and reads it back whole. */
static struct file sample_file(void)
{
	struct snap_writer w;
	struct file f;
	char path[] = "/tmp/mote-snap-XXXXXX";
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	unlink(path);
	snap_writer_init(&w);
	snap_begin(&w, TAG_A);
	snap_put_u8(&w, 0xab);
	snap_put_u16(&w, 0xbeef);
	snap_put_u32(&w, 0xdeadbeef);
	snap_put_u64(&w, 0x0123456789abcdefULL);
	snap_put_bool(&w, true);
	snap_put_str(&w, "vda");
	snap_put_str(&w, NULL);
	snap_end(&w);
	snap_begin(&w, TAG_B);
	snap_put_bytes(&w, "\x01\x02\x03", 3);
	snap_end(&w);
	assert_int_equal(snap_writer_write(&w, fd), 0);
	snap_writer_free(&w);
	f.len = (size_t)lseek(fd, 0, SEEK_END);
	f.data = malloc(f.len);
	assert_non_null(f.data);
	assert_int_equal(pread(fd, f.data, f.len, 0), (ssize_t)f.len);
	close(fd);
	return f;
}

static void every_field_reads_back_as_written(void **state)
{
	struct snap_reader payload, a, b;
	const char *why = NULL;
	char str[8];
	uint8_t bytes[3];
	(void)state;
	struct file f = sample_file();

	assert_int_equal(snap_reader_open(&payload, f.data, f.len, &why), 0);
	assert_true(snap_next_is(&payload, TAG_A));
	snap_section(&payload, TAG_A, &a);
	assert_int_equal(snap_get_u8(&a), 0xab);
	assert_int_equal(snap_get_u16(&a), 0xbeef);
	assert_int_equal(snap_get_u32(&a), 0xdeadbeef);
	assert_true(snap_get_u64(&a) == 0x0123456789abcdefULL);
	assert_true(snap_get_bool(&a));
	assert_true(snap_get_str(&a, str, sizeof(str)));
	assert_string_equal(str, "vda");
	assert_false(snap_get_str(&a, str, sizeof(str)));
	assert_string_equal(str, "");
	assert_int_equal(snap_reader_finish(&a), 0);
	snap_section(&payload, TAG_B, &b);
	snap_get_bytes(&b, bytes, 3);
	assert_memory_equal(bytes, "\x01\x02\x03", 3);
	assert_int_equal(snap_reader_finish(&b), 0);
	assert_int_equal(snap_reader_finish(&payload), 0);
	free(f.data);
}

static void every_truncation_is_refused(void **state)
{
	struct snap_reader payload;
	const char *why = NULL;
	(void)state;
	struct file f = sample_file();

	for (size_t len = 0; len < f.len; len++) {
		assert_int_equal(snap_reader_open(&payload, f.data, len, &why), -EINVAL);
		assert_non_null(why);
	}
	free(f.data);
}

static void every_flipped_bit_is_refused(void **state)
{
	struct snap_reader payload;
	const char *why = NULL;
	(void)state;
	struct file f = sample_file();

	for (size_t bit = 0; bit < f.len * 8; bit++) {
		f.data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		int ret = snap_reader_open(&payload, f.data, f.len, &why);
		/* A flip in the version field is "another version"; every other is damage. */
		if (bit / 8 >= 8 && bit / 8 < 12)
			assert_int_equal(ret, -EPROTO);
		else
			assert_int_equal(ret, -EINVAL);
		f.data[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
	free(f.data);
}

static void a_missing_or_reordered_section_is_an_error(void **state)
{
	struct snap_reader payload, section;
	const char *why = NULL;
	(void)state;
	struct file f = sample_file();

	assert_int_equal(snap_reader_open(&payload, f.data, f.len, &why), 0);
	snap_section(&payload, TAG_B, &section);
	assert_int_equal(snap_reader_finish(&section), -EINVAL);
	assert_int_equal(snap_reader_finish(&payload), -EINVAL);
	assert_non_null(payload.failure);
	free(f.data);
}

static void reading_past_a_section_fails_and_yields_zeros(void **state)
{
	struct snap_reader payload, b;
	const char *why = NULL;
	(void)state;
	struct file f = sample_file();

	assert_int_equal(snap_reader_open(&payload, f.data, f.len, &why), 0);
	snap_section(&payload, TAG_A, &b);
	snap_section(&payload, TAG_B, &b);
	assert_int_equal(snap_get_u64(&b), 0);
	assert_int_equal(snap_get_u8(&b), 0);
	assert_int_equal(snap_reader_finish(&b), -EINVAL);
	free(f.data);
}

static void unread_fields_make_a_section_fail(void **state)
{
	struct snap_reader payload, a;
	const char *why = NULL;
	(void)state;
	struct file f = sample_file();

	assert_int_equal(snap_reader_open(&payload, f.data, f.len, &why), 0);
	snap_section(&payload, TAG_A, &a);
	snap_get_u8(&a);
	assert_int_equal(snap_reader_finish(&a), -EINVAL);
	free(f.data);
}

static void bad_booleans_and_long_strings_are_refused(void **state)
{
	struct snap_writer w;
	struct snap_reader r;
	char small[3];
	(void)state;

	snap_writer_init(&w);
	snap_put_u8(&w, 2);
	snap_put_str(&w, "toolong");
	r = (struct snap_reader){.data = w.buf, .len = w.len};
	snap_get_bool(&r);
	assert_int_equal(r.error, -EINVAL);
	r = (struct snap_reader){.data = w.buf + 1, .len = w.len - 1};
	assert_false(snap_get_str(&r, small, sizeof(small)));
	assert_int_equal(r.error, -EINVAL);
	snap_writer_free(&w);
}

static void nested_sections_are_a_writer_error(void **state)
{
	struct snap_writer w;
	(void)state;

	snap_writer_init(&w);
	snap_begin(&w, TAG_A);
	snap_begin(&w, TAG_B);
	assert_int_equal(w.error, -EINVAL);
	assert_int_equal(snap_writer_write(&w, -1), -EINVAL);
	snap_writer_free(&w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(every_field_reads_back_as_written),
	    cmocka_unit_test(every_truncation_is_refused),
	    cmocka_unit_test(every_flipped_bit_is_refused),
	    cmocka_unit_test(a_missing_or_reordered_section_is_an_error),
	    cmocka_unit_test(reading_past_a_section_fails_and_yields_zeros),
	    cmocka_unit_test(unread_fields_make_a_section_fail),
	    cmocka_unit_test(bad_booleans_and_long_strings_are_refused),
	    cmocka_unit_test(nested_sections_are_a_writer_error),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
