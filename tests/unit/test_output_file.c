/* output_file: files that appear whole or not at all, private while written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/output_file.h"

struct fixture {
	char dir[64];
	char path[128];
	char other[128];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	strcpy(f->dir, "/tmp/mote-output-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/mem", f->dir);
	snprintf(f->other, sizeof(f->other), "%s/state", f->dir);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char command[128];

	snprintf(command, sizeof(command), "rm -rf %s", f->dir);
	if (system(command) != 0)
		return -1;
	free(f);
	return 0;
}

static void write_file(const char *path, const char *text, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
}

static void assert_file_holds(const char *path, const char *text)
{
	char buf[64] = {0};
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(read(fd, buf, sizeof(buf) - 1), (ssize_t)strlen(text));
	close(fd);
	assert_string_equal(buf, text);
}

static mode_t mode_of(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return st.st_mode & 07777;
}

static void writes(struct output_file *out, const char *text)
{
	assert_int_equal(write(out->fd, text, strlen(text)), (ssize_t)strlen(text));
}

/* Whoever opens the temporary file while guest RAM is written to it must not be able
 * to: it is the owner's alone until finished, whatever the umask. */
static void the_file_is_private_while_written(void **state)
{
	struct fixture *f = *state;
	struct output_file out;
	struct stat st;

	mode_t old_mask = umask(022);
	assert_int_equal(output_file_open(&out, f->path, NULL), 0);
	assert_int_equal(fstat(out.fd, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	writes(&out, "ram");
	assert_int_equal(output_file_commit(&out, NULL), 0);
	/* A new file then gets what the umask leaves of 0666, as any new file. */
	assert_int_equal(mode_of(f->path), 0644);
	assert_file_holds(f->path, "ram");
	umask(old_mask);
}

static void a_replaced_file_keeps_its_permissions(void **state)
{
	struct fixture *f = *state;
	struct output_file out;

	write_file(f->path, "old", 0640);
	assert_int_equal(output_file_open(&out, f->path, NULL), 0);
	writes(&out, "new");
	assert_int_equal(output_file_commit(&out, NULL), 0);
	assert_int_equal(mode_of(f->path), 0640);
	assert_file_holds(f->path, "new");
}

/* Two files written together (a snapshot's memory and state): both finished before
 * either is renamed, so that when the second cannot be finished both old files stay. */
static void finishing_renames_nothing_and_abandoning_leaves_the_old_files(void **state)
{
	struct fixture *f = *state;
	struct output_file memory, state_file;

	write_file(f->path, "old memory", 0600);
	write_file(f->other, "old state", 0600);
	assert_int_equal(output_file_open(&memory, f->path, NULL), 0);
	assert_int_equal(output_file_open(&state_file, f->other, NULL), 0);
	writes(&memory, "new memory");
	writes(&state_file, "new state");
	assert_int_equal(output_file_finish(&memory, NULL), 0);
	assert_int_equal(memory.fd, -1);
	assert_file_holds(f->path, "old memory");
	char finished[sizeof(memory.temp)];
	strcpy(finished, memory.temp);
	assert_int_equal(access(finished, F_OK), 0);
	/* The second file fails (here: it is abandoned): the first is not renamed. */
	output_file_abandon(&state_file);
	output_file_abandon(&memory);
	assert_file_holds(f->path, "old memory");
	assert_file_holds(f->other, "old state");
	assert_int_equal(access(finished, F_OK), -1);

	/* Both finished, then both renamed; a file not finished is never renamed. */
	assert_int_equal(output_file_open(&memory, f->path, NULL), 0);
	assert_int_equal(output_file_open(&state_file, f->other, NULL), 0);
	writes(&memory, "new memory");
	writes(&state_file, "new state");
	assert_int_equal(output_file_rename(&memory, NULL), -EBADF);
	assert_file_holds(f->path, "old memory");
	assert_int_equal(output_file_finish(&memory, NULL), 0);
	assert_int_equal(output_file_finish(&memory, NULL), -EBADF); /* once */
	assert_int_equal(output_file_finish(&state_file, NULL), 0);
	assert_int_equal(output_file_rename(&memory, NULL), 0);
	assert_int_equal(output_file_rename(&state_file, NULL), 0);
	assert_int_equal(output_file_sync_directory(f->path), 0);
	assert_file_holds(f->path, "new memory");
	assert_file_holds(f->other, "new state");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(the_file_is_private_while_written, setup, teardown),
	    cmocka_unit_test_setup_teardown(a_replaced_file_keeps_its_permissions, setup, teardown),
	    cmocka_unit_test_setup_teardown(
		finishing_renames_nothing_and_abandoning_leaves_the_old_files, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
