/* `mote merge-memory`: a full memory file and its diffs merged into one full file
 * (mote.h: mote_memory_merge).
 *   mote merge-memory --mem FULL --mem-diff DIFF [--mem-diff DIFF]... --out FILE [--quiet]
 */
#ifndef MOTE_CLI_MERGE_H
#define MOTE_CLI_MERGE_H

#include <stdbool.h>
#include <stddef.h>

struct cli_merge_options {
	const char *mem_path;
	const char **diff_paths; /* owned array of argv's strings */
	unsigned diff_count;
	const char *out_path;
	bool quiet;
	bool help;
};

/* Parses argv (argv[0] is "merge-memory"). 0, or -EINVAL (-ENOMEM) with a one-line
 * reason in error; free the options either way. */
int cli_merge_parse(struct cli_merge_options *opts, int argc, char **argv, char *error,
		    size_t error_len);
void cli_merge_options_free(struct cli_merge_options *opts);

/* The whole subcommand; returns its exit code: 0 merged, 1 out of memory, 2 usage
 * error, 4 a file that cannot be read or written (missing, no room, I/O error, ...),
 * 6 files that are not a full file and its diffs in order, or damaged. */
int cli_merge_main(int argc, char **argv);

#endif
