/* libmote's client for the in-guest agent (guest-init/AGENT_PROTOCOL.md): run commands
 * in a guest with their output streamed back and stdin forwarded, copy files in and
 * out, power the guest off. An orchestrator embeds this; `mote exec` and `mote cp`
 * are thin front-ends over it.
 *
 * It reaches the agent through the VM's vsock Unix socket with Firecracker's
 * host-initiated protocol (connect to the socket, send "CONNECT <port>\n", read
 * "OK <n>\n"), or over any stream fd already connected to an agent
 * (mote_agent_attach: a socketpair in tests, an AF_VSOCK socket with vhost-vsock).
 *
 * Contract, as for the rest of libmote: nothing here exits or aborts; failures return
 * a negative errno and describe themselves once through the log callback. The guest is
 * not trusted: every frame it sends is checked, and a malformed one fails the call
 * with -EPROTO. Failures come in two kinds:
 *   - the agent answered with an error (e.g. -ENOENT for a missing file): the
 *     connection stays usable, mote_agent_broken() is false;
 *   - the connection failed (lost, timed out, protocol violation): it is unusable
 *     and mote_agent_broken() is true; connect again.
 * One call at a time per connection (no internal locking). For commands in parallel,
 * open several connections: the agent serves many at once. */
#ifndef MOTE_AGENT_CLIENT_H
#define MOTE_AGENT_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mote.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MOTE_AGENT_DEFAULT_PORT 52

struct mote_agent;

struct mote_agent_options {
	const char *uds_path; /* the VM's vsock Unix socket; required by mote_agent_connect */
	uint32_t port;	      /* the agent's vsock port in the guest (default 52) */
	/* How long to keep trying while nothing answers yet (no socket, the VMM closing
	 * the connection because the guest does not listen yet, no HELLO): the guest may
	 * still be booting. 0: one attempt. Each attempt may take up to 5 s. */
	int wait_ms;
	/* Upload, download and power-off fail with -ETIMEDOUT (connection broken) when
	 * the agent makes no progress for this long. 0: wait as long as it takes. Does not
	 * apply to commands, which may be silent for as long as they like (see
	 * mote_agent_exec.timeout_ms). Default 30 s. */
	int io_timeout_ms;
	/* A download that would write more than this many bytes (announced or sent) is
	 * cancelled and fails with -EFBIG, before anything past the limit is written: the
	 * guest says how big a file is and sends what it likes. 0: no limit. */
	uint64_t max_download_bytes;
	/* An upload or download that has not ended this long after it began fails with
	 * -ETIMEDOUT (connection broken), however steadily the agent answers: a guest can
	 * send a file slowly for as long as it likes. 0: no limit. */
	int transfer_timeout_ms;
	mote_log_fn log;
	void *log_opaque;
};

/* Defaults: port 52, no retrying, 30 s I/O timeout, no log. */
MOTE_API void mote_agent_options_init(struct mote_agent_options *options);

/* What the agent said in its HELLO frame. */
struct mote_agent_info {
	uint32_t version;     /* protocol version (3) */
	uint32_t max_payload; /* largest frame payload it accepts */
	uint64_t uptime_ms;   /* the guest's uptime (CLOCK_BOOTTIME) when it answered */
	char hostname[65];    /* printable characters only */
};

/* Connects to the agent of the VM whose vsock socket is options->uds_path and waits
 * for its HELLO, retrying for up to options->wait_ms. Errors:
 *   -ETIMEDOUT  nothing answered in time (the message says what the last try saw);
 *   -EPROTO     the VMM or the agent answered something else than the protocol
 *               (a line other than "OK <n>", a first frame other than HELLO);
 *   -EPROTONOSUPPORT  the agent speaks another protocol version;
 *   -EBUSY      the agent refused the connection (too many connections);
 *   -EINVAL     bad options (no path, a path too long for a Unix socket);
 *   -EACCES and others: the socket cannot be used at all. */
MOTE_API int mote_agent_connect(const struct mote_agent_options *options,
				struct mote_agent **agent_out);

/* Uses fd, a stream already connected to an agent, and waits for its HELLO (up to
 * options->wait_ms, at least 5 s). Takes ownership of fd (closed on failure too).
 * uds_path and port are not used. Errors as for mote_agent_connect. */
MOTE_API int mote_agent_attach(int fd, const struct mote_agent_options *options,
			       struct mote_agent **agent_out);

MOTE_API const struct mote_agent_info *mote_agent_info(const struct mote_agent *agent);

/* True once the connection failed; every call then returns -ENOTCONN. */
MOTE_API bool mote_agent_broken(const struct mote_agent *agent);

/* Closes the connection; the agent kills the commands still running on it and drops
 * unfinished uploads. agent may be NULL. */
MOTE_API void mote_agent_close(struct mote_agent *agent);

/* Receives a command's output as it comes. Returning a negative errno stops the
 * command (SIGKILL); mote_agent_exec() then returns that value once it has ended. */
typedef int (*mote_agent_output_fn)(void *opaque, const void *data, size_t len);

