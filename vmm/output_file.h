/* A file that appears complete or not at all: written under a temporary name next to
 * its final one, then synced and renamed over it. Readers of the old file (a VM that
 * maps it) keep the old content, since a rename only moves the name. */
#ifndef MOTE_OUTPUT_FILE_H
#define MOTE_OUTPUT_FILE_H

#include <stdbool.h>

#include "log.h"

struct output_file {
	const char *path;
	char temp[4096 + 32];
	int fd;	       /* the temporary file's, read-write; -1 once finished or abandoned */
	bool finished; /* output_file_finish succeeded: it may take its name */
};

/* Creates "<path>.tmp-<pid>-<random>", a new file (never through a link), readable by
 * its owner only while it is written. 0 or a negative errno, with a message. */
int output_file_open(struct output_file *out, const char *path, const struct mote_log *log);

/* Everything a commit does short of the rename: gives it the permissions of the file it
 * replaces (a new file: what the umask leaves of 0666), syncs and closes it. A writer
 * of several files finishes them all before renaming any, so that a failure leaves
 * every old file in place. 0 or a negative errno, with a message. */
int output_file_finish(struct output_file *out, const struct mote_log *log);

/* Renames a finished file to its path (the directory not synced yet). 0 or a negative
 * errno, with a message: -EBADF for one not finished (or whose finish failed). */
int output_file_rename(struct output_file *out, const struct mote_log *log);

/* Finishes it (unless done), renames it to its path and syncs the directory. 0 or a
 * negative errno, with a message; on a failure before the rename, the temporary file is
 * left for output_file_abandon. A directory that cannot be synced is an error too, the
 * file already in place: it may not survive a crash, so whoever would delete what it
 * was made from must not. */
int output_file_commit(struct output_file *out, const struct mote_log *log);

/* The message for a file renamed into place whose directory could not be synced:
 * path, then the error's words. */
#define OUTPUT_FILE_UNSYNCED_FMT                                                                   \
	"%s: in place, but its directory could not be synced (%s): it may not survive a "          \
	"crash"

/* Makes a rename in path's directory durable (fsync of the directory). 0, or a negative
 * errno (the directory could not be opened or synced), without a message. */
int output_file_sync_directory(const char *path);

/* Closes and removes what was not committed; a no-op after a commit. */
void output_file_abandon(struct output_file *out);

#endif
