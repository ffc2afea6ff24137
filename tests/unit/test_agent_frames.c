/* Malformed input to the agent (AGENT_PROTOCOL.md "Errors"): each bad shape of frame
 * gets its ERROR (or the connection closed when the stream cannot be trusted), the
 * server never crashes, and the listener goes on serving other connections. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/un.h>

#include <cmocka.h>

#include "tests/unit/agent_test_wire.h"

/* The next ERROR frame: its errno, and the frame type it answers. */
static uint32_t expect_error(struct wire_fixture *f, uint32_t id, uint16_t *type)
{
	struct agent_reader rd;

	assert_int_equal(wire_recv(f->server.fd, &f->frame), 0);
	assert_int_equal(f->frame.h.type, AGENT_ERROR);
	assert_int_equal(f->frame.h.id, id);
	agent_reader_init(&rd, f->frame.payload, f->frame.h.length);
	uint32_t err = agent_get_u32(&rd);
	uint16_t answered = agent_get_u16(&rd);
	if (type)
		*type = answered;
	return err;
}

/* The connection still works: an echo runs to its end. */
static void expect_still_serving(struct wire_fixture *f, uint32_t id)
{
	const char *argv[] = {"echo", "alive", NULL};

	assert_int_equal(wire_send_exec(f->server.fd, id, 0, NULL, argv, NULL), 0);
	for (;;) {
		assert_int_equal(wire_recv(f->server.fd, &f->frame), 0);
		if (f->frame.h.id == id && f->frame.h.type == AGENT_EXIT)
			return;
		assert_int_not_equal(f->frame.h.type, AGENT_ERROR);
	}
}

static void send_raw(struct wire_fixture *f, const void *bytes, size_t len)
{
	assert_int_equal(wire_write_full(f->server.fd, bytes, len), 0);
}

static void oversized_frame_gets_emsgsize_and_the_connection_closes(void **state)
{
	struct wire_fixture *f = *state;
	uint8_t header[AGENT_HEADER_SIZE];

	wire_expect_hello(f);
	agent_header_encode(
	    header,
	    &(struct agent_header){.length = AGENT_MAX_PAYLOAD + 1, .type = AGENT_EXEC, .id = 1});
	send_raw(f, header, sizeof(header));
	assert_int_equal(expect_error(f, 0, NULL), EMSGSIZE);
	assert_int_equal(wire_recv(f->server.fd, &f->frame), -ECONNRESET);
}

static void unknown_type_gets_eopnotsupp_and_the_connection_goes_on(void **state)
{
	struct wire_fixture *f = *state;
	uint16_t type;

	wire_expect_hello(f);
	assert_int_equal(wire_send(f->server.fd, 0x7777, 3, "abc", 3), 0);
	assert_int_equal(expect_error(f, 3, &type), EOPNOTSUPP);
	assert_int_equal(type, 0x7777);
	/* A type only the agent sends is just as unknown coming from a client. */
	assert_int_equal(wire_send(f->server.fd, AGENT_HELLO, 4, NULL, 0), 0);
	assert_int_equal(expect_error(f, 4, NULL), EOPNOTSUPP);
	expect_still_serving(f, 5);
}

static void reserved_flags_get_eproto_and_the_connection_goes_on(void **state)
{
	struct wire_fixture *f = *state;
	uint8_t header[AGENT_HEADER_SIZE];

	wire_expect_hello(f);
	agent_header_encode(header, &(struct agent_header){
					.length = 0, .type = AGENT_POWER_OFF, .flags = 1, .id = 2});
	send_raw(f, header, sizeof(header));
	assert_int_equal(expect_error(f, 2, NULL), EPROTO);
	expect_still_serving(f, 3);
}

/* EXEC payloads cut, stretched or filled with nonsense. */
static void send_exec_bytes(struct wire_fixture *f, uint32_t id, const uint8_t *payload, size_t len)
{
	assert_int_equal(wire_send(f->server.fd, AGENT_EXEC, id, payload, len), 0);
}

static void truncated_exec_payloads_get_eproto(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {"echo", "x", NULL};
	uint8_t payload[256];
	size_t len = wire_exec_payload(payload, sizeof(payload), 0, NULL, argv, NULL);

	wire_expect_hello(f);
	/* Every cut short of the whole payload: in a field, in a string, between them. */
	for (size_t cut = 0; cut < len; cut++) {
		send_exec_bytes(f, (uint32_t)cut + 1, payload, cut);
		assert_int_equal(expect_error(f, (uint32_t)cut + 1, NULL), EPROTO);
	}
	expect_still_serving(f, 1000);
}

