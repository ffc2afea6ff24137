/* libmote's agent client (vmm/agent_client.h) end to end without KVM: a fake VMM socket
 * speaks Firecracker's CONNECT/OK handshake and hands each connection to the real
 * agent_serve(), or answers the way a broken VMM or a hostile guest might. */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cmocka.h>

#include "tests/unit/agent_test_wire.h"
#include "vmm/agent_client.h"
#include "vmm/clock.h"

static int64_t now_ms(void)
{
	return clock_now_ns() / 1000000;
}

struct fixture {
	char dir[64];
	char path[96];
	struct wire_fake_vmm fake;
	struct mote_agent_options options;
	struct mote_agent *agent;
	char last_log[512];
	int power_pipe[2];
};

static void capture_log(void *opaque, enum mote_log_level level, const char *message)
{
	struct fixture *f = opaque;

	if (level <= MOTE_LOG_WARN)
		snprintf(f->last_log, sizeof(f->last_log), "%s", message);
}

static int setup(void **state)
{
	static struct fixture f;

	memset(&f, 0, sizeof(f));
	snprintf(f.dir, sizeof(f.dir), "/tmp/mote-agent-client-XXXXXX");
	if (!mkdtemp(f.dir) || pipe(f.power_pipe) < 0)
		return -1;
	snprintf(f.path, sizeof(f.path), "%s/vsock.sock", f.dir);
	f.fake.config = (struct agent_config){
	    .power_off = wire_power_off_to_pipe, .opaque = &f.power_pipe[1], .quiet = true};
	mote_agent_options_init(&f.options);
	f.options.uds_path = f.path;
	f.options.wait_ms = 5000;
	f.options.log = capture_log;
	f.options.log_opaque = &f;
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char command[128];

	mote_agent_close(f->agent);
	if (f->fake.pid > 0) {
		kill(f->fake.pid, SIGKILL);
		waitpid(f->fake.pid, NULL, 0);
	}
	close(f->power_pipe[0]);
	close(f->power_pipe[1]);
	snprintf(command, sizeof(command), "rm -rf %s", f->dir);
	return system(command) == 0 ? 0 : -1;
}

static void fake_start(struct fixture *f)
{
	wire_fake_vmm_start(&f->fake, f->path);
}

static void connect_to_agent(struct fixture *f)
{
	fake_start(f);
	assert_int_equal(mote_agent_connect(&f->options, &f->agent), 0);
}

/* Output callbacks collecting into buffers. */
struct sink {
	char data[65536];
	size_t len;
};

static int collect(void *opaque, const void *data, size_t len)
{
	struct sink *s = opaque;
	size_t room = sizeof(s->data) - 1 - s->len;

	if (len > room)
		len = room;
	memcpy(s->data + s->len, data, len);
	s->len += len;
	s->data[s->len] = '\0';
	return 0;
}

struct streams {
	struct sink out, err;
};

static int collect_out(void *opaque, const void *data, size_t len)
{
	return collect(&((struct streams *)opaque)->out, data, len);
}

static int collect_err(void *opaque, const void *data, size_t len)
{
	return collect(&((struct streams *)opaque)->err, data, len);
}

static int run(struct fixture *f, const char *const *argv, struct streams *io, int stdin_fd,
	       struct mote_agent_result *result)
{
	struct mote_agent_exec exec;

	mote_agent_exec_init(&exec);
	exec.argv = argv;
	exec.stdin_fd = stdin_fd;
	exec.on_stdout = collect_out;
	exec.on_stderr = collect_err;
	exec.opaque = io;
	memset(io, 0, sizeof(*io));
	return mote_agent_exec(f->agent, &exec, result);
}

static void connect_gets_the_hello(void **state)
{
	struct fixture *f = *state;

	connect_to_agent(f);
	const struct mote_agent_info *info = mote_agent_info(f->agent);
	assert_int_equal(info->version, AGENT_PROTOCOL_VERSION);
	assert_int_equal(info->max_payload, AGENT_MAX_PAYLOAD);
	assert_false(mote_agent_broken(f->agent));
}

static void exec_returns_output_and_status(void **state)
{
	struct fixture *f = *state;
	const char *argv[] = {"sh", "-c", "echo out; echo err >&2; exit 3", NULL};
	struct mote_agent_result result;
	static struct streams io;

	connect_to_agent(f);
	assert_int_equal(run(f, argv, &io, -1, &result), 0);
	assert_int_equal(result.outcome, MOTE_AGENT_EXITED);
	assert_int_equal(result.code, 3);
	assert_string_equal(io.out.data, "out\n");
	assert_string_equal(io.err.data, "err\n");
	assert_true(result.pid > 0);
}

static void missing_program_is_not_started_with_enoent(void **state)
{
	struct fixture *f = *state;
	const char *argv[] = {"/no/such/program", NULL};
	struct mote_agent_result result;
	static struct streams io;

	connect_to_agent(f);
	assert_int_equal(run(f, argv, &io, -1, &result), 0);
	assert_int_equal(result.outcome, MOTE_AGENT_NOT_STARTED);
	assert_int_equal(result.code, ENOENT);
	assert_non_null(strstr(result.message, "/no/such/program"));
	assert_false(mote_agent_broken(f->agent));
}

