/* A VM's overlay disks at snapshot time (vm_devices_freeze_disks) and in its setup
 * record (vm_setup.h): where each layer goes and how it is named, what the setup
 * records, a chain of layers that is full, and a state file's setup read back. No KVM:
 * the VM has guest memory, an event loop and its disks, nothing else. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
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

#include "vmm/vm.h"
#include "vmm/vm_devices.h"

#define CLUSTER 4096
#define IMAGE_BYTES (16 * CLUSTER)

struct world {
	struct mote_vm *vm;
	char dir[64];
	char image[128];
	char overlay[128];
	char name[400]; /* name_in_dir()'s result */
	char old_cwd[PATH_MAX];
};

static const char *name_in_dir(struct world *w, const char *name)
{
	snprintf(w->name, sizeof(w->name), "%s/%s", w->dir, name);
	return w->name;
}

static void write_file(const char *path, uint8_t fill, uint64_t offset, size_t len, off_t size)
{
	uint8_t buf[CLUSTER];
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, size), 0);
	memset(buf, fill, sizeof(buf));
	for (size_t done = 0; done < len; done += sizeof(buf))
		assert_int_equal(pwrite(fd, buf, sizeof(buf), (off_t)(offset + done)), sizeof(buf));
	close(fd);
}

/* Whether path is a file whose cluster c is data holding fill. */
static bool cluster_holds(const char *path, unsigned c, uint8_t fill)
{
	uint8_t buf[CLUSTER];
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return false;
	bool data = lseek(fd, (off_t)c * CLUSTER, SEEK_DATA) == (off_t)c * CLUSTER;
	bool read = pread(fd, buf, CLUSTER, (off_t)c * CLUSTER) == CLUSTER;
	close(fd);
	for (unsigned i = 0; data && read && i < CLUSTER; i++) {
		if (buf[i] != fill)
			return false;
	}
	return data && read;
}

static bool exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/* Disk vda: the image read-only; disk vdb: the image under an overlay holding cluster 3
 * from before (so the first freeze of vdb holds it). */
static int world_setup(void **state)
{
	struct world *w = calloc(1, sizeof(*w));
	struct mote_log log = {0};
	struct mote_config config;

	if (!w || !getcwd(w->old_cwd, sizeof(w->old_cwd)))
		return -1;
	snprintf(w->dir, sizeof(w->dir), "/tmp/mote-layers-XXXXXX");
	if (!mkdtemp(w->dir) || chdir(w->dir) != 0 || !getcwd(w->dir, sizeof(w->dir)))
		return -1;
	snprintf(w->image, sizeof(w->image), "%s/image", w->dir);
	snprintf(w->overlay, sizeof(w->overlay), "%s/overlay", w->dir);
	write_file(w->image, 0x11, 0, IMAGE_BYTES, IMAGE_BYTES);
	write_file(w->overlay, 0x33, 3 * CLUSTER, CLUSTER, IMAGE_BYTES);

	mote_config_init(&config);
	config.disk_count = 2;
	config.disks[0] = (struct mote_disk){.path = w->image, .read_only = true};
	config.disks[1] = (struct mote_disk){.path = w->image, .overlay = w->overlay};
	w->vm = vm_new(&log, 1, 0);
	if (!w->vm || vm_setup_from_config(&w->vm->setup, &config) != 0 ||
	    guest_memory_create(&w->vm->mem, 16 << 20, NULL) != 0 ||
	    event_loop_init(&w->vm->events) != 0)
		return -1;
	for (unsigned i = 0; i < config.disk_count; i++) {
		struct virtio_blk_options options = {.path = config.disks[i].path,
						     .read_only = config.disks[i].read_only,
						     .overlay = config.disks[i].overlay};
		if (virtio_blk_create(&options, &w->vm->mem, &w->vm->events, &w->vm->log,
				      &w->vm->disks[i]) != 0)
			return -1;
		w->vm->disk_count++;
	}
	*state = w;
	return 0;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(path);
}

static int world_teardown(void **state)
{
	struct world *w = *state;

	mote_vm_destroy(w->vm);
	int ret = chdir(w->old_cwd) == 0 ? nftw(w->dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS) : -1;
	free(w);
	return ret == 0 ? 0 : -1;
}

static void layers_are_named_after_the_state_file_and_the_guests_disk(void **state)
{
	struct world *w = *state;
	const struct vm_setup_disk *vdb = &w->vm->setup.disks[1];

	/* A relative state path: the layer is recorded absolute, for restores elsewhere. */
	assert_int_equal(vm_devices_freeze_disks(w->vm, "snap"), 0);
	assert_int_equal(w->vm->setup.disks[0].layer_count, 0);
	assert_int_equal(vdb->layer_count, 1);
	assert_string_equal(vdb->layers[0], name_in_dir(w, "snap.vdb.layer"));
	assert_true(cluster_holds(vdb->layers[0], 3, 0x33));
	assert_false(exists(name_in_dir(w, "snap.vda.layer")));
}

