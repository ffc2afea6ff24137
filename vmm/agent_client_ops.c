/* The agent client's requests (guest-init/AGENT_PROTOCOL.md): commands with their
 * streams, uploads, downloads and power-off, over the connection of agent_client.c. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "agent_client_internal.h"
#include "write_quiet.h"

/* A command that got SIGKILL (timeout, failing callback) and still sends no EXIT after
 * this long has a broken agent behind it. */
#define KILL_GRACE_MS 10000
/* Room kept free for control frames (STDIN_EOF, SIGNAL) next to a stdin chunk. */
#define CONTROL_ROOM 256
/* How long a forwarded signal may wait in the output queue: an agent that has stopped
 * reading (a guest that stopped serving) would never see it. */
#define SIGNAL_DELIVERY_MS 5000
/* mote_agent_exec.stop_grace_ms's default. */
#define STOP_GRACE_MS 10000
/* Warnings the agent may cause in one call before the rest go unlogged. */
#define AGENT_WARNINGS_MAX 8

void mote_agent_exec_init(struct mote_agent_exec *exec)
{
	memset(exec, 0, sizeof(*exec));
	exec->stdin_fd = -1;
	exec->signal_fd = -1;
	exec->tty_size_fd = -1;
	exec->tty_resize_fd = -1;
}

struct exec_run {
	struct mote_agent *a;
	const struct mote_agent_exec *ex;
	struct mote_agent_result *result;
	uint32_t id;
	bool stdin_open;
	/* Stdin sent and not yet reported taken by the agent: kept within
	 * AGENT_STDIN_WINDOW, so the agent never stops reading this connection for it and a
	 * SIGNAL sent after it is taken at once. */
	uint64_t stdin_in_flight;
	bool done;
	int error;	    /* the call's error, once it has one */
	int callback_error; /* a callback failed: the command is being killed */
	int64_t deadline;   /* timeout_ms, or -1 */
	int64_t kill_deadline;
	/* A forwarded signal not yet sent: when its frame is on its way (out_sent reaches
	 * signal_sent_at) and when to give up on it, or -1. */
	int last_signal;
	uint64_t signal_sent_at;
	int64_t signal_deadline;
	/* A request to stop (exec->stop_grace_ms): when the connection is given up, or -1;
	 * and the SIGINTs forwarded so far (the second is one). */
	int64_t stop_deadline;
	unsigned interrupts;
	unsigned warnings; /* logged for the agent's ERROR frames that answer no request */
	/* tty_resize_fd: still read, and the part of a request read so far. */
	bool resize_open;
	uint8_t resize[4];
	size_t resize_len;
};

/* Encodes the EXEC frame straight into the (empty) output queue. */
static int queue_exec(struct exec_run *run)
{
	const struct mote_agent_exec *ex = run->ex;
	struct mote_agent *a = run->a;
	struct agent_writer w;
	uint32_t argc = 0, envc = 0;

	int ret = agent_flush_wait(a, agent_deadline(a->io_timeout_ms));
	if (ret)
		return ret;
	while (ex->argv[argc])
		argc++;
	while (ex->env && ex->env[envc])
		envc++;
	agent_writer_init(&w, a->out, AGENT_HEADER_SIZE + AGENT_MAX_PAYLOAD);
	size_t at = agent_frame_open(&w, AGENT_EXEC, run->id);
	agent_put_u32(&w, (ex->env_replace ? AGENT_EXEC_ENV_REPLACE : 0) |
			      (ex->tty ? AGENT_EXEC_TTY : 0));
	agent_put_u32(&w, argc);
	agent_put_u32(&w, envc);
	agent_put_string(&w, ex->cwd ? ex->cwd : "");
	for (uint32_t i = 0; i < argc; i++)
		agent_put_string(&w, ex->argv[i]);
	for (uint32_t i = 0; i < envc; i++)
		agent_put_string(&w, ex->env[i]);
	if (ex->tty) {
		agent_put_u16(&w, ex->tty_rows);
		agent_put_u16(&w, ex->tty_cols);
	}
	agent_frame_close(&w, at);
	if (w.overflow || argc > AGENT_MAX_ARGS || envc > AGENT_MAX_ENV) {
		log_error(&a->log,
			  "exec: arguments and environment exceed what one request "
			  "holds (%u KiB, %u entries each)",
			  AGENT_MAX_PAYLOAD / 1024, AGENT_MAX_ARGS);
		return -E2BIG;
	}
	a->out_start = 0;
	a->out_end = w.len;
	return 0;
}