static void stdin_fd_is_forwarded_and_ends_in_eof(void **state)
{
	struct fixture *f = *state;
	const char *argv[] = {"cat", NULL};
	struct mote_agent_result result;
	static struct streams io;
	int p[2];

	connect_to_agent(f);
	assert_int_equal(pipe(p), 0);
	assert_int_equal(write(p[1], "typed\n", 6), 6);
	close(p[1]);
	assert_int_equal(run(f, argv, &io, p[0], &result), 0);
	close(p[0]);
	assert_string_equal(io.out.data, "typed\n");
	assert_int_equal(result.code, 0);

	int null_fd = open("/dev/null", O_RDONLY);
	assert_int_equal(run(f, argv, &io, null_fd, &result), 0);
	close(null_fd);
	assert_int_equal(io.out.len, 0);
	assert_int_equal(result.code, 0);
}

static void timeout_kills_the_command(void **state)
{
	struct fixture *f = *state;
	const char *argv[] = {"sleep", "100", NULL};
	struct mote_agent_result result;
	struct mote_agent_exec exec;

	connect_to_agent(f);
	mote_agent_exec_init(&exec);
	exec.argv = argv;
	exec.timeout_ms = 300;
	assert_int_equal(mote_agent_exec(f->agent, &exec, &result), 0);
	assert_true(result.timed_out);
	assert_int_equal(result.outcome, MOTE_AGENT_SIGNALED);
	assert_int_equal(result.code, SIGKILL);
}

/* The given signals (a list ending in 0) blocked in this process and read from a
 * signalfd instead, as `mote exec` forwards them; signals_release() undoes it. */
struct caught_signals {
	int fd;
	sigset_t old_mask;
};

static void signals_catch(struct caught_signals *c, const int *signals)
{
	sigset_t set;

	sigemptyset(&set);
	for (; *signals; signals++)
		sigaddset(&set, *signals);
	sigprocmask(SIG_BLOCK, &set, &c->old_mask);
	c->fd = signalfd(-1, &set, SFD_CLOEXEC);
	assert_true(c->fd >= 0);
}

static void signals_release(struct caught_signals *c)
{
	close(c->fd);
	sigprocmask(SIG_SETMASK, &c->old_mask, NULL);
}

/* The command says it is ready; the callback then raises SIGUSR1 in this process,
 * where it is blocked and read from the signalfd the client forwards. */
static int raise_on_ready(void *opaque, const void *data, size_t len)
{
	(void)opaque;
	if (len >= 5 && memcmp(data, "ready", 5) == 0)
		kill(getpid(), SIGUSR1);
	return 0;
}

static int raise_term_on_ready(void *opaque, const void *data, size_t len)
{
	(void)opaque;
	if (len >= 5 && memcmp(data, "ready", 5) == 0)
		kill(getpid(), SIGTERM);
	return 0;
}

static void signals_from_the_signal_fd_are_forwarded(void **state)
{
	struct fixture *f = *state;
	const char *argv[] = {"sh", "-c",
			      "trap 'exit 7' USR1; echo ready; while :; do sleep 0.05; done", NULL};
	struct mote_agent_result result;
	struct mote_agent_exec exec;
	struct caught_signals caught;

	connect_to_agent(f);
	signals_catch(&caught, (const int[]){SIGUSR1, 0});
	mote_agent_exec_init(&exec);
	exec.argv = argv;
	exec.signal_fd = caught.fd;
	exec.on_stdout = raise_on_ready;
	assert_int_equal(mote_agent_exec(f->agent, &exec, &result), 0);
	signals_release(&caught);
	assert_int_equal(result.outcome, MOTE_AGENT_EXITED);
	assert_int_equal(result.code, 7);
}

/* The user's terminal (a pty here) grows when the command is ready, and SIGWINCH
 * comes, as a terminal emulator's would. */
struct resize_context {
	int terminal;
	struct sink out;
	bool resized;
	size_t stderr_bytes; /* none: a terminal has one output */
};

static int count_stderr(void *opaque, const void *data, size_t len)
{
	(void)data;
	((struct resize_context *)opaque)->stderr_bytes += len;
	return 0;
}

static int resize_on_ready(void *opaque, const void *data, size_t len)
{
	struct resize_context *ctx = opaque;

	collect(&ctx->out, data, len);
	if (!ctx->resized && strstr(ctx->out.data, "ready")) {
		struct winsize size = {.ws_row = 50, .ws_col = 132};
		ctx->resized = true;
		assert_int_equal(ioctl(ctx->terminal, TIOCSWINSZ, &size), 0);
		kill(getpid(), SIGWINCH);
	}
	return 0;
}

/* With tty, the command runs on a terminal of the size given, its stderr comes with
 * its stdout, and SIGWINCH resizes it to the size of tty_size_fd's terminal. */
