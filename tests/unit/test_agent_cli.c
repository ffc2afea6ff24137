/* `mote exec` and `mote cp` (vmm/cli_exec.h): their options, and their exit codes and
 * output end to end against a fake VMM socket with the real agent behind it. */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "tests/unit/agent_test_wire.h"
#include "vmm/cli_exec.h"

#define ARGC(argv) ((int)(sizeof(argv) / sizeof((argv)[0])) - 1)

static void exec_options_stop_at_the_command(void **state)
{
	char *argv[] = {
	    "exec",  "--vsock",	     "/run/vm.sock", "--env", "A=1",	 "--env",     "B=x=y",
	    "--cwd", "/tmp",	     "--port",	     "1024",  "--wait",	 "2.5",	      "--timeout",
	    "1",     "--no-seccomp", "ls",	     "-l",    "--vsock", "elsewhere", NULL};
	struct cli_agent_options opts;
	char error[256] = "";

	(void)state;
	assert_int_equal(cli_exec_parse(&opts, ARGC(argv), argv, error, sizeof(error)), 0);
	assert_string_equal(opts.vsock_path, "/run/vm.sock");
	assert_int_equal(opts.port, 1024);
	assert_int_equal(opts.wait_ms, 2500);
	assert_int_equal(opts.timeout_ms, 1000);
	assert_true(opts.no_seccomp);
	assert_string_equal(opts.cwd, "/tmp");
	assert_int_equal(opts.env_count, 2);
	assert_string_equal(opts.env[1], "B=x=y");
	assert_null(opts.env[2]);
	assert_string_equal(opts.command[0], "ls");
	assert_string_equal(opts.command[1], "-l");
	assert_string_equal(opts.command[2], "--vsock");
	assert_null(opts.command[4]);
	cli_agent_options_free(&opts);
}

/* A timeout above 0 never rounds to 0 ms, which would mean none at all. */
static void a_tiny_timeout_is_still_a_timeout(void **state)
{
	char *argv[] = {"exec", "--vsock", "v", "--timeout", "0.0004", "ls", NULL};
	struct cli_agent_options opts;
	char error[256] = "";

	(void)state;
	assert_int_equal(cli_exec_parse(&opts, ARGC(argv), argv, error, sizeof(error)), 0);
	assert_int_equal(opts.timeout_ms, 1);
	cli_agent_options_free(&opts);
}

static void exec_defaults_and_double_dash(void **state)
{
	char *argv[] = {"exec", "--vsock", "v.sock", "--", "--odd-name", NULL};
	struct cli_agent_options opts;
	char error[256] = "";

	(void)state;
	assert_int_equal(cli_exec_parse(&opts, ARGC(argv), argv, error, sizeof(error)), 0);
	assert_int_equal(opts.port, 52);
	assert_int_equal(opts.wait_ms, CLI_AGENT_DEFAULT_WAIT_S * 1000);
	assert_int_equal(opts.timeout_ms, 0);
	assert_false(opts.no_seccomp);
	assert_null(opts.cwd);
	assert_string_equal(opts.command[0], "--odd-name");
	cli_agent_options_free(&opts);
}

static void expect_exec_error(char **argv, int argc, const char *words)
{
	struct cli_agent_options opts;
	char error[256] = "";

	assert_int_equal(cli_exec_parse(&opts, argc, argv, error, sizeof(error)), -EINVAL);
	assert_non_null(strstr(error, words));
	cli_agent_options_free(&opts);
}

