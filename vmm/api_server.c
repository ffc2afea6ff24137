/* The control API's socket and HTTP (api_server.h): libmicrohttpd parses requests on its
 * own thread, one at a time, on a Unix socket bound here; api_handle() answers them.
 * libmicrohttpd (and the TLS libraries it needs) is loaded when a server starts, not
 * linked (shared_lib.h says why), so its calls go through the server's table. */
#include "api_server.h"

#include <errno.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shared_lib.h"
#include "unix_listener.h"

#define API_LISTEN_BACKLOG 16
/* Idle connections are closed after this long. */
#define API_CONNECTION_TIMEOUT_S 60
/* A body over API_BODY_MAX is read to its end and dropped before the 413 goes out: a
 * reply sent while the client still writes would be lost to the connection's reset.
 * Only a body declared larger than this is refused before it is read. */
#define API_DRAIN_MAX (16 * 1024 * 1024)

/* The libmicrohttpd functions the server calls, typed by microhttpd.h's declarations. */
struct mhd_functions {
	__typeof__(MHD_start_daemon) *start_daemon;
	__typeof__(MHD_stop_daemon) *stop_daemon;
	__typeof__(MHD_lookup_connection_value) *lookup_connection_value;
	__typeof__(MHD_create_response_from_buffer) *create_response_from_buffer;
	__typeof__(MHD_get_response_header) *get_response_header;
	__typeof__(MHD_add_response_header) *add_response_header;
	__typeof__(MHD_queue_response) *queue_response;
	__typeof__(MHD_destroy_response) *destroy_response;
};

struct api_server {
	struct vm_controller *controller;
	struct mote_log log;
	void *mhd_lib;
	struct mhd_functions mhd;
	struct MHD_Daemon *daemon;
	char *socket_path;
	struct unix_listener_id socket_id; /* the socket bound, so only it is removed */
};

/* One request's body as it arrives. */
struct api_request {
	char *body;
	size_t len;
	bool too_large;
};

static void *api_load_mhd(struct mhd_functions *f, const struct mote_log *log)
{
	const struct shared_lib_symbol symbols[] = {
	    {"MHD_start_daemon", (void **)&f->start_daemon},
	    {"MHD_stop_daemon", (void **)&f->stop_daemon},
	    {"MHD_lookup_connection_value", (void **)&f->lookup_connection_value},
	    {"MHD_create_response_from_buffer", (void **)&f->create_response_from_buffer},
	    {"MHD_get_response_header", (void **)&f->get_response_header},
	    {"MHD_add_response_header", (void **)&f->add_response_header},
	    {"MHD_queue_response", (void **)&f->queue_response},
	    {"MHD_destroy_response", (void **)&f->destroy_response},
	};
	char error[256];

	void *lib = shared_lib_open(MOTE_MICROHTTPD_SONAME, symbols,
				    sizeof(symbols) / sizeof(symbols[0]), error, sizeof(error));
	if (!lib)
		log_error(log, "api socket: %s", error);
	return lib;
}

static enum MHD_Result api_send(const struct api_server *server, struct MHD_Connection *connection,
				struct api_reply *reply)
{
	const struct mhd_functions *mhd = &server->mhd;
	struct MHD_Response *response;

	if (reply->body)
		response = mhd->create_response_from_buffer(strlen(reply->body), reply->body,
							    MHD_RESPMEM_MUST_FREE);
	else
		response = mhd->create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	if (!response) {
		free(reply->body);
		return MHD_NO;
	}
	reply->body = NULL; /* the response's now */
	if (mhd->get_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE) == NULL)
		mhd->add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE,
					 "application/json");
	if (reply->allow)
		mhd->add_response_header(response, MHD_HTTP_HEADER_ALLOW, reply->allow);
	enum MHD_Result ret = mhd->queue_response(connection, reply->status, response);
	mhd->destroy_response(response);
	return ret;
}

static enum MHD_Result api_too_large(const struct api_server *server,
				     struct MHD_Connection *connection)
{
	static const char body[] = "{\"fault_message\":\"request body larger than 65536 bytes\"}";
	struct api_reply reply = {.status = MHD_HTTP_CONTENT_TOO_LARGE, .body = strdup(body)};

	_Static_assert(API_BODY_MAX == 65536, "the message above names the limit");
	return api_send(server, connection, &reply);
}

/* libmicrohttpd calls this once with the headers, once per piece of body, and once more
 * with none left (*upload_data_size 0): then the request is complete. */