static void a_command_on_a_terminal_follows_the_size_of_ours(void **state)
{
	struct fixture *f = *state;
	const char *argv[] = {"sh", "-c",
			      "stty size; echo err >&2; trap 'stty size; exit 5' WINCH; "
			      "echo ready; while :; do sleep 0.05; done",
			      NULL};
	struct resize_context ctx = {0};
	struct mote_agent_result result;
	struct mote_agent_exec exec;
	struct caught_signals caught;
	int pty = posix_openpt(O_RDWR | O_NOCTTY);

	assert_true(pty >= 0);
	ctx.terminal = pty;
	connect_to_agent(f);
	signals_catch(&caught, (const int[]){SIGWINCH, 0});
	mote_agent_exec_init(&exec);
	exec.argv = argv;
	exec.signal_fd = caught.fd;
	exec.tty = true;
	exec.tty_rows = 40;
	exec.tty_cols = 120;
	exec.tty_size_fd = pty;
	exec.on_stdout = resize_on_ready;
	exec.on_stderr = count_stderr;
	exec.opaque = &ctx;
	int ret = mote_agent_exec(f->agent, &exec, &result);
	signals_release(&caught);
	close(pty);
	assert_int_equal(ret, 0);
	assert_int_equal(result.outcome, MOTE_AGENT_EXITED);
	assert_int_equal(result.code, 5);
	assert_string_equal(ctx.out.data, "40 120\r\nerr\r\nready\r\n50 132\r\n");
	assert_int_equal(ctx.stderr_bytes, 0);
}

static int refuse_output(void *opaque, const void *data, size_t len)
{
	(void)opaque;
	(void)data;
	(void)len;
	return -EPIPE;
}

static void failing_callback_stops_the_command(void **state)
{
	struct fixture *f = *state;
	const char *argv[] = {"sh", "-c", "while :; do echo spam; sleep 0.01; done", NULL};
	struct mote_agent_result result;
	struct mote_agent_exec exec;

	connect_to_agent(f);
	mote_agent_exec_init(&exec);
	exec.argv = argv;
	exec.on_stdout = refuse_output;
	assert_int_equal(mote_agent_exec(f->agent, &exec, &result), -EPIPE);
	assert_int_equal(result.outcome, MOTE_AGENT_SIGNALED);
	assert_false(mote_agent_broken(f->agent));
}

static void make_file(const char *path, size_t size, uint64_t seed, mode_t mode)
{
	static uint8_t buf[1 << 16];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

	assert_true(fd >= 0);
	for (size_t done = 0; done < size;) {
		size_t n = size - done < sizeof(buf) ? size - done : sizeof(buf);
		wire_fill(buf, n, &seed);
		assert_int_equal(write(fd, buf, n), (ssize_t)n);
		done += n;
	}
	close(fd);
}

static uint64_t hash_file(const char *path)
{
	static uint8_t buf[1 << 16];
	uint64_t hash = WIRE_FNV_INIT;
	int fd = open(path, O_RDONLY);
	ssize_t n;

	assert_true(fd >= 0);
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		hash = wire_fnv(hash, buf, (size_t)n);
	close(fd);
	return hash;
}

