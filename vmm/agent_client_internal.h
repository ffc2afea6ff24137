/* What agent_client.c (connection, frames, handshake) and agent_client_ops.c (commands,
 * files) share. Not part of the public API. */
#ifndef MOTE_AGENT_CLIENT_INTERNAL_H
#define MOTE_AGENT_CLIENT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../guest-init/agent_protocol.h"
#include "agent_client.h"
#include "log.h"

/* Room for the largest request (an EXEC of AGENT_MAX_PAYLOAD) plus a little. */
#define CLIENT_OUT_CAP (AGENT_HEADER_SIZE + AGENT_MAX_PAYLOAD + 1024)
#define CLIENT_IN_CAP (AGENT_HEADER_SIZE + AGENT_MAX_PAYLOAD)
/* Errnos the guest names are Linux's, below 4096 (MAX_ERRNO); anything else is EIO. */
#define AGENT_ERRNO_MAX 4095

struct mote_agent {
	int fd;
	bool broken;
	bool quiet; /* while connecting: failures go to why only, not to the log */
	struct mote_log log;
	int io_timeout_ms;
	uint64_t max_download_bytes; /* 0: no limit */
	int transfer_timeout_ms;     /* 0: no limit */
	int64_t transfer_end;	     /* the transfer in progress's deadline, or -1 */
	uint32_t next_id;
	struct mote_agent_info info;
	/* Received: in[in_start..in_len), of which the first in_used bytes are the frame
	 * last taken. Bytes move to the front only when the buffer's end is reached, so a
	 * flood of small frames costs each byte one move at most, not one per frame. */
	uint8_t *in;
	size_t in_start;
	size_t in_len;
	size_t in_used;
	uint8_t *out; /* to send: out[out_start..out_end) */
	size_t out_start;
	size_t out_end;
	uint64_t out_sent; /* bytes sent since the connection began */
	char why[320];	   /* the last failure, in words */
};

struct agent_frame {
	struct agent_header h;
	const uint8_t *payload; /* valid until the next read from the connection */
};

int64_t agent_now_ms(void);
/* now + ms, or -1 (no deadline) for ms <= 0. */
int64_t agent_deadline(int ms);
/* The next wait's deadline in an upload or download: the I/O timeout's, or the
 * transfer's end if that comes first. */
int64_t agent_transfer_deadline(const struct mote_agent *a);
int agent_poll_timeout(int64_t deadline);
/* Copies n bytes, each non-printable one as '?', terminated within cap. */
void agent_printable(char *dst, size_t cap, const char *src, size_t n);

/* Marks the connection broken, records (and logs) why; returns err. */
int agent_fail(struct mote_agent *a, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* -ENOTCONN (logged) once broken, else 0. */
int agent_usable(struct mote_agent *a);

size_t agent_out_free(const struct mote_agent *a);
/* n bytes at the end of the output queue, or NULL if they do not fit now. */
uint8_t *agent_out_tail(struct mote_agent *a, size_t n);
/* Queues a frame, first waiting for the queue to drain if it must. */
int agent_queue(struct mote_agent *a, uint16_t type, uint32_t id, const void *payload, size_t len,
		int64_t deadline);
int agent_flush_some(struct mote_agent *a);
int agent_flush_wait(struct mote_agent *a, int64_t deadline);

/* Reads what the socket has now (never blocks). */
int agent_fill(struct mote_agent *a);
/* 1 and the next complete frame, 0 if none is complete yet, or a broken-connection
 * error. */
int agent_take_frame(struct mote_agent *a, struct agent_frame *f);
/* Waits for the next frame (sending what is queued meanwhile). */
int agent_next_frame(struct mote_agent *a, struct agent_frame *f, int64_t deadline);
/* Waits for the next frame of request id, dropping late frames of earlier ones. */
int agent_wait_answer(struct mote_agent *a, uint32_t id, struct agent_frame *f, int64_t deadline);

/* Decodes an ERROR frame: its errno negated (EIO if out of range), the type of frame
 * it answers and its message (AGENT_MESSAGE_MAX + 1 bytes). */
int agent_error_frame(struct mote_agent *a, const struct agent_frame *f, uint16_t *answered,
		      char *message);
/* The same, logged as the agent's answer to the current request. */
int agent_remote_error(struct mote_agent *a, const struct agent_frame *f);

uint32_t agent_new_id(struct mote_agent *a);

#endif
