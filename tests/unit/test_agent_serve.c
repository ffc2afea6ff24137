/* The in-guest agent's core, agent_serve(), on the host: a child process serves one end
 * of a socketpair, the test speaks raw frames on the other (AGENT_PROTOCOL.md). */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "tests/unit/agent_test_wire.h"

struct outcome {
	char out[65536];
	size_t out_len;
	char err[4096];
	size_t err_len;
	uint64_t out_total;
	uint64_t out_hash;
	bool started;
	uint32_t pid;
	bool exited;
	uint32_t kind, value;
	bool failed;
	uint32_t fail_errno, fail_stage;
	char message[AGENT_MESSAGE_MAX + 1];
	bool error;
	uint32_t error_errno;
	uint64_t stdin_taken; /* the sum of its STDIN_TAKEN reports */
};

static void append(char *buf, size_t cap, size_t *len, const uint8_t *data, size_t n)
{
	size_t room = cap - 1 - *len;
	size_t take = n < room ? n : room;

	memcpy(buf + *len, data, take);
	*len += take;
	buf[*len] = '\0';
}

static void read_message(struct agent_reader *rd, char *dst)
{
	agent_get_cstring(rd, dst, AGENT_MESSAGE_MAX + 1);
}

/* Handles one frame for request id; true when it ended the request. */
static bool take_frame(const struct wire_frame *f, uint32_t id, struct outcome *o)
{
	struct agent_reader rd;

	if (f->h.id != id)
		return false;
	agent_reader_init(&rd, f->payload, f->h.length);
	switch (f->h.type) {
	case AGENT_STARTED:
		o->started = true;
		o->pid = agent_get_u32(&rd);
		return false;
	case AGENT_STDOUT:
		append(o->out, sizeof(o->out), &o->out_len, f->payload, f->h.length);
		o->out_total += f->h.length;
		o->out_hash = wire_fnv(o->out_hash, f->payload, f->h.length);
		return false;
	case AGENT_STDERR:
		append(o->err, sizeof(o->err), &o->err_len, f->payload, f->h.length);
		return false;
	case AGENT_STDIN_TAKEN:
		o->stdin_taken += agent_get_u32(&rd);
		assert_true(agent_reader_done(&rd));
		return false;
	case AGENT_EXIT:
		o->exited = true;
		o->kind = agent_get_u32(&rd);
		o->value = agent_get_u32(&rd);
		return true;
	case AGENT_EXEC_FAILED:
		o->failed = true;
		o->fail_errno = agent_get_u32(&rd);
		o->fail_stage = agent_get_u32(&rd);
		read_message(&rd, o->message);
		return true;
	case AGENT_ERROR:
		o->error = true;
		o->error_errno = agent_get_u32(&rd);
		agent_get_u16(&rd);
		agent_get_u16(&rd);
		read_message(&rd, o->message);
		return true;
	}
	return false;
}

static void collect(struct wire_fixture *f, uint32_t id, struct outcome *o)
{
	o->out_hash = WIRE_FNV_INIT;
	for (;;) {
		assert_int_equal(wire_recv(f->server.fd, &f->frame), 0);
		if (take_frame(&f->frame, id, o))
			return;
	}
}

static struct outcome *run(struct wire_fixture *f, uint32_t id, uint32_t flags, const char *cwd,
			   const char *const *argv, const char *const *env)
{
	static struct outcome o;

	memset(&o, 0, sizeof(o));
	wire_expect_hello(f);
	assert_int_equal(wire_send_exec(f->server.fd, id, flags, cwd, argv, env), 0);
	collect(f, id, &o);
	return &o;
}

static void hello_comes_first_with_version_and_limits(void **state)
{
	wire_expect_hello(*state);
}

