/* The agent protocol's encoding (guest-init/agent_protocol.h), shared by the guest and
 * the host: little-endian headers, bounded writers, readers that stop at the payload's
 * end however the bytes lie. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "guest-init/agent_protocol.h"

static void header_round_trips_little_endian(void **state)
{
	uint8_t bytes[AGENT_HEADER_SIZE];
	struct agent_header h = {.length = 0x01020304, .type = AGENT_STDOUT, .id = 0xa0b0c0d0};
	struct agent_header back;

	(void)state;
	agent_header_encode(bytes, &h);
	const uint8_t expected[AGENT_HEADER_SIZE] = {0x04, 0x03, 0x02, 0x01, 0x84, 0x00,
						     0x00, 0x00, 0xd0, 0xc0, 0xb0, 0xa0};
	assert_memory_equal(bytes, expected, sizeof(expected));
	assert_int_equal(agent_header_decode(bytes, UINT32_MAX, &back), 0);
	assert_int_equal(back.length, h.length);
	assert_int_equal(back.type, h.type);
	assert_int_equal(back.flags, 0);
	assert_int_equal(back.id, h.id);
}

static void oversized_length_is_emsgsize(void **state)
{
	uint8_t bytes[AGENT_HEADER_SIZE];
	struct agent_header h;

	(void)state;
	agent_header_encode(bytes, &(struct agent_header){.length = AGENT_MAX_PAYLOAD});
	assert_int_equal(agent_header_decode(bytes, AGENT_MAX_PAYLOAD, &h), 0);
	agent_header_encode(bytes, &(struct agent_header){.length = AGENT_MAX_PAYLOAD + 1});
	assert_int_equal(agent_header_decode(bytes, AGENT_MAX_PAYLOAD, &h), -EMSGSIZE);
	memset(bytes, 0xff, sizeof(bytes));
	assert_int_equal(agent_header_decode(bytes, AGENT_MAX_PAYLOAD, &h), -EMSGSIZE);
}

static void reserved_flags_are_eproto(void **state)
{
	uint8_t bytes[AGENT_HEADER_SIZE];
	struct agent_header h;

	(void)state;
	agent_header_encode(bytes, &(struct agent_header){.length = 4, .flags = 0x8000});
	assert_int_equal(agent_header_decode(bytes, AGENT_MAX_PAYLOAD, &h), -EPROTO);
	assert_int_equal(h.length, 4);
}

static void frame_open_and_close_fill_in_the_length(void **state)
{
	uint8_t buf[64];
	struct agent_writer w;
	struct agent_header h;

	(void)state;
	agent_writer_init(&w, buf, sizeof(buf));
	size_t at = agent_frame_open(&w, AGENT_EXIT, 9);
	agent_put_u32(&w, AGENT_EXIT_CODE);
	agent_put_u32(&w, 3);
	agent_frame_close(&w, at);
	assert_false(w.overflow);
	assert_int_equal(w.len, AGENT_HEADER_SIZE + 8);
	assert_int_equal(agent_header_decode(buf, AGENT_MAX_PAYLOAD, &h), 0);
	assert_int_equal(h.length, 8);
	assert_int_equal(h.type, AGENT_EXIT);
	assert_int_equal(h.id, 9);
}

static void writer_overflow_writes_nothing_more(void **state)
{
	uint8_t buf[8] = {0};
	struct agent_writer w;

	(void)state;
	agent_writer_init(&w, buf, sizeof(buf));
	agent_put_u32(&w, 0x11111111);
	agent_put_string(&w, "too long for the rest");
	assert_true(w.overflow);
	assert_int_equal(w.len, 4);
	agent_put_u16(&w, 0x2222); /* would fit, but the writer already failed */
	assert_int_equal(w.len, 4);
	assert_int_equal(buf[4], 0);
}

static void strings_decode_in_place(void **state)
{
	uint8_t buf[64];
	struct agent_writer w;
	struct agent_reader r;
	const char *s;
	size_t n;

	(void)state;
	agent_writer_init(&w, buf, sizeof(buf));
	agent_put_string(&w, "argv0");
	agent_put_string(&w, "");
	agent_put_u64(&w, 0x0102030405060708ULL);
	agent_reader_init(&r, buf, w.len);
	agent_get_string(&r, &s, &n);
	assert_int_equal(n, 5);
	assert_memory_equal(s, "argv0", 5);
	agent_get_string(&r, &s, &n);
	assert_int_equal(n, 0);
	assert_true(agent_get_u64(&r) == 0x0102030405060708ULL);
	assert_true(agent_reader_done(&r));
}

