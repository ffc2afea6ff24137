/* libFuzzer target: a hostile snapshot memory file (snapshot_memory.h), read as a restore
 * and a merge read one: its trailer with the guest size the state file gives
 * (snapshot_memory_read_identity) and with none (snapshot_memory_probe), its place in a
 * chain (snapshot_memory_check_chain), its content against its checksum
 * (snapshot_memory_verify), and a diff laid over a guest (snapshot_memory_apply_diff)
 * or a full file loaded into one (snapshot_memory_load_full).
 *
 * The file is a full or a diff memory file that snapshot_memory_write() wrote of a
 * 16 MiB guest (the smallest mote makes), with the input's bytes XORed onto its trailer,
 * its page bitmap and its first pages: an input of zeros is a valid file. The trailer's
 * CRC-32 is recomputed after the XOR, or nearly every change would be refused there,
 * unless the input asks for it as the XOR left it; the input may also give the file
 * another length, the bitmap and trailer still at its end. Whatever the bytes, what
 * the header promises holds: a refusal says why and names the file, one that comes
 * before anything is copied leaves the guest as it was, and what is accepted is laid
 * over the guest exactly. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include "vmm/little_endian.h"
#include "vmm/snapshot_memory.h"

#define PAGE GUEST_PAGE_SIZE
#define GUEST_BYTES (16ULL << 20)
#define GUEST_PAGES (GUEST_BYTES / PAGE)
#define TRAILER SNAPSHOT_MEMORY_TRAILER_SIZE
#define BITMAP_BYTES 4096u /* a bit a page of 16 MiB, padded to a page */
#define TRAILER_CRC_AT 72u /* the CRC-32 of the trailer's fields before it */
#define WINDOW_PAGES 4u	   /* the guest's first pages: the input reaches them */
#define WINDOW_BYTES (WINDOW_PAGES * PAGE)
#define HIGH_PAGE 4000u /* a page beyond them, in the diff and in the older memory */
#define BEFORE_PAGES 5u /* the older memory's pages: the window's, then HIGH_PAGE */
#define MAX_FILE (GUEST_BYTES + BITMAP_BYTES + TRAILER + WINDOW_BYTES)
#define MEM_PATH "fuzz.mem"
#define BASE_PATH "base.mem"

/* The input: a control byte, a length, then the mask (mask_layout). */
#define FLAG_CRC_AS_IS 0x01 /* keep the trailer's CRC-32 as the XOR left it */
#define FLAG_DIFF 0x02	    /* a diff file, else a full one */
#define FLAG_VERIFY 0x04    /* apply a diff checking its content too */
#define FLAG_RESIZE 0x08    /* the file's length is the input's, not the template's */
#define FLAG_DENSE 0x10	    /* the window's zero pages written, not holes */
#define CONTROL_BYTES 5u
#define TRAILER_FIELDS 80u /* the fields, the CRC-32 and the first zeros */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A file as snapshot_memory_write() left it: the window's pages (the guest's only data
 * there, nothing beyond but zeros) and the tail, a diff's bitmap then the trailer. */
struct memory_template {
	uint8_t pages[WINDOW_BYTES];
	uint8_t tail[BITMAP_BYTES + TRAILER];
	uint64_t tail_len;
};

/* Where the mask goes: what a short input reaches first (the trailer's fields; the
 * bitmap's bits around the guest's last page, HIGH_PAGE's and those past the guest,
 * then the others), then the window's pages, then the zeros that pad the bitmap and the
 * trailer. A full file has no bitmap: its mask skips those segments. */
enum mask_region { MASK_TRAILER, MASK_BITMAP, MASK_PAGES };

/* The bitmap's bytes from 512 pages before the guest's end to 512 pages past it. */
#define BITMAP_EDGE (GUEST_PAGES / 8 - 64)

static const struct mask_segment {
	enum mask_region region;
	uint32_t offset, len;
} mask_layout[] = {
    {MASK_TRAILER, 0, TRAILER_FIELDS},
    {MASK_BITMAP, BITMAP_EDGE, 128},
    {MASK_BITMAP, 0, BITMAP_EDGE},
    {MASK_PAGES, 0, WINDOW_BYTES},
    {MASK_BITMAP, BITMAP_EDGE + 128, BITMAP_BYTES - BITMAP_EDGE - 128},
    {MASK_TRAILER, TRAILER_FIELDS, TRAILER - TRAILER_FIELDS},
};

