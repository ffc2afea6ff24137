/* Memory files of snapshots (snapshot_memory.h). */
#include "snapshot_memory.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* The library's functions compiled in here, from its header (Debian's libxxhash-dev):
 * nothing to link, and the fastest variant the compiler can build. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "file_image.h"
#include "little_endian.h"

#define TRAILER_MAGIC "MOTEMEM"
#define TRAILER_VERSION 1u
#define TRAILER_CHECKED_BYTES 72u /* the fields before the trailer's CRC-32 */
/* Pages are read in runs of up to this size to be verified or laid over. */
#define READ_RUN_MAX (1u << 20)

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

/* One page into the content checksum (snapshot_memory.h): a full file's zero pages do
 * not count, a diff's all do. */
static void checksum_page(XXH3_state_t *state, uint64_t index, const uint8_t *page, bool diff)
{
	uint8_t le_index[8];

	if (!diff && page_is_zero(page))
		return;
	le_store(le_index, index, sizeof(le_index));
	XXH3_64bits_update(state, le_index, sizeof(le_index));
	XXH3_64bits_update(state, page, GUEST_PAGE_SIZE);
}

/* A diff's page bitmap in the file: a bit a page, padded to whole pages. */
static uint64_t bitmap_bytes_for(uint64_t guest_bytes)
{
	uint64_t bytes = (guest_bytes / GUEST_PAGE_SIZE + 7) / 8;

	return (bytes + GUEST_PAGE_SIZE - 1) & ~(uint64_t)(GUEST_PAGE_SIZE - 1);
}

static bool bit_is_set(const uint8_t *bitmap, uint64_t page)
{
	return (bitmap[page / 8] >> (page % 8)) & 1;
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
	le_store(trailer + 8, TRAILER_VERSION, 4);
	le_store(trailer + 12, identity->diff ? 1 : 0, 4);
	le_store(trailer + 16, identity->guest_bytes, 8);
	memcpy(trailer + 24, identity->id, SNAPSHOT_ID_SIZE);
	memcpy(trailer + 40, identity->base_id, SNAPSHOT_ID_SIZE);
	le_store(trailer + 56, identity->content_checksum, 8);
	le_store(trailer + 64, identity->bitmap_bytes, 8);
	le_store(trailer + TRAILER_CHECKED_BYTES, crc32(0L, trailer, TRAILER_CHECKED_BYTES), 4);
}