static void every_truncation_marks_the_reader_bad(void **state)
{
	uint8_t buf[64];
	struct agent_writer w;
	const char *s;
	size_t n;

	(void)state;
	agent_writer_init(&w, buf, sizeof(buf));
	agent_put_u32(&w, 7);
	agent_put_string(&w, "path");
	agent_put_u16(&w, 1);
	for (size_t cut = 0; cut < w.len; cut++) {
		struct agent_reader r;
		agent_reader_init(&r, buf, cut);
		agent_get_u32(&r);
		agent_get_string(&r, &s, &n);
		agent_get_u16(&r);
		assert_true(r.bad);
		assert_false(agent_reader_done(&r));
	}
}

static void bad_reader_yields_zeros_and_empty_strings(void **state)
{
	const uint8_t buf[2] = {0xff, 0xff};
	struct agent_reader r;
	const char *s;
	size_t n;

	(void)state;
	agent_reader_init(&r, buf, sizeof(buf));
	assert_int_equal(agent_get_u32(&r), 0);
	assert_int_equal(agent_get_u16(&r), 0); /* the 2 bytes are there, but too late */
	agent_get_string(&r, &s, &n);
	assert_string_equal(s, "");
	assert_int_equal(n, 0);
}

static void string_length_past_the_end_is_bad(void **state)
{
	uint8_t buf[8];
	struct agent_reader r;
	const char *s;
	size_t n;

	(void)state;
	agent_le32_put(buf, 0xffffffffu);
	memcpy(buf + 4, "abcd", 4);
	agent_reader_init(&r, buf, sizeof(buf));
	agent_get_string(&r, &s, &n);
	assert_true(r.bad);
	assert_int_equal(n, 0);
}

static void string_with_a_nul_is_bad(void **state)
{
	uint8_t buf[16];
	struct agent_writer w;
	struct agent_reader r;
	const char *s;
	size_t n;

	(void)state;
	agent_writer_init(&w, buf, sizeof(buf));
	agent_put_string_n(&w, "a\0b", 3);
	agent_reader_init(&r, buf, w.len);
	agent_get_string(&r, &s, &n);
	assert_true(r.bad);
}

static void cstring_that_does_not_fit_is_bad(void **state)
{
	uint8_t buf[32];
	struct agent_writer w;
	struct agent_reader r;
	char dst[4];

	(void)state;
	agent_writer_init(&w, buf, sizeof(buf));
	agent_put_string(&w, "abc");
	agent_put_string(&w, "abcd");
	agent_reader_init(&r, buf, w.len);
	agent_get_cstring(&r, dst, sizeof(dst));
	assert_string_equal(dst, "abc");
	assert_false(r.bad);
	agent_get_cstring(&r, dst, sizeof(dst));
	assert_true(r.bad);
	assert_string_equal(dst, "");
}

static void trailing_bytes_mean_not_done(void **state)
{
	const uint8_t buf[5] = {1, 0, 0, 0, 9};
	struct agent_reader r;

	(void)state;
	agent_reader_init(&r, buf, sizeof(buf));
	assert_int_equal(agent_get_u32(&r), 1);
	assert_false(r.bad);
	assert_false(agent_reader_done(&r));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(header_round_trips_little_endian),
	    cmocka_unit_test(oversized_length_is_emsgsize),
	    cmocka_unit_test(reserved_flags_are_eproto),
	    cmocka_unit_test(frame_open_and_close_fill_in_the_length),
	    cmocka_unit_test(writer_overflow_writes_nothing_more),
	    cmocka_unit_test(strings_decode_in_place),
	    cmocka_unit_test(every_truncation_marks_the_reader_bad),
	    cmocka_unit_test(bad_reader_yields_zeros_and_empty_strings),
	    cmocka_unit_test(string_length_past_the_end_is_bad),
	    cmocka_unit_test(string_with_a_nul_is_bad),
	    cmocka_unit_test(cstring_that_does_not_fit_is_bad),
	    cmocka_unit_test(trailing_bytes_mean_not_done),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