struct harness {
	struct guest_memory mem;      /* a diff is laid over it, a full file loaded into it */
	int fd;			      /* the memory file under test */
	uint8_t window[WINDOW_BYTES]; /* the file's first pages, masked */
	/* The older memory a diff applies on, and the snapshot it is the memory of. */
	uint8_t before[BEFORE_PAGES][PAGE];
	struct snapshot_memory_identity base;
	struct memory_template full, diff; /* of the newer memory */
	uint8_t page[PAGE];
};

struct log_record {
	bool names_file; /* the last message names MEM_PATH */
};

static struct log_record record;

static void fuzz_log(void *opaque, enum mote_log_level level, const char *message)
{
	struct log_record *r = opaque;

	(void)level;
	r->names_file = strstr(message, MEM_PATH) != NULL;
}

static const struct mote_log *log_reset(void)
{
	static struct mote_log counted = {fuzz_log, &record};

	record = (struct log_record){0};
	return &counted;
}

/* A refusal says why, naming the file. */
static void check_refusal(int ret)
{
	if (ret && (ret != -EINVAL || !record.names_file))
		abort();
}

static uint64_t before_page_index(unsigned i)
{
	return i < WINDOW_PAGES ? i : HIGH_PAGE;
}

static int write_memory_file(struct guest_memory *mem, const uint64_t *dirty,
			     struct snapshot_memory_identity *identity, struct memory_template *t)
{
	int fd = memfd_create("fuzz-template", MFD_CLOEXEC);

	if (fd < 0)
		return -1;
	int ret = snapshot_memory_write(mem, dirty, fd, identity, "template.mem", NULL);
	t->tail_len = identity->bitmap_bytes + TRAILER;
	if (!ret && pread(fd, t->pages, sizeof(t->pages), 0) != (ssize_t)sizeof(t->pages))
		ret = -1;
	if (!ret && pread(fd, t->tail, t->tail_len, (off_t)GUEST_BYTES) != (ssize_t)t->tail_len)
		ret = -1;
	if (!ret && (lseek(fd, 0, SEEK_END) != (off_t)(GUEST_BYTES + t->tail_len) ||
		     identity->bitmap_bytes > BITMAP_BYTES))
		ret = -1;
	close(fd);
	return ret;
}

/* The older memory (pages 0, 2, 3 and HIGH_PAGE) and its full file; then the newer: page
 * 0 changed, 1 written, 3 and HIGH_PAGE cleared (a diff names them all, cleared pages
 * too), page 2 untouched; its full file and its diff. */
static int write_templates(struct harness *h)
{
	struct guest_memory *mem = &h->mem;
	struct snapshot_memory_identity newer = {.id = {1}};
	struct memory_template older;
	uint64_t dirty[GUEST_PAGES / 64] = {0};

	memset(mem->base, 0xa0, PAGE);
	memset(mem->base + 2 * PAGE, 0xa2, PAGE);
	mem->base[3 * PAGE + 17] = 0xa3;
	memset(mem->base + HIGH_PAGE * PAGE, 0xa4, PAGE);
	for (unsigned i = 0; i < BEFORE_PAGES; i++)
		memcpy(h->before[i], mem->base + before_page_index(i) * PAGE, PAGE);
	h->base = (struct snapshot_memory_identity){.id = {2}};
	if (write_memory_file(mem, NULL, &h->base, &older))
		return -1;
	memset(mem->base, 0xb0, PAGE / 2);
	memset(mem->base + PAGE, 0xb1, PAGE);
	memset(mem->base + 3 * PAGE, 0, PAGE);
	memset(mem->base + HIGH_PAGE * PAGE, 0, PAGE);
	static const uint64_t changed[] = {0, 1, 3, HIGH_PAGE};
	for (unsigned i = 0; i < sizeof(changed) / sizeof(changed[0]); i++)
		dirty[changed[i] / 64] |= 1ULL << (changed[i] % 64);
	if (write_memory_file(mem, NULL, &newer, &h->full))
		return -1;
	newer = (struct snapshot_memory_identity){.id = {3}};
	memcpy(newer.base_id, h->base.id, SNAPSHOT_ID_SIZE);
	return write_memory_file(mem, dirty, &newer, &h->diff);
}