/* Whether the trailer is one this version writes; fills identity if so. */
static bool trailer_decode(const uint8_t trailer[SNAPSHOT_MEMORY_TRAILER_SIZE],
			   struct snapshot_memory_identity *identity)
{
	if (memcmp(trailer, TRAILER_MAGIC, sizeof(TRAILER_MAGIC)) != 0 ||
	    le_load(trailer + 8, 4) != TRAILER_VERSION || le_load(trailer + 12, 4) > 1 ||
	    le_load(trailer + TRAILER_CHECKED_BYTES, 4) !=
		crc32(0L, trailer, TRAILER_CHECKED_BYTES))
		return false;
	for (unsigned i = TRAILER_CHECKED_BYTES + 4; i < SNAPSHOT_MEMORY_TRAILER_SIZE; i++)
		if (trailer[i])
			return false;
	identity->diff = le_load(trailer + 12, 4) == 1;
	identity->guest_bytes = le_load(trailer + 16, 8);
	memcpy(identity->id, trailer + 24, SNAPSHOT_ID_SIZE);
	memcpy(identity->base_id, trailer + 40, SNAPSHOT_ID_SIZE);
	identity->content_checksum = le_load(trailer + 56, 8);
	identity->bitmap_bytes = le_load(trailer + 64, 8);
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

/* The dirty words as the file's bitmap (a byte order of its own) at offset. */
static int write_bitmap(int fd, const uint64_t *dirty, uint64_t pages, uint64_t offset,
			uint64_t bitmap_bytes)
{
	uint8_t *bitmap = calloc(1, bitmap_bytes);

	if (!bitmap)
		return -ENOMEM;
	for (uint64_t word = 0; word < (pages + 63) / 64; word++)
		le_store(bitmap + word * 8, dirty[word], 8);
	int ret = write_all(fd, bitmap, bitmap_bytes, offset);
	free(bitmap);
	return ret;
}

int snapshot_memory_write(const struct guest_memory *mem, const uint64_t *dirty, int fd,
			  struct snapshot_memory_identity *identity, const char *path,
			  const struct mote_log *log)
{
	XXH3_state_t checksum;
	int ret = 0;

	XXH3_64bits_reset(&checksum);
	identity->diff = dirty != NULL;
	identity->guest_bytes = mem->size;
	identity->bitmap_bytes = identity->diff ? bitmap_bytes_for(mem->size) : 0;
	if (ftruncate(fd, (off_t)(mem->size + identity->bitmap_bytes +
				  SNAPSHOT_MEMORY_TRAILER_SIZE)) < 0) {
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
					      mem->base + offset, dirty != NULL);
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
	if (!ret && identity->diff)
		ret = write_bitmap(fd, dirty, snapshot_memory_pages(mem), mem->size,
				   identity->bitmap_bytes);
	if (!ret) {
		uint8_t trailer[SNAPSHOT_MEMORY_TRAILER_SIZE];

		identity->content_checksum = XXH3_64bits_digest(&checksum);
		trailer_encode(identity, trailer);
		ret = write_all(fd, trailer, sizeof(trailer), mem->size + identity->bitmap_bytes);
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

	/* Bounded first, so that the sums below cannot wrap (a hostile trailer's size). */
	if (guest_bytes == 0 || guest_bytes > GUEST_MEMORY_MAX) {
		log_error(log, "memory file %s: %llu bytes of guest memory: not a mote guest's",
			  path, (unsigned long long)guest_bytes);
		return -EINVAL;
	}
	uint64_t full_size = guest_bytes + SNAPSHOT_MEMORY_TRAILER_SIZE;
	uint64_t diff_size = full_size + bitmap_bytes_for(guest_bytes);

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    ((uint64_t)st.st_size != full_size && (uint64_t)st.st_size != diff_size)) {
		log_error(log,
			  "memory file %s: not a regular file of %llu bytes (the snapshot's "
			  "%llu bytes of guest memory and a %u-byte trailer), nor a diff of "
			  "%llu",
			  path, (unsigned long long)full_size, (unsigned long long)guest_bytes,
			  SNAPSHOT_MEMORY_TRAILER_SIZE, (unsigned long long)diff_size);
		return -EINVAL;
	}
	uint64_t trailer_at = (uint64_t)st.st_size - SNAPSHOT_MEMORY_TRAILER_SIZE;
	int ret = file_read_at(fd, trailer, sizeof(trailer), trailer_at);
	if (ret) {
		log_error(log, "memory file %s: reading its trailer: %s", path, strerror(-ret));
		return ret;
	}
	if (!trailer_decode(trailer, identity) || identity->guest_bytes != guest_bytes ||
	    identity->bitmap_bytes != (identity->diff ? bitmap_bytes_for(guest_bytes) : 0) ||
	    guest_bytes + identity->bitmap_bytes != trailer_at) {
		log_error(log,
			  "memory file %s: its trailer is not a mote memory file's (damaged, or "
			  "written by another version of mote)",
			  path);
		return -EINVAL;
	}
	return 0;
}

int snapshot_memory_open(const char *path, bool diff, const struct mote_log *log)
{
	int fd = path ? file_open_read(path) : -EINVAL;

	if (fd < 0)
		log_error(log, "%smemory file %s: %s", diff ? "diff " : "", path ? path : "(none)",
			  file_open_error(fd));
	return fd;
}

int snapshot_memory_check_chain(const struct snapshot_memory_identity *identity, const char *path,
				const struct snapshot_memory_identity *previous,
				const char *previous_path, const struct mote_log *log)
{
	if (!previous && identity->diff) {
		log_error(log,
			  "memory file %s is a diff: give the full memory file first, then the "
			  "diffs, oldest first",
			  path);
		return -EINVAL;
	}
	if (previous && !identity->diff) {
		log_error(log, "diff memory file %s is a full memory file, not a diff", path);
		return -EINVAL;
	}
	if (previous && memcmp(identity->base_id, previous->id, SNAPSHOT_ID_SIZE) != 0) {
		log_error(log,
			  "diff memory file %s does not apply on %s: give the diffs oldest first, "
			  "each right after the snapshot it was taken after",
			  path, previous_path);
		return -EINVAL;
	}
	return 0;
}

int snapshot_memory_probe(int fd, struct snapshot_memory_identity *identity, const char *path,
			  const struct mote_log *log)
{
	uint8_t trailer[SNAPSHOT_MEMORY_TRAILER_SIZE];
	struct stat st;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size < SNAPSHOT_MEMORY_TRAILER_SIZE + GUEST_PAGE_SIZE ||
	    file_read_at(fd, trailer, sizeof(trailer),
			 (uint64_t)st.st_size - SNAPSHOT_MEMORY_TRAILER_SIZE) != 0 ||
	    !trailer_decode(trailer, identity) || identity->guest_bytes == 0 ||
	    identity->guest_bytes % GUEST_PAGE_SIZE != 0) {
		log_error(log,
			  "memory file %s: not a mote memory file (no trailer of this version)",
			  path);
		return -EINVAL;
	}
	/* The trailer's sizes against the file's, as a restore checks them. */
	return snapshot_memory_read_identity(fd, identity->guest_bytes, identity, path, log);
}

