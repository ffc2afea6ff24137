/* `mote restore` (cli_restore.h). */
#include "cli_restore.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_control.h"
#include "cli_options.h"
#include "cli_run.h"
#include "size_parse.h"

#include "../virtio/vsock_uds.h"

void cli_restore_options_init(struct cli_restore_options *opts)
{
	memset(opts, 0, sizeof(*opts));
	mote_restore_config_init(&opts->restore);
	opts->console = MOTE_CONSOLE_FDS;
	opts->copies = 1;
}

/* The restore configuration's strings are const for the library; here they are ours. */
static void cli_free_const(const char *s)
{
	free((char *)s);
}

void cli_restore_options_free(struct cli_restore_options *opts)
{
	struct mote_restore_config *r = &opts->restore;

	cli_free_const(r->state_path);
	cli_free_const(r->mem_path);
	for (unsigned i = 0; i < r->mem_diff_count; i++)
		cli_free_const(r->mem_diff_paths[i]);
	for (unsigned i = 0; i < r->disk_override_count; i++) {
		cli_free_const(r->disk_overrides[i].disk);
		cli_free_const(r->disk_overrides[i].path);
		cli_free_const(r->disk_overrides[i].overlay);
	}
	for (unsigned i = 0; i < r->net_override_count; i++) {
		cli_free_const(r->net_overrides[i].nic);
		cli_free_const(r->net_overrides[i].tap);
	}
	cli_free_const(r->vsock_uds_path);
	free(opts->api_sock);
	free(opts->console_path);
	cli_restore_options_init(opts);
}

static int cli_restore_copy(const char **field, const char *text, size_t n)
{
	char *copy = strndup(text, n);

	if (!copy)
		return -ENOMEM;
	cli_free_const(*field);
	*field = copy;
	return 0;
}

/* "NAME:path=IMG,overlay=FILE", either part or both. */
static int cli_restore_disk(struct mote_restore_config *r, const char *text, char *error,
			    size_t error_len)
{
	const char *colon = strchr(text, ':');

	if (r->disk_override_count == MOTE_MAX_DISKS)
		return cli_error(error, error_len, "--disk %s: at most %d disk overrides", text,
				 MOTE_MAX_DISKS);
	if (!colon || colon == text || !colon[1])
		return cli_error(error, error_len,
				 "--disk %s: expected NAME:path=IMG[,overlay=FILE] or "
				 "NAME:overlay=FILE",
				 text);
	struct mote_disk_override *o = &r->disk_overrides[r->disk_override_count];
	int ret = cli_restore_copy(&o->disk, text, (size_t)(colon - text));
	for (const char *part = colon + 1; *part && !ret;) {
		size_t n = strcspn(part, ",");

		if (n > 5 && strncmp(part, "path=", 5) == 0)
			ret = cli_restore_copy(&o->path, part + 5, n - 5);
		else if (n > 8 && strncmp(part, "overlay=", 8) == 0)
			ret = cli_restore_copy(&o->overlay, part + 8, n - 8);
		else
			ret = cli_error(error, error_len,
					"--disk %s: unknown part '%.*s' (expected path=IMG or "
					"overlay=FILE)",
					text, (int)n, part);
		part += n;
		if (*part == ',')
			part++;
	}
	if (!ret && !o->path && !o->overlay)
		ret = cli_error(error, error_len, "--disk %s: give path=IMG, overlay=FILE or both",
				text);
	/* Counted even when it failed, so that free finds its strings. */
	r->disk_override_count++;
	return ret;
}

/* "NAME=TAP". */
static int cli_restore_net(struct mote_restore_config *r, const char *text, char *error,
			   size_t error_len)
{
	const char *equals = strchr(text, '=');

	if (r->net_override_count == MOTE_MAX_NETS)
		return cli_error(error, error_len, "--net %s: at most %d NIC overrides", text,
				 MOTE_MAX_NETS);
	if (!equals || equals == text || !equals[1])
		return cli_error(error, error_len, "--net %s: expected NAME=TAP", text);
	struct mote_net_override *o = &r->net_overrides[r->net_override_count++];
	int ret = cli_restore_copy(&o->nic, text, (size_t)(equals - text));
	return ret ? ret : cli_restore_copy(&o->tap, equals + 1, strlen(equals + 1));
}