static void bad_exec_command_lines_say_what_is_wrong(void **state)
{
	char *no_vsock[] = {"exec", "ls", NULL};
	char *no_command[] = {"exec", "--vsock", "v", NULL};
	char *port_zero[] = {"exec", "--vsock", "v", "--port", "0", "ls", NULL};
	char *port_any[] = {"exec", "--vsock", "v", "--port", "4294967295", "ls", NULL};
	char *bad_env[] = {"exec", "--vsock", "v", "--env", "NOVALUE", "ls", NULL};
	char *nameless_env[] = {"exec", "--vsock", "v", "--env", "=v", "ls", NULL};
	char *bad_wait[] = {"exec", "--vsock", "v", "--wait", "-1", "ls", NULL};
	char *bad_timeout[] = {"exec", "--vsock", "v", "--timeout", "soon", "ls", NULL};
	char *hex_timeout[] = {"exec", "--vsock", "v", "--timeout", "0x2", "ls", NULL};
	char *spaced_timeout[] = {"exec", "--vsock", "v", "--timeout", " 5", "ls", NULL};
	char *grouped[] = {"exec", "--vsock", "v", "-xt", "ls", NULL};
	char *unknown[] = {"exec", "--vsock", "v", "--bogus", "ls", NULL};
	char *max_size[] = {"exec", "--vsock", "v", "--max-size", "1G", "ls", NULL};

	(void)state;
	expect_exec_error(no_vsock, ARGC(no_vsock), "--vsock PATH");
	expect_exec_error(no_command, ARGC(no_command), "no command");
	expect_exec_error(port_zero, ARGC(port_zero), "--port 0");
	expect_exec_error(port_any, ARGC(port_any), "--port 4294967295");
	expect_exec_error(bad_env, ARGC(bad_env), "NAME=VALUE");
	expect_exec_error(nameless_env, ARGC(nameless_env), "NAME=VALUE");
	expect_exec_error(bad_wait, ARGC(bad_wait), "--wait -1");
	expect_exec_error(bad_timeout, ARGC(bad_timeout), "--timeout soon");
	expect_exec_error(hex_timeout, ARGC(hex_timeout), "--timeout 0x2");
	expect_exec_error(spaced_timeout, ARGC(spaced_timeout), "--timeout  5");
	expect_exec_error(grouped, ARGC(grouped), "option -x");
	expect_exec_error(unknown, ARGC(unknown), "--bogus");
	expect_exec_error(max_size, ARGC(max_size), "unknown option --max-size");
}

static void cp_takes_one_guest_path(void **state)
{
	char *up[] = {"cp", "--vsock", "v", "local", "guest:/tmp/x", NULL};
	char *down[] = {"cp", "--vsock", "v", "--port", "7", "guest:/etc/hosts", "-", NULL};
	struct cli_agent_options opts;
	char error[256] = "";

	(void)state;
	assert_int_equal(cli_cp_parse(&opts, ARGC(up), up, error, sizeof(error)), 0);
	assert_string_equal(opts.src, "local");
	assert_string_equal(opts.dst, "guest:/tmp/x");
	cli_agent_options_free(&opts);
	assert_int_equal(cli_cp_parse(&opts, ARGC(down), down, error, sizeof(error)), 0);
	assert_int_equal(opts.port, 7);
	assert_string_equal(opts.dst, "-");
	assert_int_equal(opts.max_size, 0);
	cli_agent_options_free(&opts);
	char *capped[] = {"cp",		  "--vsock",  "v", "--max-size", "2G",
			  "--no-seccomp", "guest:/x", "-", NULL};
	assert_int_equal(cli_cp_parse(&opts, ARGC(capped), capped, error, sizeof(error)), 0);
	assert_int_equal(opts.max_size, 2ULL << 30);
	assert_true(opts.no_seccomp);
	cli_agent_options_free(&opts);
}

static void expect_cp_error(char **argv, int argc, const char *words)
{
	struct cli_agent_options opts;
	char error[256] = "";

	assert_int_equal(cli_cp_parse(&opts, argc, argv, error, sizeof(error)), -EINVAL);
	assert_non_null(strstr(error, words));
	cli_agent_options_free(&opts);
}

static void bad_cp_command_lines_say_what_is_wrong(void **state)
{
	char *both_local[] = {"cp", "--vsock", "v", "a", "b", NULL};
	char *both_guest[] = {"cp", "--vsock", "v", "guest:/a", "guest:/b", NULL};
	char *one[] = {"cp", "--vsock", "v", "guest:/a", NULL};
	char *three[] = {"cp", "--vsock", "v", "a", "b", "guest:/c", NULL};
	char *empty[] = {"cp", "--vsock", "v", "a", "guest:", NULL};
	char *env[] = {"cp", "--vsock", "v", "--env", "A=1", "a", "guest:/b", NULL};
	char *size[] = {"cp", "--vsock", "v", "--max-size", "lots", "guest:/a", "b", NULL};
	char *zero[] = {"cp", "--vsock", "v", "--max-size", "0", "guest:/a", "b", NULL};

	(void)state;
	expect_cp_error(both_local, ARGC(both_local), "exactly one");
	expect_cp_error(both_guest, ARGC(both_guest), "exactly one");
	expect_cp_error(one, ARGC(one), "SRC DST");
	expect_cp_error(three, ARGC(three), "SRC DST");
	expect_cp_error(empty, ARGC(empty), "no path");
	expect_cp_error(env, ARGC(env), "unknown option --env");
	expect_cp_error(size, ARGC(size), "--max-size lots");
	expect_cp_error(zero, ARGC(zero), "--max-size 0");
}

