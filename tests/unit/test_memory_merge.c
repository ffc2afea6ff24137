/* Merging memory files (mote.h: mote_memory_merge) and `mote merge-memory`'s options
 * (vmm/cli_merge.h): a full file and its diffs become one full file of the last diff's
 * snapshot holding the memory they restore to; anything that is not such a chain, or
 * is damaged, is refused and nothing is written. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "vmm/cli_merge.h"
#include "vmm/cli_options.h"
#include "vmm/mote.h"
#include "vmm/snapshot_memory.h"

#define MIB (1024ULL * 1024ULL)
#define GUEST_BYTES (16 * MIB)

/* A guest, its snapshots in a directory of their own: full.mem, then d1.mem and d2.mem,
 * each a diff on the one before; after[i] is the guest's memory when file i was
 * written. */
struct fixture {
	char dir[64];
	char paths[3][96];
	struct snapshot_memory_identity ids[3];
	uint8_t *after[3];
	struct guest_memory mem;
	char last_error[512];
};

static void remember_error(void *opaque, enum mote_log_level level, const char *message)
{
	struct fixture *f = opaque;

	if (level == MOTE_LOG_ERROR)
		snprintf(f->last_error, sizeof(f->last_error), "%s", message);
}

static void set_page(struct fixture *f, uint64_t page, uint8_t value)
{
	memset(f->mem.base + page * GUEST_PAGE_SIZE, value, GUEST_PAGE_SIZE);
}

