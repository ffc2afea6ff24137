/* The host side of virtio-vsock: AF_UNIX stream sockets and Firecracker's hybrid
 * vsock protocol (design.md "vsock"). A host program connects to the device's socket
 * at uds_path and writes "CONNECT <port>\n" to reach guest port <port>; a guest
 * connecting to the host (CID 2) on port P reaches whoever listens on
 * "<uds_path>_<P>". Every socket here is non-blocking, so that nothing the host or
 * the guest does can stall the event thread. */
#ifndef MOTE_VIRTIO_VSOCK_UDS_H
#define MOTE_VIRTIO_VSOCK_UDS_H

#include <stddef.h>
#include <stdint.h>

#include "../vmm/unix_listener.h"

/* The longest CONNECT line taken, "\n" included; Firecracker reads at most 32 bytes. */
#define VSOCK_UDS_LINE_MAX 32

/* Whether "<uds_path>_<port>" fits a sockaddr_un for every 32-bit port. */
int vsock_uds_path_check(const char *uds_path);

/* Creates, binds and listens on uds_path, replacing a stale socket there
 * (unix_listener.h): the listening fd and *id, or a negative errno (-EEXIST when the
 * path is not a socket, -EADDRINUSE when a process serves it). */
int vsock_uds_listen(const char *uds_path, struct unix_listener_id *id);

/* Accepts one pending host client: its fd, -EAGAIN when there is none, or another
 * negative errno. */
int vsock_uds_accept(int listen_fd);

/* Connects to "<uds_path>_<port>" without waiting: the connected fd, or a negative
 * errno (-ENOENT or -ECONNREFUSED when nobody listens, -EAGAIN when the listener's
 * backlog is full). */
int vsock_uds_connect_port(const char *uds_path, uint32_t port);

/* Parses one CONNECT line of len bytes ending in "\n": "CONNECT" in any case, blanks,
 * a decimal port that fits 32 bits, optional trailing blanks. 0 and *port, or
 * -EINVAL. */
int vsock_uds_parse_connect(const char *line, size_t len, uint32_t *port);

/* Takes what fd has of a CONNECT line into line[*len, VSOCK_UDS_LINE_MAX) without
 * consuming a byte past its "\n" (those are the start of the stream). 1 and *port once
 * the line is complete; 0 while it is not; -EINVAL for a bad line, -EMSGSIZE for one
 * too long, -ECONNRESET when the client left first, other negative errnos. */
int vsock_uds_read_connect(int fd, char *line, size_t *len, uint32_t *port);

/* Writes all of buf or fails: 0, or a negative errno (-EAGAIN for a short write). No
 * SIGPIPE when the peer is gone. */
int vsock_uds_send_all(int fd, const void *buf, size_t len);

#endif