static void exec_streams_stdout_stderr_and_exit_status(void **state)
{
	const char *argv[] = {"sh", "-c", "echo out; echo err >&2; exit 3", NULL};
	struct outcome *o = run(*state, 7, 0, NULL, argv, NULL);

	assert_true(o->started);
	assert_true(o->exited);
	assert_string_equal(o->out, "out\n");
	assert_string_equal(o->err, "err\n");
	assert_int_equal(o->kind, AGENT_EXIT_CODE);
	assert_int_equal(o->value, 3);
}

static void missing_program_could_not_start_with_enoent(void **state)
{
	const char *argv[] = {"/nonexistent/program", NULL};
	struct outcome *o = run(*state, 1, 0, NULL, argv, NULL);

	assert_false(o->exited);
	assert_true(o->failed);
	assert_int_equal(o->fail_errno, ENOENT);
	assert_int_equal(o->fail_stage, AGENT_STAGE_EXEC);
	assert_non_null(strstr(o->message, "/nonexistent/program"));
}

static void program_not_on_path_could_not_start_with_enoent(void **state)
{
	const char *argv[] = {"mote-no-such-command", NULL};
	struct outcome *o = run(*state, 1, 0, NULL, argv, NULL);

	assert_true(o->failed);
	assert_int_equal(o->fail_errno, ENOENT);
}

static void missing_cwd_could_not_start_at_chdir(void **state)
{
	const char *argv[] = {"true", NULL};
	struct outcome *o = run(*state, 1, 0, "/nonexistent-dir", argv, NULL);

	assert_true(o->failed);
	assert_int_equal(o->fail_errno, ENOENT);
	assert_int_equal(o->fail_stage, AGENT_STAGE_CHDIR);
}

static void exit_127_of_a_program_is_an_exit_not_a_failure(void **state)
{
	const char *argv[] = {"sh", "-c", "exit 127", NULL};
	struct outcome *o = run(*state, 1, 0, NULL, argv, NULL);

	assert_true(o->exited);
	assert_false(o->failed);
	assert_int_equal(o->value, 127);
}

static void killed_command_reports_the_signal(void **state)
{
	const char *argv[] = {"sh", "-c", "kill -KILL $$", NULL};
	struct outcome *o = run(*state, 1, 0, NULL, argv, NULL);

	assert_true(o->exited);
	assert_int_equal(o->kind, AGENT_EXIT_SIGNAL);
	assert_int_equal(o->value, SIGKILL);
}

static void signal_request_reaches_a_running_command(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {"sleep", "100", NULL};
	struct outcome o = {0};
	uint8_t sig[4];

	wire_expect_hello(f);
	assert_int_equal(wire_send_exec(f->server.fd, 5, 0, NULL, argv, NULL), 0);
	agent_le32_put(sig, SIGTERM);
	assert_int_equal(wire_send(f->server.fd, AGENT_SIGNAL, 5, sig, sizeof(sig)), 0);
	collect(f, 5, &o);
	assert_true(o.exited);
	assert_int_equal(o.kind, AGENT_EXIT_SIGNAL);
	assert_int_equal(o.value, SIGTERM);
}

/* Stdin for a command that closed its own is dropped, and reported taken all the same:
 * a client keeping within the stdin window would otherwise never send more. */
static void stdin_dropped_after_the_command_closed_it_is_reported_taken(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {"sh", "-c", "exec 0<&-; echo closed; sleep 1", NULL};
	static uint8_t chunk[AGENT_CHUNK_MAX];
	struct outcome o = {0};

	wire_expect_hello(f);
	assert_int_equal(wire_send_exec(f->server.fd, 6, 0, NULL, argv, NULL), 0);
	o.out_hash = WIRE_FNV_INIT;
	while (!strstr(o.out, "closed")) {
		assert_int_equal(wire_recv(f->server.fd, &f->frame), 0);
		assert_false(take_frame(&f->frame, 6, &o));
	}
	for (int i = 0; i < 3; i++)
		assert_int_equal(wire_send(f->server.fd, AGENT_STDIN, 6, chunk, sizeof(chunk)), 0);
	assert_int_equal(wire_send(f->server.fd, AGENT_STDIN_EOF, 6, NULL, 0), 0);
	collect(f, 6, &o);
	assert_int_equal(o.value, 0);
	assert_int_equal(o.stdin_taken, 3 * sizeof(chunk));
}

