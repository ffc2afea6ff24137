#include "snapshot_stream.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "little_endian.h"

#define SNAP_NULL_STRING 0xffffffffu

static uint32_t snap_crc32(const uint8_t *data, size_t len)
{
	uLong crc = crc32(0L, Z_NULL, 0);

	/* zlib takes a uInt length: feed it in pieces below 4 GiB. */
	while (len) {
		uInt chunk = len > (1u << 30) ? 1u << 30 : (uInt)len;
		crc = crc32(crc, data, chunk);
		data += chunk;
		len -= chunk;
	}
	return (uint32_t)crc;
}

void snap_writer_init(struct snap_writer *w)
{
	memset(w, 0, sizeof(*w));
}

void snap_writer_free(struct snap_writer *w)
{
	free(w->buf);
	memset(w, 0, sizeof(*w));
}

static uint8_t *snap_reserve(struct snap_writer *w, size_t len)
{
	if (w->error)
		return NULL;
	if (len > SNAP_MAX_PAYLOAD || w->len + len > SNAP_MAX_PAYLOAD) {
		w->error = -E2BIG;
		return NULL;
	}
	if (w->len + len > w->cap) {
		size_t cap = w->cap ? w->cap : 4096;
		while (cap < w->len + len)
			cap *= 2;
		uint8_t *buf = realloc(w->buf, cap);
		if (!buf) {
			w->error = -ENOMEM;
			return NULL;
		}
		w->buf = buf;
		w->cap = cap;
	}
	uint8_t *p = w->buf + w->len;
	w->len += len;
	return p;
}

static void snap_put_le(struct snap_writer *w, uint64_t v, unsigned bytes)
{
	uint8_t *p = snap_reserve(w, bytes);

	if (p)
		le_store(p, v, bytes);
}

void snap_put_u8(struct snap_writer *w, uint8_t v)
{
	snap_put_le(w, v, 1);
}

void snap_put_u16(struct snap_writer *w, uint16_t v)
{
	snap_put_le(w, v, 2);
}

void snap_put_u32(struct snap_writer *w, uint32_t v)
{
	snap_put_le(w, v, 4);
}

void snap_put_u64(struct snap_writer *w, uint64_t v)
{
	snap_put_le(w, v, 8);
}

void snap_put_bool(struct snap_writer *w, bool v)
{
	snap_put_le(w, v ? 1 : 0, 1);
}

void snap_put_bytes(struct snap_writer *w, const void *data, size_t len)
{
	uint8_t *p = snap_reserve(w, len);

	if (p && len)
		memcpy(p, data, len);
}

void snap_put_str(struct snap_writer *w, const char *s)
{
	if (!s) {
		snap_put_u32(w, SNAP_NULL_STRING);
		return;
	}
	size_t len = strlen(s);
	if (len >= SNAP_NULL_STRING) {
		w->error = w->error ? w->error : -E2BIG;
		return;
	}
	snap_put_u32(w, (uint32_t)len);
	snap_put_bytes(w, s, len);
}

void snap_begin(struct snap_writer *w, uint32_t tag)
{
	if (w->section_start && !w->error)
		w->error = -EINVAL;
	snap_put_u32(w, tag);
	w->section_start = w->len;
	snap_put_u32(w, 0); /* the length, filled in by snap_end() */
}

void snap_end(struct snap_writer *w)
{
	if (w->error)
		return;
	if (!w->section_start) {
		w->error = -EINVAL;
		return;
	}
	size_t body = w->len - w->section_start - 4;
	le_store(w->buf + w->section_start, body, 4);
	w->section_start = 0;
}

