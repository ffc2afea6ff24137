/* The VM's event thread (event_loop.h). */
#include "event_loop.h"

#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "vm.h"

#define EVENT_BATCH 16

int event_loop_init(struct event_loop *loop)
{
	memset(loop, 0, sizeof(*loop));
	loop->stop_fd = -1;
	loop->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	if (loop->epoll_fd < 0)
		return -errno;
	loop->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (loop->stop_fd < 0) {
		int err = -errno;
		close(loop->epoll_fd);
		loop->epoll_fd = -1;
		return err;
	}
	/* The stop eventfd is the one source with no handler: data.ptr NULL. */
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	if (epoll_ctl(loop->epoll_fd, EPOLL_CTL_ADD, loop->stop_fd, &ev) < 0) {
		int err = -errno;
		event_loop_destroy(loop);
		return err;
	}
	return 0;
}

int event_loop_add(struct event_loop *loop, int fd, event_handler_fn handler, void *opaque)
{
	if (fd < 0 || !handler)
		return -EINVAL;
	if (loop->source_count == EVENT_LOOP_MAX_SOURCES)
		return -ENOSPC;
	struct event_source *source = &loop->sources[loop->source_count];
	*source = (struct event_source){.fd = fd, .handler = handler, .opaque = opaque};
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = source};
	if (epoll_ctl(loop->epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0)
		return -errno;
	loop->source_count++;
	return 0;
}

int event_loop_watch(struct event_loop *loop, int fd, unsigned events)
{
	for (unsigned i = 0; i < loop->source_count; i++) {
		struct event_source *source = &loop->sources[i];
		if (source->fd != fd || !source->handler)
			continue;
		struct epoll_event ev = {
		    .events = ((events & EVENT_READABLE) ? EPOLLIN : 0) |
			      ((events & EVENT_WRITABLE) ? EPOLLOUT : 0),
		    .data.ptr = source,
		};
		return epoll_ctl(loop->epoll_fd, EPOLL_CTL_MOD, fd, &ev) < 0 ? -errno : 0;
	}
	return -ENOENT;
}

int event_loop_remove(struct event_loop *loop, int fd)
{
	for (unsigned i = 0; i < loop->source_count; i++) {
		struct event_source *source = &loop->sources[i];
		if (source->fd != fd || !source->handler)
			continue;
		int err = epoll_ctl(loop->epoll_fd, EPOLL_CTL_DEL, fd, NULL) < 0 ? -errno : 0;
		/* Events of this fd already fetched in the same epoll_wait are skipped. */
		source->handler = NULL;
		source->fd = -1;
		return err;
	}
	return -ENOENT;
}

/* Runs the handlers of one epoll_wait; sets *stop when the stop eventfd fired. */
static int event_loop_dispatch(struct event_loop *loop, int timeout_ms, bool *stop)
{
	struct epoll_event events[EVENT_BATCH];
	int n = epoll_wait(loop->epoll_fd, events, EVENT_BATCH, timeout_ms);
	int ran = 0;

	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	for (int i = 0; i < n; i++) {
		struct event_source *source = events[i].data.ptr;
		if (!source) {
			*stop = true;
			continue;
		}
		if (!source->handler)
			continue; /* removed by an earlier handler of this batch */
		source->handler(source->opaque);
		ran++;
	}
	return ran;
}

int event_loop_run_once(struct event_loop *loop, int timeout_ms)
{
	bool stop = false;

	return event_loop_dispatch(loop, timeout_ms, &stop);
}

static void *event_loop_thread(void *arg)
{
	struct event_loop *loop = arg;
	bool stop = false;

	while (!stop) {
		if (event_loop_dispatch(loop, -1, &stop) < 0)
			break;
	}
	return NULL;
}

int event_loop_start(struct event_loop *loop)
{
	int err = vm_thread_start(&loop->thread, event_loop_thread, loop);

	if (err)
		return -err;
	loop->thread_started = true;
	return 0;
}

void event_loop_stop(struct event_loop *loop)
{
	uint64_t one = 1;

	if (!loop->thread_started)
		return;
	if (write(loop->stop_fd, &one, sizeof(one)) < 0) {
		/* A nonblocking eventfd only refuses a write at its maximum count: the
		 * thread has been told already. */
	}
	pthread_join(loop->thread, NULL);
	loop->thread_started = false;
	/* Consumed, so that a loop started again (a resumed VM) does not stop at once. */
	uint64_t count;
	if (read(loop->stop_fd, &count, sizeof(count)) < 0) {
		/* EAGAIN: the thread had stopped on an error before it was told. */
	}
}

void event_loop_destroy(struct event_loop *loop)
{
	event_loop_stop(loop);
	if (loop->epoll_fd >= 0)
		close(loop->epoll_fd);
	if (loop->stop_fd >= 0)
		close(loop->stop_fd);
	loop->epoll_fd = loop->stop_fd = -1;
}
