#include "guest_memory.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../boot/layout.h"

#define MIB (1024ULL * 1024ULL)

static void guest_memory_add_region(struct guest_memory *mem, uint64_t guest_addr, uint64_t size,
				    uint64_t file_offset)
{
	struct guest_memory_region *r = &mem->regions[mem->region_count++];

	r->guest_addr = guest_addr;
	r->size = size;
	r->file_offset = file_offset;
	r->host = mem->base + file_offset;
}

static void guest_memory_add_regions(struct guest_memory *mem)
{
	uint64_t low = mem->size < LAYOUT_MMIO_GAP_START ? mem->size : LAYOUT_MMIO_GAP_START;

	guest_memory_add_region(mem, 0, low, 0);
	if (mem->size > low)
		guest_memory_add_region(mem, LAYOUT_MMIO_GAP_END, mem->size - low, low);
}

static int guest_memory_check_size(uint64_t size, const struct mote_log *log)
{
	if (size < GUEST_MEMORY_MIN || size > GUEST_MEMORY_MAX || size % (2 * MIB)) {
		log_error(log,
			  "guest memory size %llu bytes: must be a multiple of 2 MiB from 16 MiB "
			  "to 1 TiB",
			  (unsigned long long)size);
		return -EINVAL;
	}
	return 0;
}

int guest_memory_create(struct guest_memory *mem, uint64_t size, const struct mote_log *log)
{
	memset(mem, 0, sizeof(*mem));
	mem->memfd = -1;
	mem->source_fd = -1;
	int ret = guest_memory_check_size(size, log);
	if (ret)
		return ret;

	mem->memfd = memfd_create("mote-guest-ram", MFD_CLOEXEC);
	if (mem->memfd < 0) {
		int err = -errno;
		log_error(log, "memfd_create for guest memory: %s", strerror(errno));
		return err;
	}
	if (ftruncate(mem->memfd, (off_t)size) < 0) {
		int err = -errno;
		log_error(log, "sizing guest memory to %llu bytes: %s", (unsigned long long)size,
			  strerror(errno));
		guest_memory_destroy(mem);
		return err;
	}
	/* MAP_NORESERVE: pages are only committed when the guest touches them. */
	mem->base =
	    mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, mem->memfd, 0);
	if (mem->base == MAP_FAILED) {
		int err = -errno;
		mem->base = NULL;
		log_error(log, "mapping %llu bytes of guest memory: %s", (unsigned long long)size,
			  strerror(errno));
		guest_memory_destroy(mem);
		return err;
	}
	madvise(mem->base, size, MADV_DONTDUMP);
	/* 2 MiB host pages let KVM map the guest with 2 MiB nested pages: far fewer faults
	 * while the guest kernel initialises its memory. Shmem honours this when the host
	 * allows (/sys/kernel/mm/transparent_hugepage/shmem_enabled: advise or always);
	 * elsewhere it is a no-op, so failure is not an error. */
	madvise(mem->base, size, MADV_HUGEPAGE);
	mem->size = size;
	guest_memory_add_regions(mem);
	return 0;
}

int guest_memory_create_from_file(struct guest_memory *mem, uint64_t size, int fd,
				  const struct mote_log *log)
{
	struct stat st = {0};

	memset(mem, 0, sizeof(*mem));
	mem->memfd = -1;
	mem->source_fd = fd;
	int ret = guest_memory_check_size(size, log);
	if (ret) {
		guest_memory_destroy(mem);
		return ret;
	}
	/* A snapshot's memory file holds a trailer after the guest's RAM (snapshot_memory.h),
	 * which is not mapped. */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size < size) {
		log_error(log, "memory file: not a regular file of at least the guest's %llu bytes",
			  (unsigned long long)size);
		guest_memory_destroy(mem);
		return -EINVAL;
	}
	/* MAP_PRIVATE: copy-on-write, so the file stays as it is and every VM restored from
	 * it shares its page-cache pages until it writes them. */
	mem->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd, 0);
	if (mem->base == MAP_FAILED) {
		int err = -errno;
		mem->base = NULL;
		log_error(log, "mapping the memory file: %s", strerror(errno));
		guest_memory_destroy(mem);
		return err;
	}
	madvise(mem->base, size, MADV_DONTDUMP);
	mem->size = size;
	guest_memory_add_regions(mem);
	return 0;
}

/* Memory kept mapped (guest_memory_keep_mapped) at its destroy: unmapped, the range could
 * be handed to the next mmap() of this process (a library's, another VM's RAM), and a
 * read the kernel still carries out would write into it. Replaced in place by a
 * reservation that holds no memory (PROT_NONE, MAP_FIXED over the old mapping, mmap(2)),
 * such a copy fails with EFAULT instead, and the guest's RAM goes back to the host; pages
 * the kernel pinned for direct I/O stay valid until it lets them go. If even that mapping
 * fails, the old one stays: leaked, but never reused. */
