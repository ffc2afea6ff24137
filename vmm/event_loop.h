/* One VM's event thread (design.md: the hot path never exits to user space). It waits
 * on file descriptors with epoll — virtqueue ioeventfds, io_uring completion eventfds,
 * later TAP and socket fds — and calls each one's handler. No KVM needed: unit tests run
 * a loop without a thread through event_loop_run_once(). */
#ifndef MOTE_EVENT_LOOP_H
#define MOTE_EVENT_LOOP_H

#include <pthread.h>
#include <stdbool.h>

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

struct event_loop {
	int epoll_fd;
	int stop_fd; /* eventfd: written to end the thread */
	unsigned source_count;
	struct event_source sources[EVENT_LOOP_MAX_SOURCES];
	pthread_t thread;
	bool thread_started;
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

/* Runs the loop on its own thread until event_loop_stop(). */
int event_loop_start(struct event_loop *loop);

/* Ends and joins the thread (no-op when it was not started). Handlers are not running
 * when this returns; what becomes ready meanwhile waits for event_loop_start() again
 * (a paused VM). */
void event_loop_stop(struct event_loop *loop);

/* Stops the loop and closes its own fds (not the watched ones). */
void event_loop_destroy(struct event_loop *loop);

#endif
