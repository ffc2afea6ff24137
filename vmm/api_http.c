/* One control API connection's HTTP (api_http.h): libhttp-parser's callbacks collect a
 * request; once it is complete the parser pauses, the request runs, and its reply is
 * queued; parsing resumes when the reply is sent. */
#include "api_http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api_server.h"

#define API_HTTP_FAULT_MAX 256

/* The parser's return for "stop here, the request is refused" (http_parser.h: a
 * callback's non-zero return is an error, HPE_CB_*). */
#define API_HTTP_STOP (-1)

static struct api_http *api_http_of(http_parser *parser)
{
	return parser->data;
}

static void api_http_request_reset(struct api_http *h)
{
	free(h->body);
	h->body = NULL;
	h->body_len = 0;
	h->drained = 0;
	h->url_len = 0;
	h->refuse = 0;
	h->refuse_why = NULL;
	h->header_name_len = 0;
	h->header_value_len = 0;
	h->header_in_value = false;
	h->expect_continue = false;
}

static int api_http_message_begin(http_parser *parser)
{
	struct api_http *h = api_http_of(parser);

	api_http_request_reset(h);
	h->in_request = true;
	return 0;
}

static int api_http_url(http_parser *parser, const char *at, size_t n)
{
	struct api_http *h = api_http_of(parser);

	if (n > API_HTTP_URL_MAX - h->url_len) {
		h->refuse = 414;
		return 0;
	}
	memcpy(h->url + h->url_len, at, n);
	h->url_len += n;
	return 0;
}

/* A header ends when the next name starts or the headers end. Only Expect matters
 * (RFC 9110 §10.1.1): a client that sends "Expect: 100-continue" waits for a 100 before
 * it sends its body. */
static void api_http_header_end(struct api_http *h)
{
	static const char expect[] = "expect", continue_[] = "100-continue";

	if (!h->header_in_value)
		return;
	/* The parser keeps a value's trailing whitespace (RFC 9110 §5.5: not part of it). */
	while (h->header_value_len && h->header_value_len <= sizeof(h->header_value) &&
	       (h->header_value[h->header_value_len - 1] == ' ' ||
		h->header_value[h->header_value_len - 1] == '\t'))
		h->header_value_len--;
	if (h->header_name_len == sizeof(expect) - 1 &&
	    strncasecmp(h->header_name, expect, sizeof(expect) - 1) == 0 &&
	    h->header_value_len == sizeof(continue_) - 1 &&
	    strncasecmp(h->header_value, continue_, sizeof(continue_) - 1) == 0)
		h->expect_continue = true;
	h->header_name_len = 0;
	h->header_value_len = 0;
	h->header_in_value = false;
}

/* Appends what fits of a header's name or value (either may arrive in pieces); a longer
 * one is marked too long by a length past the buffer, so it matches nothing. */
static void api_http_header_append(char *buffer, size_t size, size_t *len, const char *at, size_t n)
{
	if (*len > size)
		return;
	if (n > size - *len) {
		*len = size + 1;
		return;
	}
	memcpy(buffer + *len, at, n);
	*len += n;
}

static int api_http_header_name(http_parser *parser, const char *at, size_t n)
{
	struct api_http *h = api_http_of(parser);

	api_http_header_end(h);
	api_http_header_append(h->header_name, sizeof(h->header_name), &h->header_name_len, at, n);
	return 0;
}

static int api_http_header_value(http_parser *parser, const char *at, size_t n)
{
	struct api_http *h = api_http_of(parser);

	h->header_in_value = true;
	api_http_header_append(h->header_value, sizeof(h->header_value), &h->header_value_len, at,
			       n);
	return 0;
}

static int api_http_append(struct api_http *h, const char *data, size_t n)
{
	char *grown = realloc(h->output, h->output_len + n);

	if (!grown)
		return -ENOMEM;
	memcpy(grown + h->output_len, data, n);
	h->output = grown;
	h->output_len += n;
	return 0;
}