static int send_signal(struct exec_run *run, int sig)
{
	uint8_t payload[4];

	agent_le32_put(payload, (uint32_t)sig);
	return agent_queue(run->a, AGENT_SIGNAL, run->id, payload, sizeof(payload),
			   agent_deadline(run->a->io_timeout_ms));
}

static void kill_command(struct exec_run *run)
{
	if (run->kill_deadline >= 0)
		return;
	run->kill_deadline = agent_now_ms() + KILL_GRACE_MS;
	run->error = run->error ? run->error : send_signal(run, SIGKILL);
}

static void output(struct exec_run *run, mote_agent_output_fn fn, const struct agent_frame *f)
{
	if (!fn || run->callback_error || f->h.length == 0)
		return;
	int ret = fn(run->ex->opaque, f->payload, f->h.length);
	if (ret < 0) {
		run->callback_error = ret;
		kill_command(run);
	}
}

static void take_exit(struct exec_run *run, const struct agent_frame *f)
{
	struct agent_reader rd;

	agent_reader_init(&rd, f->payload, f->h.length);
	uint32_t kind = agent_get_u32(&rd);
	uint32_t value = agent_get_u32(&rd);
	bool ok =
	    agent_reader_done(&rd) && ((kind == AGENT_EXIT_CODE && value <= 255) ||
				       (kind == AGENT_EXIT_SIGNAL && value >= 1 && value < 128));
	if (!ok) {
		run->error = agent_fail(run->a, -EPROTO, "the agent sent a malformed EXIT");
		return;
	}
	run->result->outcome = kind == AGENT_EXIT_CODE ? MOTE_AGENT_EXITED : MOTE_AGENT_SIGNALED;
	run->result->code = (int)value;
	run->done = true;
}

static void take_exec_failed(struct exec_run *run, const struct agent_frame *f)
{
	struct agent_reader rd;
	const char *text;
	size_t n;

	agent_reader_init(&rd, f->payload, f->h.length);
	uint32_t err = agent_get_u32(&rd);
	agent_get_u32(&rd); /* the stage: the message names it */
	agent_get_string(&rd, &text, &n);
	if (!agent_reader_done(&rd) || n > AGENT_MESSAGE_MAX) {
		run->error = agent_fail(run->a, -EPROTO, "the agent sent a malformed EXEC_FAILED");
		return;
	}
	run->result->outcome = MOTE_AGENT_NOT_STARTED;
	run->result->code = err > 0 && err <= AGENT_ERRNO_MAX ? (int)err : EIO;
	agent_printable(run->result->message, sizeof(run->result->message), text, n);
	run->done = true;
}

static void take_error(struct exec_run *run, const struct agent_frame *f)
{
	char message[AGENT_MESSAGE_MAX + 1];
	uint16_t answered = 0;
	int err = agent_error_frame(run->a, f, &answered, message);

	if (run->a->broken) {
		run->error = err;
	} else if (answered == AGENT_EXEC && (err == -E2BIG || err == -ECANCELED)) {
		/* Errors mote_agent_exec() gives meanings of its own (and `mote exec` exit
		 * codes): no answer of the agent's is one. */
		run->error = agent_fail(run->a, -EPROTO,
					"the agent refused the command with error %d, which it "
					"never gives: %s",
					-err, message);
	} else if (answered == AGENT_EXEC) {
		/* The request itself was refused: no command, no EXIT to wait for. */
		log_error(&run->a->log, "agent: %s", message);
		run->error = err;
	} else if (run->warnings < AGENT_WARNINGS_MAX) {
		log_warn(&run->a->log, "agent: %s%s", message,
			 ++run->warnings == AGENT_WARNINGS_MAX ? " (further warnings not shown)"
							       : "");
	}
}

