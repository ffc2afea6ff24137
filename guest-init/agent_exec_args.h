/* The payload of an EXEC request (AGENT_PROTOCOL.md "Commands"): decoded and checked
 * apart from running it, since it is where the client's bytes become the strings a
 * command is started with (and so what tests/fuzz/fuzz_agent_exec_args.c feeds). */
#ifndef MOTE_AGENT_EXEC_ARGS_H
#define MOTE_AGENT_EXEC_ARGS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>

#include "agent_protocol.h"

/* An EXEC payload decoded into NUL-terminated strings, all inside arena. */
struct exec_args {
	uint32_t flags;
	struct winsize size; /* flag TTY: the terminal's */
	char *cwd;	     /* NULL: the agent's own */
	char **argv;
	char **env;
	uint32_t envc;
	char *arena;
};

/* Decodes an EXEC frame's payload (h->length bytes) into a (overwritten whole), whose
 * strings it allocates (free with exec_args_free, whatever the result). 0: flags known, argv[0] not
 * empty, argv and env NULL-terminated, every env entry NAME=VALUE, cwd shorter than AGENT_PATH_MAX
 * or NULL. Otherwise a positive errno (EPROTO for a payload truncated, malformed or too long) with
 * the reason in why. */
int exec_args_decode(const struct agent_header *h, const uint8_t *payload, struct exec_args *a,
		     char *why, size_t why_len);

void exec_args_free(struct exec_args *a);

/* The command's environment: the agent's own (with a default PATH) plus the request's
 * entries, each replacing one of the same name; or exactly the request's entries. The
 * strings are borrowed from environ and the arena. NULL when out of memory; free() it. */
char **exec_args_env(const struct exec_args *a);

#endif
