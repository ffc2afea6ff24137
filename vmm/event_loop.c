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
	pthread_mutex_init(&loop->lock, NULL);
	/* On CLOCK_MONOTONIC: event_loop_wait_parked()'s deadline is. */
	pthread_condattr_t monotonic;
	pthread_condattr_init(&monotonic);
	pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
	pthread_cond_init(&loop->changed, &monotonic);
	pthread_condattr_destroy(&monotonic);
	loop->sync_ready = true;
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

/* The stop eventfd fired: parks until told to run again; false when told to end. */
static bool event_loop_obey(struct event_loop *loop)
{
	uint64_t count;

	pthread_mutex_lock(&loop->lock);
	/* Consumed under the lock: a later request writes it again after changing want. */
	if (read(loop->stop_fd, &count, sizeof(count)) < 0) {
		/* EAGAIN: consumed by an earlier look at want. */
	}
	if (loop->want == EVENT_LOOP_PARK) {
		loop->parked = true;
		pthread_cond_broadcast(&loop->changed);
		while (loop->want == EVENT_LOOP_PARK)
			pthread_cond_wait(&loop->changed, &loop->lock);
		loop->parked = false;
	}
	bool run = loop->want == EVENT_LOOP_RUN;
	pthread_mutex_unlock(&loop->lock);
	return run;
}

static void *event_loop_thread(void *arg)
{
	struct event_loop *loop = arg;

	for (;;) {
		bool told = false;
		int ran = event_loop_dispatch(loop, -1, &told);
		if (ran < 0) {
			log_error(loop->log, "event thread: epoll_wait: %s (devices stop)",
				  strerror(-ran));
			break;
		}
		if (told && !event_loop_obey(loop))
			break;
	}
	/* Whatever ended it, a pause waiting for the thread to park must not wait on. */
	pthread_mutex_lock(&loop->lock);
	loop->exited = true;
	loop->parked = true;
	pthread_cond_broadcast(&loop->changed);
	pthread_mutex_unlock(&loop->lock);
	return NULL;
}

/* Asks the thread to do what: a parked one waits on changed; to park or end, a running
 * one is woken from epoll_wait by the eventfd. Whether the thread had ended on its own
 * (an epoll_wait failure). */
static bool event_loop_tell(struct event_loop *loop, enum event_loop_want want)
{
	uint64_t one = 1;

	pthread_mutex_lock(&loop->lock);
	loop->want = want;
	bool exited = loop->exited;
	pthread_cond_broadcast(&loop->changed);
	pthread_mutex_unlock(&loop->lock);
	if (want != EVENT_LOOP_RUN && write(loop->stop_fd, &one, sizeof(one)) < 0) {
		/* A nonblocking eventfd only refuses a write at its maximum count: the
		 * thread has been told already. */
	}
	return exited;
}

int event_loop_start(struct event_loop *loop)
{
	if (loop->thread_started) {
		if (!event_loop_tell(loop, EVENT_LOOP_RUN))
			return 0;
		/* It said it returned; its end may still be held by disk I/O it started. */
		vm_thread_join_returned(loop->thread, loop->log, "the device thread");
		loop->thread_started = false;
	}
	loop->want = EVENT_LOOP_RUN;
	loop->parked = false;
	loop->exited = false;
	int err = vm_thread_start(&loop->thread, event_loop_thread, loop);
	if (err)
		return -err;
	loop->thread_started = true;
	return 0;
}

void event_loop_ask_park(struct event_loop *loop)
{
	if (loop->thread_started)
		event_loop_tell(loop, EVENT_LOOP_PARK);
}

int event_loop_wait_parked(struct event_loop *loop, int64_t deadline_ns)
{
	if (!loop->thread_started)
		return 0;
	struct timespec until = clock_timespec(deadline_ns);
	pthread_mutex_lock(&loop->lock);
	while (!loop->parked && clock_now_ns() < deadline_ns) {
		if (deadline_ns == CLOCK_FOREVER)
			pthread_cond_wait(&loop->changed, &loop->lock);
		else
			pthread_cond_timedwait(&loop->changed, &loop->lock, &until);
	}
	bool parked = loop->parked;
	pthread_mutex_unlock(&loop->lock);
	return parked ? 0 : -ETIMEDOUT;
}

void event_loop_pause(struct event_loop *loop)
{
	event_loop_ask_park(loop);
	(void)event_loop_wait_parked(loop, CLOCK_FOREVER);
}

void event_loop_stop(struct event_loop *loop)
{
	if (!loop->thread_started)
		return;
	event_loop_tell(loop, EVENT_LOOP_END);
	pthread_mutex_lock(&loop->lock);
	while (!loop->exited)
		pthread_cond_wait(&loop->changed, &loop->lock);
	pthread_mutex_unlock(&loop->lock);
	vm_thread_join_returned(loop->thread, loop->log, "the device thread");
	loop->thread_started = false;
}

void event_loop_destroy(struct event_loop *loop)
{
	event_loop_stop(loop);
	if (loop->epoll_fd >= 0)
		close(loop->epoll_fd);
	if (loop->stop_fd >= 0)
		close(loop->stop_fd);
	loop->epoll_fd = loop->stop_fd = -1;
	if (loop->sync_ready) {
		pthread_cond_destroy(&loop->changed);
		pthread_mutex_destroy(&loop->lock);
		loop->sync_ready = false;
	}
}
