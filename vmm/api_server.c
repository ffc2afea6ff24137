/* The control API's socket (api_server.h): a thread of the server's own accepts
 * connections on a Unix socket bound here and answers them (api_http.h), one request at
 * a time, so commands never run concurrently. It polls every connection, so a client
 * that sends or reads slowly holds up no other. Nothing is loaded or started beyond
 * that one thread: every restored or forked copy serves its own socket. */
#include "api_server.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api_http.h"
#include "clock.h"
#include "unix_listener.h"
#include "vm.h"

#define API_LISTEN_BACKLOG 16
/* A connection that neither sends nor reads for this long is closed, unless
 * api_server_set_idle_timeout() says otherwise. */
#define API_IDLE_TIMEOUT_NS (60 * 1000000000LL)
/* A request must arrive whole within this long of its first byte, unless
 * api_server_set_request_timeout() says otherwise: a client that sends one byte at a
 * time holds its connection no longer than that. */
#define API_REQUEST_TIMEOUT_NS (10 * 1000000000LL)
/* With every connection taken, a new client is let in by closing the connection that
 * has waited longest between requests, once it has waited this long: long enough that a
 * client that just connected sends its request first. */
#define API_EVICT_AFTER_NS (1000 * 1000000LL)
/* accept() failing for want of descriptors or memory is retried after this long
 * instead of at once (the pending connection keeps the socket readable). */
#define API_ACCEPT_RETRY_NS (100 * 1000000LL)

struct api_connection {
	int fd;
	int64_t active_ns;	     /* when it last sent or read */
	int64_t request_ns;	     /* when the request being read began; 0: none is */
	unsigned long requests_done; /* api_http_requests_done() when request_ns was set */
	struct api_http http;
};

struct api_server {
	struct vm_controller *controller;
	struct mote_log log;
	int listen_fd;
	int stop_fd; /* eventfd: readable once api_server_stop() wants the thread gone */
	pthread_t thread;
	struct api_connection *connections[API_CONNECTIONS_MAX];
	unsigned connection_count;
	int64_t accept_after_ns; /* accept() is retried from then on */
	_Atomic int64_t idle_timeout_ns;
	_Atomic int64_t request_timeout_ns;
	char *socket_path;
	struct unix_listener_id socket_id; /* the socket bound, so only it is removed */
};

static void api_connection_close(struct api_server *server, unsigned i)
{
	struct api_connection *connection = server->connections[i];

	api_http_free(&connection->http);
	close(connection->fd);
	free(connection);
	server->connections[i] = server->connections[--server->connection_count];
}

/* What the connection waits for: room for a request, or its reply to be read. */
static short api_connection_events(struct api_connection *connection)
{
	size_t room, unsent;

	api_http_output(&connection->http, &unsent);
	if (unsent)
		return POLLOUT;
	api_http_input_space(&connection->http, &room);
	return room ? POLLIN : 0;
}

/* Reads what came, sends what is queued. 0, or -1: close the connection. The clock is
 * read after each step: a request may run for long (a snapshot), and the connection was
 * active until its reply went out. */
