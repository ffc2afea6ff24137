/* Command line and JSON config: good settings land in the options, bad ones give a
 * one-line reason and -EINVAL. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli_test_parse.h"
#include "vmm/size_parse.h"

#define MIB (1024ULL * 1024ULL)

/* Parses "mote" and args. */
static int parse(struct cli_options *opts, char *error, const char *const *args)
{
	return cli_test_parse(opts, error, args, NULL);
}

static void run_flags_fill_every_setting(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *args[] = {"run",
			      "--kernel",
			      "vmlinux",
			      "--initrd",
			      "init.cpio.gz",
			      "--cmdline",
			      "console=ttyS0",
			      "--cpus",
			      "4",
			      "--mem",
			      "1G",
			      "--console",
			      "file:/tmp/out",
			      "--exit-at-boot",
			      "--console-max-size",
			      "64M",
			      "--no-seccomp",
			      NULL};

	(void)state;
	assert_int_equal(parse(&o, error, args), 0);
	assert_int_equal(o.command, CLI_COMMAND_RUN);
	assert_string_equal(o.kernel, "vmlinux");
	assert_string_equal(o.initrd, "init.cpio.gz");
	assert_string_equal(o.cmdline, "console=ttyS0");
	assert_int_equal(o.cpus, 4);
	assert_int_equal(o.mem_bytes, 1024 * MIB);
	assert_int_equal(o.console, MOTE_CONSOLE_FILE);
	assert_string_equal(o.console_path, "/tmp/out");
	assert_int_equal(o.console_max_bytes, 64 * MIB);
	assert_true(o.exit_at_boot);
	assert_true(o.no_seccomp);
	cli_options_free(&o);
}

static void defaults_are_one_cpu_128m_stdio(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX];
	const char *args[] = {"run", "--kernel", "k", NULL};

	(void)state;
	assert_int_equal(parse(&o, error, args), 0);
	assert_int_equal(o.cpus, 1);
	assert_int_equal(o.mem_bytes, 128 * MIB);
	assert_int_equal(o.console, MOTE_CONSOLE_FDS);
	assert_int_equal(o.console_max_bytes, 0);
	assert_null(o.initrd);
	assert_false(o.exit_at_boot);
	assert_false(o.no_seccomp);
	cli_options_free(&o);
}

static void bad_values_are_rejected_with_a_reason(void **state)
{
	const char *const cases[][4] = {
	    {"--cpus", "0"},
	    {"--cpus", "33"},
	    {"--cpus", "two"},
	    {"--cpus", "4x"},
	    {"--mem", "15M"},
	    {"--mem", "129M"},
	    {"--mem", "lots"},
	    {"--mem", "-1"},
	    {"--mem", "2T"},
	    {"--mem", "99999999999999999999"},
	    {"--console", "tty"},
	    {"--console", "file:"},
	    {"--console-max-size", "0"},
	    {"--console-max-size", "big"},
	    {"--bogus", "1"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cli_options o;
		char error[CLI_ERROR_MAX] = "";
		const char *args[] = {"run", "--kernel", "k", cases[i][0], cases[i][1], NULL};

		assert_int_equal(parse(&o, error, args), -EINVAL);
		assert_true(strlen(error) > 0);
		assert_null(strchr(error, '\n'));
		cli_options_free(&o);
	}
}

/* The refused option is named, not a word near it: inside a group of short options
 * glibc's optind still points past the word before. */
static void the_refused_option_is_the_one_named(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *grouped[] = {"run", "--kernel", "k", "-vq", NULL};
	const char *unknown[] = {"run", "--kernel", "k", "--bogus", NULL};
	const char *no_value[] = {"run", "--kernel", "k", "--mem", NULL};

	(void)state;
	assert_int_equal(parse(&o, error, grouped), -EINVAL);
	assert_non_null(strstr(error, "option -v"));
	cli_options_free(&o);
	assert_int_equal(parse(&o, error, unknown), -EINVAL);
	assert_non_null(strstr(error, "option --bogus"));
	cli_options_free(&o);
	assert_int_equal(parse(&o, error, no_value), -EINVAL);
	assert_non_null(strstr(error, "option --mem"));
	cli_options_free(&o);
}

static void run_without_kernel_is_an_error(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *args[] = {"run", "--cpus", "2", NULL};

	(void)state;
	assert_int_equal(parse(&o, error, args), -EINVAL);
	assert_non_null(strstr(error, "--kernel"));
	cli_options_free(&o);
}

static void unknown_command_and_stray_argument_are_errors(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *unknown[] = {"launch", NULL};
	const char *stray[] = {"run", "--kernel", "k", "extra", NULL};

	(void)state;
	assert_int_equal(parse(&o, error, unknown), -EINVAL);
	cli_options_free(&o);
	assert_int_equal(parse(&o, error, stray), -EINVAL);
	assert_non_null(strstr(error, "extra"));
	cli_options_free(&o);
}

static void help_and_version_are_commands(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX];
	const char *help[] = {"--help", NULL};
	const char *version[] = {"--version", NULL};

	(void)state;
	assert_int_equal(parse(&o, error, help), 0);
	assert_int_equal(o.command, CLI_COMMAND_HELP);
	assert_int_equal(parse(&o, error, version), 0);
	assert_int_equal(o.command, CLI_COMMAND_VERSION);
}