enum {
	OPT_SNAPSHOT = 1000,
	OPT_MEM,
	OPT_MEM_DIFF,
	OPT_DISK,
	OPT_NET,
	OPT_VSOCK_UDS,
	OPT_PAUSED,
	OPT_TRACK_DIRTY,
	OPT_API_SOCK,
	OPT_CONSOLE,
	OPT_QUIET,
	OPT_COPIES,
	OPT_HELP,
	OPT_CONSOLE_MAX,
	OPT_VERIFY_MEMORY,
	OPT_NO_SECCOMP,
};

static const struct option restore_options[] = {
    {"snapshot", required_argument, NULL, OPT_SNAPSHOT},
    {"mem", required_argument, NULL, OPT_MEM},
    {"mem-diff", required_argument, NULL, OPT_MEM_DIFF},
    {"disk", required_argument, NULL, OPT_DISK},
    {"net", required_argument, NULL, OPT_NET},
    {"vsock-uds", required_argument, NULL, OPT_VSOCK_UDS},
    {"paused", no_argument, NULL, OPT_PAUSED},
    {"track-dirty-pages", no_argument, NULL, OPT_TRACK_DIRTY},
    {"verify-memory", no_argument, NULL, OPT_VERIFY_MEMORY},
    {"api-sock", required_argument, NULL, OPT_API_SOCK},
    {"console", required_argument, NULL, OPT_CONSOLE},
    {"console-max-size", required_argument, NULL, OPT_CONSOLE_MAX},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"copies", required_argument, NULL, OPT_COPIES},
    {"no-seccomp", no_argument, NULL, OPT_NO_SECCOMP},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

static int cli_restore_option(struct cli_restore_options *opts, int option, const char *arg,
			      char *error, size_t error_len)
{
	struct mote_restore_config *r = &opts->restore;

	switch (option) {
	case OPT_SNAPSHOT:
		if (cli_file_option_once(r->state_path, "restore", "snapshot", error, error_len))
			return -EINVAL;
		return cli_restore_copy(&r->state_path, arg, strlen(arg));
	case OPT_MEM:
		if (cli_file_option_once(r->mem_path, "restore", "mem", error, error_len))
			return -EINVAL;
		return cli_restore_copy(&r->mem_path, arg, strlen(arg));
	case OPT_MEM_DIFF:
		if (r->mem_diff_count == MOTE_MAX_MEM_DIFFS)
			return cli_error(error, error_len, "--mem-diff: at most %d files",
					 MOTE_MAX_MEM_DIFFS);
		r->mem_diff_paths[r->mem_diff_count] = NULL;
		return cli_restore_copy(&r->mem_diff_paths[r->mem_diff_count++], arg, strlen(arg));
	case OPT_DISK:
		return cli_restore_disk(r, arg, error, error_len);
	case OPT_NET:
		return cli_restore_net(r, arg, error, error_len);
	case OPT_VSOCK_UDS:
		/* As --vsock uds= is checked in mote run: a command-line error (exit 2). */
		if (vsock_uds_path_check(arg) != 0)
			return cli_error(
			    error, error_len,
			    "--vsock-uds %s: empty, or too long for a Unix socket path "
			    "with the _PORT suffix",
			    arg);
		return cli_restore_copy(&r->vsock_uds_path, arg, strlen(arg));
	case OPT_PAUSED:
		r->paused = true;
		return 0;
	case OPT_TRACK_DIRTY:
		r->track_dirty_pages = true;
		return 0;
	case OPT_VERIFY_MEMORY:
		r->verify_memory = true;
		return 0;
	case OPT_NO_SECCOMP:
		opts->no_seccomp = true;
		return 0;
	case OPT_API_SOCK:
		return cli_api_sock_set(&opts->api_sock, arg, error, error_len);
	case OPT_CONSOLE: {
		/* cli_console_parse() fills a cli_options; borrow one for the value. */
		struct cli_options console;
		cli_options_init(&console);
		int ret = cli_console_parse(&console, arg);
		if (ret == -EINVAL)
			return cli_error(error, error_len,
					 "--console %s: must be stdio, none or file:PATH", arg);
		opts->console = console.console;
		free(opts->console_path);
		opts->console_path = console.console_path;
		opts->console_given = true;
		return ret;
	}
	case OPT_CONSOLE_MAX:
		opts->console_max_given = true;
		return cli_console_max_parse(&opts->console_max_bytes, arg, error, error_len);
	case OPT_QUIET:
		opts->quiet = true;
		return 0;
	case OPT_COPIES:
		if (uint_parse(arg, 1, CLI_RESTORE_MAX_COPIES, &opts->copies))
			return cli_error(error, error_len, "--copies %s: expected 1 to %d", arg,
					 CLI_RESTORE_MAX_COPIES);
		return 0;
	case OPT_HELP:
		opts->help = true;
		return 0;
	}
	return 0;
}

