/* Memory files of snapshots (vmm/snapshot_memory.h): what a snapshot writes reads back
 * with its identity, a changed page, bitmap bit or trailer is found, and whether zero
 * pages are holes or not changes nothing, in a full file or a diff. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "vmm/snapshot_memory.h"

#define MIB (1024ULL * 1024ULL)
#define GUEST_BYTES (16 * MIB)

struct fixture {
	struct guest_memory mem;
	int fd;
};

static int temp_file(void)
{
	char path[] = "/tmp/mote-snapmem-XXXXXX";
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	unlink(path);
	return fd;
}

/* A guest with a few pages of content: pages 0, 1 and 300, and the last one. */
static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	assert_int_equal(guest_memory_create(&f->mem, GUEST_BYTES, NULL), 0);
	memset(f->mem.base, 0x11, 2 * GUEST_PAGE_SIZE);
	memset(f->mem.base + 300 * GUEST_PAGE_SIZE, 0x5a, GUEST_PAGE_SIZE);
	f->mem.base[GUEST_BYTES - 1] = 0x7f;
	f->fd = temp_file();
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	guest_memory_destroy(&f->mem);
	close(f->fd);
	free(f);
	return 0;
}

static void write_full(struct fixture *f, struct snapshot_memory_identity *written)
{
	*written = (struct snapshot_memory_identity){0};
	assert_int_equal(snapshot_memory_new_id(written->id), 0);
	assert_int_equal(snapshot_memory_write(&f->mem, NULL, f->fd, written, "full.mem", NULL), 0);
}

static void flip_byte(int fd, uint64_t offset)
{
	uint8_t byte;

	assert_int_equal(pread(fd, &byte, 1, (off_t)offset), 1);
	byte ^= 0x01;
	assert_int_equal(pwrite(fd, &byte, 1, (off_t)offset), 1);
}

static void a_full_file_holds_the_guest_then_its_identity_and_verifies(void **state)
{
	struct fixture *f = *state;
	struct snapshot_memory_identity written, read;
	struct stat st;

	write_full(f, &written);
	assert_int_equal(fstat(f->fd, &st), 0);
	assert_int_equal(st.st_size, GUEST_BYTES + SNAPSHOT_MEMORY_TRAILER_SIZE);
	/* The guest's bytes at their own offsets: a restore maps the file as it is. */
	uint8_t page[GUEST_PAGE_SIZE];
	assert_int_equal(pread(f->fd, page, sizeof(page), 300 * GUEST_PAGE_SIZE), sizeof(page));
	assert_memory_equal(page, f->mem.base + 300 * GUEST_PAGE_SIZE, sizeof(page));
	/* Zero pages are holes: far fewer blocks than the guest's size. */
	assert_true((uint64_t)st.st_blocks * 512 < GUEST_BYTES / 4);

	assert_int_equal(snapshot_memory_read_identity(f->fd, GUEST_BYTES, &read, "full.mem", NULL),
			 0);
	assert_false(read.diff);
	assert_memory_equal(read.id, written.id, SNAPSHOT_ID_SIZE);
	assert_int_equal(read.guest_bytes, GUEST_BYTES);
	assert_int_equal(read.content_checksum, written.content_checksum);
	assert_int_equal(snapshot_memory_verify(f->fd, &read, "full.mem", NULL), 0);
}

static void two_snapshots_get_different_ids(void **state)
{
	struct fixture *f = *state;
	struct snapshot_memory_identity first, second;

	write_full(f, &first);
	assert_int_equal(ftruncate(f->fd, 0), 0);
	write_full(f, &second);
	assert_memory_not_equal(first.id, second.id, SNAPSHOT_ID_SIZE);
	/* The same memory: the same checksum. */
	assert_int_equal(first.content_checksum, second.content_checksum);
}

/* One bit changed anywhere in the guest's bytes, in a page that held data or in a
 * hole, is found by the verification; the identity alone still reads. */
static void a_changed_page_fails_verification(void **state)
{
	struct fixture *f = *state;
	struct snapshot_memory_identity written, read;
	const uint64_t offsets[] = {300 * GUEST_PAGE_SIZE + 17, 5 * MIB, GUEST_BYTES - 1, 0};

	write_full(f, &written);
	for (unsigned i = 0; i < sizeof(offsets) / sizeof(offsets[0]); i++) {
		flip_byte(f->fd, offsets[i]);
		assert_int_equal(
		    snapshot_memory_read_identity(f->fd, GUEST_BYTES, &read, "full.mem", NULL), 0);
		assert_int_equal(snapshot_memory_verify(f->fd, &read, "full.mem", NULL), -EINVAL);
		flip_byte(f->fd, offsets[i]); /* back */
		assert_int_equal(snapshot_memory_verify(f->fd, &read, "full.mem", NULL), 0);
	}
}

/* A copy with every hole filled in (cp without --sparse on some file systems, a
 * download) holds the same memory, and verifies. */