static void write_snapshot(struct fixture *f, unsigned i, const uint64_t *dirty)
{
	int fd = open(f->paths[i], O_RDWR | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	f->ids[i] = (struct snapshot_memory_identity){0};
	if (i > 0)
		memcpy(f->ids[i].base_id, f->ids[i - 1].id, SNAPSHOT_ID_SIZE);
	assert_int_equal(snapshot_memory_new_id(f->ids[i].id), 0);
	assert_int_equal(snapshot_memory_write(&f->mem, dirty, fd, &f->ids[i], f->paths[i], NULL),
			 0);
	close(fd);
	f->after[i] = malloc(GUEST_BYTES);
	assert_non_null(f->after[i]);
	memcpy(f->after[i], f->mem.base, GUEST_BYTES);
}

static void mark(uint64_t *dirty, uint64_t page)
{
	dirty[page / 64] |= 1ULL << (page % 64);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	size_t words = GUEST_BYTES / GUEST_PAGE_SIZE / 64;
	uint64_t *dirty = calloc(words, sizeof(uint64_t));
	const char *names[] = {"full.mem", "d1.mem", "d2.mem"};

	strcpy(f->dir, "/tmp/mote-merge-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	for (unsigned i = 0; i < 3; i++)
		snprintf(f->paths[i], sizeof(f->paths[i]), "%s/%s", f->dir, names[i]);
	assert_int_equal(guest_memory_create(&f->mem, GUEST_BYTES, NULL), 0);
	set_page(f, 0, 0x11);
	set_page(f, 300, 0x5a);
	set_page(f, 4095, 0x7f);
	write_snapshot(f, 0, NULL);
	/* d1: page 300 zeroed (it must end up zero, not the full file's 0x5a), page 7 new. */
	set_page(f, 300, 0);
	set_page(f, 7, 0x33);
	mark(dirty, 300);
	mark(dirty, 7);
	write_snapshot(f, 1, dirty);
	/* d2: page 7 written again, page 2000 new. */
	memset(dirty, 0, words * sizeof(uint64_t));
	set_page(f, 7, 0x44);
	set_page(f, 2000, 0x99);
	mark(dirty, 7);
	mark(dirty, 2000);
	write_snapshot(f, 2, dirty);
	free(dirty);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	DIR *dir = opendir(f->dir);
	struct dirent *entry;
	char path[384];

	while (dir && (entry = readdir(dir)) != NULL) {
		if (entry->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", f->dir, entry->d_name);
		unlink(path);
	}
	if (dir)
		closedir(dir);
	rmdir(f->dir);
	for (unsigned i = 0; i < 3; i++)
		free(f->after[i]);
	guest_memory_destroy(&f->mem);
	free(f);
	return 0;
}

static int merge(struct fixture *f, const char *mem, const char *const *diffs, unsigned count,
		 const char *out)
{
	struct mote_memory_merge_params params = {
	    .mem_path = mem,
	    .diff_paths = diffs,
	    .diff_count = count,
	    .out_path = out,
	    .log = remember_error,
	    .log_opaque = f,
	};

	f->last_error[0] = '\0';
	return mote_memory_merge(&params);
}

static unsigned files_in(const struct fixture *f)
{
	DIR *dir = opendir(f->dir);
	struct dirent *entry;
	unsigned count = 0;

	assert_non_null(dir);
	while ((entry = readdir(dir)) != NULL)
		count += entry->d_name[0] != '.';
	closedir(dir);
	return count;
}

static mode_t mode_of(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return st.st_mode & 07777;
}

/* What the umask leaves of 0666: the mode of a new file. */
static mode_t new_file_mode(void)
{
	mode_t mask = umask(0);

	umask(mask);
	return 0666 & ~mask;
}

/* The merged file is a full file of the given snapshot that verifies and holds memory:
 * a restore of that snapshot from it alone gives the guest's memory then. */
static void assert_full_file_of(const char *path, const struct snapshot_memory_identity *of,
				const uint8_t *memory)
{
	struct snapshot_memory_identity read;
	int fd = open(path, O_RDONLY);
	struct stat st;

	assert_true(fd >= 0);
	assert_int_equal(snapshot_memory_read_identity(fd, GUEST_BYTES, &read, path, NULL), 0);
	assert_false(read.diff);
	assert_memory_equal(read.id, of->id, SNAPSHOT_ID_SIZE);
	static const uint8_t zeros[SNAPSHOT_ID_SIZE];
	assert_memory_equal(read.base_id, zeros, SNAPSHOT_ID_SIZE);
	assert_int_equal(snapshot_memory_verify(fd, &read, path, NULL), 0);
	uint8_t *content = malloc(GUEST_BYTES);
	assert_int_equal(pread(fd, content, GUEST_BYTES, 0), GUEST_BYTES);
	assert_memory_equal(content, memory, GUEST_BYTES);
	free(content);
	/* Still sparse: a handful of pages, not the guest's size. */
	assert_int_equal(fstat(fd, &st), 0);
	assert_true((uint64_t)st.st_blocks * 512 < GUEST_BYTES / 4);
	close(fd);
}

static void a_full_file_and_its_diffs_merge_into_the_last_snapshots_full_file(void **state)
{
	struct fixture *f = *state;
	const char *diffs[] = {f->paths[1], f->paths[2]};
	char out[128];

	snprintf(out, sizeof(out), "%s/merged.mem", f->dir);
	assert_int_equal(merge(f, f->paths[0], diffs, 2, out), 0);
	assert_full_file_of(out, &f->ids[2], f->after[2]);
	assert_int_equal(mode_of(out), new_file_mode());
	/* The inputs are untouched and nothing else is left behind. */
	assert_full_file_of(f->paths[0], &f->ids[0], f->after[0]);
	assert_int_equal(files_in(f), 4);
}

/* Merging in steps gives the file of merging at once: the merged file of d1's snapshot
 * is the base d2 applies on. */
static void merging_in_steps_chains(void **state)
{
	struct fixture *f = *state;
	char step[128], out[128];

	snprintf(step, sizeof(step), "%s/step.mem", f->dir);
	snprintf(out, sizeof(out), "%s/merged.mem", f->dir);
	assert_int_equal(merge(f, f->paths[0], (const char *[]){f->paths[1]}, 1, step), 0);
	assert_full_file_of(step, &f->ids[1], f->after[1]);
	assert_int_equal(merge(f, step, (const char *[]){f->paths[2]}, 1, out), 0);
	assert_full_file_of(out, &f->ids[2], f->after[2]);
}

/* The output may be the full file itself: it is replaced whole, and whoever has the old
 * file open (a VM that maps it) still reads the old memory. */
static void merging_over_the_full_file_replaces_it_whole(void **state)
{
	struct fixture *f = *state;
	const char *diffs[] = {f->paths[1], f->paths[2]};
	int old = open(f->paths[0], O_RDONLY);
	uint8_t page[GUEST_PAGE_SIZE];

	assert_true(old >= 0);
	assert_int_equal(merge(f, f->paths[0], diffs, 2, f->paths[0]), 0);
	assert_full_file_of(f->paths[0], &f->ids[2], f->after[2]);
	assert_int_equal(pread(old, page, sizeof(page), 300 * GUEST_PAGE_SIZE), sizeof(page));
	assert_memory_equal(page, f->after[0] + 300 * GUEST_PAGE_SIZE, sizeof(page));
	close(old);
	assert_int_equal(files_in(f), 3);
}

/* Guest memory may hold secrets: a merge over a private file keeps it private, and the
 * output may be any input, the last diff included. */
static void a_merge_over_an_input_keeps_its_permissions(void **state)
{
	struct fixture *f = *state;
	const char *diffs[] = {f->paths[1], f->paths[2]};

	assert_int_equal(chmod(f->paths[0], 0600), 0);
	assert_int_equal(merge(f, f->paths[0], diffs, 2, f->paths[0]), 0);
	assert_full_file_of(f->paths[0], &f->ids[2], f->after[2]);
	assert_int_equal(mode_of(f->paths[0]), 0600);
	assert_int_equal(files_in(f), 3);
}

/* Into the last diff's own name: it is read whole before it is replaced. */
static void a_merge_may_replace_the_last_diff(void **state)
{
	struct fixture *f = *state;
	const char *diffs[] = {f->paths[1], f->paths[2]};

	assert_int_equal(chmod(f->paths[2], 0640), 0);
	assert_int_equal(merge(f, f->paths[0], diffs, 2, f->paths[2]), 0);
	assert_full_file_of(f->paths[2], &f->ids[2], f->after[2]);
	assert_int_equal(mode_of(f->paths[2]), 0640);
	assert_int_equal(files_in(f), 3);
}

static void flip_byte(const char *path, uint64_t offset)
{
	int fd = open(path, O_RDWR);
	uint8_t byte;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &byte, 1, (off_t)offset), 1);
	byte ^= 0x01;
	assert_int_equal(pwrite(fd, &byte, 1, (off_t)offset), 1);
	close(fd);
}

/* Refused with -EINVAL and a message containing what, and no file written. */
static void assert_refused(struct fixture *f, const char *mem, const char *const *diffs,
			   unsigned count, const char *what)
{
	char out[128];

	snprintf(out, sizeof(out), "%s/merged.mem", f->dir);
	unsigned before = files_in(f);
	assert_int_equal(merge(f, mem, diffs, count, out), -EINVAL);
	assert_non_null(strstr(f->last_error, what));
	assert_int_equal(files_in(f), before);
}

static void anything_but_the_chain_in_order_is_refused(void **state)
{
	struct fixture *f = *state;

	assert_refused(f, f->paths[0], (const char *[]){f->paths[2], f->paths[1]}, 2,
		       "does not apply on");
	assert_refused(f, f->paths[0], (const char *[]){f->paths[2]}, 1, "does not apply on");
	assert_refused(f, f->paths[1], (const char *[]){f->paths[2]}, 1, "is a diff");
	assert_refused(f, f->paths[0], (const char *[]){f->paths[0]}, 1, "is a full memory file");
	assert_refused(f, f->paths[0], (const char *[]){f->paths[1]}, 0, "required");
}

/* A damaged input would be laundered into a file with a fresh, matching checksum: each
 * input's content is checked first. */
static void a_damaged_input_is_refused(void **state)
{
	struct fixture *f = *state;
	const char *diffs[] = {f->paths[1], f->paths[2]};

	flip_byte(f->paths[0], 300 * GUEST_PAGE_SIZE + 5);
	assert_refused(f, f->paths[0], diffs, 2, "does not match its checksum");
	flip_byte(f->paths[0], 300 * GUEST_PAGE_SIZE + 5);
	flip_byte(f->paths[2], 2000 * GUEST_PAGE_SIZE);
	assert_refused(f, f->paths[0], diffs, 2, "does not match its checksum");
	flip_byte(f->paths[2], 2000 * GUEST_PAGE_SIZE);
	/* A file that is no memory file at all (a state file given by mistake). */
	int fd = open(f->paths[1], O_WRONLY | O_TRUNC);
	assert_int_equal(write(fd, "MOTESNAP", 8), 8);
	close(fd);
	assert_refused(f, f->paths[0], diffs, 2, f->paths[1]);
	assert_refused(f, f->paths[1], diffs + 1, 1, "not a mote memory file");
}

static void host_errors_are_reported(void **state)
{
	struct fixture *f = *state;
	const char *diffs[] = {f->paths[1]};
	char missing[128], nowhere[128];

	snprintf(missing, sizeof(missing), "%s/missing.mem", f->dir);
	snprintf(nowhere, sizeof(nowhere), "%s/no/such/dir.mem", f->dir);
	assert_int_equal(merge(f, missing, diffs, 1, f->paths[2]), -ENOENT);
	assert_int_equal(merge(f, f->paths[0], (const char *[]){missing}, 1, f->paths[2]), -ENOENT);
	assert_int_equal(merge(f, f->paths[0], diffs, 1, nowhere), -ENOENT);
	assert_int_equal(files_in(f), 3);
	/* d2 was not touched by the failed merges into its name. */
	assert_full_file_of(f->paths[0], &f->ids[0], f->after[0]);
	struct snapshot_memory_identity read;
	int fd = open(f->paths[2], O_RDONLY);
	assert_int_equal(snapshot_memory_read_identity(fd, GUEST_BYTES, &read, "d2", NULL), 0);
	assert_true(read.diff);
	close(fd);
}

static int parse(struct cli_merge_options *opts, char *error, int argc, const char **argv)
{
	return cli_merge_parse(opts, argc, (char **)argv, error, CLI_ERROR_MAX);
}

static void the_command_line_names_the_files(void **state)
{
	(void)state;
	struct cli_merge_options opts;
	char error[CLI_ERROR_MAX];

	const char *good[] = {"merge-memory", "--mem", "full",	"--mem-diff", "d1",
			      "--mem-diff",   "d2",    "--out", "m",	      "--quiet"};
	assert_int_equal(parse(&opts, error, 10, good), 0);
	assert_string_equal(opts.mem_path, "full");
	assert_int_equal(opts.diff_count, 2);
	assert_string_equal(opts.diff_paths[0], "d1");
	assert_string_equal(opts.diff_paths[1], "d2");
	assert_string_equal(opts.out_path, "m");
	assert_true(opts.quiet);
	cli_merge_options_free(&opts);

	const char *no_diff[] = {"merge-memory", "--mem", "full", "--out", "m"};
	assert_int_equal(parse(&opts, error, 5, no_diff), -EINVAL);
	assert_non_null(strstr(error, "--mem-diff"));
	cli_merge_options_free(&opts);
	const char *no_out[] = {"merge-memory", "--mem", "full", "--mem-diff", "d1"};
	assert_int_equal(parse(&opts, error, 5, no_out), -EINVAL);
	cli_merge_options_free(&opts);
	const char *stray[] = {"merge-memory", "--mem", "f", "--mem-diff", "d", "--out", "m", "x"};
	assert_int_equal(parse(&opts, error, 8, stray), -EINVAL);
	assert_non_null(strstr(error, "unexpected argument x"));
	cli_merge_options_free(&opts);
	/* A second --mem or --out is a slip that would drop a file, not a choice. */
	const char *two_mems[] = {"merge-memory", "--mem", "f",	    "--mem", "g",
				  "--mem-diff",	  "d",	   "--out", "m"};
	assert_int_equal(parse(&opts, error, 9, two_mems), -EINVAL);
	assert_non_null(strstr(error, "--mem given twice"));
	cli_merge_options_free(&opts);
	const char *two_outs[] = {"merge-memory", "--mem", "f",	    "--mem-diff", "d",
				  "--out",	  "m",	   "--out", "n"};
	assert_int_equal(parse(&opts, error, 9, two_outs), -EINVAL);
	assert_non_null(strstr(error, "--out given twice"));
	cli_merge_options_free(&opts);
	const char *unknown[] = {"merge-memory", "--diff", "d"};
	assert_int_equal(parse(&opts, error, 3, unknown), -EINVAL);
	assert_non_null(strstr(error, "--diff"));
	cli_merge_options_free(&opts);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(a_full_file_and_its_diffs_merge_into_the_last_snapshots_full_file),
	    TEST(merging_in_steps_chains),
	    TEST(merging_over_the_full_file_replaces_it_whole),
	    TEST(a_merge_over_an_input_keeps_its_permissions),
	    TEST(a_merge_may_replace_the_last_diff),
	    TEST(anything_but_the_chain_in_order_is_refused),
	    TEST(a_damaged_input_is_refused),
	    TEST(host_errors_are_reported),
	    cmocka_unit_test(the_command_line_names_the_files),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