/* A client that keeps within the stdin window, feeding a command that never reads it
 * until nothing more may be sent: the frames all fit, so a SIGNAL after them is taken
 * at once and ends the command. */
static void a_full_stdin_window_does_not_hold_back_a_signal(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {"sleep", "100", NULL};
	static uint8_t chunk[AGENT_CHUNK_MAX];
	struct outcome o = {0};
	uint64_t sent = 0;
	uint8_t sig[4];

	wire_expect_hello(f);
	assert_int_equal(wire_send_exec(f->server.fd, 7, 0, NULL, argv, NULL), 0);
	for (;;) {
		while (sent - o.stdin_taken + sizeof(chunk) <= AGENT_STDIN_WINDOW) {
			assert_int_equal(
			    wire_send(f->server.fd, AGENT_STDIN, 7, chunk, sizeof(chunk)), 0);
			sent += sizeof(chunk);
		}
		/* The window is full: wait a while for the pipe to take more. */
		if (wire_recv_timeout(f->server.fd, &f->frame, 500) != 0)
			break;
		assert_false(take_frame(&f->frame, 7, &o));
	}
	assert_true(sent >= AGENT_STDIN_WINDOW);
	agent_le32_put(sig, SIGTERM);
	assert_int_equal(wire_send(f->server.fd, AGENT_SIGNAL, 7, sig, sizeof(sig)), 0);
	collect(f, 7, &o);
	assert_int_equal(o.kind, AGENT_EXIT_SIGNAL);
	assert_int_equal(o.value, SIGTERM);
}

static void signal_for_an_unknown_request_is_esrch(void **state)
{
	struct wire_fixture *f = *state;
	struct outcome o = {0};
	uint8_t sig[4];

	wire_expect_hello(f);
	agent_le32_put(sig, SIGTERM);
	assert_int_equal(wire_send(f->server.fd, AGENT_SIGNAL, 9, sig, sizeof(sig)), 0);
	collect(f, 9, &o);
	assert_true(o.error);
	assert_int_equal(o.error_errno, ESRCH);
}

static void stdin_is_forwarded_until_eof(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {"cat", NULL};
	struct outcome o = {0};

	wire_expect_hello(f);
	assert_int_equal(wire_send_exec(f->server.fd, 2, 0, NULL, argv, NULL), 0);
	assert_int_equal(wire_send(f->server.fd, AGENT_STDIN, 2, "hello ", 6), 0);
	assert_int_equal(wire_send(f->server.fd, AGENT_STDIN, 2, "world\n", 6), 0);
	assert_int_equal(wire_send(f->server.fd, AGENT_STDIN_EOF, 2, NULL, 0), 0);
	collect(f, 2, &o);
	assert_string_equal(o.out, "hello world\n");
	assert_int_equal(o.value, 0);
	/* Every byte was reported taken, so a client may send that much more. */
	assert_int_equal(o.stdin_taken, 12);
}

