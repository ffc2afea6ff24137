/* Commands (AGENT_PROTOCOL.md "Commands"): EXEC forks a child that becomes the leader
 * of a session of its own and execs the program with pipes for stdin, stdout and
 * stderr, or with flag TTY on a new pseudo-terminal that is its controlling terminal
 * (pts(4)). A fourth pipe, close-on-exec, tells the agent whether the exec happened: it
 * reads EOF when it did, and (stage, errno) when chdir or execve failed, so "could
 * not start" never looks like a program that exited 127. */
#include "agent_internal.h"
#include "agent_exec_args.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

/* What a command may still write after it exited, before EXIT is sent: its own last
 * output is at most a pipe's capacity (1 MiB at most, fs.pipe-max-size), while a
 * background process that keeps writing must not hold EXIT back forever. */
#define DRAIN_AFTER_EXIT (2u * 1024u * 1024u)

static _Noreturn void child_fail(int report_fd, int stage, int err)
{
	int32_t msg[2] = {stage, err};

	if (write(report_fd, msg, sizeof(msg)) < 0) {
		/* The agent then sees EOF and reports exit 127: nothing better is possible. */
	}
	_exit(127);
}

/* fds: its stdin, stdout and stderr; with a terminal, the terminal's slave side each. */
static _Noreturn void child_run(const int fds[3], bool tty, int report_fd,
				const struct exec_args *a, char **env)
{
	struct sigaction dfl = {.sa_handler = SIG_DFL};
	sigset_t none;

	/* execve keeps ignored signals and the mask: give the command a clean slate. */
	for (int sig = 1; sig < NSIG; sig++)
		sigaction(sig, &dfl, NULL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* Its own session and process group, so SIGNAL reaches its children too. */
	setsid();
	/* A session leader's terminal: its foreground group gets ^C's SIGINT, and the
	 * whole session SIGHUP when the terminal goes. */
	if (tty && ioctl(fds[0], TIOCSCTTY, 0) < 0)
		child_fail(report_fd, AGENT_STAGE_SETUP, errno);
	for (int i = 0; i < 3; i++) {
		if (dup2(fds[i], i) < 0)
			child_fail(report_fd, AGENT_STAGE_SETUP, errno);
	}
	/* Whatever else the agent's process holds stays with it (best effort: older
	 * kernels lack CLOSE_RANGE_CLOEXEC, and the agent's own fds are close-on-exec). */
	syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
	if (a->cwd && chdir(a->cwd) < 0)
		child_fail(report_fd, AGENT_STAGE_CHDIR, errno);
	environ = env;
	execvp(a->argv[0], a->argv);
	child_fail(report_fd, AGENT_STAGE_EXEC, errno);
}

static void set_nonblocking(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static void wait_for(pid_t pid, int *status)
{
	while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
	}
}

/* A size of 0 is unknown, which programs take badly (busybox stty fails): the classic
 * terminal's 24 x 80 then, a VT100's. */
static void terminal_size_known(struct winsize *size)
{
	if (!size->ws_row)
		size->ws_row = 24;
	if (!size->ws_col)
		size->ws_col = 80;
}

/* A new pseudo-terminal of the given size: its master in pty[1] (the agent's end) and
 * its slave in pty[0] (the command's), both close-on-exec. 0 or an errno. */
static int open_terminal(int pty[2], const struct winsize *size)
{
	char name[64];

	pty[1] = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (pty[1] < 0 || grantpt(pty[1]) < 0 || unlockpt(pty[1]) < 0 ||
	    ptsname_r(pty[1], name, sizeof(name)) != 0)
		return errno ? errno : EIO;
	struct winsize known = *size;
	terminal_size_known(&known);
	if (ioctl(pty[1], TIOCSWINSZ, &known) < 0)
		return errno;
	pty[0] = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	return pty[0] < 0 ? errno : 0;
}

/* Starts the command. Returns 0, or a positive errno and the stage that failed. */
static int spawn(struct exec_state *e, const struct exec_args *a, char **env, int *stage)
{
	int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, report[2] = {-1, -1};
	bool tty = a->flags & AGENT_EXEC_TTY;
	int32_t msg[2];
	int ret = 0;
	ssize_t n;

	*stage = AGENT_STAGE_SETUP;
	/* On a terminal, in[] is the terminal and out[] its master's second descriptor. */
	if (tty ? (ret = open_terminal(in, &a->size)) != 0 ||
		      (out[0] = fcntl(in[1], F_DUPFD_CLOEXEC, 0)) < 0
		: pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 ||
		      pipe2(err, O_CLOEXEC) < 0) {
		ret = ret ? ret : errno;
		goto fail;
	}
	if (pipe2(report, O_CLOEXEC) < 0) {
		ret = errno;
		goto fail;
	}
	pid_t pid = fork();
	if (pid < 0) {
		ret = errno;
		goto fail;
	}
	if (pid == 0)
		child_run(tty ? (const int[3]){in[0], in[0], in[0]}
			      : (const int[3]){in[0], out[1], err[1]},
			  tty, report[1], a, env);
	/* The terminal's slave stays open here while the command runs (tty_slave_fd). */
	int slave = tty ? in[0] : -1;
	if (!tty)
		close_fd(&in[0]);
	close_fd(&out[1]);
	close_fd(&err[1]);
	close_fd(&report[1]);
	do
		n = read(report[0], msg, sizeof(msg));
	while (n < 0 && errno == EINTR);
	close_fd(&report[0]);
	if (n == (ssize_t)sizeof(msg)) {
		/* A report of up to PIPE_BUF bytes arrives whole or not at all. */
		wait_for(pid, NULL);
		*stage = msg[0];
		ret = msg[1] > 0 ? msg[1] : EIO;
		goto fail;
	}
	e->pid = pid;
	e->tty = tty;
	e->tty_slave_fd = slave;
	in[0] = -1;
	e->in_fd = in[1];
	e->out_fd = out[0];
	e->err_fd = err[0];
	set_nonblocking(e->in_fd);
	set_nonblocking(e->out_fd);
	if (e->err_fd >= 0)
		set_nonblocking(e->err_fd);
	/* Without pidfd_open (Linux < 5.3) the loop polls waitpid on a timer instead. */
	e->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	return 0;
fail:
	for (int i = 0; i < 2; i++) {
		close_fd(&in[i]);
		close_fd(&out[i]);
		close_fd(&err[i]);
		close_fd(&report[i]);
	}
	return ret;
}

static void send_exec_failed(struct agent_conn *c, uint32_t id, int err, int stage,
			     const struct exec_args *a)
{
	uint8_t payload[12 + AGENT_MESSAGE_MAX];
	char message[AGENT_MESSAGE_MAX + 1];
	struct agent_writer w;

	if (stage == AGENT_STAGE_CHDIR)
		snprintf(message, sizeof(message), "chdir %s: %s", a->cwd, strerror(err));
	else if (stage == AGENT_STAGE_EXEC)
		snprintf(message, sizeof(message), "%s: %s", a->argv[0], strerror(err));
	else
		snprintf(message, sizeof(message), "cannot start %s: %s", a->argv[0],
			 strerror(err));
	agent_writer_init(&w, payload, sizeof(payload));
	agent_put_u32(&w, (uint32_t)err);
	agent_put_u32(&w, (uint32_t)stage);
	agent_put_string_n(&w, message, strnlen(message, AGENT_MESSAGE_MAX));
	conn_send(c, AGENT_EXEC_FAILED, id, payload, w.len);
}

void exec_start(struct agent_conn *c, const struct agent_header *h, const uint8_t *payload)
{
	struct exec_args a = {0};
	char why[AGENT_MESSAGE_MAX];
	struct request *r;
	char **env = NULL;
	int err, stage;

	err = exec_args_decode(h, payload, &a, why, sizeof(why));
	if (err) {
		conn_send_error(c, h->id, h->type, err, "%s", why);
		goto out;
	}
	r = conn_new_request(c, h, REQUEST_EXEC);
	if (!r)
		goto out;
	env = exec_args_env(&a);
	err = env ? spawn(&r->exec, &a, env, &stage) : ENOMEM;
	if (err) {
		send_exec_failed(c, h->id, err, env ? stage : AGENT_STAGE_SETUP, &a);
		conn_free_request(r);
		goto out;
	}
	uint8_t started[4];
	agent_le32_put(started, (uint32_t)r->exec.pid);
	conn_send(c, AGENT_STARTED, h->id, started, sizeof(started));
out:
	free(env);
	exec_args_free(&a);
}

static void stdin_close(struct exec_state *e)
{
	e->tty_eof_left = 0;
	close_fd(&e->in_fd);
	free(e->stdin_buf);
	e->stdin_buf = NULL;
	e->stdin_len = 0;
}

/* Whether byte, typed last, leaves the terminal's canonical input at the start of a
 * line: a newline, a carriage return the terminal turns into one (ICRNL without IGNCR:
 * an Enter key), an end-of-line character, or an end of file. */
static bool tty_line_end(int master, uint8_t byte)
{
	struct termios mode;

	if (byte == '\n')
		return true;
	if (tcgetattr(master, &mode) != 0)
		return false;
	if (byte == '\r')
		return (mode.c_iflag & ICRNL) && !(mode.c_iflag & IGNCR);
	return byte != _POSIX_VDISABLE &&
	       (byte == mode.c_cc[VEOL] || byte == mode.c_cc[VEOL2] || byte == mode.c_cc[VEOF]);
}

/* Writes the terminal's end-of-file characters still due; true once all are. */
static bool tty_write_eof(struct exec_state *e)
{
	struct termios mode;
	uint8_t eof = 4; /* ^D */

	if (tcgetattr(e->in_fd, &mode) == 0 && mode.c_cc[VEOF])
		eof = mode.c_cc[VEOF];
	while (e->tty_eof_left) {
		ssize_t n = write(e->in_fd, &eof, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno != EAGAIN && errno != EWOULDBLOCK; /* full: poll for room */
		e->tty_eof_left--;
	}
	return true;
}

/* The end of stdin, once what was queued before it is written. A pipe is closed. On a
 * terminal, that is its end-of-file character, which a command reading in canonical
 * mode sees as end of file at the start of a line; after a partial line it only ends
 * the line, so a second one follows. The terminal stays. */
static void stdin_end(struct exec_state *e)
{
	if (e->tty && e->in_fd >= 0) {
		struct termios mode;
		bool partial_line =
		    e->tty_mid_line && tcgetattr(e->in_fd, &mode) == 0 && (mode.c_lflag & ICANON);
		e->tty_eof_left = partial_line ? 2 : 1;
		e->tty_mid_line = false;
		if (!tty_write_eof(e))
			return; /* the rest when the terminal has room (stdin_flush) */
	}
	stdin_close(e);
}

/* Writes what the pipe takes now. Returns the bytes written; a command that closed its
 * stdin (EPIPE) gets nothing more. */
static size_t stdin_write(struct exec_state *e, const uint8_t *data, size_t len)
{
	ssize_t n;

	do
		n = write(e->in_fd, data, len);
	while (n < 0 && errno == EINTR);
	if (n > 0 && e->tty)
		e->tty_mid_line = !tty_line_end(e->in_fd, data[n - 1]);
	if (n >= 0)
		return (size_t)n;
	if (errno != EAGAIN && errno != EWOULDBLOCK)
		stdin_close(e);
	return 0;
}

enum frame_result exec_stdin(struct agent_conn *c, const struct agent_header *h,
			     const uint8_t *payload)
{
	struct request *r = conn_find(c, h->id, REQUEST_EXEC);

	if (h->type == AGENT_STDIN_EOF && h->length != 0) {
		conn_send_error(c, h->id, h->type, EPROTO, "STDIN_EOF takes no payload");
		return FRAME_DONE;
	}
	if (!r)
		return FRAME_DONE;
	struct exec_state *e = &r->exec;
	bool accepting = e->in_fd >= 0 && !e->stdin_eof;
	if (accepting && e->stdin_len > 0 && STDIN_CAP - e->stdin_len < h->length)
		return FRAME_BLOCKED;
	/* Accepted: from here on its bytes are queued, written or dropped, and whatever
	 * leaves the queue is reported taken (report_stdin_taken). */
	e->stdin_received += h->length;
	/* A command that ended (or closed its stdin) just before this frame came: it has
	 * nowhere to go, and is no error. */
	if (!accepting)
		return FRAME_DONE;
	if (h->type == AGENT_STDIN_EOF) {
		e->stdin_eof = true;
		if (e->stdin_len == 0)
			stdin_end(e);
		return FRAME_DONE;
	}
	size_t done = 0;
	if (e->stdin_len == 0) {
		done = stdin_write(e, payload, h->length);
		if (e->in_fd < 0 || done == h->length)
			return FRAME_DONE;
	}
	if (!e->stdin_buf) {
		e->stdin_buf = malloc(STDIN_CAP);
		if (!e->stdin_buf) {
			conn_send_error(c, h->id, h->type, ENOMEM, "no memory for stdin");
			stdin_close(e);
			return FRAME_DONE;
		}
	}
	memcpy(e->stdin_buf + e->stdin_len, payload + done, h->length - done);
	e->stdin_len += h->length - done;
	return FRAME_DONE;
}

void exec_signal(struct agent_conn *c, const struct agent_header *h, const uint8_t *payload)
{
	struct agent_reader rd;

	agent_reader_init(&rd, payload, h->length);
	uint32_t sig = agent_get_u32(&rd);
	if (!agent_reader_done(&rd)) {
		conn_send_error(c, h->id, h->type, EPROTO, "SIGNAL payload must be 4 bytes");
		return;
	}
	if (sig < 1 || sig >= NSIG) {
		conn_send_error(c, h->id, h->type, EINVAL, "signal %u out of range", sig);
		return;
	}
	struct request *r = conn_find(c, h->id, REQUEST_EXEC);
	if (!r) {
		conn_send_error(c, h->id, h->type, ESRCH, "no command with request id %u", h->id);
		return;
	}
	/* The group id outlives its leader while members remain, so it can never name
	 * another process; the pid can, once reaped. */
	if (kill(-r->exec.pid, (int)sig) < 0 && !r->exec.exited)
		kill(r->exec.pid, (int)sig);
}

void exec_resize(struct agent_conn *c, const struct agent_header *h, const uint8_t *payload)
{
	struct agent_reader rd;
	struct winsize size = {0};

	agent_reader_init(&rd, payload, h->length);
	size.ws_row = agent_get_u16(&rd);
	size.ws_col = agent_get_u16(&rd);
	if (!agent_reader_done(&rd)) {
		conn_send_error(c, h->id, h->type, EPROTO, "RESIZE payload must be 4 bytes");
		return;
	}
	struct request *r = conn_find(c, h->id, REQUEST_EXEC);
	if (!r) {
		conn_send_error(c, h->id, h->type, ESRCH, "no command with request id %u", h->id);
		return;
	}
	if (!r->exec.tty) {
		conn_send_error(c, h->id, h->type, ENOTTY, "command %u has no terminal", h->id);
		return;
	}
	/* The kernel sends SIGWINCH to the terminal's foreground group. Once the command
	 * has gone and its output is drained, there is no terminal left to resize. */
	terminal_size_known(&size);
	if (r->exec.out_fd >= 0 && ioctl(r->exec.out_fd, TIOCSWINSZ, &size) < 0)
		conn_send_error(c, h->id, h->type, errno, "resizing the terminal: %s",
				strerror(errno));
}

static void poll_add(struct pollfd *fds, struct poll_owner *owners, size_t *n, int fd, short events,
		     struct request *r, enum poll_role role)
{
	fds[*n] = (struct pollfd){.fd = fd, .events = events};
	owners[*n] = (struct poll_owner){.request = r, .role = role};
	(*n)++;
}

void exec_poll_add(struct agent_conn *c, struct request *r, struct pollfd *fds,
		   struct poll_owner *owners, size_t *n)
{
	struct exec_state *e = &r->exec;

	if (e->pidfd >= 0 && !e->exited)
		poll_add(fds, owners, n, e->pidfd, POLLIN, r, ROLE_PIDFD);
	if (e->in_fd >= 0 && (e->stdin_len > 0 || e->tty_eof_left > 0))
		poll_add(fds, owners, n, e->in_fd, POLLOUT, r, ROLE_STDIN);
	/* Backpressure: a pipe is read only when a whole chunk fits in the output. */
	if (!conn_has_chunk_room(c))
		return;
	if (e->out_fd >= 0)
		poll_add(fds, owners, n, e->out_fd, POLLIN, r, ROLE_STDOUT);
	if (e->err_fd >= 0)
		poll_add(fds, owners, n, e->err_fd, POLLIN, r, ROLE_STDERR);
}

static void reap(struct exec_state *e)
{
	int status;
	pid_t pid;

	do
		pid = waitpid(e->pid, &status, WNOHANG);
	while (pid < 0 && errno == EINTR);
	if (pid == e->pid || (pid < 0 && errno == ECHILD)) {
		e->exited = true;
		e->status = pid == e->pid ? status : 0;
		close_fd(&e->pidfd);
	}
}

/* Forwards one chunk of output. Returns false when the pipe has nothing more for now
 * (closed at end of file or on error; left open on EAGAIN). */
static bool read_output(struct agent_conn *c, struct request *r, int *fd, uint16_t type)
{
	ssize_t n = conn_send_from_fd(c, type, r->id, *fd);

	if (n > 0)
		return true;
	if (n != -EAGAIN)
		close_fd(fd);
	return false;
}

static void stdin_flush(struct exec_state *e)
{
	if (e->in_fd < 0)
		return;
	if (e->tty_eof_left) {
		if (tty_write_eof(e))
			stdin_close(e);
		return;
	}
	size_t n = stdin_write(e, e->stdin_buf, e->stdin_len);
	if (e->in_fd < 0)
		return;
	memmove(e->stdin_buf, e->stdin_buf + n, e->stdin_len - n);
	e->stdin_len -= n;
	if (e->stdin_len == 0 && e->stdin_eof)
		stdin_end(e);
}

void exec_poll_event(struct agent_conn *c, struct request *r, enum poll_role role)
{
	struct exec_state *e = &r->exec;

	switch (role) {
	case ROLE_PIDFD:
		reap(e);
		break;
	case ROLE_STDIN:
		stdin_flush(e);
		break;
	case ROLE_STDOUT:
		if (e->out_fd >= 0 && conn_has_chunk_room(c))
			read_output(c, r, &e->out_fd, AGENT_STDOUT);
		break;
	case ROLE_STDERR:
		if (e->err_fd >= 0 && conn_has_chunk_room(c))
			read_output(c, r, &e->err_fd, AGENT_STDERR);
		break;
	case ROLE_SOCKET:
		break;
	}
}

/* After the command exited: whatever it wrote is in the pipe by now, so forward what
 * is there and close the pipe when it runs dry or the budget is spent (a background
 * child holding it open must not hold back EXIT). */
static void drain(struct agent_conn *c, struct request *r, int *fd, uint16_t type, size_t *budget)
{
	while (*fd >= 0 && conn_has_chunk_room(c)) {
		ssize_t n = *budget ? conn_send_from_fd(c, type, r->id, *fd) : 0;
		if (n <= 0) {
			close_fd(fd);
			return;
		}
		*budget -= (size_t)n < *budget ? (size_t)n : *budget;
	}
}

static void send_exit(struct agent_conn *c, struct request *r)
{
	int status = r->exec.status;
	uint8_t payload[8];

	if (WIFSIGNALED(status)) {
		agent_le32_put(payload, AGENT_EXIT_SIGNAL);
		agent_le32_put(payload + 4, (uint32_t)WTERMSIG(status));
	} else {
		agent_le32_put(payload, AGENT_EXIT_CODE);
		agent_le32_put(payload + 4, (uint32_t)WEXITSTATUS(status));
	}
	conn_send(c, AGENT_EXIT, r->id, payload, sizeof(payload));
}

/* Tells the client how much stdin left the command's queue (into its pipe, or
 * dropped), so that it may send that much more (AGENT_STDIN_WINDOW). */
static enum progress_wait report_stdin_taken(struct agent_conn *c, struct request *r)
{
	struct exec_state *e = &r->exec;
	uint64_t unreported = e->stdin_received - e->stdin_len - e->stdin_reported;
	uint8_t payload[4];

	if (unreported == 0)
		return WAIT_EVENTS;
	/* Any room will do, the reserve included (frames are parsed again only once the
	 * reserve is free): so the report always goes before EXIT, which needs more. */
	if (conn_out_free(c) < AGENT_HEADER_SIZE + sizeof(payload))
		return WAIT_ROOM;
	uint32_t taken = unreported > UINT32_MAX ? UINT32_MAX : (uint32_t)unreported;
	agent_le32_put(payload, taken);
	conn_send(c, AGENT_STDIN_TAKEN, r->id, payload, sizeof(payload));
	e->stdin_reported += taken;
	return WAIT_EVENTS;
}

enum progress_wait exec_progress(struct agent_conn *c, struct request *r)
{
	struct exec_state *e = &r->exec;
	enum progress_wait reported = report_stdin_taken(c, r);

	if (!e->exited) {
		reap(e);
		if (!e->exited)
			return (enum progress_wait)(reported |
						    (e->pidfd < 0 ? WAIT_TIMER : WAIT_EVENTS));
		e->drain_left = DRAIN_AFTER_EXIT;
		/* Now the master reads what the terminal holds, then EIO once no process
		 * is left on it. */
		close_fd(&e->tty_slave_fd);
	}
	drain(c, r, &e->out_fd, AGENT_STDOUT, &e->drain_left);
	drain(c, r, &e->err_fd, AGENT_STDERR, &e->drain_left);
	if (e->out_fd >= 0 || e->err_fd >= 0 || conn_out_free(c) < OUT_RESERVE)
		return WAIT_ROOM;
	send_exit(c, r);
	stdin_close(e);
	conn_free_request(r);
	return WAIT_EVENTS;
}

void exec_abort(struct request *r)
{
	struct exec_state *e = &r->exec;

	kill(-e->pid, SIGKILL);
	if (!e->exited) {
		kill(e->pid, SIGKILL);
		wait_for(e->pid, NULL);
	}
	stdin_close(e);
	close_fd(&e->out_fd);
	close_fd(&e->err_fd);
	close_fd(&e->pidfd);
	close_fd(&e->tty_slave_fd);
}
