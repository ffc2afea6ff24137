/* The control API: HTTP/1.1 with JSON bodies on a Unix socket, shaped like Firecracker's
 * (its firecracker-api.yaml: paths, field names, 204 for a done PUT or PATCH, errors as
 * {"fault_message": "..."}). Every request becomes a vm_command for the controller
 * (vm_command.h); libhttp-parser reads the HTTP (api_http.h).
 *
 *   GET   /                          {"id", "state", "vmm_version", "app_name"}
 *   GET   /machine-config            {"vcpu_count", "mem_size_mib", "smt", "track_dirty_pages"}
 *   GET   /vm/config                 FullVmConfiguration: boot-source, drives, machine-config,
 *                                    network-interfaces, vsock
 *   GET   /version                   {"firecracker_version"}, mote's version in it
 *   PUT   /machine-config            PATCH /machine-config (only the fields given)
 *   PUT   /boot-source               PUT /drives/{drive_id}   PUT /network-interfaces/{iface_id}
 *   PUT   /vsock                     PUT /actions {"action_type": InstanceStart|SendCtrlAltDel}
 *   PATCH /vm {"state": "Paused"|"Resumed"}
 *   PUT   /snapshot/create           PUT /snapshot/load
 *
 * Statuses: 200 (GET), 204 (done), 400 (malformed JSON, wrong type, unknown field or
 * value, a command the VM's state refuses, a command that failed; malformed HTTP or a
 * protocol upgrade, api_http.h), 404 (no such path), 405 (method not allowed there), 413
 * (body over API_BODY_MAX), 414 (path over API_HTTP_URL_MAX), 500 (out of memory).
 * A refused request changes nothing. */
#ifndef MOTE_API_SERVER_H
#define MOTE_API_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "vm_command.h"

#define API_BODY_MAX (64 * 1024)
/* Connections served at once. Further clients wait in the listen backlog until one
 * closes, or until one that waits between requests has waited for a second: that one
 * is closed to let the next in (api_server.c). */
#define API_CONNECTIONS_MAX 16

struct api_reply {
	unsigned status;
	char *body;	   /* JSON, malloc'd; NULL for none */
	const char *allow; /* 405: the methods the path takes */
};

/* Runs one request on the controller and fills reply (free reply->body). method and
 * path as in the request line; body of len bytes, not NUL-terminated (NULL: none). */
void api_handle(struct vm_controller *c, const char *method, const char *path, const char *body,
		size_t len, struct api_reply *reply);

struct api_server;

/* Fills the whole of reply: status and a {"fault_message": message} body (500 and none
 * when out of memory). */
void api_reply_fault(struct api_reply *reply, unsigned status, const char *message);

/* Binds socket_path (a stale socket there is replaced; a path that is not a socket, or a
 * socket some process serves, is refused) and answers requests on a thread of its own
 * until api_server_stop(). Errors: -EEXIST not a socket, -EADDRINUSE served by another
 * process, -ENAMETOOLONG, others from eventfd(), socket(), bind() or pthread_create();
 * each logged. */
int api_server_start(struct vm_controller *c, const char *socket_path, const struct mote_log *log,
		     struct api_server **out);

/* Closes connections that neither send nor read for timeout_ns (60 s by default). The
 * server thread reads it when it next wakes: set it before clients connect. */
void api_server_set_idle_timeout(struct api_server *server, int64_t timeout_ns);

/* Answers 408 and closes connections whose request has not arrived whole timeout_ns
 * after its first byte (10 s by default). Read as api_server_set_idle_timeout()'s is. */
void api_server_set_request_timeout(struct api_server *server, int64_t timeout_ns);

/* Stops answering and removes the socket; server may be NULL. */
void api_server_stop(struct api_server *server);

#endif
