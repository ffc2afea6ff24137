/* A listening Unix stream socket at a path, as the control API and the vsock device
 * each serve one: a socket a killed mote left behind is replaced, anything else at the
 * path is refused, and at the end the path is removed only while it still names the
 * socket bound here (another process may have replaced it meanwhile). */
#ifndef MOTE_UNIX_LISTENER_H
#define MOTE_UNIX_LISTENER_H

#include <sys/types.h>

/* Which socket file was bound, so that only it is removed. */
struct unix_listener_id {
	dev_t dev;
	ino_t ino;
};

/* Binds path and listens with backlog; flags adds SOCK_NONBLOCK to a close-on-exec
 * stream socket. A socket at path that no process accepts on is stale and replaced.
 * Processes opening paths in one directory at once take turns (an flock on the
 * directory), so of several opening the same path exactly one wins. Where the
 * directory cannot be read or locked (no read permission, a file system without
 * flock), a stale socket cannot be told from one another process has bound and is
 * about to listen on, so it is not replaced: -ESTALE. The listening fd and *id, or
 * -ENAMETOOLONG (too long for sockaddr_un), -EEXIST (path is not a socket),
 * -EADDRINUSE (a process serves it), -EBUSY (a process kept the directory locked for
 * 2 s), -ESTALE, another negative errno. */
int unix_listener_open(const char *path, int flags, int backlog, struct unix_listener_id *id);

/* What an error of unix_listener_open means, for a message about the path. */
const char *unix_listener_strerror(int err);

/* Unlinks path if it still names the socket id. Call it before closing the listening
 * fd: once the socket is closed its inode number may be given to a new file. */
void unix_listener_remove(const char *path, const struct unix_listener_id *id);

#endif