static void take_frame(struct exec_run *run, const struct agent_frame *f)
{
	if (f->h.id != run->id) {
		if (f->h.id == 0 && f->h.type == AGENT_ERROR)
			run->error = agent_fail(run->a, -EPROTO,
						"the agent reported a protocol "
						"error on the connection");
		return;
	}
	switch (f->h.type) {
	case AGENT_STARTED:
		if (f->h.length != 4) {
			run->error =
			    agent_fail(run->a, -EPROTO, "the agent sent a malformed STARTED");
			return;
		}
		run->result->pid = agent_le32_get(f->payload);
		return;
	case AGENT_STDOUT:
		output(run, run->ex->on_stdout, f);
		return;
	case AGENT_STDERR:
		output(run, run->ex->on_stderr, f);
		return;
	case AGENT_STDIN_TAKEN:
		if (f->h.length != 4 || agent_le32_get(f->payload) > run->stdin_in_flight) {
			run->error =
			    agent_fail(run->a, -EPROTO, "the agent sent a malformed STDIN_TAKEN");
			return;
		}
		run->stdin_in_flight -= agent_le32_get(f->payload);
		return;
	case AGENT_EXIT:
		take_exit(run, f);
		return;
	case AGENT_EXEC_FAILED:
		take_exec_failed(run, f);
		return;
	case AGENT_ERROR:
		take_error(run, f);
		return;
	default:
		run->error = agent_fail(run->a, -EPROTO,
					"the agent sent frame type 0x%x for a command", f->h.type);
	}
}

static void forward_stdin(struct exec_run *run, short revents)
{
	struct mote_agent *a = run->a;
	uint8_t *p = agent_out_tail(a, AGENT_HEADER_SIZE + AGENT_CHUNK_MAX);
	ssize_t n = 0;

	if (!p)
		return;
	if (!(revents & POLLNVAL)) {
		n = read(run->ex->stdin_fd, p + AGENT_HEADER_SIZE, AGENT_CHUNK_MAX);
		if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
			return;
	}
	if (n <= 0) {
		/* End of file, or a stdin that cannot be read (EIO, EBADF): EOF either way. */
		run->stdin_open = false;
		run->error = agent_queue(a, AGENT_STDIN_EOF, run->id, NULL, 0, -1);
		return;
	}
	agent_header_encode(
	    p, &(struct agent_header){.length = (uint32_t)n, .type = AGENT_STDIN, .id = run->id});
	a->out_end += AGENT_HEADER_SIZE + (size_t)n;
	run->stdin_in_flight += (uint64_t)n;
}

static void queue_resize(struct exec_run *run, uint16_t rows, uint16_t cols)
{
	uint8_t payload[4];

	agent_le16_put(payload, rows);
	agent_le16_put(payload + 2, cols);
	run->error = agent_queue(run->a, AGENT_RESIZE, run->id, payload, sizeof(payload),
				 agent_deadline(run->a->io_timeout_ms));
}

/* The user's terminal changed size: so does the command's. */
static void resize_terminal(struct exec_run *run)
{
	struct winsize size;

	if (ioctl(run->ex->tty_size_fd, TIOCGWINSZ, &size) == 0)
		queue_resize(run, size.ws_row, size.ws_col);
}

/* A resize request from tty_resize_fd, whole once its 4 bytes are in. */
static void forward_resize(struct exec_run *run)
{
	ssize_t n = read(run->ex->tty_resize_fd, run->resize + run->resize_len,
			 sizeof(run->resize) - run->resize_len);

	if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
		return;
	if (n <= 0) {
		run->resize_open = false; /* end of file, or an fd that cannot be read */
		return;
	}
	run->resize_len += (size_t)n;
	if (run->resize_len < sizeof(run->resize))
		return;
	uint16_t rows, cols;
	memcpy(&rows, run->resize, sizeof(rows));
	memcpy(&cols, run->resize + sizeof(rows), sizeof(cols));
	run->resize_len = 0;
	queue_resize(run, rows, cols);
}

