/* libFuzzer target: any bytes as the payload of an EXEC request to the in-guest agent
 * (guest-init/agent_exec_args.h), decoded as the agent decodes it before it starts a
 * command. The decoder must refuse cleanly or give exactly what its header promises
 * (checked below: a violation aborts, as a crash would), never reading past the
 * payload or writing past what it allocated (ASan watches). The environment built
 * from an accepted payload holds each of its entries. Running the command is not
 * fuzzed: a fuzzer that starts programs of its own choosing would run them on the host. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "guest-init/agent_exec_args.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_accepted(const struct exec_args *a)
{
	size_t argc = 0;

	if (a->flags & ~(uint32_t)(AGENT_EXEC_ENV_REPLACE | AGENT_EXEC_TTY))
		abort();
	if (!a->argv[0] || a->argv[0][0] == '\0')
		abort();
	while (a->argv[argc])
		argc++;
	if (argc > AGENT_MAX_ARGS || a->envc > AGENT_MAX_ENV || a->env[a->envc])
		abort();
	if (a->cwd && (a->cwd[0] == '\0' || strlen(a->cwd) >= AGENT_PATH_MAX))
		abort();
	for (uint32_t i = 0; i < a->envc; i++) {
		if (!a->env[i] || a->env[i][0] == '=' || !strchr(a->env[i], '='))
			abort();
	}

	/* Every entry of the request is in the command's environment, as given (of two of
	 * the same name, the later one). */
	char **env = exec_args_env(a);
	if (!env)
		return;
	for (uint32_t i = 0; i < a->envc; i++) {
		size_t key_len = (size_t)(strchr(a->env[i], '=') - a->env[i]) + 1;
		bool later = false;
		for (uint32_t j = i + 1; j < a->envc && !later; j++)
			later = strncmp(a->env[j], a->env[i], key_len) == 0;
		bool found = false;
		for (char **e = env; *e && !found; e++)
			found = *e == a->env[i];
		if (found == later)
			abort();
	}
	free(env);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > AGENT_MAX_PAYLOAD)
		return 0;
	/* A buffer of exactly the payload, so that ASan sees a read past it. */
	uint8_t *payload = malloc(size ? size : 1);
	if (!payload)
		abort();
	memcpy(payload, data, size);
	struct agent_header h = {.length = (uint32_t)size, .type = AGENT_EXEC, .id = 1};
	struct exec_args a = {0};
	char why[AGENT_MESSAGE_MAX];

	if (exec_args_decode(&h, payload, &a, why, sizeof(why)) == 0)
		check_accepted(&a);
	exec_args_free(&a);
	free(payload);
	return 0;
}
