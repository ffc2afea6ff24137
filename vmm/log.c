#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

void log_msg(const struct mote_log *log, enum mote_log_level level, const char *fmt, ...)
{
	char message[512];
	va_list args;

	if (!log || !log->fn)
		return;
	/* Callers log a failure and then return -errno: neither vsnprintf nor the
	 * embedder's callback (stdio often leaves ENOTTY behind) may change it. */
	int saved_errno = errno;
	va_start(args, fmt);
	vsnprintf(message, sizeof(message), fmt, args);
	va_end(args);
	log->fn(log->opaque, level, message);
	errno = saved_errno;
}