/* Reads a diff's bitmap (identity->bitmap_bytes after the RAM) into a new buffer.
 * -EINVAL for bits past the guest's pages, which no monitor writes. */
static int read_bitmap(int fd, const struct snapshot_memory_identity *identity,
		       uint8_t **bitmap_out, const char *path, const struct mote_log *log)
{
	uint64_t pages = identity->guest_bytes / GUEST_PAGE_SIZE;
	uint8_t *bitmap = malloc(identity->bitmap_bytes);

	*bitmap_out = NULL;
	if (!bitmap)
		return -ENOMEM;
	int ret = file_read_at(fd, bitmap, identity->bitmap_bytes, identity->guest_bytes);
	if (ret) {
		log_error(log, "diff memory file %s: reading its page bitmap: %s", path,
			  strerror(-ret));
		free(bitmap);
		return ret;
	}
	for (uint64_t bit = pages; bit < identity->bitmap_bytes * 8; bit++) {
		if (bit_is_set(bitmap, bit)) {
			log_error(log,
				  "diff memory file %s: its page bitmap names pages past the "
				  "guest's memory (damaged)",
				  path);
			free(bitmap);
			return -EINVAL;
		}
	}
	*bitmap_out = bitmap;
	return 0;
}

/* The next run of set bits at or after *page, at most max_pages long: its first page
 * and length in pages (0 when none is left). */
static uint64_t next_run(const uint8_t *bitmap, uint64_t pages, uint64_t *page, uint64_t max_pages)
{
	while (*page < pages && !bit_is_set(bitmap, *page))
		(*page)++;
	uint64_t len = 0;
	while (*page + len < pages && len < max_pages && bit_is_set(bitmap, *page + len))
		len++;
	return len;
}

/* Reads len bytes of fd at offset into guest memory at at. Its pages are faulted in
 * first, all in one call: page by page, as the read touches them, the faults took a
 * fifth of a merge's time. A kernel without MADV_POPULATE_WRITE (5.14) faults them
 * as before. */
static int read_into_memory(int fd, uint8_t *at, uint64_t len, uint64_t offset)
{
	(void)madvise(at, len, MADV_POPULATE_WRITE);
	return file_read_at(fd, at, len, offset);
}

/* The full file's checksum: its data extents, zero pages skipped. The pages are read
 * into run, or with into (memory of the file's size) to their place there. */
static int checksum_full(int fd, uint64_t size, uint8_t *run, uint8_t *into, XXH3_state_t *checksum)
{
	uint64_t next_page = 0;
	int ret = 0;

	while (next_page < size && !ret) {
		off_t data = lseek(fd, (off_t)next_page, SEEK_DATA);
		if (data < 0 && errno == ENXIO)
			break;
		if (data < 0)
			return -errno;
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
			uint64_t len = end - offset < READ_RUN_MAX ? end - offset : READ_RUN_MAX;
			uint8_t *buf = into ? into + offset : run;
			ret = into ? read_into_memory(fd, buf, len, offset)
				   : file_read_at(fd, buf, len, offset);
			for (uint64_t at = 0; at < len && !ret; at += GUEST_PAGE_SIZE)
				checksum_page(checksum, (offset + at) / GUEST_PAGE_SIZE, buf + at,
					      false);
			offset += len;
		}
		next_page = end > next_page ? end : next_page + GUEST_PAGE_SIZE;
	}
	return ret;
}