static void forward_signal(struct exec_run *run)
{
	struct signalfd_siginfo si;
	struct mote_agent *a = run->a;

	if (read(run->ex->signal_fd, &si, sizeof(si)) != (ssize_t)sizeof(si))
		return;
	/* A command on a terminal learns of sizes from the terminal, never from a stray
	 * signal: without a terminal to follow, SIGWINCH means nothing to it. */
	if (si.ssi_signo == SIGWINCH && run->ex->tty) {
		if (run->ex->tty_size_fd >= 0)
			resize_terminal(run);
		return;
	}
	run->error = send_signal(run, (int)si.ssi_signo);
	run->last_signal = (int)si.ssi_signo;
	run->signal_sent_at = a->out_sent + (a->out_end - a->out_start);
	if (run->signal_deadline < 0)
		run->signal_deadline = agent_now_ms() + SIGNAL_DELIVERY_MS;
	/* SIGTERM, SIGHUP, SIGQUIT or a second SIGINT ask us to stop: the command may
	 * handle them, but a command (or a guest) that ignores them must not keep us. */
	bool stop = si.ssi_signo != SIGINT || ++run->interrupts >= 2;
	if (stop && run->stop_deadline < 0)
		run->stop_deadline =
		    agent_now_ms() +
		    (run->ex->stop_grace_ms > 0 ? run->ex->stop_grace_ms : STOP_GRACE_MS);
}

/* A forwarded signal the agent has not taken in time: the connection is given up,
 * which makes the agent kill the command (AGENT_PROTOCOL.md). */
static void check_signal_delivery(struct exec_run *run, int64_t now)
{
	if (run->signal_deadline < 0)
		return;
	if (run->a->out_sent >= run->signal_sent_at) {
		run->signal_deadline = -1;
		return;
	}
	if (now < run->signal_deadline)
		return;
	run->result->code = run->last_signal;
	run->error = agent_fail(run->a, -ECANCELED,
				"the agent took no data for %d s, so signal %d could not be passed "
				"on; the connection is closed, which ends the command",
				SIGNAL_DELIVERY_MS / 1000, run->last_signal);
}

static void check_timers(struct exec_run *run)
{
	int64_t now = agent_now_ms();

	if (run->stop_deadline >= 0 && now >= run->stop_deadline) {
		run->result->code = run->last_signal;
		run->error = agent_fail(run->a, -ECANCELED,
					"the command did not end after signal %d; the connection "
					"is closed, which ends it",
					run->last_signal);
		return;
	}
	if (run->deadline >= 0 && now >= run->deadline && !run->result->timed_out) {
		run->result->timed_out = true;
		kill_command(run);
	}
	if (run->kill_deadline >= 0 && now >= run->kill_deadline)
		run->error =
		    agent_fail(run->a, -ETIMEDOUT, "the command did not end within %d s of SIGKILL",
			       KILL_GRACE_MS / 1000);
	if (!run->error)
		check_signal_delivery(run, now);
}

static int64_t next_timer(const struct exec_run *run)
{
	int64_t t = run->result->timed_out ? -1 : run->deadline;

	if (run->kill_deadline >= 0 && (t < 0 || run->kill_deadline < t))
		t = run->kill_deadline;
	if (run->signal_deadline >= 0 && (t < 0 || run->signal_deadline < t))
		t = run->signal_deadline;
	if (run->stop_deadline >= 0 && (t < 0 || run->stop_deadline < t))
		t = run->stop_deadline;
	return t;
}

/* Handles the complete frames already received. */
static void take_frames(struct exec_run *run)
{
	struct agent_frame f;
	int got;

	while (!run->error && !run->done && (got = agent_take_frame(run->a, &f)) != 0) {
		if (got < 0)
			run->error = got;
		else
			take_frame(run, &f);
	}
}

