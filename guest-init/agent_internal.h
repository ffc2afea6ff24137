/* What the agent's modules share: one connection's state (agent_conn.c), the
 * requests in progress on it (commands: agent_exec.c; files: agent_files.c), and the
 * bounded output buffer every answer goes through.
 *
 * Memory is bounded per connection: input holds at most one frame, output at most
 * OUT_CAP bytes, each command's queued stdin at most STDIN_CAP. A producer (a command's
 * stdout, a download) only reads when a whole chunk fits next to OUT_RESERVE, and
 * frames are only parsed while OUT_RESERVE is free, so the short answers a frame
 * causes always fit and a slow client stops the reading instead of growing a queue. */
#ifndef MOTE_AGENT_INTERNAL_H
#define MOTE_AGENT_INTERNAL_H

#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent.h"
#include "agent_protocol.h"

#define OUT_RESERVE 2048u
#define OUT_CAP (4u * (AGENT_HEADER_SIZE + AGENT_CHUNK_MAX) + OUT_RESERVE)
#define IN_CAP (AGENT_HEADER_SIZE + AGENT_MAX_PAYLOAD)
#define STDIN_CAP AGENT_STDIN_WINDOW

enum request_kind {
	REQUEST_FREE,
	REQUEST_EXEC,
	REQUEST_UPLOAD,
	REQUEST_DOWNLOAD,
};

struct exec_state {
	pid_t pid;
	int pidfd;  /* readable once the command exits; -1 without pidfd_open */
	int in_fd;  /* our end of its stdin; -1 once closed */
	int out_fd; /* our ends of its stdout/stderr; -1 once drained */
	int err_fd;
	bool tty; /* on a pseudo-terminal: in_fd and out_fd are its master, err_fd -1 */
	/* The terminal's slave side, held by the agent until the command exits: so the
	 * master never reads EIO (nor hangs the terminal up when closed) while the command
	 * runs, whatever descriptors it closed or reopens. -1 otherwise. */
	int tty_slave_fd;
	/* End-of-file characters still to write once the queued stdin is written: 1, or 2
	 * after a partial line (the first only ends the line, RFC-less but POSIX
	 * "Canonical Mode Input Processing"). */
	unsigned tty_eof_left;
	bool tty_mid_line; /* stdin written to the terminal since its last line end */
	bool exited;
	int status; /* waitpid status, once exited */
	bool stdin_eof;
	uint8_t *stdin_buf; /* queued stdin not yet taken by the command */
	size_t stdin_len;
	/* STDIN bytes accepted from the client, and those reported taken: what left the
	 * queue (written or dropped) and is not reported yet is received - stdin_len -
	 * reported, so no path that drops stdin has to count it. */
	uint64_t stdin_received;
	uint64_t stdin_reported;
	size_t drain_left; /* output still forwarded after the exit (DRAIN_AFTER_EXIT) */
};

struct upload_state {
	int fd;	    /* the temporary file; -1 after a failure */
	int dir_fd; /* its directory, for the rename and the fsync */
	char *tmp_name;
	char *final_name;
	char *path; /* as the client named it, for messages */
	uint32_t mode;
	uint64_t bytes;
	bool failed; /* an ERROR was sent: drop data until UPLOAD_END */
};

struct download_state {
	int fd;
	uint64_t sent;
};

struct request {
	uint32_t id;
	enum request_kind kind;
	union {
		struct exec_state exec;
		struct upload_state upload;
		struct download_state download;
	};
};

/* Which request and which of its fds a pollfd entry stands for. */
enum poll_role {
	ROLE_SOCKET,
	ROLE_STDIN,
	ROLE_STDOUT,
	ROLE_STDERR,
	ROLE_PIDFD,
};

struct poll_owner {
	struct request *request;
	enum poll_role role;
};

#define POLL_MAX (1 + 4 * AGENT_MAX_REQUESTS)

