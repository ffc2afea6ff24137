/* `mote merge-memory` (cli_merge.h). */
#include "cli_merge.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "cli_options.h"
#include "cli_run.h"
#include "mote.h"

enum {
	OPT_MEM = 1000,
	OPT_MEM_DIFF,
	OPT_OUT,
	OPT_QUIET,
	OPT_HELP,
};

static const struct option merge_options[] = {
    {"mem", required_argument, NULL, OPT_MEM}, {"mem-diff", required_argument, NULL, OPT_MEM_DIFF},
    {"out", required_argument, NULL, OPT_OUT}, {"quiet", no_argument, NULL, OPT_QUIET},
    {"help", no_argument, NULL, OPT_HELP},     {NULL, 0, NULL, 0},
};

int cli_merge_parse(struct cli_merge_options *opts, int argc, char **argv, char *error,
		    size_t error_len)
{
	int option;

	memset(opts, 0, sizeof(*opts));
	/* No more diffs than arguments. */
	opts->diff_paths = calloc((size_t)argc + 1, sizeof(*opts->diff_paths));
	if (!opts->diff_paths)
		return cli_error(error, error_len, "merge-memory: out of memory");
	cli_getopt_restart();
	while ((option = getopt_long(argc, argv, "", merge_options, NULL)) != -1) {
		switch (option) {
		case OPT_MEM:
			if (cli_file_option_once(opts->mem_path, "merge-memory", "mem", error,
						 error_len))
				return -EINVAL;
			opts->mem_path = optarg;
			break;
		case OPT_MEM_DIFF:
			opts->diff_paths[opts->diff_count++] = optarg;
			break;
		case OPT_OUT:
			if (cli_file_option_once(opts->out_path, "merge-memory", "out", error,
						 error_len))
				return -EINVAL;
			opts->out_path = optarg;
			break;
		case OPT_QUIET:
			opts->quiet = true;
			break;
		case OPT_HELP:
			opts->help = true;
			break;
		default: {
			char buf[3];
			return cli_error(error, error_len,
					 "merge-memory: unknown or incomplete option %s",
					 cli_refused_option(argv, buf));
		}
		}
	}
	if (optind < argc)
		return cli_error(error, error_len, "merge-memory: unexpected argument %s",
				 argv[optind]);
	if (opts->help)
		return 0;
	if (!opts->mem_path || !opts->out_path || opts->diff_count == 0)
		return cli_error(error, error_len,
				 "merge-memory: --mem FULL, at least one --mem-diff DIFF and "
				 "--out FILE are required");
	return 0;
}

void cli_merge_options_free(struct cli_merge_options *opts)
{
	free(opts->diff_paths);
	opts->diff_paths = NULL;
}

static void cli_merge_log(void *opaque, enum mote_log_level level, const char *message)
{
	(void)opaque;
	if (level <= MOTE_LOG_WARN)
		fprintf(stderr, "mote merge-memory: %s%s\n",
			level == MOTE_LOG_ERROR ? "error: " : "", message);
}

int cli_merge_main(int argc, char **argv)
{
	struct cli_merge_options opts;
	char error[CLI_ERROR_MAX] = "";
	int64_t start_ns = clock_now_ns();

	if (cli_merge_parse(&opts, argc, argv, error, sizeof(error))) {
		fprintf(stderr, "mote: %s\n", error);
		cli_merge_options_free(&opts);
		return CLI_EXIT_USAGE;
	}
	if (opts.help) {
		printf("usage: mote merge-memory --mem FULL --mem-diff DIFF [--mem-diff DIFF]... "
		       "--out FILE [--quiet]\n");
		cli_merge_options_free(&opts);
		return 0;
	}
	struct mote_memory_merge_params params = {
	    .mem_path = opts.mem_path,
	    .diff_paths = opts.diff_paths,
	    .diff_count = opts.diff_count,
	    .out_path = opts.out_path,
	    .log = cli_merge_log,
	};
	int ret = mote_memory_merge(&params);
	if (!ret && !opts.quiet)
		fprintf(stderr, "mote merge-memory: %s and %u diff%s merged into %s in %lld ms\n",
			opts.mem_path, opts.diff_count, opts.diff_count == 1 ? "" : "s",
			opts.out_path, (long long)((clock_now_ns() - start_ns) / 1000000));
	cli_merge_options_free(&opts);
	if (ret == 0)
		return 0;
	/* -EINVAL: the files are not a chain, or are damaged; the rest is the host's. */
	if (ret == -EINVAL)
		return CLI_EXIT_BAD_SNAPSHOT;
	return ret == -ENOMEM ? CLI_EXIT_VM_FAILED : CLI_EXIT_BAD_FILE;
}