static int api_http_headers_complete(http_parser *parser)
{
	struct api_http *h = api_http_of(parser);
	static const char go_on[] = "HTTP/1.1 100 Continue\r\n\r\n";

	api_http_header_end(h);
	if ((parser->flags & F_CONTENTLENGTH) && parser->content_length > API_DRAIN_MAX) {
		h->refuse = 413;
		return API_HTTP_STOP;
	}
	/* A protocol switch (RFC 9110 §7.8) this server does not speak: the request is
	 * read to its end and refused, and the connection closes after the answer. */
	if (parser->upgrade && !h->refuse) {
		h->refuse = 400;
		h->refuse_why = "protocol upgrade not supported";
	}
	/* Before HTTP/1.1 there is no 100 (RFC 9110 §15.2). */
	if (h->expect_continue &&
	    (parser->http_major > 1 || (parser->http_major == 1 && parser->http_minor >= 1)) &&
	    api_http_append(h, go_on, sizeof(go_on) - 1)) {
		h->out_of_memory = true;
		return API_HTTP_STOP;
	}
	return 0;
}

static int api_http_body(http_parser *parser, const char *at, size_t n)
{
	struct api_http *h = api_http_of(parser);

	h->drained += n;
	if (h->drained > API_DRAIN_MAX) {
		h->refuse = 413;
		return API_HTTP_STOP;
	}
	if (h->refuse)
		return 0; /* read to the end and dropped */
	if (n > API_BODY_MAX - h->body_len) {
		h->refuse = 413;
		return 0;
	}
	if (!h->body && !(h->body = malloc(API_BODY_MAX))) {
		h->out_of_memory = true;
		return API_HTTP_STOP;
	}
	memcpy(h->body + h->body_len, at, n);
	h->body_len += n;
	return 0;
}

static int api_http_message_complete(http_parser *parser)
{
	struct api_http *h = api_http_of(parser);

	h->in_request = false;
	h->unanswered = false;
	h->requests_done++;
	h->keep_alive = http_should_keep_alive(parser) != 0;
	h->method = parser->method;
	http_parser_pause(parser, 1); /* answered before the next request is parsed */
	return 0;
}

static const http_parser_settings api_http_settings = {
    .on_message_begin = api_http_message_begin,
    .on_url = api_http_url,
    .on_header_field = api_http_header_name,
    .on_header_value = api_http_header_value,
    .on_headers_complete = api_http_headers_complete,
    .on_body = api_http_body,
    .on_message_complete = api_http_message_complete,
};

void api_http_init(struct api_http *h, struct vm_controller *c, const struct mote_log *log)
{
	memset(h, 0, sizeof(*h));
	h->controller = c;
	h->log = *log;
	http_parser_init(&h->parser, HTTP_REQUEST);
	h->parser.data = h;
}

void api_http_free(struct api_http *h)
{
	free(h->body);
	free(h->output);
	h->body = NULL;
	h->output = NULL;
}

/* Queues reply (and frees its body) as the response to the request just read, with
 * "Connection: close" if the connection ends after it. A response to HEAD has no body,
 * only its length (RFC 9110 §9.3.2). */
static int api_http_respond(struct api_http *h, struct api_reply *reply, bool to_head)
{
	const char *reason = http_status_str((enum http_status)reply->status);
	size_t body_len = reply->body ? strlen(reply->body) : 0;
	char head[512];
	int n;

	/* A 204 has neither a body nor a Content-Length (RFC 9110 §8.6). */
	if (reply->status == 204)
		n = snprintf(head, sizeof(head), "HTTP/1.1 204 %s\r\n", reason);
	else
		n = snprintf(head, sizeof(head),
			     "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\n"
			     "Content-Length: %zu\r\n",
			     reply->status, reason, body_len);
	if (reply->allow)
		n += snprintf(head + n, sizeof(head) - (size_t)n, "Allow: %s\r\n", reply->allow);
	n += snprintf(head + n, sizeof(head) - (size_t)n, "%s\r\n",
		      h->closing ? "Connection: close\r\n" : "");
	int ret = api_http_append(h, head, (size_t)n);
	if (!ret && body_len && !to_head)
		ret = api_http_append(h, reply->body, body_len);
	free(reply->body);
	reply->body = NULL;
	return ret;
}