struct agent_conn {
	int fd;
	const struct agent_config *config;
	uint8_t *in; /* received bytes not yet parsed */
	size_t in_len;
	uint8_t *out; /* frames not yet sent: out[out_start..out_end) */
	size_t out_start;
	size_t out_end;
	bool closing;		/* fatal protocol error: flush what is queued, then stop */
	bool dead;		/* the socket is gone: stop now */
	int error;		/* why, as a negative errno; 0 for a normal close */
	bool power_off_pending; /* call config->power_off once out is flushed */
	struct request requests[AGENT_MAX_REQUESTS];
};

/* What a request handler did with a frame. */
enum frame_result {
	FRAME_DONE,    /* consumed */
	FRAME_BLOCKED, /* cannot be taken yet (stdin queue full): keep it, retry later */
};

/* agent_conn.c */
size_t conn_out_free(const struct agent_conn *c);
bool conn_has_chunk_room(const struct agent_conn *c);
/* Queues one frame; the payload must fit (the reserve rules guarantee it). */
void conn_send(struct agent_conn *c, uint16_t type, uint32_t id, const void *payload, size_t len);
void conn_send_ok(struct agent_conn *c, uint32_t id, uint64_t size, uint32_t mode);
void conn_send_error(struct agent_conn *c, uint32_t id, uint16_t request_type, int err,
		     const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Reads at most one chunk from fd straight into a frame of the given type. Returns the
 * bytes read, 0 at end of file (no frame), or -errno (-EAGAIN: nothing there). */
ssize_t conn_send_from_fd(struct agent_conn *c, uint16_t type, uint32_t id, int fd);
struct request *conn_find(struct agent_conn *c, uint32_t id, enum request_kind kind);
/* A free slot for a new request, or NULL after answering EEXIST / EBUSY / EINVAL. */
struct request *conn_new_request(struct agent_conn *c, const struct agent_header *h,
				 enum request_kind kind);
void conn_free_request(struct request *r);
void close_fd(int *fd);

/* agent_exec.c */
void exec_start(struct agent_conn *c, const struct agent_header *h, const uint8_t *payload);
enum frame_result exec_stdin(struct agent_conn *c, const struct agent_header *h,
			     const uint8_t *payload);
void exec_signal(struct agent_conn *c, const struct agent_header *h, const uint8_t *payload);
void exec_resize(struct agent_conn *c, const struct agent_header *h, const uint8_t *payload);
/* Adds the fds of a running command worth polling now. */
void exec_poll_add(struct agent_conn *c, struct request *r, struct pollfd *fds,
		   struct poll_owner *owners, size_t *n);
void exec_poll_event(struct agent_conn *c, struct request *r, enum poll_role role);
/* What a request still waits for that poll cannot see. */
enum progress_wait {
	WAIT_EVENTS = 0, /* only its fds: nothing to do before they are ready */
	WAIT_ROOM = 1,	 /* output room: go on as soon as the buffer has drained */
	WAIT_TIMER = 2,	 /* a command without a pidfd: look at it again soon */
};

/* Reaps exited commands, drains what they left in their pipes, sends EXIT. */
enum progress_wait exec_progress(struct agent_conn *c, struct request *r);
/* Kills the command's process group and reaps it. */
void exec_abort(struct request *r);

/* agent_files.c */
void upload_begin(struct agent_conn *c, const struct agent_header *h, const uint8_t *payload);
void upload_data(struct agent_conn *c, const struct agent_header *h, const uint8_t *payload);
void upload_end(struct agent_conn *c, const struct agent_header *h, const uint8_t *payload);
void upload_abort(struct request *r);
void download_begin(struct agent_conn *c, const struct agent_header *h, const uint8_t *payload);
/* Sends the next chunk if there is room; WAIT_ROOM until the download has ended. */
enum progress_wait download_progress(struct agent_conn *c, struct request *r);
void download_abort(struct request *r);
/* CANCEL of an upload (nothing written) or a download (no more DATA): answers OK. */
void file_cancel(struct agent_conn *c, const struct agent_header *h);

#endif
