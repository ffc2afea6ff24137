/* Decoding an EXEC payload (agent_exec_args.h). */
#include "agent_exec_args.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

#define DEFAULT_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

void exec_args_free(struct exec_args *a)
{
	free(a->arena);
	free(a->argv);
	free(a->env);
}

/* Copies the next string into the arena. NULL, with nothing copied, once the reader
 * failed: the arena is sized by the payload, and strings the payload does not hold
 * (counts larger than it) must not take room in it. */
static char *copy_string(struct agent_reader *r, char **arena)
{
	const char *s;
	size_t n;

	agent_get_string(r, &s, &n);
	if (r->bad)
		return NULL;
	char *copy = *arena;
	memcpy(copy, s, n);
	copy[n] = '\0';
	*arena += n + 1;
	return copy;
}

int exec_args_decode(const struct agent_header *h, const uint8_t *payload, struct exec_args *a,
		     char *why, size_t why_len)
{
	struct agent_reader r;

	*a = (struct exec_args){0}; /* exec_args_free() then frees whatever was allocated */
	agent_reader_init(&r, payload, h->length);
	a->flags = agent_get_u32(&r);
	uint32_t argc = agent_get_u32(&r);
	a->envc = agent_get_u32(&r);
	if (r.bad)
		return snprintf(why, why_len, "EXEC payload truncated"), EPROTO;
	if (a->flags & ~(AGENT_EXEC_ENV_REPLACE | AGENT_EXEC_TTY))
		return snprintf(why, why_len, "unknown EXEC flags 0x%x", a->flags), EINVAL;
	if (argc == 0 || argc > AGENT_MAX_ARGS)
		return snprintf(why, why_len, "argc %u: must be 1 to %u", argc, AGENT_MAX_ARGS),
		       EINVAL;
	if (a->envc > AGENT_MAX_ENV)
		return snprintf(why, why_len, "%u environment entries: at most %u", a->envc,
				AGENT_MAX_ENV),
		       E2BIG;

	/* Each string costs 4 + n payload bytes and n + 1 arena bytes. */
	char *p = a->arena = malloc(h->length + 1);
	a->argv = calloc(argc + 1, sizeof(char *));
	a->env = calloc(a->envc + 1, sizeof(char *));
	if (!a->arena || !a->argv || !a->env)
		return snprintf(why, why_len, "out of memory"), ENOMEM;
	char *cwd = copy_string(&r, &p);
	for (uint32_t i = 0; i < argc && !r.bad; i++)
		a->argv[i] = copy_string(&r, &p);
	for (uint32_t i = 0; i < a->envc && !r.bad; i++)
		a->env[i] = copy_string(&r, &p);
	if (a->flags & AGENT_EXEC_TTY) {
		a->size.ws_row = agent_get_u16(&r);
		a->size.ws_col = agent_get_u16(&r);
	}
	if (!agent_reader_done(&r))
		return snprintf(why, why_len, "EXEC payload truncated, malformed or too long"),
		       EPROTO;
	if (strlen(cwd) >= AGENT_PATH_MAX)
		return snprintf(why, why_len, "working directory longer than %u bytes",
				AGENT_PATH_MAX),
		       ENAMETOOLONG;
	a->cwd = cwd[0] ? cwd : NULL;
	if (a->argv[0][0] == '\0')
		return snprintf(why, why_len, "empty program name"), EINVAL;
	for (uint32_t i = 0; i < a->envc; i++) {
		if (a->env[i][0] == '=' || !strchr(a->env[i], '='))
			return snprintf(why, why_len, "environment entry %u is not NAME=VALUE", i),
			       EINVAL;
	}
	return 0;
}

char **exec_args_env(const struct exec_args *a)
{
	bool replace = a->flags & AGENT_EXEC_ENV_REPLACE;
	size_t base = 0, n = 0;

	for (char **e = environ; !replace && e && *e; e++)
		base++;
	char **env = calloc(base + a->envc + 2, sizeof(char *));
	if (!env)
		return NULL;
	if (!replace) {
		bool has_path = false;
		for (size_t i = 0; i < base; i++) {
			env[n++] = environ[i];
			has_path |= strncmp(environ[i], "PATH=", 5) == 0;
		}
		if (!has_path)
			env[n++] = DEFAULT_PATH;
	}
	for (uint32_t i = 0; i < a->envc; i++) {
		size_t key_len = (size_t)(strchr(a->env[i], '=') - a->env[i]) + 1;
		size_t j = 0;
		while (j < n && strncmp(env[j], a->env[i], key_len) != 0)
			j++;
		env[j] = a->env[i];
		if (j == n)
			n++;
	}
	env[n] = NULL;
	return env;
}
