/* write(2) to a pipe or socket whose reader may be gone, without SIGPIPE.
 *
 * libmote writes to file descriptors its embedder hands it (the console, a download's
 * destination). When such a descriptor is a pipe whose reader has left, write() raises
 * SIGPIPE, whose default action ends the whole process: the library must not rely on its
 * embedder ignoring it (the mote command does; another program may not), and changing
 * the signal's disposition would be process-wide state. So the signal is blocked in the
 * writing thread for the one call, and one it raised is taken back before it is
 * unblocked: the caller sees EPIPE, as with MSG_NOSIGNAL on a socket. */
#ifndef MOTE_WRITE_QUIET_H
#define MOTE_WRITE_QUIET_H

#include <stddef.h>
#include <sys/types.h>

/* As write(2), errno included, with no SIGPIPE. */
ssize_t write_quiet(int fd, const void *buf, size_t len);

#endif
