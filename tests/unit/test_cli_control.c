/* The command lines of `mote restore`, `pause`, `resume` and `snapshot`, the run flags
 * of the control API, and the controller's life without a VM. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli_test_parse.h"
#include "thread_syscall.h"
#include "vmm/api_requests.h"
#include "vmm/cli_control.h"
#include "vmm/cli_restore.h"
#include "vmm/vm_command.h"

#define ARGV_MAX 32

/* Copies the NULL-terminated words into a mutable argv (getopt may permute it). */
static int make_argv(char **argv, const char *const *words)
{
	int argc = 0;

	while (words[argc]) {
		assert_true(argc < ARGV_MAX - 1);
		argv[argc] = (char *)words[argc];
		argc++;
	}
	argv[argc] = NULL;
	return argc;
}

static int parse_restore(struct cli_restore_options *o, char *error, const char *const *words)
{
	char *argv[ARGV_MAX];
	int argc = make_argv(argv, words);

	cli_restore_options_init(o);
	return cli_restore_parse(o, argc, argv, error, CLI_ERROR_MAX);
}

static int parse_control(struct cli_control_options *o, char *error, const char *const *words)
{
	char *argv[ARGV_MAX];
	int argc = make_argv(argv, words);

	return cli_control_parse(o, argc, argv, error, CLI_ERROR_MAX);
}

static void restore_flags_fill_every_setting(void **state)
{
	struct cli_restore_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *words[] = {"restore",
			       "--snapshot",
			       "/s/state",
			       "--mem",
			       "/s/mem",
			       "--mem-diff",
			       "/s/d1",
			       "--mem-diff",
			       "/s/d2",
			       "--disk",
			       "rootfs:path=/img/base,overlay=/img/copy1",
			       "--disk",
			       "vdb:overlay=/img/scratch1",
			       "--net",
			       "eth0=tap7",
			       "--vsock-uds",
			       "/tmp/v1.sock",
			       "--paused",
			       "--track-dirty-pages",
			       "--api-sock",
			       "/tmp/api1.sock",
			       "--console",
			       "file:/tmp/c1",
			       "--console-max-size",
			       "1M",
			       "--no-seccomp",
			       NULL};
	const struct mote_restore_config *r = &o.restore;

	(void)state;
	assert_int_equal(parse_restore(&o, error, words), 0);
	assert_string_equal(r->state_path, "/s/state");
	assert_string_equal(r->mem_path, "/s/mem");
	assert_int_equal(r->mem_diff_count, 2);
	assert_string_equal(r->mem_diff_paths[1], "/s/d2");
	assert_int_equal(r->disk_override_count, 2);
	assert_string_equal(r->disk_overrides[0].disk, "rootfs");
	assert_string_equal(r->disk_overrides[0].path, "/img/base");
	assert_string_equal(r->disk_overrides[0].overlay, "/img/copy1");
	assert_string_equal(r->disk_overrides[1].disk, "vdb");
	assert_null(r->disk_overrides[1].path);
	assert_string_equal(r->disk_overrides[1].overlay, "/img/scratch1");
	assert_int_equal(r->net_override_count, 1);
	assert_string_equal(r->net_overrides[0].nic, "eth0");
	assert_string_equal(r->net_overrides[0].tap, "tap7");
	assert_string_equal(r->vsock_uds_path, "/tmp/v1.sock");
	assert_true(r->paused);
	assert_true(r->track_dirty_pages);
	assert_string_equal(o.api_sock, "/tmp/api1.sock");
	assert_int_equal(o.console, MOTE_CONSOLE_FILE);
	assert_string_equal(o.console_path, "/tmp/c1");
	assert_int_equal(o.console_max_bytes, 1u << 20);
	assert_true(o.no_seccomp);
	cli_restore_options_free(&o);
}

static void restore_defaults_run_at_once_on_stdio(void **state)
{
	struct cli_restore_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *words[] = {"restore", "--snapshot", "s", "--mem", "m", NULL};

	(void)state;
	assert_int_equal(parse_restore(&o, error, words), 0);
	assert_false(o.restore.paused);
	assert_false(o.restore.track_dirty_pages);
	assert_false(o.restore.verify_memory);
	assert_false(o.no_seccomp);
	assert_int_equal(o.restore.mem_diff_count, 0);
	assert_null(o.api_sock);
	assert_int_equal(o.console, MOTE_CONSOLE_FDS);
	cli_restore_options_free(&o);
}