/* A diff's checksum: every page its bitmap names. */
static int checksum_diff(int fd, const uint8_t *bitmap, uint64_t pages, uint8_t *run,
			 XXH3_state_t *checksum)
{
	uint64_t page = 0, len;

	while ((len = next_run(bitmap, pages, &page, READ_RUN_MAX / GUEST_PAGE_SIZE)) > 0) {
		int ret = file_read_at(fd, run, len * GUEST_PAGE_SIZE, page * GUEST_PAGE_SIZE);
		if (ret)
			return ret;
		for (uint64_t i = 0; i < len; i++)
			checksum_page(checksum, page + i, run + i * GUEST_PAGE_SIZE, true);
		page += len;
	}
	return 0;
}

/* The end of a verification: a read that failed (ret), or the checksum of what was read
 * against the trailer's. */
static int checksum_compare(int ret, XXH3_state_t *checksum,
			    const struct snapshot_memory_identity *identity, const char *path,
			    const struct mote_log *log)
{
	if (ret) {
		log_error(log, "memory file %s: verifying it: %s", path, strerror(-ret));
		return ret;
	}
	if (XXH3_64bits_digest(checksum) != identity->content_checksum) {
		log_error(log,
			  "memory file %s: its content does not match its checksum (the file was "
			  "changed or damaged after the snapshot)",
			  path);
		return -EINVAL;
	}
	return 0;
}

int snapshot_memory_verify(int fd, const struct snapshot_memory_identity *identity,
			   const char *path, const struct mote_log *log)
{
	uint8_t *run = malloc(READ_RUN_MAX), *bitmap = NULL;
	XXH3_state_t checksum;
	int ret = 0;

	if (!run)
		return -ENOMEM;
	XXH3_64bits_reset(&checksum);
	if (identity->diff) {
		ret = read_bitmap(fd, identity, &bitmap, path, log);
		if (ret) {
			free(run);
			return ret;
		}
		ret = checksum_diff(fd, bitmap, identity->guest_bytes / GUEST_PAGE_SIZE, run,
				    &checksum);
	} else {
		ret = checksum_full(fd, identity->guest_bytes, run, NULL, &checksum);
	}
	free(bitmap);
	free(run);
	return checksum_compare(ret, &checksum, identity, path, log);
}

int snapshot_memory_load_full(struct guest_memory *mem, int fd,
			      const struct snapshot_memory_identity *identity, const char *path,
			      const struct mote_log *log)
{
	XXH3_state_t checksum;

	if (identity->guest_bytes != mem->size || identity->diff)
		return -EINVAL;
	XXH3_64bits_reset(&checksum);
	int ret = checksum_full(fd, identity->guest_bytes, NULL, mem->base, &checksum);
	return checksum_compare(ret, &checksum, identity, path, log);
}

int snapshot_memory_apply_diff(struct guest_memory *mem, int fd,
			       const struct snapshot_memory_identity *identity, bool verify,
			       const char *path, const struct mote_log *log)
{
	uint64_t pages = snapshot_memory_pages(mem), page = 0, len;
	XXH3_state_t checksum;
	uint8_t *bitmap;

	if (identity->guest_bytes != mem->size || !identity->diff)
		return -EINVAL;
	int ret = read_bitmap(fd, identity, &bitmap, path, log);
	if (ret)
		return ret;
	XXH3_64bits_reset(&checksum);
	/* Straight into guest memory: the pages the bitmap names, holes or not (a hole
	 * reads as the zeros the page held). */
	while (!ret && (len = next_run(bitmap, pages, &page, UINT64_MAX)) > 0) {
		uint8_t *at = mem->base + page * GUEST_PAGE_SIZE;
		ret = read_into_memory(fd, at, len * GUEST_PAGE_SIZE, page * GUEST_PAGE_SIZE);
		if (ret)
			log_error(log, "diff memory file %s: %s", path, strerror(-ret));
		for (uint64_t i = 0; verify && !ret && i < len; i++)
			checksum_page(&checksum, page + i, at + i * GUEST_PAGE_SIZE, true);
		page += len;
	}
	free(bitmap);
	/* What was read is what is checked: a file that changes meanwhile cannot slip
	 * unchecked pages in. */
	if (!ret && verify)
		ret = checksum_compare(0, &checksum, identity, path, log);
	return ret;
}