static enum MHD_Result api_access(void *cls, struct MHD_Connection *connection, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	struct api_server *server = cls;
	struct api_request *request = *con_cls;

	(void)version;
	if (!request) {
		request = calloc(1, sizeof(*request));
		if (!request)
			return MHD_NO;
		*con_cls = request;
		const char *length = server->mhd.lookup_connection_value(
		    connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (length && strtoull(length, NULL, 10) > API_DRAIN_MAX) {
			request->too_large = true;
			return api_too_large(server, connection);
		}
		return MHD_YES;
	}
	if (*upload_data_size) {
		/* Past the limit, the rest is read and dropped. */
		if (!request->too_large && request->len + *upload_data_size <= API_BODY_MAX) {
			char *grown = realloc(request->body, request->len + *upload_data_size);
			if (!grown)
				return MHD_NO;
			memcpy(grown + request->len, upload_data, *upload_data_size);
			request->body = grown;
			request->len += *upload_data_size;
		} else {
			request->too_large = true;
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (request->too_large)
		return api_too_large(server, connection);
	struct api_reply reply;
	api_handle(server->controller, method, url, request->body, request->len, &reply);
	log_debug(&server->log, "api: %s %s: %u", method, url, reply.status);
	return api_send(server, connection, &reply);
}

static void api_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
			  enum MHD_RequestTerminationCode code)
{
	struct api_request *request = *con_cls;

	(void)cls;
	(void)connection;
	(void)code;
	if (request) {
		free(request->body);
		free(request);
		*con_cls = NULL;
	}
}

static void api_mhd_log(void *cls, const char *fmt, va_list args)
{
	struct api_server *server = cls;
	char message[256];

	vsnprintf(message, sizeof(message), fmt, args);
	message[strcspn(message, "\n")] = '\0';
	log_debug(&server->log, "api: %s", message);
}

static int api_socket_bind(struct api_server *server, const char *path)
{
	int fd = unix_listener_open(path, 0, API_LISTEN_BACKLOG, &server->socket_id);

	if (fd == -ENAMETOOLONG)
		log_error(&server->log, "api socket %s: path too long", path);
	else if (fd == -EEXIST)
		log_error(&server->log, "api socket %s: exists and is not a socket", path);
	else if (fd == -EADDRINUSE)
		log_error(&server->log, "api socket %s: another process serves it", path);
	else if (fd < 0)
		log_error(&server->log, "api socket %s: %s", path, strerror(-fd));
	return fd;
}

static void api_server_free(struct api_server *server)
{
	shared_lib_close(server->mhd_lib);
	free(server->socket_path);
	free(server);
}

int api_server_start(struct vm_controller *c, const char *socket_path, const struct mote_log *log,
		     struct api_server **out)
{
	struct api_server *server = calloc(1, sizeof(*server));

	*out = NULL;
	if (!server || !(server->socket_path = strdup(socket_path))) {
		free(server);
		return -ENOMEM;
	}
	server->controller = c;
	server->log = *log;
	server->mhd_lib = api_load_mhd(&server->mhd, log);
	if (!server->mhd_lib) {
		api_server_free(server);
		return -ENOSYS;
	}
	int fd = api_socket_bind(server, socket_path);
	if (fd < 0) {
		api_server_free(server);
		return fd;
	}
	/* One internal thread answers every connection in turn, so commands never run
	 * concurrently and a slow client cannot hold the others up. */
	server->daemon = server->mhd.start_daemon(
	    MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL, api_access, server,
	    MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, MHD_OPTION_NOTIFY_COMPLETED, api_completed,
	    server, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)API_CONNECTION_TIMEOUT_S,
	    MHD_OPTION_EXTERNAL_LOGGER, api_mhd_log, server, MHD_OPTION_END);
	if (!server->daemon) {
		log_error(&server->log, "api socket %s: libmicrohttpd did not start", socket_path);
		unix_listener_remove(server->socket_path, &server->socket_id);
		close(fd);
		api_server_free(server);
		return -EIO;
	}
	log_debug(&server->log, "api: serving on %s", socket_path);
	*out = server;
	return 0;
}

void api_server_stop(struct api_server *server)
{
	if (!server)
		return;
	/* The path first: the daemon closes the listening socket (unix_listener.h). */
	unix_listener_remove(server->socket_path, &server->socket_id);
	server->mhd.stop_daemon(server->daemon);
	api_server_free(server);
}