static void exec_payload_with_trailing_bytes_gets_eproto(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {"echo", NULL};
	uint8_t payload[256];
	size_t len = wire_exec_payload(payload, sizeof(payload), 0, NULL, argv, NULL);

	wire_expect_hello(f);
	payload[len++] = 0xff;
	send_exec_bytes(f, 1, payload, len);
	assert_int_equal(expect_error(f, 1, NULL), EPROTO);
}

static void string_length_beyond_the_payload_gets_eproto(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {"echo", NULL};
	uint8_t payload[256];
	size_t len = wire_exec_payload(payload, sizeof(payload), 0, NULL, argv, NULL);

	wire_expect_hello(f);
	/* The argv[0] length field (after flags, argc, envc and the empty cwd). */
	agent_le32_put(payload + 16, 0xfffffff0u);
	send_exec_bytes(f, 1, payload, len);
	assert_int_equal(expect_error(f, 1, NULL), EPROTO);
}

static void nul_inside_an_argument_gets_eproto(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {"echo", "abc", NULL};
	uint8_t payload[256];
	size_t len = wire_exec_payload(payload, sizeof(payload), 0, NULL, argv, NULL);

	wire_expect_hello(f);
	payload[len - 2] = '\0';
	send_exec_bytes(f, 1, payload, len);
	assert_int_equal(expect_error(f, 1, NULL), EPROTO);
}

static void exec_without_arguments_gets_einval(void **state)
{
	struct wire_fixture *f = *state;
	const char *none[] = {NULL};
	uint8_t payload[64];
	size_t len = wire_exec_payload(payload, sizeof(payload), 0, NULL, none, NULL);

	wire_expect_hello(f);
	send_exec_bytes(f, 1, payload, len);
	assert_int_equal(expect_error(f, 1, NULL), EINVAL);
}

static void huge_argument_count_gets_einval_without_allocating_it(void **state)
{
	struct wire_fixture *f = *state;
	uint8_t payload[16] = {0};

	wire_expect_hello(f);
	agent_le32_put(payload + 4, 0xffffffffu);
	send_exec_bytes(f, 1, payload, sizeof(payload));
	assert_int_equal(expect_error(f, 1, NULL), EINVAL);
	agent_le32_put(payload + 4, 1);
	agent_le32_put(payload + 8, 0xffffffffu);
	send_exec_bytes(f, 2, payload, sizeof(payload));
	assert_int_equal(expect_error(f, 2, NULL), E2BIG);
}

/* Counts within the limits but beyond what the payload holds: each missing string
 * used to take a byte of an arena sized by the payload, 8192 of them past its end. */
static void counts_beyond_the_payload_get_eproto(void **state)
{
	struct wire_fixture *f = *state;
	uint8_t payload[12] = {0};

	wire_expect_hello(f);
	agent_le32_put(payload + 4, AGENT_MAX_ARGS);
	agent_le32_put(payload + 8, AGENT_MAX_ENV);
	send_exec_bytes(f, 1, payload, sizeof(payload));
	assert_int_equal(expect_error(f, 1, NULL), EPROTO);
	expect_still_serving(f, 2);
}

static void unknown_exec_flags_get_einval(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {"echo", NULL};

	wire_expect_hello(f);
	assert_int_equal(wire_send_exec(f->server.fd, 1, 0x80, NULL, argv, NULL), 0);
	assert_int_equal(expect_error(f, 1, NULL), EINVAL);
}

static void env_entry_without_a_value_gets_einval(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {"echo", NULL};
	const char *env[] = {"JUSTANAME", NULL};
	const char *env2[] = {"=value", NULL};

	wire_expect_hello(f);
	assert_int_equal(wire_send_exec(f->server.fd, 1, 0, NULL, argv, env), 0);
	assert_int_equal(expect_error(f, 1, NULL), EINVAL);
	assert_int_equal(wire_send_exec(f->server.fd, 2, 0, NULL, argv, env2), 0);
	assert_int_equal(expect_error(f, 2, NULL), EINVAL);
}

static void request_id_zero_gets_einval(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {"echo", NULL};

	wire_expect_hello(f);
	assert_int_equal(wire_send_exec(f->server.fd, 0, 0, NULL, argv, NULL), 0);
	assert_int_equal(expect_error(f, 0, NULL), EINVAL);
}