static void a_copy_with_its_holes_filled_verifies(void **state)
{
	struct fixture *f = *state;
	struct snapshot_memory_identity written, read;
	uint8_t *whole = malloc(GUEST_BYTES + SNAPSHOT_MEMORY_TRAILER_SIZE);
	int dense = temp_file();

	write_full(f, &written);
	assert_non_null(whole);
	assert_int_equal(pread(f->fd, whole, GUEST_BYTES + SNAPSHOT_MEMORY_TRAILER_SIZE, 0),
			 GUEST_BYTES + SNAPSHOT_MEMORY_TRAILER_SIZE);
	assert_int_equal(pwrite(dense, whole, GUEST_BYTES + SNAPSHOT_MEMORY_TRAILER_SIZE, 0),
			 GUEST_BYTES + SNAPSHOT_MEMORY_TRAILER_SIZE);
	struct stat st;
	assert_int_equal(fstat(dense, &st), 0);
	assert_true((uint64_t)st.st_blocks * 512 >= GUEST_BYTES);
	assert_int_equal(
	    snapshot_memory_read_identity(dense, GUEST_BYTES, &read, "dense.mem", NULL), 0);
	assert_int_equal(snapshot_memory_verify(dense, &read, "dense.mem", NULL), 0);
	free(whole);
	close(dense);
}

static void a_damaged_trailer_or_a_file_of_another_size_is_refused(void **state)
{
	struct fixture *f = *state;
	struct snapshot_memory_identity written, read;

	write_full(f, &written);
	/* The id, then the checksum field, then the reserved zeros after the CRC. */
	const uint64_t trailer_bytes[] = {24, 60, 100};
	for (unsigned i = 0; i < 3; i++) {
		flip_byte(f->fd, GUEST_BYTES + trailer_bytes[i]);
		assert_int_equal(
		    snapshot_memory_read_identity(f->fd, GUEST_BYTES, &read, "full.mem", NULL),
		    -EINVAL);
		flip_byte(f->fd, GUEST_BYTES + trailer_bytes[i]);
	}
	/* Read as another guest size: refused on the size. */
	assert_int_equal(
	    snapshot_memory_read_identity(f->fd, GUEST_BYTES - 2 * MIB, &read, "full.mem", NULL),
	    -EINVAL);
	/* Without its trailer (a memory file as an older mote wrote it). */
	assert_int_equal(ftruncate(f->fd, GUEST_BYTES), 0);
	assert_int_equal(snapshot_memory_read_identity(f->fd, GUEST_BYTES, &read, "full.mem", NULL),
			 -EINVAL);
}

/* The guest after a full snapshot: page 300 zeroed, page 7 written; a diff of those
 * two pages into diff_fd, applying on full. */
static void write_diff(struct fixture *f, const struct snapshot_memory_identity *full, int diff_fd,
		       struct snapshot_memory_identity *diff)
{
	size_t words = (snapshot_memory_pages(&f->mem) + 63) / 64;
	uint64_t *dirty = calloc(words, sizeof(uint64_t));

	memset(f->mem.base + 300 * GUEST_PAGE_SIZE, 0, GUEST_PAGE_SIZE);
	memset(f->mem.base + 7 * GUEST_PAGE_SIZE, 0x33, GUEST_PAGE_SIZE);
	dirty[300 / 64] |= 1ULL << (300 % 64);
	dirty[0] |= 1ULL << 7;
	*diff = (struct snapshot_memory_identity){.diff = true};
	memcpy(diff->base_id, full->id, SNAPSHOT_ID_SIZE);
	assert_int_equal(snapshot_memory_new_id(diff->id), 0);
	assert_int_equal(snapshot_memory_write(&f->mem, dirty, diff_fd, diff, "d.mem", NULL), 0);
	free(dirty);
}

/* The full file's memory with the diff laid over it equals the guest's memory now. */
static void assert_diff_restores_the_guest(struct fixture *f, int diff_fd)
{
	struct snapshot_memory_identity read;
	struct guest_memory older;

	assert_int_equal(snapshot_memory_read_identity(diff_fd, GUEST_BYTES, &read, "d.mem", NULL),
			 0);
	assert_int_equal(snapshot_memory_verify(diff_fd, &read, "d.mem", NULL), 0);
	assert_int_equal(guest_memory_create(&older, GUEST_BYTES, NULL), 0);
	assert_int_equal(pread(f->fd, older.base, GUEST_BYTES, 0), GUEST_BYTES);
	assert_int_equal(snapshot_memory_apply_diff(&older, diff_fd, &read, false, "d.mem", NULL),
			 0);
	assert_memory_equal(older.base, f->mem.base, GUEST_BYTES);
	guest_memory_destroy(&older);
}

/* A diff holds exactly the pages of its bitmap, a page the guest zeroed included, names
 * the snapshot it applies on, and laid over the older memory gives the newer one. */
