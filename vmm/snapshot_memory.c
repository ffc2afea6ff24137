/* Memory files of snapshots (snapshot_memory.h). */
#include "snapshot_memory.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* The library's functions compiled in here, from its header (Debian's libxxhash-dev):
 * nothing to link, and the fastest variant the compiler can build. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "file_image.h"

#define TRAILER_MAGIC "MOTEMEM"
#define TRAILER_VERSION 1u
#define TRAILER_CHECKED_BYTES 68u /* the fields before the trailer's CRC-32 */
/* Pages are read in runs of up to this size to be verified. */
#define VERIFY_RUN_MAX (1u << 20)

/* Writes are gathered into runs of consecutive pages up to this size. */
#define SNAPSHOT_RUN_MAX (1u << 20)

static bool page_is_zero(const uint8_t *page)
{
	const uint64_t *words = (const uint64_t *)(const void *)page;
	uint64_t any = 0;

	for (unsigned i = 0; i < GUEST_PAGE_SIZE / sizeof(uint64_t); i++)
		any |= words[i];
	return any == 0;
}

/* One page into the content checksum (snapshot_memory.h): zero pages do not count. */
static void checksum_page(XXH3_state_t *state, uint64_t index, const uint8_t *page)
{
	uint8_t le_index[8];

	if (page_is_zero(page))
		return;
	for (unsigned i = 0; i < 8; i++)
		le_index[i] = (uint8_t)(index >> (8 * i));
	XXH3_64bits_update(state, le_index, sizeof(le_index));
	XXH3_64bits_update(state, page, GUEST_PAGE_SIZE);
}

