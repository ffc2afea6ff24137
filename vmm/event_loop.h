/* One VM's event thread (design.md: the hot path never exits to user space). It waits
 * on file descriptors with epoll — virtqueue ioeventfds, io_uring completion eventfds,
 * later TAP and socket fds — and calls each one's handler. No KVM needed: unit tests run
 * a loop without a thread through event_loop_run_once(). */
#ifndef MOTE_EVENT_LOOP_H
#define MOTE_EVENT_LOOP_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "clock.h"
#include "log.h"

/* Called on the event thread when fd is readable (or in error). The handler must
 * consume what made it readable (read the eventfd, drain the socket) or it is called
 * again at once. */
typedef void (*event_handler_fn)(void *opaque);

#define EVENT_LOOP_MAX_SOURCES 64

struct event_source {
	int fd;
	event_handler_fn handler;
	void *opaque;
};

/* What the thread is asked to do next (event_loop_pause, _start, _stop). */
enum event_loop_want {
	EVENT_LOOP_RUN,
	EVENT_LOOP_PARK,
	EVENT_LOOP_END,
};

struct event_loop {
	int epoll_fd;
	int stop_fd; /* eventfd: written to make the thread look at want */
	unsigned source_count;
	struct event_source sources[EVENT_LOOP_MAX_SOURCES];
	pthread_t thread;
	bool thread_started;
	/* lock guards want, parked and exited; changed signals each. */
	pthread_mutex_t lock;
	pthread_cond_t changed;
	enum event_loop_want want;
	bool parked;
	/* The thread returned from its function: told to end, or on its own (an
	 * epoll_wait failure). */
	bool exited;
	bool sync_ready;	    /* lock and changed initialised */
	const struct mote_log *log; /* for the thread's own failure; NULL: silent */
};

/* 0 or a negative errno. */
int event_loop_init(struct event_loop *loop);

/* Watches fd for reading. Setup-time only: before event_loop_start(), or from the
 * event thread itself. -ENOSPC when EVENT_LOOP_MAX_SOURCES are watched. */
int event_loop_add(struct event_loop *loop, int fd, event_handler_fn handler, void *opaque);

/* What wakes a watched fd's handler: readable (the default), writable, both, or neither
 * (paused), e.g. a device with no guest buffers for what a socket holds, or waiting to
 * write again after EAGAIN. The handler finds out which by trying. */
#define EVENT_READABLE 1u
#define EVENT_WRITABLE 2u

/* Changes what wakes fd's handler (fd must be watched). Callable from the event thread
 * (its handlers) and before event_loop_start(). -ENOENT when fd is not watched. */
int event_loop_watch(struct event_loop *loop, int fd, unsigned events);

/* Stops watching fd for good, e.g. a backend that failed: epoll reports errors and
 * hang-ups even on a paused fd, and a handler called for them forever would spin the
 * thread. The slot is not reused. Same threads as event_loop_watch(); -ENOENT when fd is
 * not watched. */
int event_loop_remove(struct event_loop *loop, int fd);

/* Waits up to timeout_ms (-1: forever) and runs the handlers of the fds that are
 * ready. Returns how many handlers ran, or a negative errno. */
int event_loop_run_once(struct event_loop *loop, int timeout_ms);

/* Runs the loop on its own thread, or lets a parked one go on (one that ended on an
 * error is replaced). 0 or a negative errno (the thread could not be created). */
int event_loop_start(struct event_loop *loop);

/* Parks the thread (no-op when it was not started): handlers are not running when this
 * returns, and what becomes ready meanwhile waits for event_loop_start() (a paused VM).
 * The thread is kept, not ended: io_uring ties a request to the thread that submitted
 * it, and one whose thread has exited fails rather than completes (a buffered read
 * waiting for its page is completed with -EFAULT, io_req_task_submit() in Linux 6.1's
 * io_uring.c; work queued to the thread's io-wq is cancelled), so a pause that ended
 * the thread made in-flight disk requests fail. */
void event_loop_pause(struct event_loop *loop);

/* event_loop_pause() in two halves, so that the thread parks while the caller does
 * something else (a VM's pause stops its vCPUs meanwhile, vm_pause.c): the first asks and
 * returns at once, the second waits until the thread is parked (or ended): 0; or
 * -ETIMEDOUT at deadline_ns (CLOCK_MONOTONIC, or CLOCK_FOREVER: clock.h), the thread
 * still in a handler (one held by a file that stopped answering). Handlers may run until
 * the second returns 0; event_loop_start() lets a thread asked to park go on. */
void event_loop_ask_park(struct event_loop *loop);
int event_loop_wait_parked(struct event_loop *loop, int64_t deadline_ns);

/* Ends the thread, parked or not, and joins it once it returned: a thread whose end the
 * kernel still holds 30 s later (vm_thread_join_returned) is left to end on its own.
 * No-op when it was not started. A thread held in a handler (an overlay's copy-up from
 * a file that stopped answering) holds this up as long. */
void event_loop_stop(struct event_loop *loop);

/* Stops the loop and closes its own fds (not the watched ones). */
void event_loop_destroy(struct event_loop *loop);

#endif