/* End to end: the subcommand in a child process with files for its stdio. */
struct fixture {
	char dir[64];
	char sock[96];
	struct wire_fake_vmm fake;
	char out[4096];
	char err[4096];
};

static int setup(void **state)
{
	static struct fixture f;

	memset(&f, 0, sizeof(f));
	snprintf(f.dir, sizeof(f.dir), "/tmp/mote-agent-cli-XXXXXX");
	if (!mkdtemp(f.dir))
		return -1;
	snprintf(f.sock, sizeof(f.sock), "%s/v.sock", f.dir);
	f.fake.config.quiet = true;
	wire_fake_vmm_start(&f.fake, f.sock);
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char command[128];

	kill(f->fake.pid, SIGKILL);
	waitpid(f->fake.pid, NULL, 0);
	snprintf(command, sizeof(command), "rm -rf %s", f->dir);
	return system(command) == 0 ? 0 : -1;
}

static void slurp(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY);
	ssize_t n = fd >= 0 ? read(fd, buf, cap - 1) : -1;

	buf[n > 0 ? n : 0] = '\0';
	if (fd >= 0)
		close(fd);
}

/* stdin_path NULL: stdin closed. */
static int run_cli(struct fixture *f, int (*main_fn)(int, char **), char **argv,
		   const char *stdin_path)
{
	char out[128], err[128];
	int argc = 0, status;

	while (argv[argc])
		argc++;
	snprintf(out, sizeof(out), "%s/stdout", f->dir);
	snprintf(err, sizeof(err), "%s/stderr", f->dir);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int in_fd = stdin_path ? open(stdin_path, O_RDONLY) : -1;
		int out_fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int err_fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (in_fd >= 0)
			dup2(in_fd, 0);
		else
			close(0);
		dup2(out_fd, 1);
		dup2(err_fd, 2);
		_exit(main_fn(argc, argv));
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	slurp(out, f->out, sizeof(f->out));
	slurp(err, f->err, sizeof(f->err));
	assert_true(WIFEXITED(status));
	return WEXITSTATUS(status);
}

static void exec_exits_with_the_commands_status(void **state)
{
	struct fixture *f = *state;
	char *argv[] = {"exec", "--vsock", f->sock, "sh", "-c", "echo out; echo err >&2; exit 3",
			NULL};

	assert_int_equal(run_cli(f, cli_exec_main, argv, "/dev/null"), 3);
	assert_string_equal(f->out, "out\n");
	assert_string_equal(f->err, "err\n");
}

static void exec_killed_by_a_signal_exits_128_plus_it(void **state)
{
	struct fixture *f = *state;
	char *argv[] = {"exec", "--vsock", f->sock, "sh", "-c", "kill -TERM $$", NULL};

	assert_int_equal(run_cli(f, cli_exec_main, argv, "/dev/null"), 128 + SIGTERM);
}

static void exec_of_a_missing_program_exits_127_with_a_message(void **state)
{
	struct fixture *f = *state;
	char *argv[] = {"exec", "--vsock", f->sock, "no-such-program-here", NULL};

	assert_int_equal(run_cli(f, cli_exec_main, argv, "/dev/null"), 127);
	assert_non_null(strstr(f->err, "cannot run no-such-program-here"));
	assert_non_null(strstr(f->err, "No such file or directory"));
}

static void exec_without_an_agent_exits_125(void **state)
{
	struct fixture *f = *state;
	char missing[128];

	snprintf(missing, sizeof(missing), "%s/none.sock", f->dir);
	char *argv[] = {"exec", "--vsock", missing, "--wait", "0.2", "true", NULL};
	assert_int_equal(run_cli(f, cli_exec_main, argv, "/dev/null"), 125);
	assert_non_null(strstr(f->err, "no agent answered"));
}

static void exec_past_its_timeout_exits_124(void **state)
{
	struct fixture *f = *state;
	char *argv[] = {"exec", "--vsock", f->sock, "--timeout", "0.3", "sleep", "100", NULL};

	assert_int_equal(run_cli(f, cli_exec_main, argv, "/dev/null"), 124);
	assert_non_null(strstr(f->err, "timed out"));
}

static void exec_forwards_stdin_and_survives_a_closed_one(void **state)
{
	struct fixture *f = *state;
	char input[128];
	char *argv[] = {"exec", "--vsock", f->sock, "cat", NULL};

	snprintf(input, sizeof(input), "%s/input", f->dir);
	int fd = open(input, O_WRONLY | O_CREAT, 0600);
	assert_int_equal(write(fd, "from stdin\n", 11), 11);
	close(fd);
	assert_int_equal(run_cli(f, cli_exec_main, argv, input), 0);
	assert_string_equal(f->out, "from stdin\n");
	assert_int_equal(run_cli(f, cli_exec_main, argv, NULL), 0);
	assert_string_equal(f->out, "");
}

