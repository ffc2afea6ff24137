#include "cli_options.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "size_parse.h"

#define MIB (1024ULL * 1024ULL)

int cli_error(char *error, size_t error_len, const char *fmt, ...)
{
	va_list args;

	va_start(args, fmt);
	vsnprintf(error, error_len, fmt, args);
	va_end(args);
	return -EINVAL;
}

int cli_file_option_once(const char *first, const char *name, const char *option, char *error,
			 size_t error_len)
{
	if (!first)
		return 0;
	return cli_error(error, error_len, "%s: --%s given twice (%s, then another)", name, option,
			 first);
}

void cli_getopt_restart(void)
{
	opterr = 0;
	/* 0, not 1: glibc then also forgets a group of short options (-vq) it was inside
	 * when the last parse stopped. */
	optind = 0;
}

const char *cli_refused_option(char *const argv[], char buf[3])
{
	/* glibc sets optopt to 0 for an unknown long option, to the option's value (1000
	 * and up here) for a long one without its value. */
	if (optopt > 0 && optopt < 128) {
		buf[0] = '-';
		buf[1] = (char)optopt;
		buf[2] = '\0';
		return buf;
	}
	return argv[optind - 1] ? argv[optind - 1] : "";
}

void cli_options_init(struct cli_options *opts)
{
	memset(opts, 0, sizeof(*opts));
	opts->cpus = 1;
	opts->mem_bytes = 128 * MIB;
	opts->console = MOTE_CONSOLE_FDS;
}

void cli_options_free(struct cli_options *opts)
{
	free(opts->kernel);
	free(opts->initrd);
	free(opts->cmdline);
	free(opts->console_path);
	cli_disks_free(opts);
	cli_nets_free(opts);
	free(opts->vsock_uds);
	free(opts->api_sock);
	cli_options_init(opts);
}

int cli_replace_part(char **field, const char *text, size_t n)
{
	char *copy = strndup(text, n);

	if (!copy)
		return -ENOMEM;
	free(*field);
	*field = copy;
	return 0;
}

static int replace_string(char **field, const char *value)
{
	return cli_replace_part(field, value, strlen(value));
}

int cli_console_max_parse(uint64_t *bytes, const char *text, char *error, size_t error_len)
{
	if (size_parse(text, bytes) || *bytes == 0)
		return cli_error(error, error_len,
				 "--console-max-size %s: not a size such as 64M or 2G", text);
	return 0;
}

int cli_console_parse(struct cli_options *opts, const char *text)
{
	if (strcmp(text, "stdio") == 0) {
		opts->console = MOTE_CONSOLE_FDS;
	} else if (strcmp(text, "none") == 0) {
		opts->console = MOTE_CONSOLE_NONE;
	} else if (strncmp(text, "file:", 5) == 0 && text[5]) {
		if (replace_string(&opts->console_path, text + 5))
			return -ENOMEM;
		opts->console = MOTE_CONSOLE_FILE;
	} else {
		return -EINVAL;
	}
	return 0;
}

int cli_memory_set(struct cli_options *opts, uint64_t bytes, char *error, size_t error_len)
{
	if (bytes < 16 * MIB || bytes > (1ULL << 40) || bytes % (2 * MIB))
		return cli_error(
		    error, error_len,
		    "memory size %llu bytes: must be a multiple of 2 MiB from 16M to 1T",
		    (unsigned long long)bytes);
	opts->mem_bytes = bytes;
	return 0;
}

enum {
	OPT_KERNEL = 1000,
	OPT_INITRD,
	OPT_CMDLINE,
	OPT_CPUS,
	OPT_MEM,
	OPT_CONSOLE,
	OPT_CONFIG,
	OPT_DISK,
	OPT_NET,
	OPT_VSOCK,
	OPT_TRACK_DIRTY,
	OPT_EXIT_AT_BOOT,
	OPT_NO_SECCOMP,
	OPT_API_SOCK,
	OPT_QUIET,
	OPT_HELP,
	OPT_CONSOLE_MAX,
};

static const struct option run_options[] = {
    {"kernel", required_argument, NULL, OPT_KERNEL},
    {"initrd", required_argument, NULL, OPT_INITRD},
    {"cmdline", required_argument, NULL, OPT_CMDLINE},
    {"cpus", required_argument, NULL, OPT_CPUS},
    {"mem", required_argument, NULL, OPT_MEM},
    {"console", required_argument, NULL, OPT_CONSOLE},
    {"console-max-size", required_argument, NULL, OPT_CONSOLE_MAX},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"disk", required_argument, NULL, OPT_DISK},
    {"net", required_argument, NULL, OPT_NET},
    {"vsock", required_argument, NULL, OPT_VSOCK},
    {"track-dirty-pages", no_argument, NULL, OPT_TRACK_DIRTY},
    {"exit-at-boot", no_argument, NULL, OPT_EXIT_AT_BOOT},
    {"no-seccomp", no_argument, NULL, OPT_NO_SECCOMP},
    {"api-sock", required_argument, NULL, OPT_API_SOCK},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