/* 4 MiB through cat: stdin and stdout both flow-controlled, nothing lost. */
static void large_stdin_round_trips_through_cat(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {"cat", NULL};
	static uint8_t chunk[AGENT_CHUNK_MAX];
	struct outcome o = {0};
	uint64_t seed = 42, hash = WIRE_FNV_INIT;
	const size_t total = 4u << 20;

	wire_expect_hello(f);
	assert_int_equal(wire_send_exec(f->server.fd, 3, 0, NULL, argv, NULL), 0);
	o.out_hash = WIRE_FNV_INIT;
	/* Send and receive at once: cat only takes more once its output is read. */
	size_t sent = 0;
	while (sent < total || !o.exited) {
		struct pollfd pfd = {.fd = f->server.fd, .events = POLLIN};
		if (sent < total)
			pfd.events |= POLLOUT;
		assert_true(poll(&pfd, 1, WIRE_TIMEOUT_MS) > 0);
		if (pfd.revents & POLLIN) {
			assert_int_equal(wire_recv(f->server.fd, &f->frame), 0);
			take_frame(&f->frame, 3, &o);
		} else if (pfd.revents & POLLOUT) {
			wire_fill(chunk, sizeof(chunk), &seed);
			hash = wire_fnv(hash, chunk, sizeof(chunk));
			assert_int_equal(
			    wire_send(f->server.fd, AGENT_STDIN, 3, chunk, sizeof(chunk)), 0);
			sent += sizeof(chunk);
			if (sent == total)
				assert_int_equal(
				    wire_send(f->server.fd, AGENT_STDIN_EOF, 3, NULL, 0), 0);
		}
	}
	assert_int_equal(o.out_total, total);
	assert_true(o.out_hash == hash);
	assert_int_equal(o.value, 0);
	assert_int_equal(o.stdin_taken, total);
}

static void env_entries_are_added_to_the_agents_environment(void **state)
{
	const char *argv[] = {"sh", "-c", "echo $MOTE_A-$MOTE_B-$MOTE_INHERITED; test -n \"$PATH\"",
			      NULL};
	const char *env[] = {"MOTE_A=one", "MOTE_B=two", "MOTE_A=three", NULL};
	struct outcome *o = run(*state, 1, 0, NULL, argv, env);

	assert_string_equal(o->out, "three-two-yes\n");
	assert_int_equal(o->value, 0);
}

static void env_replace_gives_exactly_the_requested_environment(void **state)
{
	const char *argv[] = {"/bin/sh", "-c", "echo \"$MOTE_A:${MOTE_INHERITED-unset}\"", NULL};
	const char *env[] = {"MOTE_A=only", NULL};
	struct outcome *o = run(*state, 1, AGENT_EXEC_ENV_REPLACE, NULL, argv, env);

	assert_string_equal(o->out, "only:unset\n");
}

static void cwd_is_the_commands_working_directory(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {"pwd", NULL};
	char expected[80];
	struct outcome *o = run(f, 1, 0, f->dir, argv, NULL);

	snprintf(expected, sizeof(expected), "%s\n", f->dir);
	assert_string_equal(o->out, expected);
}

static void commands_on_one_connection_run_at_once(void **state)
{
	struct wire_fixture *f = *state;
	const char *slow[] = {"sh", "-c", "sleep 1; echo slow", NULL};
	const char *fast[] = {"echo", "fast", NULL};
	uint32_t first_exit = 0;
	int exits = 0;

	wire_expect_hello(f);
	assert_int_equal(wire_send_exec(f->server.fd, 10, 0, NULL, slow, NULL), 0);
	assert_int_equal(wire_send_exec(f->server.fd, 11, 0, NULL, fast, NULL), 0);
	while (exits < 2) {
		assert_int_equal(wire_recv(f->server.fd, &f->frame), 0);
		if (f->frame.h.type == AGENT_EXIT) {
			if (!exits)
				first_exit = f->frame.h.id;
			exits++;
		}
	}
	assert_int_equal(first_exit, 11);
}

/* A client that reads nothing stops the command: the agent stops reading its pipe
 * once the socket and its own bounded buffer are full, so 8 MiB cannot all leave. */
static void output_stalls_while_the_client_does_not_read(void **state)
{
	struct wire_fixture *f = *state;
	char script[200], marker[100];
	struct outcome o = {0};
	struct stat st;

	snprintf(marker, sizeof(marker), "%s/done", f->dir);
	snprintf(script, sizeof(script), "head -c 8388608 /dev/zero; touch %s", marker);
	const char *argv[] = {"sh", "-c", script, NULL};
	wire_expect_hello(f);
	assert_int_equal(wire_send_exec(f->server.fd, 4, 0, NULL, argv, NULL), 0);
	nanosleep(&(struct timespec){.tv_nsec = 500000000}, NULL);
	assert_int_equal(stat(marker, &st), -1);
	collect(f, 4, &o);
	assert_int_equal(o.out_total, 8388608);
	assert_int_equal(o.value, 0);
	assert_int_equal(stat(marker, &st), 0);
}