static void config_json_sets_firecracker_shaped_settings(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *json = "{\"boot-source\": {\"kernel_image_path\": \"/k\", \"initrd_path\": "
			   "\"/i\", \"boot_args\": \"quiet\"}, \"machine-config\": "
			   "{\"vcpu_count\": 3, \"mem_size_mib\": 512}, \"console\": \"none\", "
			   "\"console_max_size\": \"2G\", \"exit_at_boot\": true}";

	(void)state;
	cli_options_init(&o);
	assert_int_equal(config_file_apply(&o, json, error, sizeof(error)), 0);
	assert_string_equal(o.kernel, "/k");
	assert_string_equal(o.initrd, "/i");
	assert_string_equal(o.cmdline, "quiet");
	assert_int_equal(o.cpus, 3);
	assert_int_equal(o.mem_bytes, 512 * MIB);
	assert_int_equal(o.console, MOTE_CONSOLE_NONE);
	assert_int_equal(o.console_max_bytes, 2048 * MIB);
	assert_true(o.exit_at_boot);
	cli_options_free(&o);
}

static void bad_config_json_is_rejected_with_a_reason(void **state)
{
	const char *cases[] = {
	    "",
	    "{",
	    "[1, 2]",
	    "{\"boot-source\": {\"kernel\": \"/k\"}}",
	    "{\"boot-source\": {\"kernel_image_path\": 7}}",
	    "{\"boot-source\": {\"kernel_image_path\": \"\"}}",
	    "{\"machine-config\": {\"vcpu_count\": 0}}",
	    "{\"machine-config\": {\"vcpu_count\": 2.5}}",
	    "{\"machine-config\": {\"vcpu_count\": \"2\"}}",
	    "{\"machine-config\": {\"mem_size_mib\": 101}}",
	    "{\"machine-config\": {\"mem_size_mib\": 1e300}}",
	    "{\"console\": \"serial\"}",
	    "{\"console_max_size\": 1024}",
	    "{\"console_max_size\": \"0\"}",
	    "{\"exit_at_boot\": 1}",
	    "{\"exit_at_boot\": \"yes\"}",
	    "{\"disks\": []}",
	    "{\"drives\": {}}",
	    "{\"drives\": [7]}",
	    "{\"drives\": [{\"drive_id\": \"a\"}]}",
	    "{\"drives\": [{\"path_on_host\": \"/a\", \"is_read_only\": 1}]}",
	    "{\"drives\": [{\"path_on_host\": \"/a\", \"cache\": \"none\"}]}",
	    "{\"drives\": [{\"path_on_host\": \"/a\", \"is_root_device\": true}, "
	    "{\"path_on_host\": \"/b\", \"is_root_device\": true}]}",
	    "{\"drives\": [{\"path_on_host\": \"/a\", \"drive_id\": "
	    "\"an-id-longer-than-twenty\"}]}",
	    "{\"boot-source\": \"vmlinux\"}",
	    /* cJSON would cut the path at the NUL and boot /k. */
	    "{\"boot-source\": {\"kernel_image_path\": \"/k\\u0000junk\"}}",
	    /* A key given twice, at any depth: not the last one silently, nor both. */
	    "{\"machine-config\": {\"vcpu_count\": 2, \"vcpu_count\": 8}}",
	    "{\"drives\": [{\"path_on_host\": \"/a\"}], \"drives\": [{\"path_on_host\": \"/b\"}]}",
	    "{\"drives\": [{\"path_on_host\": \"/a\", \"path_on_host\": \"/b\"}]}",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char error[CLI_ERROR_MAX];

		assert_config_refused(cases[i], error);
		assert_true(strncmp(error, "config: ", 8) == 0);
	}
}