static void a_snapshot_taken_again_at_the_same_path_keeps_the_earlier_layers(void **state)
{
	struct world *w = *state;
	const struct vm_setup_disk *vdb = &w->vm->setup.disks[1];
	char snap[200];

	snprintf(snap, sizeof(snap), "%s/snap", w->dir);
	for (int i = 0; i < 3; i++)
		assert_int_equal(vm_devices_freeze_disks(w->vm, snap), 0);
	assert_int_equal(vdb->layer_count, 3);
	assert_string_equal(vdb->layers[0], name_in_dir(w, "snap.vdb.layer"));
	assert_string_equal(vdb->layers[1], name_in_dir(w, "snap.vdb.layer.2"));
	assert_string_equal(vdb->layers[2], name_in_dir(w, "snap.vdb.layer.3"));
	/* The first still holds what it froze: it was not overwritten by the others. */
	assert_true(cluster_holds(vdb->layers[0], 3, 0x33));
	assert_true(exists(vdb->layers[1]) && exists(vdb->layers[2]));
}

static void a_full_chain_of_layers_starts_over_from_one_whole_layer(void **state)
{
	struct world *w = *state;
	const struct vm_setup_disk *vdb = &w->vm->setup.disks[1];
	char name[32];

	assert_int_equal(vm_devices_freeze_disks(w->vm, "first"), 0);
	while (vdb->layer_count < VM_SETUP_MAX_LAYERS) {
		snprintf(name, sizeof(name), "older-%u", vdb->layer_count);
		vm_setup_put_layer(&w->vm->setup, 1, strdup(name), false);
	}
	/* Nothing written since "first": still, the one layer left holds it all. */
	assert_int_equal(vm_devices_freeze_disks(w->vm, "full"), 0);
	assert_int_equal(vdb->layer_count, 1);
	assert_string_equal(vdb->layers[0], name_in_dir(w, "full.vdb.layer"));
	assert_true(cluster_holds(vdb->layers[0], 3, 0x33));
}

static void a_failed_freeze_records_no_layer(void **state)
{
	struct world *w = *state;

	assert_int_equal(vm_devices_freeze_disks(w->vm, "missing/snap"), -ENOENT);
	assert_int_equal(w->vm->setup.disks[1].layer_count, 0);
	/* What it would have frozen goes into the next one. */
	assert_int_equal(vm_devices_freeze_disks(w->vm, "snap"), 0);
	assert_true(cluster_holds(w->vm->setup.disks[1].layers[0], 3, 0x33));
}

/* Writes setup as a state file would hold it and reads it back into *out. */
static int setup_round_trip(const struct vm_setup *setup, struct vm_setup *out,
			    const char **failure)
{
	struct snap_writer writer;
	struct snap_reader payload;
	char path[] = "/tmp/mote-setup-XXXXXX";
	const char *why = NULL;
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	unlink(path);
	snap_writer_init(&writer);
	vm_setup_save(setup, &writer);
	assert_int_equal(snap_writer_write(&writer, fd), 0);
	snap_writer_free(&writer);
	size_t len = (size_t)lseek(fd, 0, SEEK_END);
	uint8_t *file = malloc(len);
	assert_non_null(file);
	assert_int_equal(pread(fd, file, len, 0), (ssize_t)len);
	close(fd);
	assert_int_equal(snap_reader_open(&payload, file, len, &why), 0);
	vm_setup_load(out, &payload);
	*failure = payload.failure;
	int err = payload.error;
	free(file);
	return err;
}

static void a_state_files_setup_keeps_the_layers_and_marks_a_restore(void **state)
{
	struct world *w = *state;
	struct vm_setup loaded;
	const char *failure;

	assert_int_equal(vm_devices_freeze_disks(w->vm, "s1"), 0);
	assert_int_equal(vm_devices_freeze_disks(w->vm, "s2"), 0);
	assert_false(w->vm->setup.from_snapshot);
	assert_int_equal(setup_round_trip(&w->vm->setup, &loaded, &failure), 0);
	assert_true(loaded.from_snapshot);
	assert_string_equal(loaded.disks[1].overlay, w->overlay);
	assert_int_equal(loaded.disks[1].layer_count, 2);
	assert_string_equal(loaded.disks[1].layers[0], name_in_dir(w, "s1.vdb.layer"));
	assert_string_equal(loaded.disks[1].layers[1], name_in_dir(w, "s2.vdb.layer"));
	assert_int_equal(loaded.disks[0].layer_count, 0);
	vm_setup_free(&loaded);
}

static void a_state_files_layers_without_an_overlay_are_refused(void **state)
{
	struct world *w = *state;
	struct vm_setup loaded;
	const char *failure;

	vm_setup_put_layer(&w->vm->setup, 0, strdup("/some.layer"), false);
	assert_int_not_equal(setup_round_trip(&w->vm->setup, &loaded, &failure), 0);
	assert_non_null(strstr(failure, "without an overlay"));
	vm_setup_free(&loaded);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, world_setup, world_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(layers_are_named_after_the_state_file_and_the_guests_disk),
	    TEST(a_snapshot_taken_again_at_the_same_path_keeps_the_earlier_layers),
	    TEST(a_full_chain_of_layers_starts_over_from_one_whole_layer),
	    TEST(a_failed_freeze_records_no_layer),
	    TEST(a_state_files_setup_keeps_the_layers_and_marks_a_restore),
	    TEST(a_state_files_layers_without_an_overlay_are_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