static void a_diff_holds_its_pages_names_its_base_and_applies(void **state)
{
	struct fixture *f = *state;
	struct snapshot_memory_identity full, diff, read;
	int diff_fd = temp_file();

	write_full(f, &full);
	write_diff(f, &full, diff_fd, &diff);
	assert_int_equal(snapshot_memory_read_identity(diff_fd, GUEST_BYTES, &read, "d.mem", NULL),
			 0);
	assert_true(read.diff);
	assert_memory_equal(read.base_id, full.id, SNAPSHOT_ID_SIZE);
	assert_memory_equal(read.id, diff.id, SNAPSHOT_ID_SIZE);
	assert_diff_restores_the_guest(f, diff_fd);
	/* Applied with verify, a changed page is found in what was copied. */
	struct guest_memory older;
	assert_int_equal(guest_memory_create(&older, GUEST_BYTES, NULL), 0);
	assert_int_equal(snapshot_memory_apply_diff(&older, diff_fd, &read, true, "d.mem", NULL),
			 0);
	flip_byte(diff_fd, 7 * GUEST_PAGE_SIZE + 100);
	assert_int_equal(snapshot_memory_apply_diff(&older, diff_fd, &read, true, "d.mem", NULL),
			 -EINVAL);
	guest_memory_destroy(&older);
	close(diff_fd);
}

/* Which pages a diff holds is its bitmap's to say, not its holes': a copy with every
 * hole filled in must not zero the pages it does not hold, and a zeroed page turned
 * into a hole must still zero the older page. */
static void a_diff_means_the_same_with_its_holes_filled_or_dug(void **state)
{
	struct fixture *f = *state;
	struct snapshot_memory_identity full, diff;
	int diff_fd = temp_file();

	write_full(f, &full);
	write_diff(f, &full, diff_fd, &diff);
	struct stat st;
	assert_int_equal(fstat(diff_fd, &st), 0);
	uint8_t *whole = malloc((size_t)st.st_size);
	assert_int_equal(pread(diff_fd, whole, (size_t)st.st_size, 0), st.st_size);

	int dense = temp_file();
	assert_int_equal(pwrite(dense, whole, (size_t)st.st_size, 0), st.st_size);
	assert_diff_restores_the_guest(f, dense);
	close(dense);

	int dug = temp_file();
	assert_int_equal(pwrite(dug, whole, (size_t)st.st_size, 0), st.st_size);
	assert_int_equal(fallocate(dug, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				   300 * GUEST_PAGE_SIZE, GUEST_PAGE_SIZE),
			 0);
	assert_diff_restores_the_guest(f, dug);
	close(dug);
	free(whole);
	close(diff_fd);
}

/* A bit changed in a diff's bitmap adds or drops a page: verification finds it, and a
 * bit past the guest's pages is refused before any page is copied. */
static void a_changed_diff_bitmap_is_found(void **state)
{
	struct fixture *f = *state;
	struct snapshot_memory_identity full, diff, read;
	int diff_fd = temp_file();
	struct guest_memory older;

	write_full(f, &full);
	write_diff(f, &full, diff_fd, &diff);
	assert_int_equal(snapshot_memory_read_identity(diff_fd, GUEST_BYTES, &read, "d.mem", NULL),
			 0);
	uint64_t pages = GUEST_BYTES / GUEST_PAGE_SIZE;
	flip_byte(diff_fd, GUEST_BYTES + 9 / 8); /* page 8's bit: a page not in the diff */
	assert_int_equal(snapshot_memory_verify(diff_fd, &read, "d.mem", NULL), -EINVAL);
	flip_byte(diff_fd, GUEST_BYTES + 9 / 8);
	assert_int_equal(snapshot_memory_verify(diff_fd, &read, "d.mem", NULL), 0);
	flip_byte(diff_fd, GUEST_BYTES + pages / 8); /* the first bit past the last page */
	assert_int_equal(guest_memory_create(&older, GUEST_BYTES, NULL), 0);
	assert_int_equal(snapshot_memory_apply_diff(&older, diff_fd, &read, false, "d.mem", NULL),
			 -EINVAL);
	assert_int_equal(snapshot_memory_verify(diff_fd, &read, "d.mem", NULL), -EINVAL);
	guest_memory_destroy(&older);
	close(diff_fd);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(a_full_file_holds_the_guest_then_its_identity_and_verifies),
	    TEST(two_snapshots_get_different_ids),
	    TEST(a_changed_page_fails_verification),
	    TEST(a_copy_with_its_holes_filled_verifies),
	    TEST(a_damaged_trailer_or_a_file_of_another_size_is_refused),
	    TEST(a_diff_holds_its_pages_names_its_base_and_applies),
	    TEST(a_diff_means_the_same_with_its_holes_filled_or_dug),
	    TEST(a_changed_diff_bitmap_is_found),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