static void exec_step(struct exec_run *run)
{
	struct mote_agent *a = run->a;
	struct pollfd fds[4];
	int stdin_at = -1, signal_at = -1, resize_at = -1;
	nfds_t n = 1;

	/* Frames that came with earlier reads (with HELLO, say) must not wait for poll. */
	take_frames(run);
	if (run->error || run->done)
		return;
	fds[0] = (struct pollfd){.fd = a->fd, .events = POLLIN};
	if (a->out_end > a->out_start)
		fds[0].events |= POLLOUT;
	/* Backpressure: stdin is read only while a chunk fits in the output queue and in
	 * the agent's window. */
	if (run->stdin_open && run->stdin_in_flight + AGENT_CHUNK_MAX <= AGENT_STDIN_WINDOW &&
	    agent_out_free(a) >= AGENT_HEADER_SIZE + AGENT_CHUNK_MAX + CONTROL_ROOM) {
		stdin_at = (int)n;
		fds[n++] = (struct pollfd){.fd = run->ex->stdin_fd, .events = POLLIN};
	}
	if (run->ex->signal_fd >= 0 && agent_out_free(a) >= CONTROL_ROOM) {
		signal_at = (int)n;
		fds[n++] = (struct pollfd){.fd = run->ex->signal_fd, .events = POLLIN};
	}
	if (run->resize_open && agent_out_free(a) >= CONTROL_ROOM) {
		resize_at = (int)n;
		fds[n++] = (struct pollfd){.fd = run->ex->tty_resize_fd, .events = POLLIN};
	}
	int ready = poll(fds, n, agent_poll_timeout(next_timer(run)));
	if (ready < 0 && errno != EINTR) {
		run->error = agent_fail(a, -errno, "poll: %s", strerror(errno));
		return;
	}
	check_timers(run);
	if (ready <= 0 || run->error)
		return;
	if (fds[0].revents & POLLOUT)
		run->error = agent_flush_some(a);
	if (!run->error && (fds[0].revents & ~POLLOUT)) {
		run->error = agent_fill(a);
		take_frames(run);
	}
	if (run->error || run->done)
		return;
	if (stdin_at >= 0 && fds[stdin_at].revents)
		forward_stdin(run, fds[stdin_at].revents);
	if (!run->error && signal_at >= 0 && (fds[signal_at].revents & POLLIN))
		forward_signal(run);
	if (!run->error && resize_at >= 0 && fds[resize_at].revents)
		forward_resize(run);
}

int mote_agent_exec(struct mote_agent *agent, const struct mote_agent_exec *exec,
		    struct mote_agent_result *result)
{
	struct exec_run run = {.a = agent,
			       .ex = exec,
			       .result = result,
			       .deadline = -1,
			       .kill_deadline = -1,
			       .signal_deadline = -1,
			       .stop_deadline = -1};
	int ret = agent_usable(agent);

	memset(result, 0, sizeof(*result));
	if (ret)
		return ret;
	if (!exec->argv || !exec->argv[0] || !exec->argv[0][0]) {
		log_error(&agent->log, "exec: no program given");
		return -EINVAL;
	}
	run.id = agent_new_id(agent);
	ret = queue_exec(&run);
	if (ret)
		return ret;
	run.stdin_open = exec->stdin_fd >= 0;
	run.resize_open = exec->tty && exec->tty_resize_fd >= 0;
	if (!run.stdin_open)
		ret = agent_queue(agent, AGENT_STDIN_EOF, run.id, NULL, 0, -1);
	if (ret)
		return ret;
	run.deadline = agent_deadline(exec->timeout_ms);
	while (!run.done && !run.error)
		exec_step(&run);
	if (run.error)
		return run.error;
	return run.callback_error;
}

/* Stops a transfer the client gave up on and waits until the agent has: its OK, or
 * the transfer's own last frame if that crossed the CANCEL. */
static int cancel(struct mote_agent *a, uint32_t id, int64_t deadline)
{
	struct agent_frame f;
	int ret = agent_queue(a, AGENT_CANCEL, id, NULL, 0, deadline);

	while (!ret) {
		ret = agent_wait_answer(a, id, &f, deadline);
		if (!ret && f.h.type != AGENT_DATA)
			return 0;
	}
	return ret;
}