/* Fills path (a mkstemp template) with a new file holding text. */
static void write_temp_file(char *path, const char *text)
{
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (int)strlen(text));
	close(fd);
}

static void flags_override_the_config_file(void **state)
{
	char path[] = "/tmp/mote-test-config-XXXXXX";
	const char *json = "{\"boot-source\": {\"kernel_image_path\": \"/from-file\"}, "
			   "\"machine-config\": {\"vcpu_count\": 2}}";
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";

	(void)state;
	write_temp_file(path, json);
	const char *args[] = {"run", "--cpus", "4", "--config", path, NULL};
	assert_int_equal(parse(&o, error, args), 0);
	assert_string_equal(o.kernel, "/from-file");
	assert_int_equal(o.cpus, 4);
	cli_options_free(&o);
	unlink(path);
}

static void disks_come_in_order_with_their_flags(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *args[] = {"run",
			      "--kernel",
			      "k",
			      "--disk",
			      "path=/root.img,root",
			      "--disk",
			      "path=/data.img,ro,id=data",
			      NULL};

	(void)state;
	assert_int_equal(parse(&o, error, args), 0);
	assert_int_equal(o.disk_count, 2);
	assert_string_equal(o.disks[0].path, "/root.img");
	assert_true(o.disks[0].root);
	assert_false(o.disks[0].read_only);
	assert_null(o.disks[0].id);
	assert_string_equal(o.disks[1].path, "/data.img");
	assert_true(o.disks[1].read_only);
	assert_false(o.disks[1].root);
	assert_string_equal(o.disks[1].id, "data");
	cli_options_free(&o);
}

static void bad_disk_options_are_rejected_with_a_reason(void **state)
{
	const char *cases[][2] = {
	    {"ro", NULL},
	    {"path=", NULL},
	    {"path=/a,rw", NULL},
	    {"path=/a,id=", NULL},
	    {"path=/a,id=an-id-longer-than-twenty", NULL},
	    {"path=/a,root", "path=/b,root"},
	    {"path=/a,overlay=", NULL},
	    {"path=/a,overlay=/o,ro", NULL},
	    {"path=/a,overlay=/a", NULL},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cli_options o;
		char error[CLI_ERROR_MAX] = "";
		const char *args[] = {"run",	   "--kernel",	"k",
				      "--disk",	   cases[i][0], cases[i][1] ? "--disk" : NULL,
				      cases[i][1], NULL};

		if (parse(&o, error, args) != -EINVAL)
			fail_msg("accepted: %s %s", cases[i][0], cases[i][1] ? cases[i][1] : "");
		assert_true(error[0] != '\0');
		cli_options_free(&o);
	}
}

static void a_disk_overlay_is_parsed(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *args[] = {
	    "run", "--kernel", "k", "--disk", "path=/base.img,overlay=/vm1.ovl,root", NULL};

	(void)state;
	assert_int_equal(parse(&o, error, args), 0);
	assert_int_equal(o.disk_count, 1);
	assert_string_equal(o.disks[0].path, "/base.img");
	assert_string_equal(o.disks[0].overlay, "/vm1.ovl");
	assert_true(o.disks[0].root);
	cli_options_free(&o);
}