static void exec_passes_env_and_cwd(void **state)
{
	struct fixture *f = *state;
	char *argv[] = {"exec",	 "--vsock", f->sock, "--env", "MOTE_X=42",
			"--cwd", f->dir,    "sh",    "-c",    "echo $MOTE_X; pwd",
			NULL};
	char expected[128];

	snprintf(expected, sizeof(expected), "42\n%s\n", f->dir);
	assert_int_equal(run_cli(f, cli_exec_main, argv, "/dev/null"), 0);
	assert_string_equal(f->out, expected);
}

static void cp_copies_in_and_out_keeping_the_mode(void **state)
{
	struct fixture *f = *state;
	char src[128], guest[136], back_dir[128], back[160];
	struct stat st;

	snprintf(src, sizeof(src), "%s/tool", f->dir);
	snprintf(guest, sizeof(guest), "guest:%s/in-guest", f->dir);
	snprintf(back_dir, sizeof(back_dir), "%s/back", f->dir);
	snprintf(back, sizeof(back), "%s/in-guest", back_dir);
	int fd = open(src, O_WRONLY | O_CREAT, 0751);
	assert_int_equal(write(fd, "#!/bin/sh\necho hi\n", 18), 18);
	close(fd);
	assert_int_equal(chmod(src, 0751), 0);
	assert_int_equal(mkdir(back_dir, 0755), 0);

	char *up[] = {"cp", "--vsock", f->sock, src, guest, NULL};
	assert_int_equal(run_cli(f, cli_cp_main, up, "/dev/null"), 0);
	assert_int_equal(stat(guest + 6, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0751);

	char *down[] = {"cp", "--vsock", f->sock, guest, back_dir, NULL};
	assert_int_equal(run_cli(f, cli_cp_main, down, "/dev/null"), 0);
	char text[64];
	slurp(back, text, sizeof(text));
	assert_string_equal(text, "#!/bin/sh\necho hi\n");

	char *to_stdout[] = {"cp", "--vsock", f->sock, guest, "-", NULL};
	assert_int_equal(run_cli(f, cli_cp_main, to_stdout, "/dev/null"), 0);
	assert_string_equal(f->out, "#!/bin/sh\necho hi\n");
}

static void cp_of_a_missing_guest_file_exits_1_and_leaves_nothing(void **state)
{
	struct fixture *f = *state;
	char guest[136], local[128];
	struct stat st;

	snprintf(guest, sizeof(guest), "guest:%s/absent", f->dir);
	snprintf(local, sizeof(local), "%s/copy", f->dir);
	char *argv[] = {"cp", "--vsock", f->sock, guest, local, NULL};
	assert_int_equal(run_cli(f, cli_cp_main, argv, "/dev/null"), 1);
	assert_non_null(strstr(f->err, "No such file or directory"));
	assert_int_equal(stat(local, &st), -1);
}

static void cp_of_a_local_directory_exits_1(void **state)
{
	struct fixture *f = *state;
	char guest[136];

	snprintf(guest, sizeof(guest), "guest:%s/x", f->dir);
	char *argv[] = {"cp", "--vsock", f->sock, f->dir, guest, NULL};
	assert_int_equal(run_cli(f, cli_cp_main, argv, "/dev/null"), 1);
	assert_non_null(strstr(f->err, "Is a directory"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(exec_options_stop_at_the_command),
	    cmocka_unit_test(exec_defaults_and_double_dash),
	    cmocka_unit_test(bad_exec_command_lines_say_what_is_wrong),
	    cmocka_unit_test(cp_takes_one_guest_path),
	    cmocka_unit_test(bad_cp_command_lines_say_what_is_wrong),
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
	    T(exec_exits_with_the_commands_status),
	    T(exec_killed_by_a_signal_exits_128_plus_it),
	    T(exec_of_a_missing_program_exits_127_with_a_message),
	    T(exec_without_an_agent_exits_125),
	    T(exec_past_its_timeout_exits_124),
	    cmocka_unit_test(a_tiny_timeout_is_still_a_timeout),
	    T(exec_forwards_stdin_and_survives_a_closed_one),
	    T(exec_passes_env_and_cwd),
	    T(cp_copies_in_and_out_keeping_the_mode),
	    T(cp_of_a_missing_guest_file_exits_1_and_leaves_nothing),
	    T(cp_of_a_local_directory_exits_1),
#undef T
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