static void closing_the_connection_kills_its_commands(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {"sleep", "100", NULL};

	wire_expect_hello(f);
	assert_int_equal(wire_send_exec(f->server.fd, 1, 0, NULL, argv, NULL), 0);
	assert_int_equal(wire_recv(f->server.fd, &f->frame), 0);
	assert_int_equal(f->frame.h.type, AGENT_STARTED);
	pid_t pid = (pid_t)agent_le32_get(f->frame.payload);
	int status = wire_server_stop(&f->server);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(kill(pid, 0), -1);
	assert_int_equal(errno, ESRCH);
}

/* EXEC with flag TTY, the terminal rows x cols. */
static void send_exec_on_terminal(struct wire_fixture *f, uint32_t id, uint16_t rows, uint16_t cols,
				  const char *const *argv)
{
	static uint8_t payload[AGENT_MAX_PAYLOAD];
	size_t len =
	    wire_exec_payload(payload, sizeof(payload) - 4, AGENT_EXEC_TTY, NULL, argv, NULL);

	assert_true(len > 0);
	agent_le16_put(payload + len, rows);
	agent_le16_put(payload + len + 2, cols);
	assert_int_equal(wire_send(f->server.fd, AGENT_EXEC, id, payload, len + 4), 0);
}

/* Frames of request id until its output holds text (the request must not end first). */
static void collect_until(struct wire_fixture *f, uint32_t id, struct outcome *o, const char *text)
{
	o->out_hash = WIRE_FNV_INIT;
	while (!strstr(o->out, text)) {
		assert_int_equal(wire_recv(f->server.fd, &f->frame), 0);
		assert_false(take_frame(&f->frame, id, o));
	}
}

/* A command on a 24 x 80 terminal, given input and then the end of stdin; it must exit
 * with status 0, and o holds what came out of the terminal. */
static void run_on_terminal_with_input(struct wire_fixture *f, uint32_t id, const char *const *argv,
				       const char *input, struct outcome *o)
{
	send_exec_on_terminal(f, id, 24, 80, argv);
	assert_int_equal(wire_send(f->server.fd, AGENT_STDIN, id, input, strlen(input)), 0);
	assert_int_equal(wire_send(f->server.fd, AGENT_STDIN_EOF, id, NULL, 0), 0);
	collect(f, id, o);
	assert_true(o->exited);
	assert_int_equal(o->kind, AGENT_EXIT_CODE);
	assert_int_equal(o->value, 0);
}

/* Its stdin, stdout and stderr are one terminal of the size asked for, which is its
 * controlling terminal; everything comes as STDOUT, through the line discipline. */
static void a_command_on_a_terminal_sees_one_of_its_size(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {"sh", "-c",
			      "test -t 0 && test -t 1 && test -t 2 && echo tty; stty size; "
			      "echo err >&2; : </dev/tty && echo ctty",
			      NULL};
	struct outcome o = {0};

	wire_expect_hello(f);
	send_exec_on_terminal(f, 4, 33, 101, argv);
	collect(f, 4, &o);
	assert_true(o.exited);
	assert_int_equal(o.value, 0);
	assert_string_equal(o.out, "tty\r\n33 101\r\nerr\r\nctty\r\n");
	assert_int_equal(o.err_len, 0);
}

