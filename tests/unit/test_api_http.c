/* One control API connection's HTTP (api_http.h) driven with bytes, no socket: requests
 * in any pieces, pipelined, malformed or oversized, and the replies that come out. The
 * controller has no VM; GET / answers with its state. No KVM needed. */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "vmm/api_http.h"
#include "vmm/api_server.h"
#include "vmm/vm_command.h"

struct fixture {
	struct vm_controller controller;
	struct api_http http;
	char sent[8192]; /* what the connection sent so far, NUL-terminated */
	size_t sent_len;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct cli_options pending;
	struct mote_log log = {0};

	cli_options_init(&pending);
	vm_controller_init(&f->controller, &pending, 0, NULL, NULL);
	api_http_init(&f->http, &f->controller, &log);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	api_http_free(&f->http);
	vm_controller_destroy(&f->controller);
	free(f);
	return 0;
}

/* Feeds text as far as the connection takes it; the bytes it took. */
static size_t feed(struct fixture *f, const char *text, size_t len)
{
	size_t room;
	char *space = api_http_input_space(&f->http, &room);

	if (room > len)
		room = len;
	memcpy(space, text, room);
	assert_int_equal(api_http_received(&f->http, room), 0);
	return room;
}

static void feed_all(struct fixture *f, const char *text)
{
	size_t len = strlen(text);
	size_t taken = feed(f, text, len);

	assert_int_equal(taken, len);
}

/* Takes up to max bytes of the connection's output, as a client reading them would. */
static size_t drain(struct fixture *f, size_t max)
{
	size_t len;
	const char *out = api_http_output(&f->http, &len);

	if (len > max)
		len = max;
	if (!len)
		return 0;
	assert_true(f->sent_len + len < sizeof(f->sent));
	memcpy(f->sent + f->sent_len, out, len);
	f->sent_len += len;
	f->sent[f->sent_len] = '\0';
	assert_int_equal(api_http_sent(&f->http, len), 0);
	return len;
}

static void drain_all(struct fixture *f)
{
	while (drain(f, SIZE_MAX))
		;
}

/* The connection's output so far begins with prefix (a status line, say). */
static void assert_sent_starts_with(const struct fixture *f, const char *prefix)
{
	if (strncmp(f->sent, prefix, strlen(prefix)) != 0)
		fail_msg("sent \"%.60s\", wanted it to begin with \"%s\"", f->sent, prefix);
}