static void restore_bad_arguments_give_a_one_line_reason(void **state)
{
	const char *const cases[][8] = {
	    {"restore", "--mem", "m", NULL},
	    {"restore", "--snapshot", "s", NULL},
	    {"restore", "--snapshot", "s", "--mem", "m", "--disk", "rootfs", NULL},
	    {"restore", "--snapshot", "s", "--mem", "m", "--disk", ":path=/x", NULL},
	    {"restore", "--snapshot", "s", "--mem", "m", "--disk", "vda:ro", NULL},
	    {"restore", "--snapshot", "s", "--mem", "m", "--disk", "vda:", NULL},
	    {"restore", "--snapshot", "s", "--mem", "m", "--net", "eth0", NULL},
	    {"restore", "--snapshot", "s", "--mem", "m", "--net", "=tap0", NULL},
	    {"restore", "--snapshot", "s", "--mem", "m", "--console", "tty", NULL},
	    {"restore", "--snapshot", "s", "--mem", "m", "--console-max-size", "0", NULL},
	    {"restore", "--snapshot", "s", "--mem", "m", "--bogus", NULL},
	    {"restore", "--snapshot", "s", "--mem", "m", "extra", NULL},
	    {"restore", "--snapshot", "s", "--mem", "m", "--api-sock", "", NULL},
	    {"restore", "--snapshot", "s", "--mem", "m", "--paused", NULL},
	    {"restore", "--snapshot", "s", "--mem", "m", "--vsock-uds", "", NULL},
	    {"restore", "--snapshot", "s", "--mem", "m", "--mem", "n", NULL},
	    {"restore", "--snapshot", "s", "--snapshot", "t", "--mem", "m", NULL},
	    /* 97 bytes: with "_4294967295" no longer a Unix socket path. */
	    {"restore", "--snapshot", "s", "--mem", "m", "--vsock-uds",
	     "/tmp/"
	     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	     "aaaaaaa",
	     NULL},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cli_restore_options o;
		char error[CLI_ERROR_MAX] = "";

		if (parse_restore(&o, error, cases[i]) != -EINVAL)
			fail_msg("case %zu accepted", i);
		assert_true(strlen(error) > 0);
		assert_null(strchr(error, '\n'));
		cli_restore_options_free(&o);
	}
}

static void restore_takes_at_most_64_diff_files(void **state)
{
	struct cli_restore_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *words[2 * (MOTE_MAX_MEM_DIFFS + 1) + 6] = {"restore", "--snapshot", "s",
							       "--mem", "m"};
	size_t n = 5;

	(void)state;
	for (int i = 0; i <= MOTE_MAX_MEM_DIFFS; i++) {
		words[n++] = "--mem-diff";
		words[n++] = "d";
	}
	words[n] = NULL;
	char **argv = calloc(n + 1, sizeof(*argv));
	memcpy(argv, words, (n + 1) * sizeof(*argv));
	cli_restore_options_init(&o);
	assert_int_equal(cli_restore_parse(&o, (int)n, argv, error, sizeof(error)), -EINVAL);
	assert_non_null(strstr(error, "at most"));
	cli_restore_options_free(&o);
	free(argv);
}