static void request_id_in_use_gets_eexist(void **state)
{
	struct wire_fixture *f = *state;
	const char *argv[] = {"sleep", "100", NULL};
	uint8_t sig[4];

	wire_expect_hello(f);
	assert_int_equal(wire_send_exec(f->server.fd, 8, 0, NULL, argv, NULL), 0);
	assert_int_equal(wire_recv(f->server.fd, &f->frame), 0);
	assert_int_equal(f->frame.h.type, AGENT_STARTED);
	assert_int_equal(wire_send_exec(f->server.fd, 8, 0, NULL, argv, NULL), 0);
	assert_int_equal(expect_error(f, 8, NULL), EEXIST);
	agent_le32_put(sig, SIGKILL);
	assert_int_equal(wire_send(f->server.fd, AGENT_SIGNAL, 8, sig, sizeof(sig)), 0);
}

static void requests_beyond_the_limit_get_ebusy(void **state)
{
	struct wire_fixture *f = *state;
	uint8_t payload[32 + AGENT_PATH_MAX];
	struct agent_writer w;
	char path[128];

	wire_expect_hello(f);
	for (uint32_t id = 1; id <= AGENT_MAX_REQUESTS + 1; id++) {
		snprintf(path, sizeof(path), "%s/f%u", f->dir, id);
		agent_writer_init(&w, payload, sizeof(payload));
		agent_put_u32(&w, 0644);
		agent_put_u32(&w, 0);
		agent_put_string(&w, path);
		assert_int_equal(wire_send(f->server.fd, AGENT_UPLOAD, id, payload, w.len), 0);
		assert_int_equal(wire_recv(f->server.fd, &f->frame), 0);
		assert_int_equal(f->frame.h.id, id);
		if (id <= AGENT_MAX_REQUESTS) {
			assert_int_equal(f->frame.h.type, AGENT_OK);
		} else {
			assert_int_equal(f->frame.h.type, AGENT_ERROR);
			assert_int_equal(agent_le32_get(f->frame.payload), EBUSY);
		}
	}
}

static void bad_signal_and_stdin_frames_get_errors(void **state)
{
	struct wire_fixture *f = *state;
	uint8_t sig[4];

	wire_expect_hello(f);
	assert_int_equal(wire_send(f->server.fd, AGENT_SIGNAL, 1, "ab", 2), 0);
	assert_int_equal(expect_error(f, 1, NULL), EPROTO);
	agent_le32_put(sig, 4096);
	assert_int_equal(wire_send(f->server.fd, AGENT_SIGNAL, 2, sig, sizeof(sig)), 0);
	assert_int_equal(expect_error(f, 2, NULL), EINVAL);
	assert_int_equal(wire_send(f->server.fd, AGENT_STDIN_EOF, 3, "x", 1), 0);
	assert_int_equal(expect_error(f, 3, NULL), EPROTO);
	/* Stdin for a command that is not (or no longer) there is dropped silently. */
	assert_int_equal(wire_send(f->server.fd, AGENT_STDIN, 4, "x", 1), 0);
	expect_still_serving(f, 5);
}

static void frame_cut_short_by_a_close_ends_the_server_cleanly(void **state)
{
	struct wire_fixture *f = *state;
	uint8_t header[AGENT_HEADER_SIZE];

	wire_expect_hello(f);
	agent_header_encode(header,
			    &(struct agent_header){.length = 100, .type = AGENT_EXEC, .id = 1});
	send_raw(f, header, sizeof(header));
	send_raw(f, "0123456789", 10);
	int status = wire_server_stop(&f->server);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void garbage_never_crashes_the_server(void **state)
{
	struct wire_fixture *f = *state;
	uint8_t junk[4096];
	uint64_t seed = 99;

	wire_expect_hello(f);
	wire_fill(junk, sizeof(junk), &seed);
	/* The agent may close before it has read everything: a failed send is fine. */
	if (wire_write_full(f->server.fd, junk, sizeof(junk)) < 0) {
	}
	shutdown(f->server.fd, SHUT_WR);
	while (wire_recv(f->server.fd, &f->frame) == 0)
		assert_int_equal(f->frame.h.type, AGENT_ERROR);
	/* wire_teardown checks that the server exited by itself. */
}

static void power_off_without_a_hook_gets_enotsup(void **state)
{
	struct wire_fixture *f = *state;
	struct agent_config no_hook = {.quiet = true};

	assert_true(WIFEXITED(wire_server_stop(&f->server)));
	assert_int_equal(wire_server_start(&f->server, &no_hook), 0);
	wire_expect_hello(f);
	assert_int_equal(wire_send(f->server.fd, AGENT_POWER_OFF, 1, NULL, 0), 0);
	assert_int_equal(expect_error(f, 1, NULL), ENOTSUP);
}

/* The listener: agent_accept_loop() on an AF_UNIX socket in a child process. */
struct listener {
	pid_t pid;
	struct sockaddr_un addr;
};

/* Replaces the fixture's socketpair server, whose fd the test then reuses. */
static void listener_start(struct wire_fixture *f, struct listener *l)
{
	assert_true(WIFEXITED(wire_server_stop(&f->server)));
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	l->addr = (struct sockaddr_un){.sun_family = AF_UNIX};
	snprintf(l->addr.sun_path, sizeof(l->addr.sun_path), "%s/agent.sock", f->dir);
	assert_int_equal(bind(fd, (struct sockaddr *)&l->addr, sizeof(l->addr)), 0);
	assert_int_equal(listen(fd, 128), 0);
	l->pid = fork();
	assert_true(l->pid >= 0);
	if (l->pid == 0)
		_exit(agent_accept_loop(fd, &f->config) < 0 ? 1 : 0);
	close(fd);
}

static void listener_stop(struct listener *l)
{
	kill(l->pid, SIGKILL);
	waitpid(l->pid, NULL, 0);
}

static int listener_connect(struct listener *l)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&l->addr, sizeof(l->addr)), 0);
	return fd;
}