/* RESIZE changes the terminal's size, and the command gets SIGWINCH. */
static void resize_reaches_the_command_as_sigwinch(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {
	    "sh", "-c", "trap 'stty size; exit 0' WINCH; echo ready; while :; do sleep 0.05; done",
	    NULL};
	struct outcome o = {0};
	uint8_t size[4];

	wire_expect_hello(f);
	send_exec_on_terminal(f, 6, 24, 80, argv);
	collect_until(f, 6, &o, "ready");
	agent_le16_put(size, 50);
	agent_le16_put(size + 2, 132);
	assert_int_equal(wire_send(f->server.fd, AGENT_RESIZE, 6, size, sizeof(size)), 0);
	collect(f, 6, &o);
	assert_true(o.exited);
	assert_int_equal(o.value, 0);
	assert_non_null(strstr(o.out, "50 132\r\n"));
}

/* Typed input goes through the terminal: ^C is SIGINT for the foreground job, and the
 * end of stdin is the end-of-file character, which ends a cat. */
static void a_terminal_turns_ctrl_c_into_sigint_and_eof_into_end_of_file(void **state)
{
	struct wire_fixture *f = *state;
	const char *sleeper[] = {"sleep", "100", NULL};
	const char *cat[] = {"cat", NULL};
	struct outcome o = {0};

	wire_expect_hello(f);
	send_exec_on_terminal(f, 8, 24, 80, sleeper);
	assert_int_equal(wire_send(f->server.fd, AGENT_STDIN, 8, "\x03", 1), 0);
	collect(f, 8, &o);
	assert_true(o.exited);
	assert_int_equal(o.kind, AGENT_EXIT_SIGNAL);
	assert_int_equal(o.value, SIGINT);

	memset(&o, 0, sizeof(o));
	run_on_terminal_with_input(f, 9, cat, "hi\n", &o);
	/* The terminal's echo of the line, then cat's copy of it. */
	assert_string_equal(o.out, "hi\r\nhi\r\n");
}

/* The end of stdin after a partial line: the first end-of-file character only ends
 * the line in canonical mode, so the agent sends a second, and cat ends. */
static void eof_after_a_partial_line_still_ends_the_input(void **state)
{
	struct wire_fixture *f = *state;
	const char *cat[] = {"cat", NULL};
	struct outcome o = {0};

	wire_expect_hello(f);
	run_on_terminal_with_input(f, 10, cat, "abc", &o);
	assert_string_equal(o.out, "abcabc");
}

/* A command that closed its terminal descriptors and opens the terminal again later
 * (a password prompt does) still reaches the client, and a resize to 0 x 0 means the
 * default size. */
static void a_terminal_reopened_after_closing_it_still_reaches_the_client(void **state)
{
	struct wire_fixture *f = *state;
	/* More than a terminal buffers (the pty's and the line discipline's), so the
	 * command finishes only if the agent reads while it runs. */
	const char *argv[] = {"sh", "-c",
			      "exec </dev/null >/dev/null 2>&1; sleep 0.3; "
			      "head -c 262144 /dev/zero | tr '\\0' x >/dev/tty; "
			      "stty size </dev/tty >/dev/tty",
			      NULL};
	uint8_t size[4] = {0, 0, 0, 0};
	struct outcome o = {0};

	wire_expect_hello(f);
	send_exec_on_terminal(f, 11, 30, 90, argv);
	assert_int_equal(wire_send(f->server.fd, AGENT_RESIZE, 11, size, sizeof(size)), 0);
	collect(f, 11, &o);
	assert_true(o.exited);
	assert_int_equal(o.value, 0);
	assert_int_equal(o.out_total, 262144 + strlen("24 80\r\n"));
}

/* An Enter typed as a carriage return ends the line (ICRNL), so the end of stdin is a
 * single end-of-file: a second one would end the next reader's input too. */
static void a_line_ended_by_a_carriage_return_gets_a_single_eof(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {"sh", "-c", "cat; timeout 1 cat; echo \"rc $?\"", NULL};
	struct outcome o = {0};

	wire_expect_hello(f);
	run_on_terminal_with_input(f, 12, argv, "hi\r", &o);
	assert_non_null(strstr(o.out, "rc 124\r\n"));
}

