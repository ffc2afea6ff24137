/* One control API connection's HTTP/1.1 (RFC 9112): bytes in, requests run on the
 * controller (api_handle), replies out. libhttp-parser parses; this file keeps the
 * request being read, answers it, and says when the connection should close. It does
 * no I/O, so the server (api_server.c) owns the socket and a test or fuzzer can drive
 * it with any bytes.
 *
 * Requests on one connection are answered in order, one at a time: while a reply is
 * unsent, no further input is parsed (a client that never reads holds only its own
 * connection and one reply's memory). A body over API_BODY_MAX is read to its end and
 * dropped before the 413 goes out: a reply sent while the client still writes is lost
 * to the connection's reset. Only a body declared, or grown, past API_DRAIN_MAX is
 * refused at once, and the connection closed. */
#ifndef MOTE_API_HTTP_H
#define MOTE_API_HTTP_H

#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>

#include "log.h"
#include "vm_command.h"

#define API_DRAIN_MAX (16 * 1024 * 1024)
/* Bytes read from the socket and not yet parsed. */
#define API_HTTP_INPUT_MAX (16 * 1024)
/* A request target longer than this is refused (414). */
#define API_HTTP_URL_MAX 2048

struct api_http {
	struct vm_controller *controller;
	struct mote_log log;
	http_parser parser;
	char input[API_HTTP_INPUT_MAX];
	size_t input_len;
	/* The request being read. */
	char url[API_HTTP_URL_MAX + 1];
	size_t url_len;
	char *body; /* API_BODY_MAX bytes once a body arrives */
	size_t body_len;
	size_t drained;		/* body bytes seen, kept or not */
	unsigned refuse;	/* a status to answer with instead of running the request */
	const char *refuse_why; /* for a 400 refusal: what was wrong */
	char header_name[16];
	char header_value[16];
	size_t header_name_len; /* past the buffer: longer than it */
	size_t header_value_len;
	bool header_in_value;
	bool expect_continue;
	bool in_request; /* some of a request was read, not all of it */
	/* Bytes came that no request completed yet: a request's start, or blank lines
	 * before one (which the parser skips without a callback). */
	bool unanswered;
	unsigned long requests_done; /* requests read whole, for the server's timer */
	/* The request complete (the parser pauses on it). */
	bool keep_alive;
	unsigned method; /* enum http_method */
	/* The reply being sent. */
	char *output;
	size_t output_len;
	size_t output_sent;
	bool closing;	    /* close once the output is sent */
	bool input_ended;   /* the client sent all it will */
	bool out_of_memory; /* a callback could not allocate */
};

/* A connection to c, logging to log. */
void api_http_init(struct api_http *h, struct vm_controller *c, const struct mote_log *log);
void api_http_free(struct api_http *h);

/* Where the next bytes read from the socket go, and how many fit (0: read nothing now:
 * a reply is being sent, or the connection is closing). */
char *api_http_input_space(struct api_http *h, size_t *room);

/* n bytes were written at api_http_input_space(): parses them, runs every request they
 * complete, and queues the replies. -ENOMEM (the connection must close) or 0. */
int api_http_received(struct api_http *h, size_t n);

/* The client closed its side: the requests it sent are still answered, one it left
 * half-sent is dropped, and then the connection is finished. -ENOMEM or 0. */
int api_http_end_of_input(struct api_http *h);

/* The reply bytes not yet sent (*len 0: none). */
const char *api_http_output(const struct api_http *h, size_t *len);

/* n bytes of api_http_output() were sent; once all are, the input that waited behind
 * them is parsed. -ENOMEM or 0. */
int api_http_sent(struct api_http *h, size_t n);

/* Bytes of a request were read, and not yet all of it (blank lines before a request
 * count: they are bytes a client sent and no request answered). */
bool api_http_mid_request(const struct api_http *h);

/* How many requests were read whole so far. */
unsigned long api_http_requests_done(const struct api_http *h);

/* Between requests: nothing of one read, nothing of a reply left to send. Closing the
 * connection now loses nothing (RFC 9112 §9.5: a client must be ready for a persistent
 * connection to close while it is idle). */
bool api_http_between_requests(const struct api_http *h);

/* Nothing left to send and nothing more to read: close the connection. */
bool api_http_finished(const struct api_http *h);

#endif