static int queue_path_request(struct mote_agent *a, uint16_t type, uint32_t id, uint32_t mode,
			      const char *path, int64_t deadline)
{
	uint8_t payload[12 + AGENT_PATH_MAX];
	struct agent_writer w;

	if (strlen(path) > AGENT_PATH_MAX) {
		log_error(&a->log, "%s: path longer than %u bytes", path, AGENT_PATH_MAX);
		return -ENAMETOOLONG;
	}
	agent_writer_init(&w, payload, sizeof(payload));
	if (type == AGENT_UPLOAD) {
		agent_put_u32(&w, mode);
		agent_put_u32(&w, 0);
	}
	agent_put_string(&w, path);
	return agent_queue(a, type, id, payload, w.len, deadline);
}

/* An OK frame: its size and mode. */
static int take_ok(struct mote_agent *a, const struct agent_frame *f, uint64_t *size,
		   uint32_t *mode)
{
	if (f->h.type == AGENT_ERROR)
		return agent_remote_error(a, f);
	if (f->h.type != AGENT_OK || f->h.length != 12)
		return agent_fail(a, -EPROTO, "expected OK from the agent, got frame type 0x%x",
				  f->h.type);
	if (size)
		*size = agent_le64_get(f->payload);
	if (mode)
		*mode = agent_le32_get(f->payload + 8) & 07777u;
	return 0;
}

/* Between two chunks: an upload the agent already failed (disk full, ...) stops here. */
static int upload_check_error(struct mote_agent *a, uint32_t id)
{
	struct agent_frame f;
	int ret = agent_fill(a);

	while (!ret && (ret = agent_take_frame(a, &f)) > 0) {
		if (f.h.id == id)
			return f.h.type == AGENT_ERROR ? agent_remote_error(a, &f)
						       : agent_fail(a, -EPROTO,
								    "unexpected frame type 0x%x "
								    "during an upload",
								    f.h.type);
	}
	return ret;
}

/* A transfer past its end (transfer_timeout_ms) fails, however steadily the agent
 * answers: waits only time out when nothing comes. */
static int transfer_check_time(struct mote_agent *a, const char *what, const char *guest_path)
{
	if (a->transfer_end < 0 || agent_now_ms() < a->transfer_end)
		return 0;
	return agent_fail(a, -ETIMEDOUT, "%s %s: not done within %d s", what, guest_path,
			  a->transfer_timeout_ms / 1000);
}

int mote_agent_upload(struct mote_agent *agent, int fd, const char *guest_path, uint32_t mode)
{
	struct mote_agent *a = agent;
	struct agent_frame f;
	uint64_t total = 0, written = 0;
	int ret = agent_usable(a);
	uint32_t id = agent_new_id(a);

	a->transfer_end = agent_deadline(a->transfer_timeout_ms);
	if (!ret)
		ret = queue_path_request(a, AGENT_UPLOAD, id, mode & 07777u, guest_path,
					 agent_transfer_deadline(a));
	if (!ret)
		ret = agent_wait_answer(a, id, &f, agent_transfer_deadline(a));
	if (!ret)
		ret = take_ok(a, &f, NULL, NULL);
	if (ret)
		return ret;
	while (!ret && !(ret = transfer_check_time(a, "upload", guest_path))) {
		uint8_t *p = agent_out_tail(a, AGENT_HEADER_SIZE + AGENT_CHUNK_MAX);
		if (!p) {
			ret = agent_flush_wait(a, agent_transfer_deadline(a));
			if (!ret)
				ret = upload_check_error(a, id);
			continue;
		}
		ssize_t n = read(fd, p + AGENT_HEADER_SIZE, AGENT_CHUNK_MAX);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			ret = -errno;
			log_error(&a->log, "upload %s: reading the source: %s", guest_path,
				  strerror(errno));
			int cancelled = cancel(a, id, agent_deadline(a->io_timeout_ms));
			return cancelled ? cancelled : ret;
		}
		if (n == 0)
			break;
		agent_header_encode(p, &(struct agent_header){.length = (uint32_t)n,
							      .type = AGENT_UPLOAD_DATA,
							      .id = id});
		a->out_end += AGENT_HEADER_SIZE + (size_t)n;
		total += (uint64_t)n;
		ret = agent_flush_some(a);
	}
	if (ret) {
		/* The agent drops an upload it failed at UPLOAD_END, without answering. */
		if (!a->broken)
			agent_queue(a, AGENT_UPLOAD_END, id, NULL, 0, -1);
		return ret;
	}
	ret = agent_queue(a, AGENT_UPLOAD_END, id, NULL, 0, agent_transfer_deadline(a));
	if (!ret)
		ret = agent_wait_answer(a, id, &f, agent_transfer_deadline(a));
	if (!ret)
		ret = take_ok(a, &f, &written, NULL);
	if (!ret && written != total)
		ret = agent_fail(a, -EPROTO, "the agent wrote %llu bytes of %llu",
				 (unsigned long long)written, (unsigned long long)total);
	return ret;
}