static void resize_without_a_terminal_or_malformed_is_refused(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {"sleep", "100", NULL};
	uint8_t size[4] = {1, 0, 1, 0};
	struct outcome o = {0};

	wire_expect_hello(f);
	assert_int_equal(wire_send_exec(f->server.fd, 3, 0, NULL, argv, NULL), 0);
	assert_int_equal(wire_send(f->server.fd, AGENT_RESIZE, 3, size, sizeof(size)), 0);
	collect(f, 3, &o);
	assert_true(o.error);
	assert_int_equal(o.error_errno, ENOTTY);
	memset(&o, 0, sizeof(o));
	assert_int_equal(wire_send(f->server.fd, AGENT_RESIZE, 3, size, 3), 0);
	collect(f, 3, &o);
	assert_true(o.error);
	assert_int_equal(o.error_errno, EPROTO);
	memset(&o, 0, sizeof(o));
	assert_int_equal(wire_send(f->server.fd, AGENT_RESIZE, 99, size, sizeof(size)), 0);
	collect(f, 99, &o);
	assert_true(o.error);
	assert_int_equal(o.error_errno, ESRCH);
	/* The command was not disturbed: it still answers a signal. */
	agent_le32_put(size, SIGTERM);
	assert_int_equal(wire_send(f->server.fd, AGENT_SIGNAL, 3, size, sizeof(size)), 0);
	memset(&o, 0, sizeof(o));
	collect(f, 3, &o);
	assert_true(o.exited);
	assert_int_equal(o.value, SIGTERM);
}

static void power_off_is_acknowledged_then_requested(void **state)
{
	struct wire_fixture *f = *state;
	char byte = 0;

	wire_expect_hello(f);
	assert_int_equal(wire_send(f->server.fd, AGENT_POWER_OFF, 3, NULL, 0), 0);
	assert_int_equal(wire_recv(f->server.fd, &f->frame), 0);
	assert_int_equal(f->frame.h.type, AGENT_OK);
	assert_int_equal(f->frame.h.id, 3);
	assert_int_equal(wire_read_full(f->power_pipe[0], &byte, 1, wire_now_ms() + 5000), 0);
	assert_int_equal(byte, 'P');
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, wire_setup, wire_teardown)
	    T(hello_comes_first_with_version_and_limits),
	    T(exec_streams_stdout_stderr_and_exit_status),
	    T(missing_program_could_not_start_with_enoent),
	    T(program_not_on_path_could_not_start_with_enoent),
	    T(missing_cwd_could_not_start_at_chdir),
	    T(exit_127_of_a_program_is_an_exit_not_a_failure),
	    T(killed_command_reports_the_signal),
	    T(signal_request_reaches_a_running_command),
	    T(signal_for_an_unknown_request_is_esrch),
	    T(stdin_dropped_after_the_command_closed_it_is_reported_taken),
	    T(a_full_stdin_window_does_not_hold_back_a_signal),
	    T(stdin_is_forwarded_until_eof),
	    T(large_stdin_round_trips_through_cat),
	    T(env_entries_are_added_to_the_agents_environment),
	    T(env_replace_gives_exactly_the_requested_environment),
	    T(cwd_is_the_commands_working_directory),
	    T(commands_on_one_connection_run_at_once),
	    T(output_stalls_while_the_client_does_not_read),
	    T(closing_the_connection_kills_its_commands),
	    T(a_command_on_a_terminal_sees_one_of_its_size),
	    T(resize_reaches_the_command_as_sigwinch),
	    T(a_terminal_turns_ctrl_c_into_sigint_and_eof_into_end_of_file),
	    T(eof_after_a_partial_line_still_ends_the_input),
	    T(a_terminal_reopened_after_closing_it_still_reaches_the_client),
	    T(a_line_ended_by_a_carriage_return_gets_a_single_eof),
	    T(resize_without_a_terminal_or_malformed_is_refused),
	    T(power_off_is_acknowledged_then_requested),
#undef T
	};
	/* The agent's own environment, which commands inherit unless told otherwise. */
	setenv("MOTE_INHERITED", "yes", 1);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
