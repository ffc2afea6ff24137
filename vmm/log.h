/* Error and progress reporting without global state: every module that can fail
 * gets a `struct mote_log *` and reports through the embedder's callback. */
#ifndef MOTE_LOG_H
#define MOTE_LOG_H

#include "mote.h"

struct mote_log {
	mote_log_fn fn;
	void *opaque;
};

/* Formats one message and hands it to the callback; a NULL log or callback drops it.
 * errno is as it was before, whatever the callback did. */
void log_msg(const struct mote_log *log, enum mote_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define log_error(log, ...) log_msg((log), MOTE_LOG_ERROR, __VA_ARGS__)
#define log_warn(log, ...) log_msg((log), MOTE_LOG_WARN, __VA_ARGS__)
#define log_info(log, ...) log_msg((log), MOTE_LOG_INFO, __VA_ARGS__)
#define log_debug(log, ...) log_msg((log), MOTE_LOG_DEBUG, __VA_ARGS__)

#endif