/* The guest as the older memory (with_before) or all zeros. */
static void guest_reset(struct harness *h, bool with_before)
{
	if (fallocate(h->mem.memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
		      (off_t)GUEST_BYTES) != 0)
		abort();
	for (unsigned i = 0; with_before && i < BEFORE_PAGES; i++)
		memcpy(h->mem.base + before_page_index(i) * PAGE, h->before[i], PAGE);
}

/* The mask XORed onto the trailer, the bitmap (NULL for a full file) and the window. */
static void apply_mask(uint8_t *trailer, uint8_t *bitmap, uint8_t *window, const uint8_t *mask,
		       size_t mask_len)
{
	size_t at = 0;

	for (unsigned s = 0; s < sizeof(mask_layout) / sizeof(mask_layout[0]); s++) {
		const struct mask_segment *segment = &mask_layout[s];
		uint8_t *to = segment->region == MASK_TRAILER  ? trailer
			      : segment->region == MASK_BITMAP ? bitmap
							       : window;
		for (uint32_t i = 0; to && i < segment->len && at < mask_len; i++, at++)
			to[segment->offset + i] ^= mask[at];
	}
}

/* The file for this input: its length, the window's pages that fit before the tail,
 * and the tail at its end. */
static void write_file(struct harness *h, const struct memory_template *t, uint8_t flags,
		       uint64_t len, const uint8_t *mask, size_t mask_len)
{
	static const uint8_t zeros[PAGE];
	uint8_t tail[BITMAP_BYTES + TRAILER];
	uint64_t tail_len = t->tail_len;

	memcpy(tail, t->tail, tail_len);
	memcpy(h->window, t->pages, sizeof(h->window));
	uint8_t *trailer = tail + tail_len - TRAILER;
	apply_mask(trailer, tail_len > TRAILER ? tail : NULL, h->window, mask, mask_len);
	if (!(flags & FLAG_CRC_AS_IS))
		le_store(trailer + TRAILER_CRC_AT, crc32(0L, trailer, TRAILER_CRC_AT), 4);
	if (ftruncate(h->fd, 0) != 0 || ftruncate(h->fd, (off_t)len) != 0)
		abort();
	uint64_t ram_end = len > tail_len ? len - tail_len : 0;
	for (unsigned p = 0; p < WINDOW_PAGES && p * PAGE < ram_end; p++) {
		const uint8_t *page = h->window + p * PAGE;
		uint64_t n = ram_end - p * PAGE < PAGE ? ram_end - p * PAGE : PAGE;
		if (!(flags & FLAG_DENSE) && memcmp(page, zeros, PAGE) == 0)
			continue;
		if (pwrite(h->fd, page, n, (off_t)(p * PAGE)) != (ssize_t)n)
			abort();
	}
	uint64_t n = len - ram_end;
	if (pwrite(h->fd, tail + tail_len - n, n, (off_t)ram_end) != (ssize_t)n)
		abort();
}

/* What the guest should hold after a call: the older memory (bitmap NULL, !from_file),
 * the older memory with the pages bitmap names from the file, or the file's pages. */
struct expectation {
	const uint8_t *bitmap;
	bool from_file;
};

static bool page_as_expected(struct harness *h, const struct expectation *e, uint64_t p)
{
	const uint8_t *at = h->mem.base + p * PAGE;

	if (e->from_file || (e->bitmap && (e->bitmap[p / 8] >> (p % 8) & 1))) {
		if (pread(h->fd, h->page, PAGE, (off_t)(p * PAGE)) != (ssize_t)PAGE)
			abort();
	} else {
		memset(h->page, 0, PAGE);
		for (unsigned i = 0; i < BEFORE_PAGES; i++)
			if (before_page_index(i) == p)
				memcpy(h->page, h->before[i], PAGE);
	}
	return memcmp(at, h->page, PAGE) == 0;
}

