/* `mote exec` and `mote cp`: front-ends over the agent client (agent_client.h) that
 * run a command in a running guest, or copy a file in or out of it.
 *
 * Exit codes of `mote exec` (README):
 *   N        the command exited with status N
 *   128+N    the command was killed by signal N
 *   124      --timeout passed; the command was killed
 *   125      the agent could not be reached, refused the request, or the connection
 *            to it failed (the message says which); or the seccomp filter could not
 *            be installed
 *   127      the command could not be started (no such program, bad --cwd, ...)
 *   2        bad command line
 * `mote cp`: 0 copied, 1 not copied (the message says why; or the seccomp filter could
 * not be installed), 2 bad command line,
 * 125 the agent could not be reached or the connection failed. */
#ifndef MOTE_CLI_EXEC_H
#define MOTE_CLI_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
	CLI_EXEC_TIMED_OUT = 124,
	CLI_EXEC_UNREACHABLE = 125,
	CLI_EXEC_NOT_STARTED = 127,
	CLI_EXEC_USAGE = 2,
	CLI_CP_FAILED = 1,
};

#define CLI_AGENT_DEFAULT_WAIT_S 10

/* Options of `mote exec` and `mote cp`. Strings are borrowed from argv. */
struct cli_agent_options {
	const char *vsock_path;
	uint32_t port;
	int wait_ms;
	int timeout_ms; /* exec: the command's; cp: the whole transfer's; 0 for none */
	const char *cwd;
	bool tty;	  /* exec --tty: on a terminal in the guest */
	const char **env; /* env_count entries, malloc'd */
	size_t env_count;
	char **command;	 /* exec: NULL-terminated, inside argv */
	const char *src; /* cp */
	const char *dst;
	uint64_t max_size; /* cp: largest download, 0 for no limit */
	bool no_seccomp;   /* run without the seccomp filter (cli_restrict_syscalls) */
};

void cli_agent_options_free(struct cli_agent_options *opts);

/* Parse `exec ...` / `cp ...` (argv[0] is the subcommand). 0, or -EINVAL with a
 * one-line reason in error. Options stop at the first non-option or at "--". */
int cli_exec_parse(struct cli_agent_options *opts, int argc, char **argv, char *error,
		   size_t error_len);
int cli_cp_parse(struct cli_agent_options *opts, int argc, char **argv, char *error,
		 size_t error_len);

/* Whole subcommands: parse, run, report; return the process exit code. */
int cli_exec_main(int argc, char **argv);
int cli_cp_main(int argc, char **argv);

#endif
