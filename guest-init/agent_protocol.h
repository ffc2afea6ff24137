/* The mote agent protocol: frames between a host client (vmm/agent_client.c) and the
 * in-guest agent (guest-init/agent_*.c) over one stream connection: AF_VSOCK in a VM,
 * any connected stream socket in tests. Plain C, header-only, shared by both sides and
 * free of libmote. guest-init/AGENT_PROTOCOL.md describes every frame; this file is its
 * encoding, kept next to it so the two cannot drift.
 *
 * Both sides treat the other as hostile: every length is checked against the frame's
 * payload before it is used, and a reader that runs short marks itself bad instead of
 * reading past the end. */
#ifndef MOTE_AGENT_PROTOCOL_H
#define MOTE_AGENT_PROTOCOL_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* 2: STDIN_TAKEN, and clients keep their stdin in flight within AGENT_STDIN_WINDOW.
 * 3: commands on a pseudo-terminal (EXEC flag TTY, RESIZE). */
#define AGENT_PROTOCOL_VERSION 3
#define AGENT_DEFAULT_PORT 52

#define AGENT_HEADER_SIZE 12
#define AGENT_MAX_PAYLOAD (256u * 1024u) /* larger: EMSGSIZE, connection closed */
#define AGENT_CHUNK_MAX (64u * 1024u)	 /* STDOUT/STDERR/DATA payloads the agent sends */
#define AGENT_MAX_REQUESTS 64		 /* requests in progress on one connection */
#define AGENT_MAX_CONNECTIONS 64	 /* connections served at once */
#define AGENT_MAX_ARGS 4096		 /* argv entries of one EXEC */
#define AGENT_MAX_ENV 4096		 /* env entries of one EXEC */
#define AGENT_PATH_MAX 4096		 /* bytes of a path, without a terminator */
#define AGENT_MESSAGE_MAX 256		 /* bytes of an ERROR or EXEC_FAILED message */
#define AGENT_HOSTNAME_MAX 64
/* Stdin bytes a client may have sent for one command and not yet seen reported in
 * STDIN_TAKEN. The agent queues that much per command, so every STDIN frame fits and
 * never holds up the frames behind it (a SIGNAL above all). 512 KiB: with 256 KiB a
 * nested guest took 50 MiB of stdin 45% slower than without the window, waiting on
 * reports; with 512 KiB as fast (2026-12-06). */
#define AGENT_STDIN_WINDOW (512u * 1024u)

enum agent_frame_type {
	/* client to agent */
	AGENT_EXEC = 0x01,
	AGENT_STDIN = 0x02,
	AGENT_STDIN_EOF = 0x03,
	AGENT_SIGNAL = 0x04,
	AGENT_UPLOAD = 0x05,
	AGENT_UPLOAD_DATA = 0x06,
	AGENT_UPLOAD_END = 0x07,
	AGENT_DOWNLOAD = 0x08,
	AGENT_POWER_OFF = 0x09,
	AGENT_CANCEL = 0x0a,
	AGENT_RESIZE = 0x0b,
	/* agent to client */
	AGENT_HELLO = 0x80,
	AGENT_OK = 0x81,
	AGENT_ERROR = 0x82,
	AGENT_STARTED = 0x83,
	AGENT_STDOUT = 0x84,
	AGENT_STDERR = 0x85,
	AGENT_EXIT = 0x86,
	AGENT_EXEC_FAILED = 0x87,
	AGENT_DATA = 0x88,
	AGENT_END = 0x89,
	AGENT_STDIN_TAKEN = 0x8a,
};

#define AGENT_EXEC_ENV_REPLACE 0x1u /* EXEC flags: env is the whole environment */
/* EXEC flags: the command runs on a new pseudo-terminal, its size (u16 rows, u16 cols)
 * after the env entries. */
#define AGENT_EXEC_TTY 0x2u

enum agent_exit_kind {
	AGENT_EXIT_CODE = 0,   /* value: the exit status, 0..255 */
	AGENT_EXIT_SIGNAL = 1, /* value: the number of the signal that killed it */
};

/* What EXEC_FAILED says could not be done before the program ran. */
enum agent_exec_stage {
	AGENT_STAGE_SETUP = 0, /* pipes, fork: the agent's side */
	AGENT_STAGE_CHDIR = 1, /* the requested working directory */
	AGENT_STAGE_EXEC = 2,  /* execve of the program (ENOENT: not found) */
};

struct agent_header {
	uint32_t length; /* payload bytes after the header */
	uint16_t type;	 /* enum agent_frame_type */
	uint16_t flags;	 /* reserved, 0 */
	uint32_t id;	 /* request id; 0 for connection-level frames */
};

