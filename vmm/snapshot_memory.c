/* Memory files of snapshots (snapshot_memory.h). */
#include "snapshot_memory.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file_image.h"

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
			  const char *path, const struct mote_log *log)
{
	int ret = 0;

	if (ftruncate(fd, (off_t)mem->size) < 0) {
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
	if (!ret && fdatasync(fd) < 0)
		ret = -errno;
	if (ret)
		log_error(log, "memory file %s: %s", path, strerror(-ret));
	return ret;
}

int snapshot_memory_apply_diff(struct guest_memory *mem, int fd, const char *path,
			       const struct mote_log *log)
{
	struct stat st;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != mem->size) {
		log_error(log, "diff memory file %s: holds %lld bytes, the guest has %llu", path,
			  (long long)st.st_size, (unsigned long long)mem->size);
		return -EINVAL;
	}
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
		/* The file may have grown since fstat(): nothing past the guest's size. */
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