/* --copies: "{i}" in each copy's resources becomes its number; shared inputs stay. */
static void restore_copies_name_each_copys_resources(void **state)
{
	struct cli_restore_options o, copy;
	char error[CLI_ERROR_MAX] = "";
	const char *words[] = {"restore",
			       "--snapshot",
			       "/s/state",
			       "--mem",
			       "/s/mem",
			       "--copies",
			       "12",
			       "--vsock-uds",
			       "/run/v{i}.sock",
			       "--api-sock",
			       "/run/a{i}",
			       "--disk",
			       "vda:path=/base.img,overlay=/o/{i}/{i}.overlay",
			       "--net",
			       "eth0=tap{i}",
			       "--console",
			       "file:/log/c{i}",
			       "--track-dirty-pages",
			       NULL};

	(void)state;
	assert_int_equal(parse_restore(&o, error, words), 0);
	assert_int_equal(o.copies, 12);
	assert_int_equal(cli_restore_options_for_copy(&o, 11, &copy), 0);
	assert_int_equal(copy.copies, 1);
	assert_string_equal(copy.restore.state_path, "/s/state");
	assert_string_equal(copy.restore.mem_path, "/s/mem");
	assert_string_equal(copy.restore.vsock_uds_path, "/run/v11.sock");
	assert_string_equal(copy.api_sock, "/run/a11");
	assert_int_equal(copy.restore.disk_override_count, 1);
	assert_string_equal(copy.restore.disk_overrides[0].disk, "vda");
	assert_string_equal(copy.restore.disk_overrides[0].path, "/base.img");
	assert_string_equal(copy.restore.disk_overrides[0].overlay, "/o/11/11.overlay");
	assert_string_equal(copy.restore.net_overrides[0].nic, "eth0");
	assert_string_equal(copy.restore.net_overrides[0].tap, "tap11");
	assert_int_equal(copy.console, MOTE_CONSOLE_FILE);
	assert_string_equal(copy.console_path, "/log/c11");
	assert_true(copy.restore.track_dirty_pages);
	cli_restore_options_free(&copy);
	cli_restore_options_free(&o);
}

/* --verify-memory with copies: shared memory files are verified by the first copy
 * only; files of each copy's own by every copy. */
static void restore_copies_verify_shared_memory_once(void **state)
{
	struct cli_restore_options o, copy;
	char error[CLI_ERROR_MAX] = "";
	const char *shared[] = {"restore", "--snapshot",      "/s/state", "--mem",
				"/s/mem",  "--copies",	      "3",	  "--console",
				"none",	   "--verify-memory", NULL};
	const char *own[] = {"restore",	   "--snapshot",      "/s/state", "--mem", "/s/mem",
			     "--mem-diff", "/s/d{i}",	      "--copies", "3",	   "--console",
			     "none",	   "--verify-memory", NULL};
	const bool wanted[2][3] = {{true, false, false}, {true, true, true}};

	(void)state;
	for (int set = 0; set < 2; set++) {
		assert_int_equal(parse_restore(&o, error, set ? own : shared), 0);
		for (unsigned i = 1; i <= 3; i++) {
			assert_int_equal(cli_restore_options_for_copy(&o, i, &copy), 0);
			assert_int_equal(copy.restore.verify_memory, wanted[set][i - 1]);
			cli_restore_options_free(&copy);
		}
		cli_restore_options_free(&o);
	}
}

static void restore_copies_print_nothing_unless_asked(void **state)
{
	struct cli_restore_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *words[] = {"restore", "--snapshot", "s", "--mem", "m", "--copies", "2", NULL};

	(void)state;
	assert_int_equal(parse_restore(&o, error, words), 0);
	assert_int_equal(o.console, MOTE_CONSOLE_NONE);
	cli_restore_options_free(&o);
}