static void api_http_refusal(unsigned status, const char *why, struct api_reply *reply)
{
	char fault[API_HTTP_FAULT_MAX];

	if (status == 413)
		snprintf(fault, sizeof(fault), "request body larger than %d bytes", API_BODY_MAX);
	else if (status == 414)
		snprintf(fault, sizeof(fault), "request target longer than %d bytes",
			 API_HTTP_URL_MAX);
	else
		snprintf(fault, sizeof(fault), "malformed HTTP request: %s", why ? why : "refused");
	api_reply_fault(reply, status, fault);
}

/* Runs the request the parser completed, or refuses it, and queues the answer. */
static int api_http_answer(struct api_http *h)
{
	const char *method = http_method_str((enum http_method)h->method);
	struct api_reply reply;

	h->url[h->url_len] = '\0';
	h->url[strcspn(h->url, "?#")] = '\0'; /* the path alone names a resource */
	if (h->refuse)
		api_http_refusal(h->refuse, h->refuse_why, &reply);
	else
		api_handle(h->controller, method, h->url, h->body, h->body_len, &reply);
	log_debug(&h->log, "api: %s %s: %u", method, h->url, reply.status);
	if (!h->keep_alive || h->parser.upgrade)
		h->closing = true;
	api_http_request_reset(h);
	return api_http_respond(h, &reply, h->method == HTTP_HEAD);
}

/* The parser stopped on an error: the answer is the last on the connection. */
static int api_http_fail(struct api_http *h)
{
	enum http_errno error = HTTP_PARSER_ERRNO(&h->parser);
	struct api_reply reply;

	if (h->out_of_memory)
		return -ENOMEM;
	if (h->refuse)
		api_http_refusal(h->refuse, h->refuse_why, &reply);
	else
		api_http_refusal(400, http_errno_description(error), &reply);
	log_debug(&h->log, "api: refused with %u: %s", reply.status, http_errno_name(error));
	h->closing = true;
	h->in_request = false;
	h->unanswered = false;
	api_http_request_reset(h);
	return api_http_respond(h, &reply, false);
}

/* Parses what input there is while no reply waits to be sent. */
static int api_http_parse(struct api_http *h)
{
	while (!h->closing && h->output_len == 0 && h->input_len > 0) {
		size_t n =
		    http_parser_execute(&h->parser, &api_http_settings, h->input, h->input_len);
		enum http_errno error = HTTP_PARSER_ERRNO(&h->parser);

		if (n > h->input_len)
			n = h->input_len;
		memmove(h->input, h->input + n, h->input_len - n);
		h->input_len -= n;
		if (error == HPE_PAUSED) {
			http_parser_pause(&h->parser, 0);
			int ret = api_http_answer(h);
			if (ret)
				return ret;
		} else if (error != HPE_OK) {
			return api_http_fail(h);
		}
	}
	/* What the client sent before it closed its side is answered first. */
	if (h->input_ended && h->input_len == 0 && h->output_len == 0)
		h->closing = true;
	return 0;
}

char *api_http_input_space(struct api_http *h, size_t *room)
{
	*room = h->closing || h->input_ended || h->output_len ? 0 : sizeof(h->input) - h->input_len;
	return h->input + h->input_len;
}

int api_http_received(struct api_http *h, size_t n)
{
	h->input_len += n;
	h->unanswered |= n > 0;
	return api_http_parse(h);
}

int api_http_end_of_input(struct api_http *h)
{
	h->input_ended = true;
	return api_http_parse(h);
}

const char *api_http_output(const struct api_http *h, size_t *len)
{
	*len = h->output_len - h->output_sent;
	return h->output ? h->output + h->output_sent : "";
}

int api_http_sent(struct api_http *h, size_t n)
{
	h->output_sent += n;
	if (h->output_sent < h->output_len)
		return 0;
	free(h->output);
	h->output = NULL;
	h->output_len = 0;
	h->output_sent = 0;
	return api_http_parse(h);
}

bool api_http_finished(const struct api_http *h)
{
	return h->closing && h->output_len == 0;
}

bool api_http_mid_request(const struct api_http *h)
{
	return h->in_request || h->unanswered;
}

unsigned long api_http_requests_done(const struct api_http *h)
{
	return h->requests_done;
}

bool api_http_between_requests(const struct api_http *h)
{
	return !api_http_mid_request(h) && h->input_len == 0 && h->output_len == 0 && !h->closing;
}
