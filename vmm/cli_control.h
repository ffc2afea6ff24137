/* `mote pause`, `mote resume`, `mote snapshot`, `mote update-disk` and `mote restore
 * --api-sock` to a waiting mote: clients of a running mote's control API (api_server.h,
 * api_client.h).
 *
 *   mote pause --api-sock PATH          PATCH /vm {"state": "Paused"}
 *   mote resume --api-sock PATH         PATCH /vm {"state": "Resumed"}
 *   mote snapshot --api-sock PATH --state FILE --mem FILE [--diff] [--resume]
 *       PATCH /vm Paused (if running), PUT /snapshot/create, and with --resume
 *       PATCH /vm Resumed afterwards (also when the snapshot failed)
 *   mote update-disk --api-sock PATH --disk ID --path FILE
 *       PATCH /drives/ID {"drive_id": ID, "path_on_host": FILE made absolute}
 *
 * Exit codes: 0 done; 1 the mote refused or failed the request (its fault_message is
 * printed); 2 bad command line; 7 nothing answers on the API socket (no such socket,
 * nobody listening, not mote's API), or libcurl cannot be loaded. */
#ifndef MOTE_CLI_CONTROL_H
#define MOTE_CLI_CONTROL_H

#include <stdbool.h>
#include <stddef.h>

#include "cli_restore.h"

enum {
	CLI_CONTROL_DONE = 0,
	CLI_CONTROL_REFUSED = 1,
	CLI_CONTROL_USAGE = 2,
	CLI_CONTROL_UNREACHABLE = 7,
};

enum cli_control_command {
	CLI_CONTROL_PAUSE,
	CLI_CONTROL_RESUME,
	CLI_CONTROL_SNAPSHOT,
	CLI_CONTROL_UPDATE_DISK,
};

/* What a disk id given to update-disk may hold: it goes into the request's path. */
#define CLI_DISK_ID_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"

/* Strings borrowed from argv. */
struct cli_control_options {
	enum cli_control_command command;
	const char *api_sock;
	const char *state_path; /* snapshot */
	const char *mem_path;
	bool diff;
	bool resume;
	const char *disk; /* update-disk */
	const char *image_path;
	bool help;
};

/* Parses argv (argv[0] is "pause", "resume", "snapshot" or "update-disk"). 0, or -EINVAL
 * with a one-line reason in error. */
int cli_control_parse(struct cli_control_options *opts, int argc, char **argv, char *error,
		      size_t error_len);

/* The whole subcommand; returns the exit code. */
int cli_control_main(int argc, char **argv);

/* Whether a process serves the Unix socket at path. */
bool cli_api_socket_is_served(const char *path);

/* Sends opts as PUT /snapshot/load to the mote on opts->api_sock; the exit code. */
int cli_restore_send(const struct cli_restore_options *opts);

/* The JSON body of that request (malloc'd), or NULL without memory. */
char *cli_restore_request_body(const struct cli_restore_options *opts);

#endif