static int api_connection_serve(struct api_connection *connection, short revents)
{
	struct api_http *http = &connection->http;
	size_t room, unsent;

	char *space = api_http_input_space(http, &room);
	if (room && (revents & (POLLIN | POLLHUP | POLLERR))) {
		ssize_t n = recv(connection->fd, space, room, 0);
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -1;
		if (n >= 0)
			connection->active_ns = clock_now_ns();
		if (n > 0 && api_http_received(http, (size_t)n))
			return -1;
		if (n == 0 && api_http_end_of_input(http))
			return -1;
	}
	/* Sent at once, without waiting for the next poll: the client is waiting for it. */
	for (const char *out; (out = api_http_output(http, &unsent)), unsent;) {
		ssize_t n = send(connection->fd, out, unsent, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -1;
		connection->active_ns = clock_now_ns();
		if (api_http_sent(http, (size_t)n))
			return -1;
	}
	return api_http_finished(http) ? -1 : 0;
}

/* The timeouts the server thread read when it last woke. */
struct api_timeouts {
	int64_t idle_ns, request_ns;
};

/* When connection must be closed: when it has been idle too long, or been sending its
 * request too long. */
static int64_t api_connection_deadline(const struct api_connection *connection,
				       const struct api_timeouts *timeouts)
{
	int64_t deadline = connection->active_ns + timeouts->idle_ns;

	if (connection->request_ns && connection->request_ns + timeouts->request_ns < deadline)
		deadline = connection->request_ns + timeouts->request_ns;
	return deadline;
}

/* Starts the request timer at a request's first bytes, and again at the next one's when
 * one read brought the end of one request and the start of another. */
static void api_request_timer(struct api_connection *connection, int64_t now)
{
	unsigned long done = api_http_requests_done(&connection->http);

	if (!api_http_mid_request(&connection->http))
		connection->request_ns = 0;
	else if (!connection->request_ns || connection->requests_done != done)
		connection->request_ns = now;
	connection->requests_done = done;
}

/* A request not read whole in time is answered 408 (RFC 9110 §15.5.9), as far as the
 * socket takes it at once, before the connection is closed. */
static bool api_request_timed_out(struct api_connection *connection, int64_t now,
				  const struct api_timeouts *timeouts)
{
	static const char body[] = "{\"fault_message\": \"the request did not arrive whole "
				   "in time\"}";
	char reply[256];

	if (!connection->request_ns || now < connection->request_ns + timeouts->request_ns)
		return false;
	int n = snprintf(reply, sizeof(reply),
			 "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
			 sizeof(body) - 1, body);
	(void)send(connection->fd, reply, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
	return true;
}

/* With every connection taken: the one that has waited longest between requests, if
 * any has, and when it may be closed to let a new client in (INT64_MAX: none may). */
static int api_eviction_candidate(const struct api_server *server, int64_t *when)
{
	int found = -1;

	*when = INT64_MAX;
	for (unsigned i = 0; i < server->connection_count; i++) {
		const struct api_connection *connection = server->connections[i];
		char byte;
		/* Bytes sent and not read yet (while a command ran): a request would be lost. */
		if (api_http_between_requests(&connection->http) &&
		    connection->active_ns + API_EVICT_AFTER_NS < *when &&
		    recv(connection->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) < 0) {
			*when = connection->active_ns + API_EVICT_AFTER_NS;
			found = (int)i;
		}
	}
	return found;
}

/* Until the nearest deadline, eviction or accept retry, in poll()'s milliseconds; -1:
 * none. */
static int api_poll_timeout(const struct api_server *server, int64_t now,
			    const struct api_timeouts *timeouts, int64_t evict_at)
{
	int64_t deadline = evict_at > now ? evict_at : INT64_MAX;

	for (unsigned i = 0; i < server->connection_count; i++) {
		int64_t end = api_connection_deadline(server->connections[i], timeouts);
		if (end < deadline)
			deadline = end;
	}
	if (server->accept_after_ns > now && server->accept_after_ns < deadline)
		deadline = server->accept_after_ns;
	if (deadline == INT64_MAX)
		return -1;
	return deadline <= now ? 0 : (int)((deadline - now + 999999) / 1000000);
}

/* A client waiting in the backlog, accepted: true, and it is the last connection. When
 * every connection is taken, it takes the place of the one that has waited longest
 * between requests, if that one has waited long enough; else it waits on. */
static bool api_accept(struct api_server *server, int64_t now)
{
	int evict = -1;

	if (server->connection_count == API_CONNECTIONS_MAX) {
		int64_t evict_at;
		evict = api_eviction_candidate(server, &evict_at);
		if (evict < 0 || evict_at > now)
			return false;
	}
	int fd = accept4(server->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0) {
		if (errno != EAGAIN && errno != ECONNABORTED && errno != EINTR) {
			log_error(&server->log, "api socket %s: accept: %s", server->socket_path,
				  strerror(errno));
			server->accept_after_ns = now + API_ACCEPT_RETRY_NS;
		}
		return false;
	}
	struct api_connection *connection = malloc(sizeof(*connection));
	if (!connection) {
		close(fd);
		return false;
	}
	if (evict >= 0) {
		log_debug(&server->log,
			  "api socket %s: every connection taken; closing the one idle longest "
			  "for a new client",
			  server->socket_path);
		api_connection_close(server, (unsigned)evict);
	}
	connection->fd = fd;
	connection->active_ns = now;
	connection->request_ns = 0;
	api_http_init(&connection->http, server->controller, &server->log);
	server->connections[server->connection_count++] = connection;
	return true;
}

/* Serves connection i for what poll said of it (revents), then closes it when it is
 * done, timed out or idle too long; a closed one's slot takes the last connection. */
static void api_connection_step(struct api_server *server, unsigned i, short revents, int64_t now,
				const struct api_timeouts *timeouts)
{
	struct api_connection *connection = server->connections[i];
	bool done = api_connection_serve(connection, revents) != 0;

	api_request_timer(connection, now);
	if (!done && api_request_timed_out(connection, now, timeouts))
		done = true;
	if (done || now >= api_connection_deadline(connection, timeouts))
		api_connection_close(server, i);
}

static void *api_server_thread(void *arg)
{
	struct api_server *server = arg;
	struct pollfd fds[2 + API_CONNECTIONS_MAX];
	sigset_t all;

	/* Signals are the process's to handle, never this thread's. */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	for (;;) {
		int64_t now = clock_now_ns(), evict_at = INT64_MAX;
		struct api_timeouts timeouts = {server->idle_timeout_ns,
						server->request_timeout_ns};
		bool full = server->connection_count == API_CONNECTIONS_MAX;
		if (full)
			api_eviction_candidate(server, &evict_at);
		bool may_accept = (!full || evict_at <= now) && now >= server->accept_after_ns;
		unsigned count = server->connection_count;

		fds[0] = (struct pollfd){.fd = server->stop_fd, .events = POLLIN};
		fds[1] =
		    (struct pollfd){.fd = may_accept ? server->listen_fd : -1, .events = POLLIN};
		for (unsigned i = 0; i < count; i++)
			fds[2 + i] = (struct pollfd){
			    .fd = server->connections[i]->fd,
			    .events = api_connection_events(server->connections[i])};
		if (poll(fds, 2 + count, api_poll_timeout(server, now, &timeouts, evict_at)) < 0 &&
		    errno != EINTR) {
			/* Out of memory passes: the server waits and serves on. Anything else
			 * (EFAULT, EINVAL) is a bug poll would repeat forever. */
			int err = errno;
			log_error(&server->log, "api socket %s: poll: %s%s", server->socket_path,
				  strerror(err), err == ENOMEM ? ", trying again" : "");
			if (err != ENOMEM)
				break;
			nanosleep(&(struct timespec){.tv_nsec = 100 * 1000 * 1000}, NULL);
			continue;
		}
		if (fds[0].revents)
			break;
		/* Idle is judged at poll's return: a connection that sent something while an
		 * earlier one's command ran is not idle, though poll has not said so yet. */
		int64_t polled = clock_now_ns();
		/* Backwards, so that the one moved into a closed one's slot was served. */
		for (unsigned i = count; i-- > 0;)
			api_connection_step(server, i, fds[2 + i].revents, polled, &timeouts);
		/* A client usually sends its request with its connect: it is read at once,
		 * not after another poll (a recv that finds nothing yet costs one call). */
		if ((fds[1].revents & POLLIN) && api_accept(server, clock_now_ns()))
			api_connection_step(server, server->connection_count - 1, POLLIN,
					    clock_now_ns(), &timeouts);
	}
	return NULL;
}

static int api_socket_bind(struct api_server *server, const char *path)
{
	int fd = unix_listener_open(path, SOCK_NONBLOCK, API_LISTEN_BACKLOG, &server->socket_id);

	if (fd < 0)
		log_error(&server->log, "api socket %s: %s", path, unix_listener_strerror(fd));
	return fd;
}

/* Everything but the thread: the socket (its path removed first, unix_listener.h), the
 * connections, the memory. */
static void api_server_free(struct api_server *server)
{
	while (server->connection_count)
		api_connection_close(server, server->connection_count - 1);
	if (server->listen_fd >= 0) {
		unix_listener_remove(server->socket_path, &server->socket_id);
		close(server->listen_fd);
	}
	if (server->stop_fd >= 0)
		close(server->stop_fd);
	free(server->socket_path);
	free(server);
}

int api_server_start(struct vm_controller *c, const char *socket_path, const struct mote_log *log,
		     struct api_server **out)
{
	struct api_server *server = calloc(1, sizeof(*server));

	*out = NULL;
	if (!server)
		return -ENOMEM;
	server->controller = c;
	server->log = *log;
	server->listen_fd = -1;
	server->idle_timeout_ns = API_IDLE_TIMEOUT_NS;
	server->request_timeout_ns = API_REQUEST_TIMEOUT_NS;
	server->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (server->stop_fd < 0 || !(server->socket_path = strdup(socket_path))) {
		int ret = server->stop_fd < 0 ? -errno : -ENOMEM;
		api_server_free(server);
		return ret;
	}
	server->listen_fd = api_socket_bind(server, socket_path);
	if (server->listen_fd < 0) {
		int ret = server->listen_fd;
		api_server_free(server);
		return ret;
	}
	int ret = -pthread_create(&server->thread, NULL, api_server_thread, server);
	if (ret) {
		log_error(&server->log, "api socket %s: cannot start its thread: %s", socket_path,
			  strerror(-ret));
		api_server_free(server);
		return ret;
	}
	log_debug(&server->log, "api: serving on %s", socket_path);
	*out = server;
	return 0;
}

void api_server_set_idle_timeout(struct api_server *server, int64_t timeout_ns)
{
	server->idle_timeout_ns = timeout_ns;
}

void api_server_set_request_timeout(struct api_server *server, int64_t timeout_ns)
{
	server->request_timeout_ns = timeout_ns;
}

void api_server_stop(struct api_server *server)
{
	uint64_t one = 1;

	if (!server)
		return;
	/* Adding 1 to an eventfd fails only at its counter's overflow, out of reach here. */
	if (write(server->stop_fd, &one, sizeof(one)) < 0)
		log_error(&server->log, "api socket %s: stop: %s", server->socket_path,
			  strerror(errno));
	pthread_join(server->thread, NULL);
	api_server_free(server);
}