static bool cli_has_copy_mark(const char *s)
{
	return s && strstr(s, CLI_COPY_MARK);
}

/* Copies cannot share a socket, a console file, an overlay or a TAP: each one given
 * must name the copy. The snapshot's own resources (no override) are its business: a
 * second copy on them fails at restore with the resource named. */
static int cli_restore_check_copies(const struct cli_restore_options *opts, char *error,
				    size_t error_len)
{
	const struct mote_restore_config *r = &opts->restore;
	const char *shared = NULL;

	if (opts->console == MOTE_CONSOLE_FDS)
		return cli_error(error, error_len,
				 "restore: --copies: the copies cannot share stdio; use --console "
				 "none or file:PATH with " CLI_COPY_MARK " in PATH");
	if (opts->api_sock && !cli_has_copy_mark(opts->api_sock))
		shared = "--api-sock";
	else if (r->vsock_uds_path && !cli_has_copy_mark(r->vsock_uds_path))
		shared = "--vsock-uds";
	else if (opts->console == MOTE_CONSOLE_FILE && !cli_has_copy_mark(opts->console_path))
		shared = "--console file:";
	for (unsigned i = 0; i < r->disk_override_count && !shared; i++)
		if (r->disk_overrides[i].overlay &&
		    !cli_has_copy_mark(r->disk_overrides[i].overlay))
			shared = "--disk ...overlay=";
	for (unsigned i = 0; i < r->net_override_count && !shared; i++)
		if (!cli_has_copy_mark(r->net_overrides[i].tap))
			shared = "--net NAME=TAP";
	if (shared)
		return cli_error(error, error_len,
				 "restore: --copies: %s must contain " CLI_COPY_MARK
				 " (each copy's number), or the copies would share it",
				 shared);
	return 0;
}

/* text with every "{i}" replaced by copy's number; NULL stays NULL. -ENOMEM. */
static int cli_copy_string(const char **field, const char *text, unsigned copy)
{
	char number[16];
	size_t marks = 0, mark_len = strlen(CLI_COPY_MARK);

	*field = NULL;
	if (!text)
		return 0;
	for (const char *p = text; (p = strstr(p, CLI_COPY_MARK)); p += mark_len)
		marks++;
	int number_len = snprintf(number, sizeof(number), "%u", copy);
	char *out = malloc(strlen(text) + marks * (size_t)number_len + 1);
	if (!out)
		return -ENOMEM;
	char *o = out;
	for (const char *p = text; *p;) {
		if (strncmp(p, CLI_COPY_MARK, mark_len) == 0) {
			memcpy(o, number, (size_t)number_len);
			o += number_len;
			p += mark_len;
		} else {
			*o++ = *p++;
		}
	}
	*o = '\0';
	*field = out;
	return 0;
}

int cli_restore_options_for_copy(const struct cli_restore_options *opts, unsigned copy,
				 struct cli_restore_options *out)
{
	const struct mote_restore_config *r = &opts->restore;
	struct mote_restore_config *c = &out->restore;
	int ret = 0;

