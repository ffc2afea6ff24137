/* write(2) without SIGPIPE (write_quiet.h). */
#include "write_quiet.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

ssize_t write_quiet(int fd, const void *buf, size_t len)
{
	sigset_t pipe_signal, old_mask, pending;

	sigemptyset(&pipe_signal);
	sigaddset(&pipe_signal, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_signal, &old_mask);
	/* A SIGPIPE already pending (for the process, or for this thread before this call)
	 * is not ours to take. */
	bool was_pending = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;

	ssize_t n = write(fd, buf, len);
	int saved = errno;

	if (n < 0 && saved == EPIPE && !was_pending) {
		/* The SIGPIPE this write raised is directed at this thread (signal(7)): take
		 * it back without waiting. */
		const struct timespec now = {0};
		while (sigtimedwait(&pipe_signal, NULL, &now) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
	errno = saved;
	return n;
}