/* Two copies on one socket, file, overlay or TAP would fight over it. */
static void restore_copies_refuse_a_shared_resource(void **state)
{
	const char *const cases[][10] = {
	    {"--copies", "0"},
	    {"--copies", "257"},
	    {"--copies", "-1"},
	    {"--copies", "2x"},
	    {"--copies", "2", "--vsock-uds", "/v"},
	    {"--copies", "2", "--api-sock", "/a"},
	    {"--copies", "2", "--console", "stdio"},
	    {"--copies", "2", "--console", "file:/c"},
	    {"--copies", "2", "--disk", "vda:overlay=/o"},
	    {"--copies", "2", "--net", "eth0=tap0"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *words[16] = {"restore", "--snapshot", "s", "--mem", "m"};
		struct cli_restore_options o;
		char error[CLI_ERROR_MAX] = "";
		size_t n = 5;

		for (size_t k = 0; cases[i][k]; k++)
			words[n++] = cases[i][k];
		if (parse_restore(&o, error, words) != -EINVAL)
			fail_msg("case %zu accepted", i);
		assert_true(strlen(error) > 0);
		assert_null(strchr(error, '\n'));
		cli_restore_options_free(&o);
	}
}

/* `mote restore words` parsed into o, its request body built and read back by PUT
 * /snapshot/load's parser into command, whose strings live in the JSON returned (the
 * caller deletes it, and frees o). */
static cJSON *restore_request_through_the_api(const char *const *words,
					      struct cli_restore_options *o,
					      struct vm_command *command)
{
	char error[CLI_ERROR_MAX] = "", fault[256] = "";

	assert_int_equal(parse_restore(o, error, words), 0);
	char *body = cli_restore_request_body(o);
	assert_non_null(body);
	cJSON *json = cJSON_Parse(body);
	free(body);
	assert_non_null(json);
	assert_int_equal(api_parse_snapshot_load(json, command, fault, sizeof(fault)), 0);
	return json;
}

/* What `mote restore --api-sock` sends is what PUT /snapshot/load reads back. */
static void restore_request_body_round_trips_through_the_api_parser(void **state)
{
	struct cli_restore_options o;
	const char *words[] = {"restore",
			       "--snapshot",
			       "/s/state",
			       "--mem",
			       "/s/mem",
			       "--mem-diff",
			       "/s/d1",
			       "--disk",
			       "vda:overlay=/o1",
			       "--net",
			       "lan=tap3",
			       "--vsock-uds",
			       "/v3",
			       "--track-dirty-pages",
			       "--verify-memory",
			       "--api-sock",
			       "/a",
			       NULL};
	struct vm_command command;

	(void)state;
	cJSON *json = restore_request_through_the_api(words, &o, &command);
	const struct mote_restore_config *r = &command.snapshot_load.restore;
	assert_string_equal(r->state_path, "/s/state");
	assert_string_equal(r->mem_path, "/s/mem");
	assert_int_equal(r->mem_diff_count, 1);
	assert_string_equal(r->mem_diff_paths[0], "/s/d1");
	assert_int_equal(r->disk_override_count, 1);
	assert_string_equal(r->disk_overrides[0].disk, "vda");
	assert_null(r->disk_overrides[0].path);
	assert_string_equal(r->disk_overrides[0].overlay, "/o1");
	assert_int_equal(r->net_override_count, 1);
	assert_string_equal(r->net_overrides[0].nic, "lan");
	assert_string_equal(r->net_overrides[0].tap, "tap3");
	assert_string_equal(r->vsock_uds_path, "/v3");
	assert_true(r->track_dirty_pages);
	assert_true(r->verify_memory);
	assert_false(r->paused); /* no --paused: resume_vm */
	cJSON_Delete(json);
	cli_restore_options_free(&o);
}

/* The mote serving the socket may run in another directory: relative paths go out
 * made absolute from ours. */
static void restore_request_paths_go_out_absolute(void **state)
{
	struct cli_restore_options o;
	char cwd[4096], expect[4200];
	const char *words[] = {"restore",     "--snapshot", "s/state",
			       "--mem",	      "mem",	    "--mem-diff",
			       "../d1",	      "--disk",	    "vda:path=img,overlay=o1",
			       "--vsock-uds", "v3",	    "--api-sock",
			       "/a",	      NULL};
	struct vm_command command;

	(void)state;
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	cJSON *json = restore_request_through_the_api(words, &o, &command);
	const struct mote_restore_config *r = &command.snapshot_load.restore;
	const char *got[] = {r->state_path,
			     r->mem_path,
			     r->mem_diff_paths[0],
			     r->disk_overrides[0].path,
			     r->disk_overrides[0].overlay,
			     r->vsock_uds_path};
	const char *relative[] = {"s/state", "mem", "../d1", "img", "o1", "v3"};
	for (unsigned i = 0; i < sizeof(got) / sizeof(got[0]); i++) {
		snprintf(expect, sizeof(expect), "%s/%s", cwd, relative[i]);
		assert_string_equal(got[i], expect);
	}
	cJSON_Delete(json);
	cli_restore_options_free(&o);
}

/* A relative vsock socket path that fits is refused when, made absolute, it would not
 * fit a Unix socket address: before anything is sent. */
static void a_vsock_path_too_long_once_absolute_is_refused(void **state)
{
	struct cli_restore_options o;
	char error[CLI_ERROR_MAX] = "", cwd[4096], deep[4096];
	const char *words[] = {
	    "restore",	  "--snapshot",	      "/s", "--mem", "/m", "--vsock-uds", "v.sock",
	    "--api-sock", "/nonexistent/api", NULL};

	(void)state;
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	snprintf(deep, sizeof(deep), "/tmp/mote-deep-%d", (int)getpid());
	assert_int_equal(mkdir(deep, 0700), 0);
	size_t len = strlen(deep);
	while (len < 110) {
		len += (size_t)snprintf(deep + len, sizeof(deep) - len, "/%s", "d123456789");
		assert_int_equal(mkdir(deep, 0700), 0);
	}
	assert_int_equal(chdir(deep), 0);
	assert_int_equal(parse_restore(&o, error, words), 0);
	assert_int_equal(cli_restore_send(&o), CLI_CONTROL_USAGE);
	cli_restore_options_free(&o);
	assert_int_equal(chdir(cwd), 0);
	while (strlen(deep) > strlen("/tmp")) {
		assert_int_equal(rmdir(deep), 0);
		*strrchr(deep, '/') = '\0';
	}
}

static void snapshot_flags_are_parsed(void **state)
{
	struct cli_control_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *words[] = {"snapshot", "--api-sock", "/a",	   "--state",  "/s",
			       "--mem",	   "/m",	 "--diff", "--resume", NULL};

	(void)state;
	assert_int_equal(parse_control(&o, error, words), 0);
	assert_int_equal(o.command, CLI_CONTROL_SNAPSHOT);
	assert_string_equal(o.api_sock, "/a");
	assert_string_equal(o.state_path, "/s");
	assert_string_equal(o.mem_path, "/m");
	assert_true(o.diff);
	assert_true(o.resume);
}

static void pause_and_resume_take_only_the_socket(void **state)
{
	struct cli_control_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *pause[] = {"pause", "--api-sock", "/a", NULL};
	const char *resume[] = {"resume", "--api-sock", "/b", NULL};
	const char *extra[] = {"pause", "--api-sock", "/a", "--diff", NULL};

	(void)state;
	assert_int_equal(parse_control(&o, error, pause), 0);
	assert_int_equal(o.command, CLI_CONTROL_PAUSE);
	assert_int_equal(parse_control(&o, error, resume), 0);
	assert_int_equal(o.command, CLI_CONTROL_RESUME);
	assert_string_equal(o.api_sock, "/b");
	assert_int_equal(parse_control(&o, error, extra), -EINVAL);
	assert_non_null(strstr(error, "--diff"));
	/* A snapshot's option with its value: the message names the option, not the value. */
	const char *with_value[] = {"resume", "--api-sock", "/a", "--mem", "m.mem", NULL};
	assert_int_equal(parse_control(&o, error, with_value), -EINVAL);
	assert_non_null(strstr(error, "unknown option --mem"));
}

static void update_disk_takes_a_disk_and_a_path(void **state)
{
	struct cli_control_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *words[] = {"update-disk", "--api-sock", "/a",  "--disk",
			       "data_1",      "--path",	    "img", NULL};

	(void)state;
	assert_int_equal(parse_control(&o, error, words), 0);
	assert_int_equal(o.command, CLI_CONTROL_UPDATE_DISK);
	assert_string_equal(o.api_sock, "/a");
	assert_string_equal(o.disk, "data_1");
	assert_string_equal(o.image_path, "img");
	/* The id goes into the request's path as it is. */
	const char *slash[] = {"update-disk", "--api-sock", "/a",  "--disk",
			       "a/b",	      "--path",	    "img", NULL};
	assert_int_equal(parse_control(&o, error, slash), -EINVAL);
	assert_non_null(strstr(error, "a/b"));
	/* Options of other commands, both ways. */
	const char *diff[] = {"update-disk", "--api-sock", "/a",     "--disk", "d",
			      "--path",	     "img",	   "--diff", NULL};
	assert_int_equal(parse_control(&o, error, diff), -EINVAL);
	assert_non_null(strstr(error, "--diff"));
	const char *disk[] = {"pause", "--api-sock", "/a", "--disk", "d", NULL};
	assert_int_equal(parse_control(&o, error, disk), -EINVAL);
	assert_non_null(strstr(error, "unknown option --disk"));
}

static void control_commands_need_their_arguments(void **state)
{
	const char *const cases[][10] = {
	    {"update-disk", "--api-sock", "/a", "--disk", "d", NULL},
	    {"update-disk", "--api-sock", "/a", "--path", "img", NULL},
	    {"update-disk", "--disk", "d", "--path", "img", NULL},
	    {"update-disk", "--api-sock", "/a", "--disk", "", "--path", "img", NULL},
	    {"update-disk", "--api-sock", "/a", "--disk", "d", "--path", "", NULL},
	    {"pause", NULL},
	    {"resume", "--api-sock", NULL},
	    {"snapshot", "--api-sock", "/a", "--state", "/s", NULL},
	    {"snapshot", "--api-sock", "/a", "--mem", "/m", NULL},
	    {"snapshot", "--state", "/s", "--mem", "/m", NULL},
	    {"pause", "--api-sock", "/a", "stray", NULL},
	    {"snapshot", "--api-sock", "/a", "--state", "/s", "--mem", "/m", "--mem", "/n", NULL},
	    {"snapshot", "--api-sock", "/a", "--state", "/s", "--state", "/t", "--mem", "/m", NULL},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cli_control_options o;
		char error[CLI_ERROR_MAX] = "";

		if (parse_control(&o, error, cases[i]) != -EINVAL)
			fail_msg("case %zu accepted", i);
		assert_true(strlen(error) > 0);
		assert_null(strchr(error, '\n'));
	}
}

static void run_with_an_api_socket_needs_no_kernel(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *args[] = {"run", "--api-sock", "/tmp/m.sock", "--track-dirty-pages", NULL};
	const char *too_long[] = {
	    "run",
	    "--kernel",
	    "k",
	    "--api-sock",
	    "/tmp/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.sock",
	    NULL};

	(void)state;
	assert_int_equal(cli_test_parse(&o, error, args, NULL), 0);
	assert_null(o.kernel);
	assert_string_equal(o.api_sock, "/tmp/m.sock");
	assert_true(o.track_dirty_pages);
	cli_options_free(&o);
	assert_int_equal(cli_test_parse(&o, error, too_long, NULL), -EINVAL);
	assert_non_null(strstr(error, "--api-sock"));
	cli_options_free(&o);
}

static void disk_overlay_from_flag_and_config(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *args[] = {"run", "--kernel", "k", "--disk", "path=/base,overlay=/top,root",
			      NULL};
	const char *json = "{\"machine-config\": {\"vcpu_count\": 1, \"mem_size_mib\": 128, "
			   "\"track_dirty_pages\": true}, \"drives\": [{\"drive_id\": \"d\", "
			   "\"path_on_host\": \"/b\", \"overlay\": \"/o\"}]}";

	(void)state;
	assert_int_equal(cli_test_parse(&o, error, args, NULL), 0);
	assert_string_equal(o.disks[0].path, "/base");
	assert_string_equal(o.disks[0].overlay, "/top");
	assert_true(o.disks[0].root);
	cli_options_free(&o);
	cli_options_init(&o);
	assert_int_equal(config_file_apply(&o, json, error, sizeof(error)), 0);
	assert_string_equal(o.disks[0].overlay, "/o");
	assert_true(o.track_dirty_pages);
	cli_options_free(&o);
	assert_config_refused("{\"machine-config\": {\"track_dirty_pages\": 1}}", error);
	assert_config_refused("{\"drives\": [{\"path_on_host\": \"/b\", \"overlay\": 3}]}", error);
}

static void *run_controller(void *arg)
{
	struct mote_exit exit_info;

	return (void *)(intptr_t)vm_controller_run(arg, &exit_info);
}

static void a_controller_stopped_before_any_vm_ends_its_wait(void **state)
{
	struct vm_controller c;
	struct cli_options pending;
	pthread_t thread;
	void *result;
	char fault[256];
	struct vm_command pause = {.kind = VM_COMMAND_PAUSE};

	(void)state;
	cli_options_init(&pending);
	vm_controller_init(&c, &pending, 0, NULL, NULL);
	assert_int_equal(pthread_create(&thread, NULL, run_controller, &c), 0);
	vm_controller_stop(&c);
	assert_int_equal(pthread_join(thread, &result), 0);
	assert_int_equal((intptr_t)result, -EINTR);
	/* Ended: every command is refused. */
	assert_int_equal(vm_controller_execute(&c, &pause, fault, sizeof(fault)), -EINVAL);
	assert_non_null(strstr(fault, "ended"));
	vm_controller_destroy(&c);
}

struct held_command {
	struct vm_controller *c;
	struct vm_command command;
	int ret;
	_Atomic pid_t entering; /* the thread's id, stored right before the command */
	atomic_bool done;
};

static void *execute_held(void *arg)
{
	struct held_command *h = arg;
	char fault[256];

	atomic_store(&h->entering, thread_own_id());
	h->ret = vm_controller_execute(h->c, &h->command, fault, sizeof(fault));
	atomic_store(&h->done, true);
	return NULL;
}

/* Waits until h's thread is blocked on the controller's condition variable, waiting for
 * the hold to lift: before that, a check that its command has not run proves nothing.
 * glibc's condition variable waits on a futex word inside the pthread_cond_t. */
static void wait_held(struct held_command *h)
{
	thread_wait_blocked_in(&h->entering, SYS_futex, (uintptr_t)&h->c->changed,
			       sizeof(h->c->changed), "a command held until the first one ran");
}

/* The command line's own first command runs before any the API took meanwhile. */
static void commands_wait_for_the_first_one(void **state)
{
	struct vm_controller c;
	struct cli_options pending;
	pthread_t thread;
	char fault[256];
	struct vm_controller_description d;
	struct vm_command first = {.kind = VM_COMMAND_MACHINE_CONFIG,
				   .machine_config = {.has_vcpu_count = true, .vcpu_count = 2}};
	struct held_command later = {
	    .c = &c,
	    .command = {.kind = VM_COMMAND_MACHINE_CONFIG,
			.machine_config = {.has_vcpu_count = true, .vcpu_count = 3}}};

	(void)state;
	cli_options_init(&pending);
	vm_controller_init(&c, &pending, 0, NULL, NULL);
	vm_controller_hold_first(&c);
	atomic_init(&later.entering, 0);
	atomic_init(&later.done, false);
	assert_int_equal(pthread_create(&thread, NULL, execute_held, &later), 0);
	wait_held(&later);
	assert_false(atomic_load(&later.done));
	assert_int_equal(vm_controller_execute_first(&c, &first, fault, sizeof(fault)), 0);
	assert_int_equal(pthread_join(thread, NULL), 0);
	assert_int_equal(later.ret, 0);
	vm_controller_describe(&c, &d);
	assert_int_equal(d.vcpu_count, 3);

	/* A stop lets the commands held go, to find the controller ended. */
	vm_controller_hold_first(&c);
	later.command = (struct vm_command){.kind = VM_COMMAND_PAUSE};
	atomic_store(&later.entering, 0);
	atomic_store(&later.done, false);
	assert_int_equal(pthread_create(&thread, NULL, execute_held, &later), 0);
	wait_held(&later);
	vm_controller_stop(&c);
	assert_int_equal(pthread_join(thread, NULL), 0);
	assert_int_equal(later.ret, -EINVAL);
	vm_controller_destroy(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(restore_flags_fill_every_setting),
	    cmocka_unit_test(restore_defaults_run_at_once_on_stdio),
	    cmocka_unit_test(restore_bad_arguments_give_a_one_line_reason),
	    cmocka_unit_test(restore_takes_at_most_64_diff_files),
	    cmocka_unit_test(restore_request_body_round_trips_through_the_api_parser),
	    cmocka_unit_test(restore_request_paths_go_out_absolute),
	    cmocka_unit_test(a_vsock_path_too_long_once_absolute_is_refused),
	    cmocka_unit_test(restore_copies_name_each_copys_resources),
	    cmocka_unit_test(restore_copies_verify_shared_memory_once),
	    cmocka_unit_test(restore_copies_print_nothing_unless_asked),
	    cmocka_unit_test(restore_copies_refuse_a_shared_resource),
	    cmocka_unit_test(snapshot_flags_are_parsed),
	    cmocka_unit_test(pause_and_resume_take_only_the_socket),
	    cmocka_unit_test(update_disk_takes_a_disk_and_a_path),
	    cmocka_unit_test(control_commands_need_their_arguments),
	    cmocka_unit_test(run_with_an_api_socket_needs_no_kernel),
	    cmocka_unit_test(disk_overlay_from_flag_and_config),
	    cmocka_unit_test(a_controller_stopped_before_any_vm_ends_its_wait),
	    cmocka_unit_test(commands_wait_for_the_first_one),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