static void broken_connection_does_not_disturb_the_next_ones(void **state)
{
	struct wire_fixture *f = *state;
	uint8_t header[AGENT_HEADER_SIZE];
	struct listener l;

	listener_start(f, &l);
	int other = listener_connect(&l);
	int bad = listener_connect(&l);
	f->server.fd = bad;
	wire_expect_hello(f);
	agent_header_encode(header, &(struct agent_header){.length = 0xffffffffu, .type = 1});
	send_raw(f, header, sizeof(header));
	assert_int_equal(expect_error(f, 0, NULL), EMSGSIZE);
	assert_int_equal(wire_recv(bad, &f->frame), -ECONNRESET);
	close(bad);

	/* The connection opened before it, and one opened after it, both work. */
	f->server.fd = other;
	wire_expect_hello(f);
	expect_still_serving(f, 1);
	f->server.fd = listener_connect(&l);
	wire_expect_hello(f);
	expect_still_serving(f, 1);
	close(f->server.fd);
	close(other);
	f->server.fd = -1;
	listener_stop(&l);
}

static void connections_beyond_the_limit_get_ebusy(void **state)
{
	struct wire_fixture *f = *state;
	int fds[AGENT_MAX_CONNECTIONS];
	struct listener l;

	listener_start(f, &l);
	for (int i = 0; i < AGENT_MAX_CONNECTIONS; i++) {
		f->server.fd = fds[i] = listener_connect(&l);
		wire_expect_hello(f);
	}
	f->server.fd = listener_connect(&l);
	assert_int_equal(expect_error(f, 0, NULL), EBUSY);
	assert_int_equal(wire_recv(f->server.fd, &f->frame), -ECONNRESET);
	close(f->server.fd);
	for (int i = 0; i < AGENT_MAX_CONNECTIONS; i++)
		close(fds[i]);
	f->server.fd = -1;
	listener_stop(&l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, wire_setup, wire_teardown)
	    T(oversized_frame_gets_emsgsize_and_the_connection_closes),
	    T(unknown_type_gets_eopnotsupp_and_the_connection_goes_on),
	    T(reserved_flags_get_eproto_and_the_connection_goes_on),
	    T(truncated_exec_payloads_get_eproto),
	    T(exec_payload_with_trailing_bytes_gets_eproto),
	    T(string_length_beyond_the_payload_gets_eproto),
	    T(nul_inside_an_argument_gets_eproto),
	    T(exec_without_arguments_gets_einval),
	    T(huge_argument_count_gets_einval_without_allocating_it),
	    T(counts_beyond_the_payload_get_eproto),
	    T(unknown_exec_flags_get_einval),
	    T(env_entry_without_a_value_gets_einval),
	    T(request_id_zero_gets_einval),
	    T(request_id_in_use_gets_eexist),
	    T(requests_beyond_the_limit_get_ebusy),
	    T(bad_signal_and_stdin_frames_get_errors),
	    T(frame_cut_short_by_a_close_ends_the_server_cleanly),
	    T(garbage_never_crashes_the_server),
	    T(power_off_without_a_hook_gets_enotsup),
	    T(broken_connection_does_not_disturb_the_next_ones),
	    T(connections_beyond_the_limit_get_ebusy),
#undef T
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
