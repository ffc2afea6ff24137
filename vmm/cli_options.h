/* `mote run` settings from the command line and from a JSON config file, validated
 * before anything is created. The same struct feeds struct mote_config. */
#ifndef MOTE_CLI_OPTIONS_H
#define MOTE_CLI_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mote.h"

enum cli_command {
	CLI_COMMAND_NONE,
	CLI_COMMAND_HELP,
	CLI_COMMAND_VERSION,
	CLI_COMMAND_RUN,
};

/* Where a disk or NIC was given, which decides what one with the same id does: a flag
 * replaces the config file's (flags override the file), an API request replaces what
 * an earlier request or the command line gave (PUT again, as in Firecracker); two with
 * one id in one file, or on one command line, are a mistake and refused. */
enum cli_origin { CLI_FROM_FLAG, CLI_FROM_CONFIG, CLI_FROM_API };

/* Whether an entry from incoming may replace the one from existing with its id. */
static inline bool cli_origin_replaces(enum cli_origin existing, enum cli_origin incoming)
{
	return incoming == CLI_FROM_API ||
	       (existing == CLI_FROM_CONFIG && incoming == CLI_FROM_FLAG);
}

struct cli_disk {
	char *path;
	char *id;      /* or NULL */
	char *overlay; /* copy-on-write overlay file, or NULL */
	bool read_only;
	bool root;
	bool direct;
	enum cli_origin origin;
};

struct cli_net {
	char *tap;
	char *id; /* or NULL */
	uint8_t mac[6];
	bool has_mac;
	enum cli_origin origin;
};

struct cli_options {
	enum cli_command command;
	char *kernel;
	char *initrd;
	char *cmdline;
	unsigned cpus;
	uint64_t mem_bytes;
	enum mote_console console; /* MOTE_CONSOLE_FDS means stdio */
	char *console_path;
	uint64_t console_max_bytes; /* --console-max-size; 0: the library's default */
	unsigned disk_count;
	struct cli_disk disks[MOTE_MAX_DISKS];
	unsigned net_count;
	struct cli_net nets[MOTE_MAX_NETS];
	uint32_t vsock_cid; /* 0: none */
	char *vsock_uds;
	bool track_dirty_pages; /* for diff snapshots */
	bool exit_at_boot;	/* end the VM at the guest's boot-complete write */
	char *api_sock;		/* serve the control API on this Unix socket, or NULL */
	bool quiet;
	bool no_seccomp; /* run without the seccomp filter (mote_restrict_syscalls) */
};

#define CLI_ERROR_MAX 256

void cli_options_init(struct cli_options *opts);
void cli_options_free(struct cli_options *opts);

/* Parses argv (argv[0] is the program). Returns 0, or -EINVAL with a one-line reason
 * in error. A --config file is applied first, so flags given alongside override it. */
int cli_options_parse(struct cli_options *opts, int argc, char **argv, char *error,
		      size_t error_len);

/* Applies a JSON config (text, NUL-terminated) on top of opts. -EINVAL with a reason
 * for malformed JSON, unknown keys and wrong types or values. */
int config_file_apply(struct cli_options *opts, const char *text, char *error, size_t error_len);

/* Reads path and applies it; -EINVAL with a reason (including unreadable files). */
int config_file_load(struct cli_options *opts, const char *path, char *error, size_t error_len);

/* Parses --console-max-size's SIZE (more than 0); -EINVAL with a reason. */
int cli_console_max_parse(uint64_t *bytes, const char *text, char *error, size_t error_len);

/* Parses "stdio", "none" or "file:PATH" into opts; -EINVAL otherwise. */
int cli_console_parse(struct cli_options *opts, const char *text);

/* Replaces *field with a copy of the n bytes at text; -ENOMEM. */
int cli_replace_part(char **field, const char *text, size_t n);

/* Writes a one-line reason into error and returns -EINVAL. */
int cli_error(char *error, size_t error_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Refuses a file option given a second time (a slip that would silently drop the first
 * file): -EINVAL with "NAME: --OPTION given twice" in error. 0 when first is NULL. */
int cli_file_option_once(const char *first, const char *name, const char *option, char *error,
			 size_t error_len);

/* Makes the next getopt_long() start a fresh parse, its errors left to the caller
 * (opterr off; cli_refused_option names them). */
void cli_getopt_restart(void);

/* The option getopt_long() just refused, for a message: "-x" for an unknown short
 * option (inside a group such as -vq, glibc leaves optind where argv[optind - 1] names
 * another word), else the word it stopped at (an unknown long option, or one missing
 * its value). buf holds the short form. */
const char *cli_refused_option(char *const argv[], char buf[3]);

/* Parses a --disk value, "path=IMG[,overlay=FILE][,ro][,id=NAME][,root][,direct]",
 * into *disk (strings allocated). -EINVAL with a reason (also an overlay with ro, or an
 * overlay that is the image), -ENOMEM. */
int cli_disk_parse(const char *text, struct cli_disk *disk, char *error, size_t error_len);

/* Adds a disk, taking ownership of its strings (freed on error too). A disk with the
 * id of one already present replaces it where cli_origin_replaces says so. -EINVAL
 * with a reason: an id given twice otherwise, more than MOTE_MAX_DISKS, two root disks,
 * an id over 20 bytes, an overlay with ro or that is the image. */
int cli_disk_add(struct cli_options *opts, struct cli_disk *disk, char *error, size_t error_len);

/* Frees every disk's strings; disk_count becomes 0. */
void cli_disks_free(struct cli_options *opts);

/* Parses a --net value, "tap=NAME[,mac=MAC][,id=NAME]", into *net (strings
 * allocated). -EINVAL with a reason, -ENOMEM. */
int cli_net_parse(const char *text, struct cli_net *net, char *error, size_t error_len);

/* Adds a NIC, taking ownership of its strings (freed on error too). A NIC with the id
 * of one already present replaces it where cli_origin_replaces says so. -EINVAL with a
 * reason: an id given twice otherwise, more than MOTE_MAX_NETS, a TAP name that is not
 * a valid interface name, two NICs on one TAP. */
int cli_net_add(struct cli_options *opts, struct cli_net *net, char *error, size_t error_len);

/* Frees every NIC's strings; net_count becomes 0. */
void cli_nets_free(struct cli_options *opts);

/* Parses "aa:bb:cc:dd:ee:ff" (hex, either case) into mac: a unicast address. 0 or
 * -EINVAL. */
int cli_mac_parse(const char *text, uint8_t mac[6]);

/* Parses a --vsock value, "cid=N,uds=PATH", into opts. -EINVAL with a reason. */
int cli_vsock_parse(struct cli_options *opts, const char *text, char *error, size_t error_len);

/* Checks and stores a vsock device: a guest CID of 3..UINT32_MAX-1 and a socket path
 * that fits sockaddr_un. -EINVAL with a reason, -ENOMEM. */
int cli_vsock_set(struct cli_options *opts, uint64_t cid, const char *uds, char *error,
		  size_t error_len);

/* Checks and stores an --api-sock path (it must fit sockaddr_un). -EINVAL with a
 * reason, -ENOMEM. */
int cli_api_sock_set(char **field, const char *path, char *error, size_t error_len);

/* Checks and stores a memory size in bytes (multiple of 2 MiB, 16 MiB..1 TiB). */
int cli_memory_set(struct cli_options *opts, uint64_t bytes, char *error, size_t error_len);

#endif