static int apply_run_option(struct cli_options *opts, int option, const char *arg, char *error,
			    size_t error_len)
{
	struct cli_disk disk;
	struct cli_net net;
	uint64_t bytes;
	int ret;

	switch (option) {
	case OPT_KERNEL:
		return replace_string(&opts->kernel, arg);
	case OPT_INITRD:
		return replace_string(&opts->initrd, arg);
	case OPT_CMDLINE:
		return replace_string(&opts->cmdline, arg);
	case OPT_CPUS:
		if (uint_parse(arg, 1, MOTE_MAX_CPUS, &opts->cpus))
			return cli_error(error, error_len,
					 "--cpus %s: must be a number from 1 to %d", arg,
					 MOTE_MAX_CPUS);
		return 0;
	case OPT_MEM:
		ret = size_parse(arg, &bytes);
		if (ret)
			return cli_error(error, error_len,
					 "--mem %s: not a size (examples: 128M, 2G, 512)", arg);
		return cli_memory_set(opts, bytes, error, error_len);
	case OPT_CONSOLE:
		if (cli_console_parse(opts, arg))
			return cli_error(error, error_len,
					 "--console %s: must be stdio, none or file:PATH", arg);
		return 0;
	case OPT_CONSOLE_MAX:
		return cli_console_max_parse(&opts->console_max_bytes, arg, error, error_len);
	case OPT_DISK:
		ret = cli_disk_parse(arg, &disk, error, error_len);
		return ret ? ret : cli_disk_add(opts, &disk, error, error_len);
	case OPT_NET:
		ret = cli_net_parse(arg, &net, error, error_len);
		return ret ? ret : cli_net_add(opts, &net, error, error_len);
	case OPT_VSOCK:
		return cli_vsock_parse(opts, arg, error, error_len);
	case OPT_TRACK_DIRTY:
		opts->track_dirty_pages = true;
		return 0;
	case OPT_NO_SECCOMP:
		opts->no_seccomp = true;
		return 0;
	case OPT_EXIT_AT_BOOT:
		opts->exit_at_boot = true;
		return 0;
	case OPT_API_SOCK:
		return cli_api_sock_set(&opts->api_sock, arg, error, error_len);
	case OPT_QUIET:
		opts->quiet = true;
		return 0;
	case OPT_HELP:
		opts->command = CLI_COMMAND_HELP;
		return 0;
	}
	return 0;
}

int cli_api_sock_set(char **field, const char *path, char *error, size_t error_len)
{
	if (!path[0] || strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return cli_error(error, error_len,
				 "--api-sock %s: must be a Unix socket path of 1 to %zu bytes",
				 path, sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
	return replace_string(field, path);
}

static int parse_run(struct cli_options *opts, int argc, char **argv, char *error, size_t error_len)
{
	int option, ret;

	/* Pass 1: only --config, so that flags (pass 2) override what the file says.
	 * opterr stays off: pass 2 reports unknown options. */
	cli_getopt_restart();
	while ((option = getopt_long(argc, argv, "", run_options, NULL)) != -1) {
		if (option == OPT_CONFIG) {
			ret = config_file_load(opts, optarg, error, error_len);
			if (ret)
				return ret;
		}
	}
	cli_getopt_restart();
	while ((option = getopt_long(argc, argv, "", run_options, NULL)) != -1) {
		if (option == '?' || option == ':') {
			char buf[3];
			return cli_error(error, error_len, "run: unknown or incomplete option %s",
					 cli_refused_option(argv, buf));
		}
		ret = apply_run_option(opts, option, optarg, error, error_len);
		if (ret == -ENOMEM)
			return cli_error(error, error_len, "out of memory");
		if (ret)
			return ret;
	}
	if (optind < argc)
		return cli_error(error, error_len, "run: unexpected argument %s", argv[optind]);
	if (opts->command == CLI_COMMAND_HELP)
		return 0;
	/* With a control socket the kernel, or a snapshot, may come through the API. */
	if (!opts->kernel && !opts->api_sock)
		return cli_error(error, error_len,
				 "run: --kernel PATH is required (or --api-sock PATH to configure "
				 "the VM through the API)");
	return 0;
}

int cli_options_parse(struct cli_options *opts, int argc, char **argv, char *error,
		      size_t error_len)
{
	if (argc < 2)
		return cli_error(error, error_len, "no command given (try mote --help)");
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		opts->command = CLI_COMMAND_HELP;
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
		opts->command = CLI_COMMAND_VERSION;
		return 0;
	}
	if (strcmp(argv[1], "run") == 0) {
		opts->command = CLI_COMMAND_RUN;
		return parse_run(opts, argc - 1, argv + 1, error, error_len);
	}
	return cli_error(error, error_len, "unknown command %s (try mote --help)", argv[1]);
}