static void an_overlay_on_a_read_only_disk_says_why_it_is_refused(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *args[] = {"run", "--kernel", "k", "--disk", "path=/b,ro,overlay=/o", NULL};

	(void)state;
	assert_int_equal(parse(&o, error, args), -EINVAL);
	assert_non_null(strstr(error, "read-only"));
	cli_options_free(&o);
}

static void config_drive_overlay_is_read(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *json = "{\"drives\": [{\"drive_id\": \"rootfs\", \"path_on_host\": \"/r\", "
			   "\"overlay\": \"/r.ovl\"}]}";
	const char *bad = "{\"drives\": [{\"path_on_host\": \"/r\", \"overlay\": 3}]}";

	(void)state;
	cli_options_init(&o);
	assert_int_equal(config_file_apply(&o, json, error, sizeof(error)), 0);
	assert_int_equal(o.disk_count, 1);
	assert_string_equal(o.disks[0].overlay, "/r.ovl");
	cli_options_free(&o);
	cli_options_init(&o);
	assert_int_equal(config_file_apply(&o, bad, error, sizeof(error)), -EINVAL);
	assert_non_null(strstr(error, "overlay"));
	cli_options_free(&o);
}

static void too_many_disks_are_an_error(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	struct cli_disk disk;

	(void)state;
	cli_options_init(&o);
	for (int i = 0; i < MOTE_MAX_DISKS; i++) {
		assert_int_equal(cli_disk_parse("path=/x", &disk, error, sizeof(error)), 0);
		assert_int_equal(cli_disk_add(&o, &disk, error, sizeof(error)), 0);
	}
	assert_int_equal(cli_disk_parse("path=/x", &disk, error, sizeof(error)), 0);
	assert_int_equal(cli_disk_add(&o, &disk, error, sizeof(error)), -EINVAL);
	assert_non_null(strstr(error, "at most"));
	assert_int_equal(o.disk_count, MOTE_MAX_DISKS);
	cli_options_free(&o);
}

static void config_drives_are_firecracker_shaped(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *json = "{\"drives\": [{\"drive_id\": \"rootfs\", \"path_on_host\": \"/r\", "
			   "\"is_root_device\": true, \"is_read_only\": false}, "
			   "{\"drive_id\": \"scratch\", \"path_on_host\": \"/s\", "
			   "\"is_root_device\": false, \"is_read_only\": true}]}";

	(void)state;
	cli_options_init(&o);
	assert_int_equal(config_file_apply(&o, json, error, sizeof(error)), 0);
	assert_int_equal(o.disk_count, 2);
	assert_string_equal(o.disks[0].id, "rootfs");
	assert_string_equal(o.disks[0].path, "/r");
	assert_true(o.disks[0].root);
	assert_string_equal(o.disks[1].id, "scratch");
	assert_true(o.disks[1].read_only);
	cli_options_free(&o);
}

static void a_disk_flag_with_a_config_drives_id_replaces_it(void **state)
{
	char path[] = "/tmp/mote-test-config-XXXXXX";
	const char *json = "{\"drives\": [{\"drive_id\": \"data\", \"path_on_host\": \"/old\"}, "
			   "{\"drive_id\": \"root\", \"path_on_host\": \"/r\", "
			   "\"is_root_device\": true}]}";
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";

	(void)state;
	write_temp_file(path, json);
	const char *args[] = {"run",	"--kernel",	     "k", "--config", path,
			      "--disk", "path=/new,id=data", NULL};
	assert_int_equal(parse(&o, error, args), 0);
	assert_int_equal(o.disk_count, 2);
	assert_string_equal(o.disks[0].path, "/new");
	assert_string_equal(o.disks[1].path, "/r");
	cli_options_free(&o);
	unlink(path);
}

/* Only a flag replaces a config file's drive: two flags, or two drives of the file,
 * with one id are a mistake, not the last one silently. */