static void guest_memory_reserve_range(struct guest_memory *mem)
{
	/* A failure leaves the guest's mapping in place for good: nothing more to do. */
	(void)mmap(mem->base, mem->size, PROT_NONE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

void guest_memory_destroy(struct guest_memory *mem)
{
	if (mem->base && __atomic_load_n(&mem->keep_mapped, __ATOMIC_ACQUIRE))
		guest_memory_reserve_range(mem);
	else if (mem->base)
		munmap(mem->base, mem->size);
	if (mem->memfd >= 0)
		close(mem->memfd);
	if (mem->source_fd >= 0)
		close(mem->source_fd);
	free(mem->vmm_dirty);
	memset(mem, 0, sizeof(*mem));
	mem->memfd = -1;
	mem->source_fd = -1;
}

void guest_memory_keep_mapped(struct guest_memory *mem)
{
	__atomic_store_n(&mem->keep_mapped, true, __ATOMIC_RELEASE);
}

static size_t guest_memory_bitmap_words(const struct guest_memory *mem)
{
	return (size_t)((mem->size / GUEST_PAGE_SIZE + 63) / 64);
}

int guest_memory_track_dirty(struct guest_memory *mem)
{
	if (mem->vmm_dirty)
		return 0;
	mem->vmm_dirty = calloc(guest_memory_bitmap_words(mem), sizeof(uint64_t));
	return mem->vmm_dirty ? 0 : -ENOMEM;
}

void guest_memory_mark_dirty_host(const struct guest_memory *mem, const void *host, uint64_t len)
{
	const uint8_t *start = host;

	if (!mem->vmm_dirty || !len || start < mem->base || start >= mem->base + mem->size ||
	    len > (uint64_t)(mem->base + mem->size - start))
		return;
	/* Each region's host mapping sits at its memory-file offset within base. */
	uint64_t offset = (uint64_t)(start - mem->base);
	uint64_t page = offset / GUEST_PAGE_SIZE, last = (offset + len - 1) / GUEST_PAGE_SIZE;
	/* A word of the bitmap at a time, and no atomic write where its bits are set
	 * already: the guest names the buffers, gigabytes of them again and again. */
	while (page <= last) {
		unsigned bit = page % 64;
		uint64_t count = last - page + 1 < 64 - bit ? last - page + 1 : 64 - bit;
		uint64_t mask = (count == 64 ? ~0ULL : (1ULL << count) - 1) << bit;
		uint64_t *word = &mem->vmm_dirty[page / 64];
		if ((__atomic_load_n(word, __ATOMIC_RELAXED) & mask) != mask)
			__atomic_fetch_or(word, mask, __ATOMIC_RELAXED);
		page += count;
	}
}

void guest_memory_mark_dirty(const struct guest_memory *mem, uint64_t guest_addr, uint64_t len)
{
	if (!mem->vmm_dirty || !len)
		return;
	const uint8_t *host = guest_memory_ptr(mem, guest_addr, len);
	if (host)
		guest_memory_mark_dirty_host(mem, host, len);
}

void guest_memory_collect_dirty(struct guest_memory *mem, uint64_t *bitmap)
{
	if (!mem->vmm_dirty)
		return;
	for (size_t i = 0; i < guest_memory_bitmap_words(mem); i++)
		bitmap[i] |= __atomic_exchange_n(&mem->vmm_dirty[i], 0, __ATOMIC_RELAXED);
}

void *guest_memory_ptr(const struct guest_memory *mem, uint64_t guest_addr, uint64_t len)
{
	for (unsigned i = 0; i < mem->region_count; i++) {
		const struct guest_memory_region *r = &mem->regions[i];

		/* Written so that no sum can wrap: offset and len are each checked against size. */
		if (guest_addr < r->guest_addr)
			continue;
		uint64_t offset = guest_addr - r->guest_addr;
		if (offset >= r->size || len > r->size - offset)
			continue;
		return r->host + offset;
	}
	return NULL;
}

int guest_memory_write(const struct guest_memory *mem, uint64_t guest_addr, const void *src,
		       uint64_t len)
{
	void *dst = guest_memory_ptr(mem, guest_addr, len);

	if (!dst)
		return -EFAULT;
	memcpy(dst, src, len);
	guest_memory_mark_dirty(mem, guest_addr, len);
	return 0;
}

uint64_t guest_memory_resident_bytes(const struct guest_memory *mem)
{
	struct stat st;

	/* A memfd counts the pages it holds in st_blocks (512-byte units), one call for
	 * any guest size; mincore() below walks every page, ~2 ms per 16 MiB nested. */
	if (mem->memfd >= 0 && fstat(mem->memfd, &st) == 0)
		return (uint64_t)st.st_blocks * 512;

	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	const uint64_t chunk_pages = 4096;
	unsigned char vec[4096];
	uint64_t resident = 0;

	/* mincore() in chunks: one byte per page, bounded stack. */
	for (uint64_t offset = 0; offset < mem->size; offset += chunk_pages * page) {
		uint64_t len = mem->size - offset;
		if (len > chunk_pages * page)
			len = chunk_pages * page;
		if (mincore(mem->base + offset, len, vec) < 0)
			return 0;
		for (uint64_t i = 0; i < (len + page - 1) / page; i++)
			resident += vec[i] & 1;
	}
	return resident * page;
}

uint64_t guest_memory_low_end(const struct guest_memory *mem)
{
	return mem->region_count ? mem->regions[0].size : 0;
}

uint64_t guest_memory_end(const struct guest_memory *mem)
{
	if (!mem->region_count)
		return 0;
	const struct guest_memory_region *last = &mem->regions[mem->region_count - 1];
	return last->guest_addr + last->size;
}