static unsigned count(const char *haystack, const char *needle)
{
	unsigned n = 0;

	for (const char *p = haystack; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

static void a_request_gets_a_json_reply_and_the_connection_stays_open(void **state)
{
	struct fixture *f = *state;

	feed_all(f, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n");
	drain_all(f);
	assert_sent_starts_with(f, "HTTP/1.1 200 OK\r\n");
	assert_non_null(strstr(f->sent, "Content-Type: application/json\r\n"));
	assert_non_null(strstr(f->sent, "\"state\":\"Not started\""));
	assert_null(strstr(f->sent, "Connection: close"));
	assert_false(api_http_finished(&f->http));
	/* Content-Length matches the body. */
	const char *length = strstr(f->sent, "Content-Length: ");
	const char *body = strstr(f->sent, "\r\n\r\n");
	assert_non_null(length);
	assert_non_null(body);
	assert_int_equal(strtoul(length + 16, NULL, 10), strlen(body + 4));
}

static void a_request_in_single_bytes_is_answered_once_complete(void **state)
{
	struct fixture *f = *state;
	const char *request = "PATCH /machine-config HTTP/1.1\r\nContent-Length: 16\r\n\r\n"
			      "{\"vcpu_count\":2}";

	for (size_t i = 0; request[i]; i++) {
		size_t len;
		api_http_output(&f->http, &len);
		assert_int_equal(len, 0); /* nothing before the last byte */
		assert_int_equal(feed(f, request + i, 1), 1);
	}
	drain_all(f);
	assert_sent_starts_with(f, "HTTP/1.1 204 No Content\r\n");
	assert_null(strstr(f->sent, "Content-Length")); /* RFC 9110 §8.6 */
	assert_int_equal(f->controller.pending.cpus, 2);
}

static void pipelined_requests_are_answered_in_order_one_at_a_time(void **state)
{
	struct fixture *f = *state;

	feed_all(f, "GET /nowhere HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n");
	/* The second waits, unparsed, while the first's reply is unsent. */
	size_t room;
	api_http_input_space(&f->http, &room);
	assert_int_equal(room, 0);
	drain(f, 5);
	assert_null(strstr(f->sent, "200 OK"));
	drain_all(f);
	const char *not_found = strstr(f->sent, "HTTP/1.1 404 Not Found\r\n");
	const char *ok = strstr(f->sent, "HTTP/1.1 200 OK\r\n");
	assert_non_null(not_found);
	assert_non_null(ok);
	assert_true(not_found < ok);
	api_http_input_space(&f->http, &room);
	assert_true(room > 0);
}

static void a_malformed_request_is_400_and_closes_the_connection(void **state)
{
	struct fixture *f = *state;

	feed_all(f, "GET / HTTP/1.1\r\nBad Header\r\n\r\n");
	drain_all(f);
	assert_sent_starts_with(f, "HTTP/1.1 400 Bad Request\r\n");
	assert_non_null(strstr(f->sent, "Connection: close\r\n"));
	assert_non_null(strstr(f->sent, "\"fault_message\":\"malformed HTTP request"));
	assert_true(api_http_finished(&f->http));
}

static void expect_100_continue_gets_a_100_before_the_body(void **state)
{
	struct fixture *f = *state;

	feed_all(f, "PATCH /machine-config HTTP/1.1\r\nContent-Length: 16\r\n"
		    "Expect: 100-continue\r\n\r\n");
	drain_all(f);
	assert_string_equal(f->sent, "HTTP/1.1 100 Continue\r\n\r\n");
	feed_all(f, "{\"vcpu_count\":3}");
	drain_all(f);
	assert_non_null(strstr(f->sent, "\r\n\r\nHTTP/1.1 204 No Content\r\n"));
	assert_int_equal(f->controller.pending.cpus, 3);
}

static void a_body_declared_past_the_drain_limit_is_413_at_once(void **state)
{
	struct fixture *f = *state;
	char request[256];

	snprintf(request, sizeof(request),
		 "PUT /machine-config HTTP/1.1\r\nContent-Length: %d\r\n\r\n", API_DRAIN_MAX + 1);
	feed_all(f, request);
	drain_all(f);
	assert_sent_starts_with(f, "HTTP/1.1 413 ");
	assert_non_null(strstr(f->sent, "larger than 65536 bytes"));
	assert_true(api_http_finished(&f->http));
}

static void a_body_over_the_limit_is_read_to_its_end_then_refused(void **state)
{
	struct fixture *f = *state;
	char head[128];
	size_t len = API_BODY_MAX + 100;
	char *body = malloc(len);

	memset(body, ' ', len);
	snprintf(head, sizeof(head), "PUT /machine-config HTTP/1.1\r\nContent-Length: %zu\r\n\r\n",
		 len);
	feed_all(f, head);
	for (size_t at = 0; at < len;) {
		size_t out;
		api_http_output(&f->http, &out);
		assert_int_equal(out, 0); /* no reply before the body's end */
		at += feed(f, body + at, len - at);
	}
	free(body);
	drain_all(f);
	assert_sent_starts_with(f, "HTTP/1.1 413 ");
	assert_false(api_http_finished(&f->http)); /* the body was read: the connection goes on */
	f->sent_len = 0;
	feed_all(f, "GET / HTTP/1.1\r\n\r\n");
	drain_all(f);
	assert_sent_starts_with(f, "HTTP/1.1 200 OK\r\n");
}

static void a_long_request_target_is_414(void **state)
{
	struct fixture *f = *state;
	char request[API_HTTP_URL_MAX + 64];

	memset(request, 'a', sizeof(request));
	memcpy(request, "GET /", 5);
	snprintf(request + API_HTTP_URL_MAX + 8, 32, " HTTP/1.1\r\n\r\n");
	feed_all(f, request);
	drain_all(f);
	assert_sent_starts_with(f, "HTTP/1.1 414 ");
	assert_non_null(strstr(f->sent, "request target longer than"));
}

static void http_1_0_closes_after_its_reply(void **state)
{
	struct fixture *f = *state;

	feed_all(f, "GET / HTTP/1.0\r\n\r\n");
	assert_false(api_http_finished(&f->http));
	drain_all(f);
	assert_non_null(strstr(f->sent, "Connection: close\r\n"));
	assert_true(api_http_finished(&f->http));
}

static void requests_sent_before_the_client_closed_are_still_answered(void **state)
{
	struct fixture *f = *state;

	feed_all(f, "GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n");
	assert_int_equal(api_http_end_of_input(&f->http), 0);
	drain_all(f);
	/* Two whole requests answered; the third, half-sent, dropped. */
	assert_int_equal(count(f->sent, "HTTP/1.1 200 OK"), 2);
	assert_true(api_http_finished(&f->http));
}

static void head_gets_the_length_without_the_body(void **state)
{
	struct fixture *f = *state;

	feed_all(f, "HEAD / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n");
	drain_all(f);
	/* The HEAD's reply ends with its headers; the GET's follows at once. */
	assert_sent_starts_with(f, "HTTP/1.1 405 ");
	assert_non_null(strstr(f->sent, "Content-Length: "));
	const char *next = strstr(f->sent, "\r\n\r\n");
	assert_non_null(next);
	assert_true(strncmp(next + 4, "HTTP/1.1 200 OK\r\n", 17) == 0);
}

/* An Upgrade request with a body, sent in one piece or with the body in a second. */
static void assert_upgrade_refused(struct fixture *f, bool split)
{
	const char *head = "PATCH /machine-config HTTP/1.1\r\nConnection: Upgrade\r\n"
			   "Upgrade: h2c\r\nContent-Length: 16\r\n\r\n";
	const char *body = "{\"vcpu_count\":2}";
	char whole[256];

	if (split) {
		feed_all(f, head);
		feed_all(f, body);
	} else {
		snprintf(whole, sizeof(whole), "%s%s", head, body);
		feed_all(f, whole);
	}
	drain_all(f);
	assert_sent_starts_with(f, "HTTP/1.1 400 ");
	assert_non_null(strstr(f->sent, "protocol upgrade not supported"));
	assert_true(api_http_finished(&f->http));
	assert_int_equal(f->controller.pending.cpus, 1); /* not run */
}

static void an_upgrade_request_is_refused_in_one_piece(void **state)
{
	assert_upgrade_refused(*state, false);
}

static void an_upgrade_request_is_refused_with_its_body_apart(void **state)
{
	assert_upgrade_refused(*state, true);
}

static void expect_with_trailing_whitespace_still_gets_its_100(void **state)
{
	struct fixture *f = *state;

	feed_all(f, "PATCH /machine-config HTTP/1.1\r\nContent-Length: 16\r\n"
		    "Expect: 100-continue \t\r\n\r\n");
	drain_all(f);
	assert_string_equal(f->sent, "HTTP/1.1 100 Continue\r\n\r\n");
}

static void an_upgrade_request_is_refused_and_closes(void **state)
{
	struct fixture *f = *state;

	feed_all(f, "CONNECT localhost:80 HTTP/1.1\r\n\r\n");
	drain_all(f);
	assert_sent_starts_with(f, "HTTP/1.1 4");
	assert_true(api_http_finished(&f->http));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(
		a_request_gets_a_json_reply_and_the_connection_stays_open, setup, teardown),
	    cmocka_unit_test_setup_teardown(a_request_in_single_bytes_is_answered_once_complete,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(pipelined_requests_are_answered_in_order_one_at_a_time,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(a_malformed_request_is_400_and_closes_the_connection,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(expect_100_continue_gets_a_100_before_the_body, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(a_body_declared_past_the_drain_limit_is_413_at_once,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(a_body_over_the_limit_is_read_to_its_end_then_refused,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(a_long_request_target_is_414, setup, teardown),
	    cmocka_unit_test_setup_teardown(http_1_0_closes_after_its_reply, setup, teardown),
	    cmocka_unit_test_setup_teardown(
		requests_sent_before_the_client_closed_are_still_answered, setup, teardown),
	    cmocka_unit_test_setup_teardown(an_upgrade_request_is_refused_and_closes, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(head_gets_the_length_without_the_body, setup, teardown),
	    cmocka_unit_test_setup_teardown(an_upgrade_request_is_refused_in_one_piece, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(an_upgrade_request_is_refused_with_its_body_apart,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(expect_with_trailing_whitespace_still_gets_its_100,
					    setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
