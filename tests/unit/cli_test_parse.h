/* The argv the command-line tests parse, and the config texts they expect refused:
 * shared by test_cli_options and test_cli_net_vsock. Static inline: each program uses
 * only part. */
#ifndef MOTE_TESTS_CLI_TEST_PARSE_H
#define MOTE_TESTS_CLI_TEST_PARSE_H

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "vmm/cli_options.h"

#define CLI_TEST_ARGS_MAX 32

static inline void cli_test_append(char **argv, int *argc, const char *const *args)
{
	for (; args && *args; args++) {
		assert_true(*argc < CLI_TEST_ARGS_MAX - 1);
		argv[(*argc)++] = (char *)*args;
	}
}

/* Parses "mote", the words of first, then those of then (each NULL-terminated; then
 * may be NULL) into opts, which it initialises: cli_options_parse()'s result. */
static inline int cli_test_parse(struct cli_options *opts, char *error, const char *const *first,
				 const char *const *then)
{
	char *argv[CLI_TEST_ARGS_MAX];
	int argc = 0;

	argv[argc++] = "mote";
	cli_test_append(argv, &argc, first);
	cli_test_append(argv, &argc, then);
	argv[argc] = NULL;
	cli_options_init(opts);
	return cli_options_parse(opts, argc, argv, error, CLI_ERROR_MAX);
}

/* Applies the config text json to fresh options, which must refuse it with -EINVAL;
 * error (CLI_ERROR_MAX bytes) is left holding the reason. */
static inline void assert_config_refused(const char *json, char *error)
{
	struct cli_options o;

	error[0] = '\0';
	cli_options_init(&o);
	if (config_file_apply(&o, json, error, CLI_ERROR_MAX) != -EINVAL)
		fail_msg("accepted: %s", json);
	cli_options_free(&o);
}

#endif