static inline void agent_le16_put(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static inline void agent_le32_put(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void agent_le64_put(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t agent_le16_get(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t agent_le32_get(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t agent_le64_get(const uint8_t *p)
{
	return (uint64_t)agent_le32_get(p) | (uint64_t)agent_le32_get(p + 4) << 32;
}

static inline void agent_header_encode(uint8_t out[AGENT_HEADER_SIZE], const struct agent_header *h)
{
	agent_le32_put(out, h->length);
	agent_le16_put(out + 4, h->type);
	agent_le16_put(out + 6, h->flags);
	agent_le32_put(out + 8, h->id);
}

/* Decodes a header. Returns 0; -EMSGSIZE when the payload would exceed max_payload
 * (the stream cannot be trusted past it: close the connection); -EPROTO when the
 * reserved flags are not 0 (the frame can be skipped). Types are the caller's to check. */
static inline int agent_header_decode(const uint8_t in[AGENT_HEADER_SIZE], uint32_t max_payload,
				      struct agent_header *h)
{
	h->length = agent_le32_get(in);
	h->type = agent_le16_get(in + 4);
	h->flags = agent_le16_get(in + 6);
	h->id = agent_le32_get(in + 8);
	if (h->length > max_payload)
		return -EMSGSIZE;
	if (h->flags != 0)
		return -EPROTO;
	return 0;
}

/* Appends to a fixed buffer; an append that does not fit sets overflow and writes
 * nothing, so a caller checks once at the end. */
struct agent_writer {
	uint8_t *buf;
	size_t cap;
	size_t len;
	bool overflow;
};

static inline void agent_writer_init(struct agent_writer *w, void *buf, size_t cap)
{
	*w = (struct agent_writer){.buf = buf, .cap = cap};
}

static inline uint8_t *agent_put_space(struct agent_writer *w, size_t n)
{
	if (w->overflow || n > w->cap - w->len) {
		w->overflow = true;
		return NULL;
	}
	uint8_t *p = w->buf + w->len;
	w->len += n;
	return p;
}

static inline void agent_put_u16(struct agent_writer *w, uint16_t v)
{
	uint8_t *p = agent_put_space(w, 2);
	if (p)
		agent_le16_put(p, v);
}

static inline void agent_put_u32(struct agent_writer *w, uint32_t v)
{
	uint8_t *p = agent_put_space(w, 4);
	if (p)
		agent_le32_put(p, v);
}

static inline void agent_put_u64(struct agent_writer *w, uint64_t v)
{
	uint8_t *p = agent_put_space(w, 8);
	if (p)
		agent_le64_put(p, v);
}

static inline void agent_put_bytes(struct agent_writer *w, const void *data, size_t n)
{
	uint8_t *p = agent_put_space(w, n);
	if (p && n)
		memcpy(p, data, n);
}

/* A string on the wire: u32 byte count, then the bytes, no terminator. */
static inline void agent_put_string_n(struct agent_writer *w, const char *s, size_t n)
{
	/* Whole or not at all, like every other append. */
	uint8_t *p = n <= UINT32_MAX && n <= SIZE_MAX - 4 ? agent_put_space(w, 4 + n) : NULL;

	if (!p) {
		w->overflow = true;
		return;
	}
	agent_le32_put(p, (uint32_t)n);
	if (n)
		memcpy(p + 4, s, n);
}

static inline void agent_put_string(struct agent_writer *w, const char *s)
{
	agent_put_string_n(w, s, strlen(s));
}

/* Starts a frame: a header whose length agent_frame_close() fills in. Returns the
 * header's offset in the writer. */
static inline size_t agent_frame_open(struct agent_writer *w, uint16_t type, uint32_t id)
{
	size_t at = w->len;
	uint8_t *p = agent_put_space(w, AGENT_HEADER_SIZE);

	if (p)
		agent_header_encode(p, &(struct agent_header){.type = type, .id = id});
	return at;
}

static inline void agent_frame_close(struct agent_writer *w, size_t at)
{
	if (!w->overflow)
		agent_le32_put(w->buf + at, (uint32_t)(w->len - at - AGENT_HEADER_SIZE));
}

/* Reads a payload front to back. A read past the end, or a string with a NUL byte in
 * it, sets bad and yields zeros / empty strings from then on. */
struct agent_reader {
	const uint8_t *p;
	size_t left;
	bool bad;
};

static inline void agent_reader_init(struct agent_reader *r, const void *payload, size_t len)
{
	*r = (struct agent_reader){.p = payload, .left = len};
}

static inline const uint8_t *agent_get_space(struct agent_reader *r, size_t n)
{
	if (r->bad || n > r->left) {
		r->bad = true;
		return NULL;
	}
	const uint8_t *p = r->p;
	r->p += n;
	r->left -= n;
	return p;
}

static inline uint16_t agent_get_u16(struct agent_reader *r)
{
	const uint8_t *p = agent_get_space(r, 2);
	return p ? agent_le16_get(p) : 0;
}

static inline uint32_t agent_get_u32(struct agent_reader *r)
{
	const uint8_t *p = agent_get_space(r, 4);
	return p ? agent_le32_get(p) : 0;
}

static inline uint64_t agent_get_u64(struct agent_reader *r)
{
	const uint8_t *p = agent_get_space(r, 8);
	return p ? agent_le64_get(p) : 0;
}

/* Points *s at the string's bytes inside the payload (not terminated) and sets *len. */
static inline void agent_get_string(struct agent_reader *r, const char **s, size_t *len)
{
	uint32_t n = agent_get_u32(r);
	const uint8_t *p = agent_get_space(r, n);

	if (!p || memchr(p, '\0', n)) {
		r->bad = true;
		*s = "";
		*len = 0;
		return;
	}
	*s = (const char *)p;
	*len = n;
}

/* Copies a string into dst (cap bytes, terminated); one that does not fit sets bad. */
static inline void agent_get_cstring(struct agent_reader *r, char *dst, size_t cap)
{
	const char *s;
	size_t n;

	agent_get_string(r, &s, &n);
	if (n >= cap) {
		r->bad = true;
		n = 0;
	}
	if (cap) {
		memcpy(dst, s, n);
		dst[n] = '\0';
	}
}

/* True when the whole payload was read and nothing was missing. */
static inline bool agent_reader_done(const struct agent_reader *r)
{
	return !r->bad && r->left == 0;
}

#endif