static int write_all(int fd, const uint8_t *data, size_t len)
{
	while (len > 0) {
		ssize_t n = write_quiet(fd, data, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

/* The download grew past max_download_bytes (to at least size): it is cancelled. */
static int download_too_big(struct mote_agent *a, const char *guest_path, uint32_t id,
			    uint64_t size)
{
	int cancelled = cancel(a, id, agent_deadline(a->io_timeout_ms));

	log_error(&a->log, "download %s: %llu bytes or more, over the limit of %llu", guest_path,
		  (unsigned long long)size, (unsigned long long)a->max_download_bytes);
	return cancelled ? cancelled : -EFBIG;
}

int mote_agent_download(struct mote_agent *agent, const char *guest_path, int fd, uint32_t *mode)
{
	struct mote_agent *a = agent;
	struct agent_frame f;
	uint64_t received = 0;
	int ret = agent_usable(a);
	uint32_t id = agent_new_id(a);

	a->transfer_end = agent_deadline(a->transfer_timeout_ms);
	if (!ret)
		ret = queue_path_request(a, AGENT_DOWNLOAD, id, 0, guest_path,
					 agent_transfer_deadline(a));
	if (!ret)
		ret = agent_wait_answer(a, id, &f, agent_transfer_deadline(a));
	uint64_t announced = 0;
	if (!ret)
		ret = take_ok(a, &f, &announced, mode);
	if (!ret && a->max_download_bytes && announced > a->max_download_bytes)
		return download_too_big(a, guest_path, id, announced);
	while (!ret && !(ret = transfer_check_time(a, "download", guest_path))) {
		ret = agent_wait_answer(a, id, &f, agent_transfer_deadline(a));
		if (ret)
			break;
		if (f.h.type == AGENT_DATA && f.h.length == 0) {
			/* The agent never sends one; it would only keep the wait alive. */
			return agent_fail(a, -EPROTO, "the agent sent an empty DATA frame");
		} else if (f.h.type == AGENT_DATA) {
			if (a->max_download_bytes && f.h.length > a->max_download_bytes - received)
				return download_too_big(a, guest_path, id, received + f.h.length);
			received += f.h.length;
			ret = write_all(fd, f.payload, f.h.length);
			if (ret) {
				log_error(&a->log, "download %s: writing: %s", guest_path,
					  strerror(-ret));
				int cancelled = cancel(a, id, agent_deadline(a->io_timeout_ms));
				return cancelled ? cancelled : ret;
			}
		} else if (f.h.type == AGENT_END) {
			if (f.h.length != 8 || agent_le64_get(f.payload) != received)
				return agent_fail(a, -EPROTO,
						  "the agent ended a download with a "
						  "wrong size");
			return 0;
		} else if (f.h.type == AGENT_ERROR) {
			return agent_remote_error(a, &f);
		} else {
			return agent_fail(a, -EPROTO,
					  "unexpected frame type 0x%x during a download", f.h.type);
		}
	}
	return ret;
}

int mote_agent_power_off(struct mote_agent *agent)
{
	struct agent_frame f;
	int ret = agent_usable(agent);
	uint32_t id = agent_new_id(agent);

	if (!ret)
		ret = agent_queue(agent, AGENT_POWER_OFF, id, NULL, 0,
				  agent_deadline(agent->io_timeout_ms));
	if (!ret)
		ret = agent_wait_answer(agent, id, &f, agent_deadline(agent->io_timeout_ms));
	return ret ? ret : take_ok(agent, &f, NULL, NULL);
}
