/* `mote restore` options:
 *   mote restore --snapshot STATE --mem MEMFILE [--mem-diff FILE]...
 *                [--disk NAME:path=IMG,overlay=FILE]... [--net NAME=TAP]...
 *                [--vsock-uds PATH] [--paused] [--track-dirty-pages]
 *                [--api-sock PATH] [--console KIND] [--quiet] [--copies N] [--no-seccomp]
 * NAME is a disk's id or the guest's name for it (vda), a NIC's id or guest name (eth0).
 * --paused needs --api-sock (a `mote resume --api-sock` continues the VM).
 * With --api-sock naming a socket a mote already serves, the snapshot is loaded into
 * that mote (PUT /snapshot/load; cli_control.h); otherwise it is restored here.
 * --copies N forks N copies in this process (cli_run.h): "{i}" in a path or TAP name
 * becomes each copy's number, 1 to N, and every per-copy resource given must have it. */
#ifndef MOTE_CLI_RESTORE_H
#define MOTE_CLI_RESTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mote.h"

struct cli_restore_options {
	/* Every string in it is owned (freed by cli_restore_options_free). The console, log
	 * and start time are filled in when it is used. */
	struct mote_restore_config restore;
	char *api_sock;
	enum mote_console console;
	char *console_path;
	uint64_t console_max_bytes; /* --console-max-size; 0: the default */
	bool console_given;
	bool console_max_given; /* --console-max-size */
	bool quiet;
	bool no_seccomp; /* run without the seccomp filter (mote_restrict_syscalls) */
	bool help;
	unsigned copies; /* VMs restored from the snapshot: 1 unless --copies */
};

#define CLI_RESTORE_MAX_COPIES 256
#define CLI_COPY_MARK "{i}"

void cli_restore_options_init(struct cli_restore_options *opts);
void cli_restore_options_free(struct cli_restore_options *opts);

/* Parses argv (argv[0] is "restore"). 0, or -EINVAL with a one-line reason in error. */
int cli_restore_parse(struct cli_restore_options *opts, int argc, char **argv, char *error,
		      size_t error_len);

/* Copy number copy (1 to opts->copies) of opts, with "{i}" replaced by that number in
 * every path and TAP name, and copies 1. 0 or -ENOMEM (out is left initialised). */
int cli_restore_options_for_copy(const struct cli_restore_options *opts, unsigned copy,
				 struct cli_restore_options *out);

/* The whole subcommand; returns the exit code (cli_run.h, or cli_control.h's when the
 * snapshot goes to a running mote). */
int cli_restore_main(int argc, char **argv, int64_t start_ns);

#endif