/* Whether every page of fd's data extents below GUEST_BYTES is as expected. */
static bool extents_as_expected(struct harness *h, const struct expectation *e, int fd)
{
	off_t data = 0;

	while ((data = lseek(fd, data, SEEK_DATA)) >= 0 && (uint64_t)data < GUEST_BYTES) {
		off_t hole = lseek(fd, data, SEEK_HOLE);
		uint64_t end =
		    hole < 0 || (uint64_t)hole > GUEST_BYTES ? GUEST_BYTES : (uint64_t)hole;
		for (uint64_t p = (uint64_t)data / PAGE; p * PAGE < end; p++)
			if (!page_as_expected(h, e, p))
				return false;
		data = (off_t)((end + PAGE - 1) & ~(uint64_t)(PAGE - 1));
	}
	return true;
}

/* The pages that may hold anything but zeros on either side, in the guest or in the
 * file, and the older memory's: elsewhere both are zeros. */
static void check_guest(struct harness *h, const struct expectation *e)
{
	for (unsigned i = 0; i < BEFORE_PAGES; i++)
		if (!page_as_expected(h, e, before_page_index(i)))
			abort();
	if (!extents_as_expected(h, e, h->mem.memfd) || !extents_as_expected(h, e, h->fd))
		abort();
}

/* Calls with an identity of the wrong kind or size are refused before anything is read
 * or copied. */
static void check_other_kind_refused(struct harness *h,
				     const struct snapshot_memory_identity *identity)
{
	const struct expectation before = {0};

	guest_reset(h, true);
	if (identity->diff || identity->guest_bytes != GUEST_BYTES) {
		if (snapshot_memory_load_full(&h->mem, h->fd, identity, MEM_PATH, log_reset()) !=
		    -EINVAL)
			abort();
		check_guest(h, &before);
	}
	if (!identity->diff || identity->guest_bytes != GUEST_BYTES) {
		if (snapshot_memory_apply_diff(&h->mem, h->fd, identity, true, MEM_PATH,
					       log_reset()) != -EINVAL)
			abort();
		check_guest(h, &before);
	}
}

/* A diff that fits the guest: applied (or refused) as its bitmap and checksum say. */
static void check_diff(struct harness *h, const struct snapshot_memory_identity *identity,
		       int verified, bool verify)
{
	uint8_t bitmap[BITMAP_BYTES];
	bool past_guest = false;

	if (pread(h->fd, bitmap, sizeof(bitmap), (off_t)GUEST_BYTES) != (ssize_t)sizeof(bitmap))
		abort();
	for (uint64_t bit = GUEST_PAGES; bit < BITMAP_BYTES * 8; bit++)
		past_guest |= bitmap[bit / 8] >> (bit % 8) & 1;
	if (past_guest && verified != -EINVAL)
		abort();
	guest_reset(h, true);
	int ret =
	    snapshot_memory_apply_diff(&h->mem, h->fd, identity, verify, MEM_PATH, log_reset());
	check_refusal(ret);
	if (past_guest) {
		/* Refused before a page is copied. */
		const struct expectation before = {0};
		if (ret != -EINVAL)
			abort();
		check_guest(h, &before);
		return;
	}
	/* Without verify nothing is compared; with it, the same verdict as the file's. */
	if (ret != (verify ? verified : 0))
		abort();
	if (!ret) {
		const struct expectation applied = {.bitmap = bitmap};
		check_guest(h, &applied);
	}
}

/* A full file that fits the guest: loaded into zeros with the same verdict as the
 * file's checksum, and then the guest is the file. */
static void check_full(struct harness *h, const struct snapshot_memory_identity *identity,
		       int verified)
{
	guest_reset(h, false);
	int ret = snapshot_memory_load_full(&h->mem, h->fd, identity, MEM_PATH, log_reset());
	check_refusal(ret);
	if (ret != verified)
		abort();
	if (!ret) {
		const struct expectation loaded = {.from_file = true};
		check_guest(h, &loaded);
	}
}

static bool same_identity(const struct snapshot_memory_identity *a,
			  const struct snapshot_memory_identity *b)
{
	return a->diff == b->diff && !memcmp(a->id, b->id, SNAPSHOT_ID_SIZE) &&
	       !memcmp(a->base_id, b->base_id, SNAPSHOT_ID_SIZE) &&
	       a->guest_bytes == b->guest_bytes && a->content_checksum == b->content_checksum &&
	       a->bitmap_bytes == b->bitmap_bytes;
}