static int snap_write_all(int fd, const uint8_t *data, size_t len)
{
	while (len) {
		ssize_t n = write(fd, data, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

int snap_writer_write(struct snap_writer *w, int fd)
{
	uint8_t header[SNAP_HEADER_SIZE];
	uint32_t crc;

	if (!w->error && w->section_start)
		w->error = -EINVAL;
	if (w->error)
		return w->error;
	crc = snap_crc32(w->buf, w->len);
	memcpy(header, SNAP_MAGIC, 8);
	le_store(header + 8, SNAP_VERSION, 4);
	le_store(header + 12, 0, 4);
	le_store(header + 16, w->len, 8);
	le_store(header + 24, crc, 4);
	int ret = snap_write_all(fd, header, sizeof(header));
	return ret ? ret : snap_write_all(fd, w->buf, w->len);
}

int snap_reader_open(struct snap_reader *payload, const uint8_t *file, size_t len, const char **why)
{
	memset(payload, 0, sizeof(*payload));
	payload->error = -EINVAL;
	if (len < SNAP_HEADER_SIZE || memcmp(file, SNAP_MAGIC, 8) != 0) {
		*why = "not a mote snapshot state file";
		return -EINVAL;
	}
	uint32_t version = (uint32_t)le_load(file + 8, 4);
	if (version != SNAP_VERSION) {
		*why = "snapshot format version not supported by this mote";
		return -EPROTO;
	}
	if (le_load(file + 12, 4) != 0) {
		*why = "state file header has reserved bits set";
		return -EINVAL;
	}
	uint64_t payload_len = le_load(file + 16, 8);
	if (payload_len > SNAP_MAX_PAYLOAD) {
		*why = "state file larger than any mote writes";
		return -EINVAL;
	}
	if (payload_len != len - SNAP_HEADER_SIZE) {
		*why = payload_len > len - SNAP_HEADER_SIZE ? "state file truncated"
							    : "state file has trailing bytes";
		return -EINVAL;
	}
	if ((uint32_t)le_load(file + 24, 4) != snap_crc32(file + SNAP_HEADER_SIZE, payload_len)) {
		*why = "state file checksum mismatch (corrupted)";
		return -EINVAL;
	}
	payload->data = file + SNAP_HEADER_SIZE;
	payload->len = payload_len;
	payload->error = 0;
	return 0;
}

void snap_put_blob(struct snap_writer *w, const void *data, uint32_t len)
{
	snap_put_u32(w, len);
	snap_put_bytes(w, data, len);
}

void snap_get_blob(struct snap_reader *r, void *dst, uint32_t len)
{
	if (snap_get_u32(r) != len) {
		snap_fail(r, "a saved structure has the wrong size");
		memset(dst, 0, len);
		return;
	}
	snap_get_bytes(r, dst, len);
}

int snap_fail(struct snap_reader *r, const char *why)
{
	if (!r->error) {
		r->error = -EINVAL;
		r->failure = why;
	}
	return -EINVAL;
}

static const uint8_t *snap_take(struct snap_reader *r, size_t len)
{
	if (r->error)
		return NULL;
	if (len > r->len - r->pos) {
		snap_fail(r, "a field runs past the end of its section");
		return NULL;
	}
	const uint8_t *p = r->data + r->pos;
	r->pos += len;
	return p;
}

bool snap_next_is(const struct snap_reader *r, uint32_t tag)
{
	return !r->error && r->len - r->pos >= 8 && le_load(r->data + r->pos, 4) == tag;
}

void snap_section(struct snap_reader *r, uint32_t tag, struct snap_reader *section)
{
	memset(section, 0, sizeof(*section));
	section->error = -EINVAL;
	section->failure = "section missing";
	const uint8_t *head = snap_take(r, 8);
	if (!head)
		return;
	if (le_load(head, 4) != tag) {
		snap_fail(r, "sections out of order or missing");
		return;
	}
	size_t body = (size_t)le_load(head + 4, 4);
	const uint8_t *p = snap_take(r, body);
	if (!p)
		return;
	section->data = p;
	section->len = body;
	section->error = 0;
	section->failure = NULL;
}

static uint64_t snap_get_le(struct snap_reader *r, unsigned bytes)
{
	const uint8_t *p = snap_take(r, bytes);

	return p ? le_load(p, bytes) : 0;
}

uint8_t snap_get_u8(struct snap_reader *r)
{
	return (uint8_t)snap_get_le(r, 1);
}

uint16_t snap_get_u16(struct snap_reader *r)
{
	return (uint16_t)snap_get_le(r, 2);
}

uint32_t snap_get_u32(struct snap_reader *r)
{
	return (uint32_t)snap_get_le(r, 4);
}

uint64_t snap_get_u64(struct snap_reader *r)
{
	return snap_get_le(r, 8);
}

bool snap_get_bool(struct snap_reader *r)
{
	uint8_t v = snap_get_u8(r);

	if (v > 1)
		snap_fail(r, "a boolean field is neither 0 nor 1");
	return v == 1;
}

void snap_get_bytes(struct snap_reader *r, void *dst, size_t len)
{
	const uint8_t *p = snap_take(r, len);

	if (p)
		memcpy(dst, p, len);
	else if (len)
		memset(dst, 0, len);
}

bool snap_get_str(struct snap_reader *r, char *dst, size_t cap)
{
	uint32_t len = snap_get_u32(r);

	dst[0] = '\0';
	if (r->error || len == SNAP_NULL_STRING)
		return false;
	if (len >= cap) {
		snap_fail(r, "a string field is longer than allowed");
		return false;
	}
	const uint8_t *p = snap_take(r, len);
	if (!p)
		return false;
	if (memchr(p, '\0', len)) {
		snap_fail(r, "a string field holds a NUL byte");
		return false;
	}
	memcpy(dst, p, len);
	dst[len] = '\0';
	return true;
}

int snap_reader_finish(struct snap_reader *r)
{
	if (!r->error && r->pos != r->len)
		snap_fail(r, "a section holds more than its fields");
	return r->error;
}
