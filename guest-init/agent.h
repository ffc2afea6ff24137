/* mote-agent: the in-guest server of guest-init/AGENT_PROTOCOL.md. It runs commands
 * (argv, env, cwd; stdout/stderr streamed, stdin forwarded, signals) and moves files
 * in and out of the guest for a host client (vmm/agent_client.h).
 *
 * It is compiled into mote-init, which forks it when the kernel command line has
 * `mote.agent[=PORT]`. The core is transport-independent: agent_serve() runs one
 * connection on any connected stream fd, agent_accept_loop() serves a listening
 * socket, one child process per connection; only agent_listen_vsock() knows vsock.
 * The unit tests run the same code on the host over AF_UNIX sockets. */
#ifndef MOTE_AGENT_H
#define MOTE_AGENT_H

#include <stdbool.h>
#include <stdint.h>

struct agent_config {
	/* Called (in the connection's process) once a POWER_OFF request has been
	 * acknowledged and the acknowledgement sent. NULL: POWER_OFF answers ENOTSUP. */
	void (*power_off)(void *opaque);
	void *opaque;
	bool quiet; /* no messages on stderr from the listener */
};

/* Serves one connection until the client closes it or breaks the protocol beyond
 * repair: sends HELLO, then answers requests, many at once (one child process per
 * command). Takes ownership of fd and closes it; on return every command it started
 * has been killed and reaped and every unfinished upload removed. Sets SIGPIPE to
 * SIG_IGN in the calling process (commands get the default back) and opens
 * /dev/null on whichever of fds 0-2 are closed. Returns 0 when the client closed the
 * connection, or a negative errno: -EPROTO for a broken stream, -ECONNRESET and the
 * like when the socket failed, -ENOMEM. */
int agent_serve(int fd, const struct agent_config *config);

/* Accepts connections on listen_fd (a listening stream socket) forever, each served
 * by agent_serve() in a child process of its own, so a failing connection never
 * disturbs another. Beyond AGENT_MAX_CONNECTIONS a connection gets an ERROR frame
 * (EBUSY) instead of HELLO and is closed. Returns a negative errno only when accept
 * fails for good. */
int agent_accept_loop(int listen_fd, const struct agent_config *config);

/* A listening AF_VSOCK stream socket on port (any CID), close-on-exec; -errno. */
int agent_listen_vsock(uint32_t port);

/* agent_main's status when it could not listen at all (no vsock transport): starting
 * it again would fail again, so guest-init does not. */
#define AGENT_EXIT_CANNOT_LISTEN 3

/* The agent process's main: listens on vsock port (retrying for a few seconds while
 * the vsock device is not there yet) and serves it. Returns an exit status:
 * AGENT_EXIT_CANNOT_LISTEN, or 1 when serving failed. */
int agent_main(uint32_t port, const struct agent_config *config);

#endif