static void fifty_mib_round_trip_through_the_client(void **state)
{
	struct fixture *f = *state;
	char src[160], guest[160], back[160];
	struct stat st;
	uint32_t mode = 0;

	snprintf(src, sizeof(src), "%s/src", f->dir);
	snprintf(guest, sizeof(guest), "%s/in-guest", f->dir);
	snprintf(back, sizeof(back), "%s/back", f->dir);
	make_file(src, 50u << 20, 11, 0600);
	connect_to_agent(f);
	int fd = open(src, O_RDONLY);
	assert_int_equal(mote_agent_upload(f->agent, fd, guest, 0640), 0);
	close(fd);
	assert_int_equal(stat(guest, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0640);
	assert_true(hash_file(guest) == hash_file(src));

	fd = open(back, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_int_equal(mote_agent_download(f->agent, guest, fd, &mode), 0);
	close(fd);
	assert_int_equal(mode, 0640);
	assert_true(hash_file(back) == hash_file(src));
}

static void agent_errors_keep_the_connection(void **state)
{
	struct fixture *f = *state;
	char missing[160];
	const char *argv[] = {"true", NULL};
	struct mote_agent_result result;
	static struct streams io;

	snprintf(missing, sizeof(missing), "%s/nope/file", f->dir);
	connect_to_agent(f);
	int null_fd = open("/dev/null", O_RDWR);
	assert_int_equal(mote_agent_download(f->agent, missing, null_fd, NULL), -ENOENT);
	assert_non_null(strstr(f->last_log, "No such file"));
	assert_int_equal(mote_agent_upload(f->agent, null_fd, missing, 0644), -ENOENT);
	assert_int_equal(mote_agent_download(f->agent, f->dir, null_fd, NULL), -EISDIR);
	close(null_fd);
	assert_false(mote_agent_broken(f->agent));
	assert_int_equal(run(f, argv, &io, -1, &result), 0);
	assert_int_equal(result.code, 0);
}

static void local_errors_cancel_the_transfer_and_keep_the_connection(void **state)
{
	struct fixture *f = *state;
	char src[160], guest[160];
	const char *argv[] = {"true", NULL};
	struct mote_agent_result result;
	static struct streams io;
	struct stat st;

	snprintf(src, sizeof(src), "%s/src", f->dir);
	snprintf(guest, sizeof(guest), "%s/target", f->dir);
	make_file(src, 1u << 20, 5, 0600);
	connect_to_agent(f);
	/* Reading a directory fails: the upload is cancelled, nothing appears. */
	int dir_fd = open(f->dir, O_RDONLY | O_DIRECTORY);
	assert_int_equal(mote_agent_upload(f->agent, dir_fd, guest, 0644), -EISDIR);
	close(dir_fd);
	assert_int_equal(stat(guest, &st), -1);
	/* Writing to a read-only fd fails: the download is cancelled mid-stream. */
	int ro = open(src, O_RDONLY);
	assert_int_equal(mote_agent_download(f->agent, src, ro, NULL), -EBADF);
	close(ro);
	assert_false(mote_agent_broken(f->agent));
	assert_int_equal(run(f, argv, &io, -1, &result), 0);
	assert_int_equal(result.code, 0);
}

/* The guest says how big a file is and sends what it likes: a download over the
 * limit is cancelled before anything past the limit is written, whether the size the
 * agent announced is over it or the data runs past it (a /proc file announces 0). */
static void a_download_over_the_limit_is_refused_and_the_connection_kept(void **state)
{
	struct fixture *f = *state;
	char src[160], back[160];
	struct stat st;

	snprintf(src, sizeof(src), "%s/src", f->dir);
	snprintf(back, sizeof(back), "%s/back", f->dir);
	make_file(src, 1u << 20, 7, 0600);
	f->options.max_download_bytes = 100;
	connect_to_agent(f);
	int fd = open(back, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_int_equal(mote_agent_download(f->agent, src, fd, NULL), -EFBIG);
	assert_non_null(strstr(f->last_log, "over the limit of 100"));
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_size, 0);
	/* /proc/self/status: size 0, then more than 100 bytes of data. */
	assert_int_equal(mote_agent_download(f->agent, "/proc/self/status", fd, NULL), -EFBIG);
	assert_int_equal(fstat(fd, &st), 0);
	assert_true(st.st_size <= 100);
	close(fd);
	assert_false(mote_agent_broken(f->agent));
	/* Within the limit, as before. */
	char small[160];
	snprintf(small, sizeof(small), "%s/small", f->dir);
	make_file(small, 64, 3, 0600);
	fd = open(back, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_int_equal(mote_agent_download(f->agent, small, fd, NULL), 0);
	close(fd);
	assert_true(hash_file(back) == hash_file(small));
}

static void *raise_later(void *arg)
{
	(void)arg;
	sleep(2);
	kill(getpid(), SIGUSR1);
	return NULL;
}

static int raise_later_on_ready(void *opaque, const void *data, size_t len)
{
	pthread_t *raiser = opaque;

	if (len >= 5 && memcmp(data, "ready", 5) == 0)
		assert_int_equal(pthread_create(raiser, NULL, raise_later, NULL), 0);
	return 0;
}

/* A command that does not read its stdin, fed far more than the agent queues for it:
 * the client keeps within the agent's stdin window, so the agent goes on reading the
 * connection and a signal sent after all that stdin still reaches the command. (Before
 * the window the agent stopped reading, and the client gave up the connection.) */
static void a_signal_behind_stdin_the_command_never_reads_reaches_it(void **state)
{
	struct fixture *f = *state;
	const char *argv[] = {"sh", "-c", "echo ready; exec sleep 1000", NULL};
	struct mote_agent_result result;
	struct mote_agent_exec exec;
	char src[160];
	pthread_t raiser;
	struct caught_signals caught;

	snprintf(src, sizeof(src), "%s/stdin", f->dir);
	make_file(src, 4u << 20, 9, 0600);
	connect_to_agent(f);
	signals_catch(&caught, (const int[]){SIGUSR1, 0});
	int in = open(src, O_RDONLY);
	assert_true(in >= 0);
	mote_agent_exec_init(&exec);
	exec.argv = argv;
	exec.stdin_fd = in;
	exec.signal_fd = caught.fd;
	exec.on_stdout = raise_later_on_ready;
	exec.opaque = &raiser;
	assert_int_equal(mote_agent_exec(f->agent, &exec, &result), 0);
	pthread_join(raiser, NULL);
	signals_release(&caught);
	close(in);
	assert_int_equal(result.outcome, MOTE_AGENT_SIGNALED);
	assert_int_equal(result.code, SIGUSR1);
	assert_false(mote_agent_broken(f->agent));
}

struct resize_pipe {
	int write_fd;
	struct sink out;
	pthread_t writer;
	bool started;
};

/* The request's last byte and the pipe's end, a while after the first three bytes: so
 * the client reads the request in pieces. */
static void *finish_resize_later(void *arg)
{
	struct resize_pipe *p = arg;
	uint16_t size[2] = {50, 132};

	usleep(300 * 1000);
	if (write(p->write_fd, (uint8_t *)size + 3, 1) != 1)
		abort();
	close(p->write_fd);
	return NULL;
}

/* The embedder's window grows once the command is ready: a request, then the pipe's
 * end, which the client takes as no more requests. */
static int resize_through_the_pipe_on_ready(void *opaque, const void *data, size_t len)
{
	struct resize_pipe *p = opaque;
	uint16_t size[2] = {50, 132};

	collect(&p->out, data, len);
	if (!p->started && strstr(p->out.data, "ready")) {
		p->started = true;
		assert_int_equal(write(p->write_fd, size, 3), 3);
		assert_int_equal(pthread_create(&p->writer, NULL, finish_resize_later, p), 0);
	}
	return 0;
}

/* An embedder without a terminal of its own resizes the command's through
 * tty_resize_fd. */
static void an_embedder_resizes_the_terminal_through_a_pipe(void **state)
{
	struct fixture *f = *state;
	const char *argv[] = {"sh", "-c",
			      "trap 'stty size; exit 5' WINCH; echo ready; "
			      "while :; do sleep 0.05; done",
			      NULL};
	struct mote_agent_result result;
	struct mote_agent_exec exec;
	struct resize_pipe p = {0};
	int fds[2];

	assert_int_equal(pipe(fds), 0);
	p.write_fd = fds[1];
	connect_to_agent(f);
	mote_agent_exec_init(&exec);
	exec.argv = argv;
	exec.tty = true;
	exec.tty_resize_fd = fds[0];
	exec.on_stdout = resize_through_the_pipe_on_ready;
	exec.opaque = &p;
	assert_int_equal(mote_agent_exec(f->agent, &exec, &result), 0);
	assert_true(p.started);
	pthread_join(p.writer, NULL);
	close(fds[0]);
	assert_int_equal(result.outcome, MOTE_AGENT_EXITED);
	assert_int_equal(result.code, 5);
	assert_string_equal(p.out.data, "ready\r\n50 132\r\n");
}

static int winch_then_usr1_later_on_ready(void *opaque, const void *data, size_t len)
{
	pthread_t *raiser = opaque;

	if (len >= 5 && memcmp(data, "ready", 5) == 0) {
		kill(getpid(), SIGWINCH);
		assert_int_equal(pthread_create(raiser, NULL, raise_later, NULL), 0);
	}
	return 0;
}

/* On a terminal without one of ours to follow, SIGWINCH means nothing to the command:
 * it is not forwarded as a signal (a later SIGUSR1 is). */
static void sigwinch_without_a_terminal_to_follow_is_not_forwarded(void **state)
{
	struct fixture *f = *state;
	const char *argv[] = {"sh", "-c",
			      "trap 'exit 9' WINCH; trap 'exit 7' USR1; echo ready; "
			      "while :; do sleep 0.05; done",
			      NULL};
	struct mote_agent_result result;
	struct mote_agent_exec exec;
	pthread_t raiser;
	struct caught_signals caught;

	connect_to_agent(f);
	signals_catch(&caught, (const int[]){SIGWINCH, SIGUSR1, 0});
	mote_agent_exec_init(&exec);
	exec.argv = argv;
	exec.signal_fd = caught.fd;
	exec.tty = true;
	exec.on_stdout = winch_then_usr1_later_on_ready;
	exec.opaque = &raiser;
	assert_int_equal(mote_agent_exec(f->agent, &exec, &result), 0);
	pthread_join(raiser, NULL);
	signals_release(&caught);
	assert_int_equal(result.outcome, MOTE_AGENT_EXITED);
	assert_int_equal(result.code, 7);
}

static void power_off_is_acknowledged(void **state)
{
	struct fixture *f = *state;
	char byte = 0;

	connect_to_agent(f);
	assert_int_equal(mote_agent_power_off(f->agent), 0);
	assert_int_equal(wire_read_full(f->power_pipe[0], &byte, 1, wire_now_ms() + 5000), 0);
	assert_int_equal(byte, 'P');
}

static void connect_retries_until_the_guest_listens(void **state)
{
	struct fixture *f = *state;

	f->fake.mode = WIRE_FAKE_NO_REPLY_N;
	f->fake.close_first = 3;
	connect_to_agent(f);
}

static void connect_waits_for_the_socket_to_appear(void **state)
{
	struct fixture *f = *state;

	f->fake.start_delay_ms = 300;
	connect_to_agent(f);
}

static void expect_connect_error(struct fixture *f, int expected, const char *words)
{
	fake_start(f);
	assert_int_equal(mote_agent_connect(&f->options, &f->agent), expected);
	assert_null(f->agent);
	assert_non_null(strstr(f->last_log, words));
}

static void refused_connect_is_an_unexpected_answer(void **state)
{
	struct fixture *f = *state;

	f->fake.mode = WIRE_FAKE_REPLY;
	f->fake.reply = "NO\n";
	expect_connect_error(f, -EPROTO, "unexpected answer to CONNECT 52: \"NO\"");
}

static void ok_without_a_port_is_an_unexpected_answer(void **state)
{
	struct fixture *f = *state;

	f->fake.mode = WIRE_FAKE_REPLY;
	f->fake.reply = "OK\n";
	expect_connect_error(f, -EPROTO, "unexpected answer");
}

static void ok_with_junk_after_the_port_is_an_unexpected_answer(void **state)
{
	struct fixture *f = *state;

	f->fake.mode = WIRE_FAKE_REPLY;
	f->fake.reply = "OK 12x\n";
	expect_connect_error(f, -EPROTO, "\"OK 12x\"");
}

static void endless_answer_line_is_too_long(void **state)
{
	struct fixture *f = *state;

	f->fake.mode = WIRE_FAKE_REPLY;
	f->fake.reply = "OK 1111111111111111111111111111111111111111111111111111111111111111111111";
	expect_connect_error(f, -EPROTO, "too long");
}

static void vmm_that_always_closes_times_out(void **state)
{
	struct fixture *f = *state;

	f->fake.mode = WIRE_FAKE_CLOSE;
	f->options.wait_ms = 500;
	expect_connect_error(f, -ETIMEDOUT, "no agent answered");
	assert_non_null(strstr(f->last_log, "VMM closed the connection"));
}

static void missing_socket_without_waiting_is_enoent(void **state)
{
	struct fixture *f = *state;

	f->options.wait_ms = 0;
	assert_int_equal(mote_agent_connect(&f->options, &f->agent), -ENOENT);
	assert_non_null(strstr(f->last_log, "No such file or directory"));
}

static void missing_socket_with_waiting_times_out(void **state)
{
	struct fixture *f = *state;

	f->options.wait_ms = 300;
	assert_int_equal(mote_agent_connect(&f->options, &f->agent), -ETIMEDOUT);
}

/* Raw agent answers after "OK": frames built here, as a hostile guest would. */
static size_t hello_frame(uint8_t *buf, size_t cap, uint32_t version)
{
	struct agent_writer w;

	agent_writer_init(&w, buf, cap);
	size_t at = agent_frame_open(&w, AGENT_HELLO, 0);
	agent_put_u32(&w, version);
	agent_put_u32(&w, AGENT_MAX_PAYLOAD);
	agent_put_u64(&w, 1);
	agent_put_string(&w, "guest");
	agent_frame_close(&w, at);
	return w.len;
}

static void first_frame_other_than_hello_is_a_protocol_error(void **state)
{
	struct fixture *f = *state;
	static uint8_t raw[64];
	struct agent_writer w;

	agent_writer_init(&w, raw, sizeof(raw));
	agent_frame_close(&w, agent_frame_open(&w, AGENT_STDOUT, 0));
	f->fake.mode = WIRE_FAKE_RAW;
	f->fake.raw = raw;
	f->fake.raw_len = w.len;
	expect_connect_error(f, -EPROTO, "expected HELLO");
}

static void other_protocol_version_is_refused(void **state)
{
	struct fixture *f = *state;
	static uint8_t raw[128];

	f->fake.mode = WIRE_FAKE_RAW;
	f->fake.raw = raw;
	/* The version before terminals: its agent would refuse an EXEC with flag TTY. */
	f->fake.raw_len = hello_frame(raw, sizeof(raw), AGENT_PROTOCOL_VERSION - 1);
	expect_connect_error(f, -EPROTONOSUPPORT, "version 2, not 3");
}

static void oversized_frame_from_the_guest_is_a_protocol_error(void **state)
{
	struct fixture *f = *state;
	static uint8_t raw[AGENT_HEADER_SIZE];

	agent_header_encode(raw, &(struct agent_header){.length = 0x7fffffff, .type = AGENT_HELLO});
	f->fake.mode = WIRE_FAKE_RAW;
	f->fake.raw = raw;
	f->fake.raw_len = sizeof(raw);
	expect_connect_error(f, -EPROTO, "frame of");
}

/* Raw frames after HELLO, each of type and id with the u32 fields given (a list per
 * frame, count fields), appended to raw at *len. */
static void append_frame(uint8_t *raw, size_t cap, size_t *len, uint16_t type, uint32_t id,
			 const uint32_t *fields, size_t count)
{
	struct agent_writer w;

	agent_writer_init(&w, raw + *len, cap - *len);
	size_t at = agent_frame_open(&w, type, id);
	for (size_t i = 0; i < count; i++)
		agent_put_u32(&w, fields[i]);
	agent_frame_close(&w, at);
	assert_false(w.overflow);
	*len += w.len;
}

/* After HELLO the fake agent answers the first request (id 1) with one frame of type
 * and u32 fields: the command fails with -EPROTO, the log says why, and the connection
 * is broken for good. */
static void expect_frame_breaks_the_connection(struct fixture *f, uint16_t type,
					       const uint32_t *fields, size_t count,
					       const char *words)
{
	const char *argv[] = {"true", NULL};
	struct mote_agent_result result;
	static uint8_t raw[256];
	static struct streams io;

	size_t len = hello_frame(raw, sizeof(raw), AGENT_PROTOCOL_VERSION);
	append_frame(raw, sizeof(raw), &len, type, 1, fields, count);
	f->fake.mode = WIRE_FAKE_RAW;
	f->fake.raw = raw;
	f->fake.raw_len = len;
	connect_to_agent(f);
	assert_int_equal(run(f, argv, &io, -1, &result), -EPROTO);
	assert_non_null(strstr(f->last_log, words));
	assert_true(mote_agent_broken(f->agent));
	assert_int_equal(run(f, argv, &io, -1, &result), -ENOTCONN);
}

/* Tens of thousands of frames for no request, ahead of the answer: each is dropped,
 * and the answer still comes through (the buffer is compacted once per fill, not once
 * per frame, so this takes no time to speak of). */
static void a_flood_of_stray_frames_ahead_of_the_answer_is_dropped(void **state)
{
	struct fixture *f = *state;
	const char *argv[] = {"true", NULL};
	const uint32_t exited_3[] = {0, 3};
	struct mote_agent_result result;
	static uint8_t raw[1u << 20];
	static struct streams io;

	size_t len = hello_frame(raw, sizeof(raw), AGENT_PROTOCOL_VERSION);
	for (int i = 0; i < 50000; i++)
		append_frame(raw, sizeof(raw), &len, AGENT_STDOUT, 99, NULL, 0);
	append_frame(raw, sizeof(raw), &len, AGENT_EXIT, 1, exited_3, 2);
	f->fake.mode = WIRE_FAKE_RAW;
	f->fake.raw = raw;
	f->fake.raw_len = len;
	connect_to_agent(f);
	assert_int_equal(run(f, argv, &io, -1, &result), 0);
	assert_int_equal(result.outcome, MOTE_AGENT_EXITED);
	assert_int_equal(result.code, 3);
}

/* A download kept alive without end: by empty DATA frames (a protocol error), or by
 * a trickle, which transfer_timeout_ms ends however steadily it comes. */
static void a_download_cannot_be_kept_alive_for_ever(void **state)
{
	struct fixture *f = *state;
	const uint32_t ok[] = {1000, 0, 0644}; /* u64 size 1000, mode */
	static uint8_t raw[256];
	char back[160];

	size_t len = hello_frame(raw, sizeof(raw), AGENT_PROTOCOL_VERSION);
	append_frame(raw, sizeof(raw), &len, AGENT_OK, 1, ok, 3);
	append_frame(raw, sizeof(raw), &len, AGENT_DATA, 1, NULL, 0);
	f->fake.mode = WIRE_FAKE_RAW;
	f->fake.raw = raw;
	f->fake.raw_len = len;
	connect_to_agent(f);
	snprintf(back, sizeof(back), "%s/back", f->dir);
	int fd = open(back, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_int_equal(mote_agent_download(f->agent, "/x", fd, NULL), -EPROTO);
	assert_non_null(strstr(f->last_log, "empty DATA"));
	close(fd);
	mote_agent_close(f->agent);
	f->agent = NULL;
	kill(f->fake.pid, SIGKILL);
	waitpid(f->fake.pid, NULL, 0);
	unlink(f->path);

	/* One byte, then nothing for longer than the transfer may take. */
	len = hello_frame(raw, sizeof(raw), AGENT_PROTOCOL_VERSION);
	append_frame(raw, sizeof(raw), &len, AGENT_OK, 1, ok, 3);
	append_frame(raw, sizeof(raw), &len, AGENT_DATA, 1, (const uint32_t[]){7}, 1);
	f->fake.raw_len = len;
	f->options.transfer_timeout_ms = 300;
	connect_to_agent(f);
	fd = open(back, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	int64_t start = now_ms();
	assert_int_equal(mote_agent_download(f->agent, "/x", fd, NULL), -ETIMEDOUT);
	assert_true(now_ms() - start < 10000); /* not the 30 s I/O timeout */
	close(fd);
	mote_agent_close(f->agent);
	f->agent = NULL;
	kill(f->fake.pid, SIGKILL);
	waitpid(f->fake.pid, NULL, 0);
	unlink(f->path);

	/* A stream without pause (100,000 frames of a byte, each a write here): it ends
	 * at the deadline, not when the data does. */
	static uint8_t stream[2u << 20];
	const uint32_t big[] = {0, 1, 0644}; /* 4 GiB announced */
	len = hello_frame(stream, sizeof(stream), AGENT_PROTOCOL_VERSION);
	append_frame(stream, sizeof(stream), &len, AGENT_OK, 1, big, 3);
	for (int i = 0; i < 100000; i++) {
		assert_true(len + AGENT_HEADER_SIZE + 1 <= sizeof(stream));
		agent_header_encode(
		    stream + len, &(struct agent_header){.length = 1, .type = AGENT_DATA, .id = 1});
		stream[len + AGENT_HEADER_SIZE] = 'z';
		len += AGENT_HEADER_SIZE + 1;
	}
	f->fake.raw = stream;
	f->fake.raw_len = len;
	f->options.transfer_timeout_ms = 20;
	connect_to_agent(f);
	fd = open(back, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_int_equal(mote_agent_download(f->agent, "/x", fd, NULL), -ETIMEDOUT);
	struct stat st;
	assert_int_equal(fstat(fd, &st), 0);
	assert_true(st.st_size > 0 && st.st_size < 100000);
	close(fd);
}

/* A command that ignores SIGTERM cannot keep the client: after stop_grace_ms the
 * connection is given up (the agent kills the command) and the call says which signal
 * it was. */
static void a_command_that_ignores_a_request_to_stop_is_given_up(void **state)
{
	struct fixture *f = *state;
	const char *argv[] = {"sh", "-c", "trap '' TERM; echo ready; sleep 30", NULL};
	struct mote_agent_result result;
	struct mote_agent_exec exec;
	struct caught_signals caught;

	connect_to_agent(f);
	signals_catch(&caught, (const int[]){SIGTERM, 0});
	mote_agent_exec_init(&exec);
	exec.argv = argv;
	exec.signal_fd = caught.fd;
	exec.stop_grace_ms = 300;
	exec.on_stdout = raise_term_on_ready;
	int64_t start = now_ms();
	assert_int_equal(mote_agent_exec(f->agent, &exec, &result), -ECANCELED);
	signals_release(&caught);
	assert_int_equal(result.code, SIGTERM);
	assert_true(now_ms() - start < 20000);
	assert_non_null(strstr(f->last_log, "did not end after signal"));
}

/* The agent may refuse a command with any error but those mote_agent_exec() gives
 * meanings of its own (and `mote exec` turns into its own exit codes): an ERROR
 * answering EXEC (u16 type, u16 zero) with E2BIG and an empty message. */
static void an_agent_refusing_a_command_with_a_reserved_error_breaks_the_connection(void **state)
{
	const uint32_t e2big_for_exec[] = {E2BIG, AGENT_EXEC, 0};

	expect_frame_breaks_the_connection(*state, AGENT_ERROR, e2big_for_exec, 3, "never gives");
}

static void malformed_exit_breaks_the_connection(void **state)
{
	const uint32_t exit_of_kind_5[] = {5, 0};

	expect_frame_breaks_the_connection(*state, AGENT_EXIT, exit_of_kind_5, 2, "EXIT");
}

/* The command was sent no stdin at all. */
static void stdin_taken_beyond_what_was_sent_breaks_the_connection(void **state)
{
	const uint32_t taken[] = {4096};

	expect_frame_breaks_the_connection(*state, AGENT_STDIN_TAKEN, taken, 1,
					   "malformed STDIN_TAKEN");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
	    T(connect_gets_the_hello),
	    T(exec_returns_output_and_status),
	    T(missing_program_is_not_started_with_enoent),
	    T(stdin_fd_is_forwarded_and_ends_in_eof),
	    T(timeout_kills_the_command),
	    T(signals_from_the_signal_fd_are_forwarded),
	    T(a_command_on_a_terminal_follows_the_size_of_ours),
	    T(sigwinch_without_a_terminal_to_follow_is_not_forwarded),
	    T(an_embedder_resizes_the_terminal_through_a_pipe),
	    T(a_signal_behind_stdin_the_command_never_reads_reaches_it),
	    T(failing_callback_stops_the_command),
	    T(fifty_mib_round_trip_through_the_client),
	    T(agent_errors_keep_the_connection),
	    T(local_errors_cancel_the_transfer_and_keep_the_connection),
	    T(a_download_over_the_limit_is_refused_and_the_connection_kept),
	    T(power_off_is_acknowledged),
	    T(connect_retries_until_the_guest_listens),
	    T(connect_waits_for_the_socket_to_appear),
	    T(refused_connect_is_an_unexpected_answer),
	    T(ok_without_a_port_is_an_unexpected_answer),
	    T(ok_with_junk_after_the_port_is_an_unexpected_answer),
	    T(endless_answer_line_is_too_long),
	    T(vmm_that_always_closes_times_out),
	    T(missing_socket_without_waiting_is_enoent),
	    T(missing_socket_with_waiting_times_out),
	    T(first_frame_other_than_hello_is_a_protocol_error),
	    T(other_protocol_version_is_refused),
	    T(oversized_frame_from_the_guest_is_a_protocol_error),
	    T(malformed_exit_breaks_the_connection),
	    T(stdin_taken_beyond_what_was_sent_breaks_the_connection),
	    T(a_flood_of_stray_frames_ahead_of_the_answer_is_dropped),
	    T(a_download_cannot_be_kept_alive_for_ever),
	    T(a_command_that_ignores_a_request_to_stop_is_given_up),
	    T(an_agent_refusing_a_command_with_a_reserved_error_breaks_the_connection),
#undef T
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