/* The chain: a full file starts one, a diff follows the snapshot it was taken after. */
static void check_chain(const struct harness *h, const struct snapshot_memory_identity *identity)
{
	int first = snapshot_memory_check_chain(identity, MEM_PATH, NULL, NULL, log_reset());
	check_refusal(first);
	if ((first == 0) != !identity->diff)
		abort();
	int next =
	    snapshot_memory_check_chain(identity, MEM_PATH, &h->base, BASE_PATH, log_reset());
	check_refusal(next);
	if ((next == 0) !=
	    (identity->diff && !memcmp(identity->base_id, h->base.id, SNAPSHOT_ID_SIZE)))
		abort();
}

/* Runs the readers over the file in h->fd, of len bytes. */
static void check_file(struct harness *h, uint64_t len, bool verify)
{
	struct snapshot_memory_identity identity, probed;

	int ret =
	    snapshot_memory_read_identity(h->fd, GUEST_BYTES, &identity, MEM_PATH, log_reset());
	check_refusal(ret);
	int probe = snapshot_memory_probe(h->fd, &probed, MEM_PATH, log_reset());
	check_refusal(probe);
	/* The trailer's sizes are the file's, and the probe finds what the state's size
	 * finds. */
	if (!probe && (probed.guest_bytes == 0 || probed.guest_bytes % PAGE ||
		       len != probed.guest_bytes + probed.bitmap_bytes + TRAILER))
		abort();
	if ((ret == 0) != (probe == 0 && probed.guest_bytes == GUEST_BYTES))
		abort();
	if (!ret && !same_identity(&identity, &probed))
		abort();
	if (!probe) {
		check_chain(h, &probed);
		int verified = snapshot_memory_verify(h->fd, &probed, MEM_PATH, log_reset());
		check_refusal(verified);
		check_other_kind_refused(h, &probed);
		if (!ret && identity.diff)
			check_diff(h, &identity, verified, verify);
		else if (!ret)
			check_full(h, &identity, verified);
	}
}

/* The templates as this harness writes them, with no mask: files a restore takes. */
static int check_templates(struct harness *h)
{
	struct snapshot_memory_identity identity;

	for (int diff = 0; diff < 2; diff++) {
		const struct memory_template *t = diff ? &h->diff : &h->full;
		write_file(h, t, 0, GUEST_BYTES + t->tail_len, NULL, 0);
		if (snapshot_memory_read_identity(h->fd, GUEST_BYTES, &identity, MEM_PATH, NULL) ||
		    identity.diff != diff ||
		    snapshot_memory_verify(h->fd, &identity, MEM_PATH, NULL) != 0)
			return -1;
	}
	return 0;
}

/* Created once: per-input setup would dominate the run. */
static struct harness *harness_get(void)
{
	static struct harness h;
	static int state; /* 0 new, 1 ready, -1 failed */

	if (state)
		return state > 0 ? &h : NULL;
	state = -1;
	h.fd = memfd_create("fuzz-memory-file", MFD_CLOEXEC);
	if (h.fd < 0 || guest_memory_create(&h.mem, GUEST_BYTES, NULL) || write_templates(&h) ||
	    h.diff.tail_len != BITMAP_BYTES + TRAILER || h.full.tail_len != TRAILER ||
	    check_templates(&h))
		return NULL;
	state = 1;
	return &h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct harness *h = harness_get();

	if (!h)
		abort(); /* the host, not the input: no run would mean anything */
	if (size < CONTROL_BYTES)
		return 0;
	uint8_t flags = data[0];
	const struct memory_template *t = flags & FLAG_DIFF ? &h->diff : &h->full;
	uint64_t len = GUEST_BYTES + t->tail_len;
	if (flags & FLAG_RESIZE)
		len = le_load(data + 1, 4) % (MAX_FILE + 1);
	write_file(h, t, flags, len, data + CONTROL_BYTES, size - CONTROL_BYTES);
	check_file(h, len, flags & FLAG_VERIFY);
	return 0;
}
