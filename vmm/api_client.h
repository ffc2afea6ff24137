/* A client of a running mote's control API (api_server.h), over libcurl's Unix-socket
 * transport: what `mote pause`, `resume`, `snapshot` and `restore --api-sock` send.
 * libcurl is loaded when a request is made, not when the process starts. */
#ifndef MOTE_API_CLIENT_H
#define MOTE_API_CLIENT_H

#include <stddef.h>

struct api_client_reply {
	long status;	 /* the HTTP status */
	char *body;	 /* NUL-terminated, malloc'd; may be empty */
	char fault[512]; /* the reply's fault_message when it has one, else "" */
};

/* Sends "METHOD path" with an optional JSON body (NULL: none) to the mote serving
 * socket_path and waits for its reply. 0 when a reply came, whatever its status
 * (free reply->body); -ECONNREFUSED when nothing answers on the socket (missing, stale,
 * not HTTP), -ENOSYS when libcurl cannot be loaded, other negative errnos for a failed
 * exchange; error says which. */
int api_client_request(const char *socket_path, const char *method, const char *path,
		       const char *body, struct api_client_reply *reply, char *error,
		       size_t error_len);

void api_client_reply_free(struct api_client_reply *reply);

#endif