	cli_restore_options_init(out);
	c->paused = r->paused;
	c->track_dirty_pages = r->track_dirty_pages;
	/* Memory files the copies share are read and verified once, by the first copy: no
	 * copy runs unless every one was restored. */
	bool own_memory = cli_has_copy_mark(r->mem_path);
	for (unsigned i = 0; i < r->mem_diff_count; i++)
		own_memory = own_memory || cli_has_copy_mark(r->mem_diff_paths[i]);
	c->verify_memory = r->verify_memory && (copy == 1 || own_memory);
	out->console = opts->console;
	out->console_max_bytes = opts->console_max_bytes;
	out->console_given = opts->console_given;
	out->quiet = opts->quiet;
	ret |= cli_copy_string(&c->state_path, r->state_path, copy);
	ret |= cli_copy_string(&c->mem_path, r->mem_path, copy);
	for (; c->mem_diff_count < r->mem_diff_count; c->mem_diff_count++)
		ret |= cli_copy_string(&c->mem_diff_paths[c->mem_diff_count],
				       r->mem_diff_paths[c->mem_diff_count], copy);
	for (; c->disk_override_count < r->disk_override_count; c->disk_override_count++) {
		const struct mote_disk_override *from = &r->disk_overrides[c->disk_override_count];
		struct mote_disk_override *to = &c->disk_overrides[c->disk_override_count];
		ret |= cli_copy_string(&to->disk, from->disk, copy);
		ret |= cli_copy_string(&to->path, from->path, copy);
		ret |= cli_copy_string(&to->overlay, from->overlay, copy);
	}
	for (; c->net_override_count < r->net_override_count; c->net_override_count++) {
		const struct mote_net_override *from = &r->net_overrides[c->net_override_count];
		struct mote_net_override *to = &c->net_overrides[c->net_override_count];
		ret |= cli_copy_string(&to->nic, from->nic, copy);
		ret |= cli_copy_string(&to->tap, from->tap, copy);
	}
	ret |= cli_copy_string(&c->vsock_uds_path, r->vsock_uds_path, copy);
	ret |= cli_copy_string((const char **)&out->api_sock, opts->api_sock, copy);
	ret |= cli_copy_string((const char **)&out->console_path, opts->console_path, copy);
	if (ret) {
		cli_restore_options_free(out);
		return -ENOMEM;
	}
	return 0;
}

int cli_restore_parse(struct cli_restore_options *opts, int argc, char **argv, char *error,
		      size_t error_len)
{
	int option;

	cli_getopt_restart();
	while ((option = getopt_long(argc, argv, "", restore_options, NULL)) != -1) {
		if (option == '?' || option == ':') {
			char buf[3];
			return cli_error(error, error_len,
					 "restore: unknown or incomplete option %s",
					 cli_refused_option(argv, buf));
		}
		int ret = cli_restore_option(opts, option, optarg, error, error_len);
		if (ret == -ENOMEM)
			return cli_error(error, error_len, "out of memory");
		if (ret)
			return ret;
	}
	if (optind < argc)
		return cli_error(error, error_len, "restore: unexpected argument %s", argv[optind]);
	if (opts->help)
		return 0;
	if (!opts->restore.state_path || !opts->restore.mem_path)
		return cli_error(error, error_len,
				 "restore: --snapshot STATE and --mem MEMFILE are required");
	if (opts->restore.paused && !opts->api_sock)
		return cli_error(
		    error, error_len,
		    "restore: --paused needs --api-sock PATH (nothing could resume it)");
	if (opts->copies == 1)
		return 0;
	/* Copies print no console unless asked to, each to its own file. */
	if (!opts->console_given)
		opts->console = MOTE_CONSOLE_NONE;
	return cli_restore_check_copies(opts, error, error_len);
}

int cli_restore_main(int argc, char **argv, int64_t start_ns)
{
	struct cli_restore_options opts;
	char error[CLI_ERROR_MAX] = "";
	int code;

	cli_restore_options_init(&opts);
	if (cli_restore_parse(&opts, argc, argv, error, sizeof(error))) {
		fprintf(stderr, "mote: %s\n", error);
		cli_restore_options_free(&opts);
		return CLI_EXIT_USAGE;
	}
	if (opts.help) {
		code = 0;
		printf(
		    "usage: mote restore --snapshot STATE --mem MEMFILE [options] (mote --help)\n");
	} else if (opts.copies > 1) {
		code = cli_restore_copies(&opts, start_ns);
	} else if (opts.api_sock && cli_api_socket_is_served(opts.api_sock)) {
		/* A mote waits there (`mote run --api-sock` without a kernel): load into it. */
		const char *flag = opts.console_given	    ? "--console"
				   : opts.console_max_given ? "--console-max-size"
				   : opts.no_seccomp	    ? "--no-seccomp"
							    : NULL;
		if (flag) {
			fprintf(stderr,
				"mote: restore: %s does not apply to a snapshot sent to a "
				"running mote (its console and seccomp filter are its own)\n",
				flag);
			code = CLI_EXIT_USAGE;
		} else {
			code = cli_restore_send(&opts);
		}
	} else {
		code = cli_restore_vm(&opts, start_ns);
	}
	cli_restore_options_free(&opts);
	return code;
}