struct mote_agent_exec {
	const char *const *argv; /* NULL-terminated, at least the program; required */
	/* NULL-terminated "NAME=VALUE" entries, or NULL. They are added to the agent's
	 * environment (replacing entries of the same name), or are the whole environment
	 * with env_replace. Without PATH, programs are looked up in the agent's default
	 * PATH (/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin). */
	const char *const *env;
	bool env_replace;
	const char *cwd; /* working directory in the guest; NULL: / */
	/* Forwarded as the command's stdin until it reads end-of-file (or fails), then
	 * the command sees EOF. -1: EOF at once. Not closed. */
	int stdin_fd;
	/* A signalfd(2) whose signals are forwarded to the command's process group, or -1.
	 * Lets a front-end pass on SIGINT/SIGTERM/SIGHUP without a signal handler. */
	int signal_fd;
	/* After this long the command's process group gets SIGKILL and the result says
	 * timed_out. 0: no limit. */
	int timeout_ms;
	/* After a SIGTERM, SIGHUP or SIGQUIT forwarded from signal_fd, or a second SIGINT,
	 * the command has this long to end; then the connection is given up, which makes
	 * the agent kill its process group, and the call returns -ECANCELED with
	 * result->code the signal. 0: 10 s. */
	int stop_grace_ms;
	/* Run the command on a new pseudo-terminal in the guest, as `ssh -t` does: its
	 * stdin, stdout and stderr are the terminal, which is its controlling terminal. All
	 * its output comes through on_stdout, as the terminal's line discipline made it
	 * ("\n" becomes "\r\n"); stdin goes through it too, so a ^C byte is SIGINT for
	 * the foreground job and input is echoed unless the command turns echo off. The
	 * end of stdin_fd is sent as the terminal's end-of-file character (^D), twice
	 * after a partial line (where one only ends the line). */
	bool tty;
	uint16_t tty_rows, tty_cols; /* the terminal's size; 0: 24 rows, 80 columns */
	/* With tty: a terminal whose size the guest's follows (the user's). Each SIGWINCH
	 * read from signal_fd resizes the guest's terminal to this one's (TIOCGWINSZ).
	 * With tty, SIGWINCH is never forwarded as a signal; without this (-1) it is
	 * dropped. */
	int tty_size_fd;
	/* With tty: resize requests from the embedder (a pipe, say), each 4 bytes: the
	 * rows, then the columns, as uint16_t in this host's byte order (0: the default).
	 * Read until end of file (a partial request then is dropped); not closed. -1:
	 * none. */
	int tty_resize_fd;
	/* Called from mote_agent_exec's own thread, synchronously: one that blocks (a
	 * full pipe) holds up everything else, signals and timeout_ms included. */
	mote_agent_output_fn on_stdout; /* NULL: discarded */
	mote_agent_output_fn on_stderr; /* NULL: discarded */
	void *opaque;
};

/* No stdin, no signals, no timeout, no terminal, output discarded, argv NULL. Call it
 * before filling one in: fields are added as libmote grows (and fds must be -1, not
 * 0, to mean none). */
MOTE_API void mote_agent_exec_init(struct mote_agent_exec *exec);

enum mote_agent_outcome {
	MOTE_AGENT_EXITED,	/* code: its exit status */
	MOTE_AGENT_SIGNALED,	/* code: the signal that killed it */
	MOTE_AGENT_NOT_STARTED, /* code: errno (ENOENT: no such program); see message */
};

struct mote_agent_result {
	enum mote_agent_outcome outcome;
	int code;
	bool timed_out;	   /* timeout_ms passed and the command was killed */
	uint32_t pid;	   /* its pid in the guest; 0 if it never started */
	char message[257]; /* MOTE_AGENT_NOT_STARTED: the agent's reason, e.g. "x: No such
			    * file or directory" (printable characters only) */
};

/* Runs a command in the guest and blocks until it has ended, streaming its output to
 * the callbacks and exec->stdin_fd to its stdin. Returns 0 with *result filled
 * whenever the command ran or could not start (a missing program is outcome
 * MOTE_AGENT_NOT_STARTED, not an error); a negative errno otherwise: a callback's
 * error, -E2BIG (arguments and environment over the agent's 256 KiB frame), an
 * error the agent answered the request with, or a broken connection; -ECANCELED when
 * a signal from exec->signal_fd could not be sent within 5 s because the agent took no
 * data (a guest that stopped serving), or the command did not end within
 * exec->stop_grace_ms of a request to stop: the connection is then given up, which ends
 * the command, and result->code holds the signal. Stdin is kept within the agent's window
 * (512 KiB not yet taken by the command), so a command that leaves its stdin unread
 * does not hold signals back.
 * result->timed_out is set whenever timeout_ms passed, even if an error followed. */
MOTE_API int mote_agent_exec(struct mote_agent *agent, const struct mote_agent_exec *exec,
			     struct mote_agent_result *result);

/* Copies everything readable from fd into guest_path with the given permission bits
 * (07777), streamed in 64 KiB frames. The agent writes a temporary file next to the
 * target and renames it over the target once complete, so the target is never half
 * written. Errors: what the agent answered (-ENOENT: no such directory, -EISDIR,
 * -EACCES, -ENOSPC, ...; the upload is dropped); -errno of reading fd (the upload
 * is cancelled, nothing is written); a broken connection. */
MOTE_API int mote_agent_upload(struct mote_agent *agent, int fd, const char *guest_path,
			       uint32_t mode);

/* Copies the regular file guest_path into fd (written at its current offset) and sets
 * *mode (may be NULL) to its permission bits. Errors: what the agent answered
 * (-ENOENT, -EISDIR, -EINVAL for a file that is not regular, -EACCES, ...); -errno of
 * writing fd (the download is cancelled); a broken connection. On an error fd may
 * hold part of the file. */
MOTE_API int mote_agent_download(struct mote_agent *agent, const char *guest_path, int fd,
				 uint32_t *mode);

/* Asks the guest to power off (sync, then the VM ends) and returns once the agent has
 * acknowledged it; the connection closes when the guest goes. */
MOTE_API int mote_agent_power_off(struct mote_agent *agent);

#ifdef __cplusplus
}
#endif

#endif