static void put_le(uint8_t *p, uint64_t v, unsigned bytes)
{
	for (unsigned i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, unsigned bytes)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < bytes; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

int snapshot_memory_new_id(uint8_t id[SNAPSHOT_ID_SIZE])
{
	size_t got = 0;

	while (got < SNAPSHOT_ID_SIZE) {
		ssize_t n = getrandom(id + got, SNAPSHOT_ID_SIZE - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		got += (size_t)n;
	}
	return 0;
}

static void trailer_encode(const struct snapshot_memory_identity *identity,
			   uint8_t trailer[SNAPSHOT_MEMORY_TRAILER_SIZE])
{
	memset(trailer, 0, SNAPSHOT_MEMORY_TRAILER_SIZE);
	memcpy(trailer, TRAILER_MAGIC, sizeof(TRAILER_MAGIC));
	put_le(trailer + 8, TRAILER_VERSION, 4);
	put_le(trailer + 12, identity->diff ? 1 : 0, 4);
	put_le(trailer + 16, identity->guest_bytes, 8);
	memcpy(trailer + 24, identity->id, SNAPSHOT_ID_SIZE);
	memcpy(trailer + 40, identity->base_id, SNAPSHOT_ID_SIZE);
	put_le(trailer + 56, identity->content_checksum, 8);
	put_le(trailer + 64, 0, 4); /* reserved */
	put_le(trailer + TRAILER_CHECKED_BYTES, crc32(0L, trailer, TRAILER_CHECKED_BYTES), 4);
}

/* Whether the trailer is one this version writes; fills identity if so. */
static bool trailer_decode(const uint8_t trailer[SNAPSHOT_MEMORY_TRAILER_SIZE],
			   struct snapshot_memory_identity *identity)
{
	if (memcmp(trailer, TRAILER_MAGIC, sizeof(TRAILER_MAGIC)) != 0 ||
	    get_le(trailer + 8, 4) != TRAILER_VERSION || get_le(trailer + 12, 4) > 1 ||
	    get_le(trailer + 64, 4) != 0 ||
	    get_le(trailer + TRAILER_CHECKED_BYTES, 4) != crc32(0L, trailer, TRAILER_CHECKED_BYTES))
		return false;
	for (unsigned i = TRAILER_CHECKED_BYTES + 4; i < SNAPSHOT_MEMORY_TRAILER_SIZE; i++)
		if (trailer[i])
			return false;
	identity->diff = get_le(trailer + 12, 4) == 1;
	identity->guest_bytes = get_le(trailer + 16, 8);
	memcpy(identity->id, trailer + 24, SNAPSHOT_ID_SIZE);
	memcpy(identity->base_id, trailer + 40, SNAPSHOT_ID_SIZE);
	identity->content_checksum = get_le(trailer + 56, 8);
	return true;
}

static int write_all(int fd, const uint8_t *data, uint64_t len, uint64_t offset)
{
	while (len) {
		ssize_t n = pwrite(fd, data, len, (off_t)offset);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		data += n;
		len -= (uint64_t)n;
		offset += (uint64_t)n;
	}
	return 0;
}

/* Where the memfd holds data (pages ever touched): for a memfd-backed guest the rest
 * is known to be zero and is not even read. Memory mapped from a file has no memfd;
 * every page is looked at. */
static uint64_t next_data(const struct guest_memory *mem, uint64_t offset, uint64_t *end)
{
	*end = mem->size;
	if (mem->memfd < 0)
		return offset;
	off_t data = lseek(mem->memfd, (off_t)offset, SEEK_DATA);
	if (data < 0)
		return errno == ENXIO ? mem->size : offset; /* ENXIO: only holes left */
	off_t hole = lseek(mem->memfd, data, SEEK_HOLE);
	*end = hole < 0 ? mem->size : (uint64_t)hole;
	return (uint64_t)data;
}

static bool page_wanted(const struct guest_memory *mem, const uint64_t *dirty, uint64_t page)
{
	if (dirty)
		return (dirty[page / 64] >> (page % 64)) & 1;
	return !page_is_zero(mem->base + page * GUEST_PAGE_SIZE);
}

int snapshot_memory_write(const struct guest_memory *mem, const uint64_t *dirty, int fd,
			  struct snapshot_memory_identity *identity, const char *path,
			  const struct mote_log *log)
{
	XXH3_state_t checksum;
	int ret = 0;

	XXH3_64bits_reset(&checksum);
	if (ftruncate(fd, (off_t)(mem->size + SNAPSHOT_MEMORY_TRAILER_SIZE)) < 0) {
		ret = -errno;
		log_error(log, "memory file %s: %s", path, strerror(errno));
		return ret;
	}
	uint64_t offset = 0;
	while (offset < mem->size && !ret) {
		uint64_t end;
		/* A diff names its pages in the bitmap: a page the guest zeroed may be a hole
		 * in the memfd now and still must be written. */
		offset = dirty ? offset : next_data(mem, offset, &end);
		if (dirty)
			end = mem->size;
		offset &= ~(uint64_t)(GUEST_PAGE_SIZE - 1);
		uint64_t run_start = offset, run_len = 0;
		for (; offset < end; offset += GUEST_PAGE_SIZE) {
			bool wanted = page_wanted(mem, dirty, offset / GUEST_PAGE_SIZE);
			if (wanted)
				checksum_page(&checksum, offset / GUEST_PAGE_SIZE,
					      mem->base + offset);
			if (wanted && run_len == 0)
				run_start = offset;
			if (wanted)
				run_len += GUEST_PAGE_SIZE;
			if (run_len && (!wanted || run_len == SNAPSHOT_RUN_MAX)) {
				ret = write_all(fd, mem->base + run_start, run_len, run_start);
				run_len = 0;
				if (ret)
					break;
			}
		}
		if (!ret && run_len)
			ret = write_all(fd, mem->base + run_start, run_len, run_start);
	}
	if (!ret) {
		uint8_t trailer[SNAPSHOT_MEMORY_TRAILER_SIZE];

		identity->guest_bytes = mem->size;
		identity->content_checksum = XXH3_64bits_digest(&checksum);
		trailer_encode(identity, trailer);
		ret = write_all(fd, trailer, sizeof(trailer), mem->size);
	}
	if (!ret && fdatasync(fd) < 0)
		ret = -errno;
	if (ret)
		log_error(log, "memory file %s: %s", path, strerror(-ret));
	return ret;
}

int snapshot_memory_read_identity(int fd, uint64_t guest_bytes,
				  struct snapshot_memory_identity *identity, const char *path,
				  const struct mote_log *log)
{
	uint8_t trailer[SNAPSHOT_MEMORY_TRAILER_SIZE];
	struct stat st;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size != guest_bytes + SNAPSHOT_MEMORY_TRAILER_SIZE) {
		log_error(log,
			  "memory file %s: not a regular file of %llu bytes (the snapshot's "
			  "%llu bytes of guest memory and a %u-byte trailer)",
			  path, (unsigned long long)(guest_bytes + SNAPSHOT_MEMORY_TRAILER_SIZE),
			  (unsigned long long)guest_bytes, SNAPSHOT_MEMORY_TRAILER_SIZE);
		return -EINVAL;
	}
	int ret = file_read_at(fd, trailer, sizeof(trailer), guest_bytes);
	if (ret) {
		log_error(log, "memory file %s: reading its trailer: %s", path, strerror(-ret));
		return ret;
	}
	if (!trailer_decode(trailer, identity) || identity->guest_bytes != guest_bytes) {
		log_error(log,
			  "memory file %s: its trailer is not a mote memory file's (damaged, or "
			  "written by another version of mote)",
			  path);
		return -EINVAL;
	}
	return 0;
}

int snapshot_memory_verify(int fd, const struct snapshot_memory_identity *identity,
			   const char *path, const struct mote_log *log)
{
	uint64_t size = identity->guest_bytes, next_page = 0;
	uint8_t *run = malloc(VERIFY_RUN_MAX);
	XXH3_state_t checksum;
	int ret = 0;

	if (!run)
		return -ENOMEM;
	XXH3_64bits_reset(&checksum);
	while (next_page < size && !ret) {
		off_t data = lseek(fd, (off_t)next_page, SEEK_DATA);
		if (data < 0 && errno == ENXIO)
			break;
		if (data < 0) {
			ret = -errno;
			break;
		}
		if ((uint64_t)data >= size)
			break;
		off_t hole = lseek(fd, data, SEEK_HOLE);
		uint64_t end = hole < 0 || (uint64_t)hole > size ? size : (uint64_t)hole;
		/* Extents of blocks smaller than a page: each page is read once. */
		uint64_t offset = (uint64_t)data & ~(uint64_t)(GUEST_PAGE_SIZE - 1);
		if (offset < next_page)
			offset = next_page;
		end = (end + GUEST_PAGE_SIZE - 1) & ~(uint64_t)(GUEST_PAGE_SIZE - 1);
		if (end > size)
			end = size;
		while (offset < end && !ret) {
			uint64_t len =
			    end - offset < VERIFY_RUN_MAX ? end - offset : VERIFY_RUN_MAX;
			ret = file_read_at(fd, run, len, offset);
			for (uint64_t at = 0; at < len && !ret; at += GUEST_PAGE_SIZE)
				checksum_page(&checksum, (offset + at) / GUEST_PAGE_SIZE, run + at);
			offset += len;
		}
		next_page = end > next_page ? end : next_page + GUEST_PAGE_SIZE;
	}
	free(run);
	if (ret) {
		log_error(log, "memory file %s: verifying it: %s", path, strerror(-ret));
		return ret;
	}
	if (XXH3_64bits_digest(&checksum) != identity->content_checksum) {
		log_error(log,
			  "memory file %s: its content does not match its checksum (the file was "
			  "changed or damaged after the snapshot)",
			  path);
		return -EINVAL;
	}
	return 0;
}

int snapshot_memory_apply_diff(struct guest_memory *mem, int fd, const char *path,
			       const struct mote_log *log)
{
	uint64_t offset = 0;
	while (offset < mem->size) {
		off_t data = lseek(fd, (off_t)offset, SEEK_DATA);
		if (data < 0 && errno == ENXIO)
			break;
		if (data < 0) {
			int err = -errno;
			log_error(log, "diff memory file %s: %s", path, strerror(errno));
			return err;
		}
		/* The trailer, and anything the file grew by since its size was checked, is
		 * not guest memory. */
		if ((uint64_t)data >= mem->size)
			break;
		off_t hole = lseek(fd, data, SEEK_HOLE);
		uint64_t end = hole < 0 || (uint64_t)hole > mem->size ? mem->size : (uint64_t)hole;
		if (end <= (uint64_t)data)
			break;
		int ret = file_read_at(fd, mem->base + data, end - (uint64_t)data, (uint64_t)data);
		if (ret) {
			log_error(log, "diff memory file %s: %s", path, strerror(-ret));
			return ret;
		}
		offset = end;
	}
	return 0;
}
