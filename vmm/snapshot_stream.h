/* The byte stream of a snapshot's state file, and its strict reader. A state file is a
 * header (magic, format version, payload length, CRC-32 of the payload) followed by
 * sections, each a tag and a length around little-endian fields:
 *
 *   "MOTESNAP" | u32 version | u32 reserved | u64 payload_len | u32 crc32 | payload
 *   payload = { u32 tag | u32 len | len bytes }...
 *
 * Writers append and remember the first failure (out of memory); readers never read
 * past what the file holds and remember the first failure too: a truncated, bit-flipped
 * or oversized file is an error at the first field that does not fit, never garbage.
 * Every loader still checks each value it reads against what it can accept. */
#ifndef MOTE_SNAPSHOT_STREAM_H
#define MOTE_SNAPSHOT_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SNAP_MAGIC "MOTESNAP"
/* 2: virtio-blk records its capacity. 3: the identity of the memory the state goes
 * with (snapshot_memory.h). A file of another version is refused. */
#define SNAP_VERSION 3u
#define SNAP_HEADER_SIZE 28u
/* A state file is small, and anything larger is refused unread. The largest a monitor
 * writes is about 6 MiB: 32 vCPUs of about 40 KiB (XSAVE with AMX, 256 CPUID entries,
 * 1024 MSRs), and 16 disks naming an image, an overlay and 64 layers of up to 4 KiB
 * paths each. Every restored copy reads the file, so the bound is also what one copy
 * costs at most while it loads. */
#define SNAP_MAX_PAYLOAD (16u << 20)

/* Section tags: four ASCII characters, so a hex dump reads. */
#define SNAP_TAG(a, b, c, d)                                                                       \
	((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)

struct snap_writer {
	uint8_t *buf;
	size_t len, cap;
	size_t section_start; /* offset of the open section's length field, or 0 */
	int error;	      /* first failure: -ENOMEM, -EINVAL (sections misnested) */
};

void snap_writer_init(struct snap_writer *w);
void snap_writer_free(struct snap_writer *w);

/* Sections do not nest: begin, fields, end. */
void snap_begin(struct snap_writer *w, uint32_t tag);
void snap_end(struct snap_writer *w);

void snap_put_u8(struct snap_writer *w, uint8_t v);
void snap_put_u16(struct snap_writer *w, uint16_t v);
void snap_put_u32(struct snap_writer *w, uint32_t v);
void snap_put_u64(struct snap_writer *w, uint64_t v);
void snap_put_bool(struct snap_writer *w, bool v);
void snap_put_bytes(struct snap_writer *w, const void *data, size_t len);
/* A u32 length and the bytes; NULL is written as length 0xffffffff. */
void snap_put_str(struct snap_writer *w, const char *s);

/* Header + payload into fd from its current position. 0, w->error, or -errno. */
/* A fixed-size binary structure (a KVM state struct): its length, then its bytes. */
void snap_put_blob(struct snap_writer *w, const void *data, uint32_t len);

int snap_writer_write(struct snap_writer *w, int fd);

struct snap_reader {
	const uint8_t *data;
	size_t len, pos;
	int error; /* first failure: -EINVAL (malformed) */
	/* What failed first, for the message (points to a string literal). */
	const char *failure;
};

/* Checks the header of a whole file in memory: magic, version, length, CRC. On success
 * *payload reads the sections. -EINVAL (not a mote snapshot, truncated, bad checksum,
 * too large) or -EPROTO (another format version); *why says which in words. */
int snap_reader_open(struct snap_reader *payload, const uint8_t *file, size_t len,
		     const char **why);

/* Reader over the next section, which must carry tag; the parent moves past it. On a
 * missing or different section the parent's error is set and *section reads nothing. */
void snap_section(struct snap_reader *r, uint32_t tag, struct snap_reader *section);

/* Whether the next section carries tag (for optional sections); reads nothing. */
bool snap_next_is(const struct snap_reader *r, uint32_t tag);

/* Each get returns 0 (or fills zeros) once an error is set. */
uint8_t snap_get_u8(struct snap_reader *r);
uint16_t snap_get_u16(struct snap_reader *r);
uint32_t snap_get_u32(struct snap_reader *r);
uint64_t snap_get_u64(struct snap_reader *r);
bool snap_get_bool(struct snap_reader *r); /* a byte other than 0 or 1 is an error */
void snap_get_bytes(struct snap_reader *r, void *dst, size_t len);
/* A string written by snap_put_str into dst (cap bytes with the NUL). Returns false for
 * NULL (dst is then ""); a string that does not fit, or holds a NUL, is an error. */
bool snap_get_str(struct snap_reader *r, char *dst, size_t cap);

/* Reads a blob written by snap_put_blob into dst; a blob of another length is an error
 * (dst is then zeroed). */
void snap_get_blob(struct snap_reader *r, void *dst, uint32_t len);

/* Marks r failed with why (a string literal) unless it already failed: for a loader
 * that read a value it cannot accept. Returns -EINVAL. */
int snap_fail(struct snap_reader *r, const char *why);

/* 0 when every byte was read and nothing failed, else -EINVAL (trailing bytes too). */
int snap_reader_finish(struct snap_reader *r);

#endif