static void an_id_given_twice_in_one_place_is_refused(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";

	(void)state;
	const char *disks[] = {"run",	 "--kernel",	    "k", "--disk", "path=/a,id=data",
			       "--disk", "path=/b,id=data", NULL};
	assert_int_equal(parse(&o, error, disks), -EINVAL);
	assert_non_null(strstr(error, "disk id data: given twice"));
	cli_options_free(&o);
	const char *nets[] = {"run",   "--kernel",	"k", "--net", "tap=t0,id=lan",
			      "--net", "tap=t1,id=lan", NULL};
	assert_int_equal(parse(&o, error, nets), -EINVAL);
	assert_non_null(strstr(error, "network interface id lan: given twice"));
	cli_options_free(&o);
	cli_options_init(&o);
	assert_int_equal(
	    config_file_apply(&o,
			      "{\"drives\": [{\"drive_id\": \"d\", \"path_on_host\": "
			      "\"/a\"}, {\"drive_id\": \"d\", \"path_on_host\": \"/b\"}]}",
			      error, sizeof(error)),
	    -EINVAL);
	assert_non_null(strstr(error, "disk id d: given twice"));
	cli_options_free(&o);
}

static void missing_config_file_is_an_error(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *args[] = {"run", "--config", "/nonexistent/mote.json", NULL};

	(void)state;
	assert_int_equal(parse(&o, error, args), -EINVAL);
	assert_non_null(strstr(error, "/nonexistent/mote.json"));
	cli_options_free(&o);
}

static void sizes_accept_units_and_default_to_mib(void **state)
{
	uint64_t bytes;

	(void)state;
	assert_int_equal(size_parse("256", &bytes), 0);
	assert_int_equal(bytes, 256 * MIB);
	assert_int_equal(size_parse("2G", &bytes), 0);
	assert_int_equal(bytes, 2048 * MIB);
	assert_int_equal(size_parse("512MiB", &bytes), 0);
	assert_int_equal(bytes, 512 * MIB);
	assert_int_equal(size_parse("64k", &bytes), 0);
	assert_int_equal(bytes, 65536);
	assert_int_equal(size_parse("12Q", &bytes), -EINVAL);
	assert_int_equal(size_parse("", &bytes), -EINVAL);
	assert_int_equal(size_parse("G", &bytes), -EINVAL);
	assert_int_equal(size_parse("99999999999T", &bytes), -ERANGE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(run_flags_fill_every_setting),
	    cmocka_unit_test(defaults_are_one_cpu_128m_stdio),
	    cmocka_unit_test(bad_values_are_rejected_with_a_reason),
	    cmocka_unit_test(run_without_kernel_is_an_error),
	    cmocka_unit_test(unknown_command_and_stray_argument_are_errors),
	    cmocka_unit_test(help_and_version_are_commands),
	    cmocka_unit_test(config_json_sets_firecracker_shaped_settings),
	    cmocka_unit_test(bad_config_json_is_rejected_with_a_reason),
	    cmocka_unit_test(flags_override_the_config_file),
	    cmocka_unit_test(missing_config_file_is_an_error),
	    cmocka_unit_test(disks_come_in_order_with_their_flags),
	    cmocka_unit_test(bad_disk_options_are_rejected_with_a_reason),
	    cmocka_unit_test(a_disk_overlay_is_parsed),
	    cmocka_unit_test(an_overlay_on_a_read_only_disk_says_why_it_is_refused),
	    cmocka_unit_test(config_drive_overlay_is_read),
	    cmocka_unit_test(too_many_disks_are_an_error),
	    cmocka_unit_test(config_drives_are_firecracker_shaped),
	    cmocka_unit_test(a_disk_flag_with_a_config_drives_id_replaces_it),
	    cmocka_unit_test(an_id_given_twice_in_one_place_is_refused),
	    cmocka_unit_test(the_refused_option_is_the_one_named),
	    cmocka_unit_test(sizes_accept_units_and_default_to_mib),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
