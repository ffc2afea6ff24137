/* log_msg(): the message reaches the embedder's callback, and errno survives it, since
 * callers log a failure and then return -errno. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "vmm/log.h"

struct seen {
	enum mote_log_level level;
	char message[64];
};

/* A callback as an embedder may write one: its stdio call leaves errno changed. */
static void clobbering_callback(void *opaque, enum mote_log_level level, const char *message)
{
	struct seen *seen = opaque;

	seen->level = level;
	strncpy(seen->message, message, sizeof(seen->message) - 1);
	errno = ENOTTY;
}

static void errno_survives_the_callback(void **state)
{
	struct seen seen = {0};
	struct mote_log log = {clobbering_callback, &seen};
	(void)state;
	errno = EACCES;
	log_error(&log, "open %s: %s", "disk.img", strerror(errno));
	assert_int_equal(errno, EACCES);
	assert_int_equal(seen.level, MOTE_LOG_ERROR);
	assert_string_equal(seen.message, "open disk.img: Permission denied");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(errno_survives_the_callback),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
