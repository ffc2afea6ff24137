/* virtio-blk's copy-on-write overlay (virtio/blk_overlay.h) as the guest and the host see
 * it: writes land in the overlay and the image never changes; what was never written
 * reads from the image, also inside a partly written cluster; freezes write exactly the
 * clusters written since the previous one into sparse layer files; a restore of the
 * image and its layers into a fresh overlay reads back what the guest had; and what
 * opening refuses. The test driver is blk_driver.h; the image is its 1 MiB of
 * pattern(), and each test keeps its overlay and layers in a directory of its own. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "blk_driver.h"
#include "virtio/blk_overlay.h"

#define CLUSTER 4096
#define SECTORS_PER_CLUSTER (CLUSTER / SECTOR)
#define DISK_BYTES (IMAGE_SECTORS * SECTOR)
#define DISK_CLUSTERS (DISK_BYTES / CLUSTER)

/* A test's world: the driver's fixture on the image, the directory of its overlay and
 * layers, and what the guest should read back (the image, then every write). */
struct world {
	struct fixture *f;
	char dir[64];
	char overlay[128];
	uint64_t disk_bytes; /* the guest's view: the image rounded up to sectors */
	uint8_t *model;
	uint64_t image_sum;  /* the image's checksum when the test began */
	char names[16][400]; /* in_dir()'s paths, a few alive at a time */
	unsigned next_name;
};

/* The path of name in the test's directory. */
static const char *in_dir(struct world *w, const char *name)
{
	char *path = w->names[w->next_name++ % 16];

	snprintf(path, sizeof(w->names[0]), "%s/%s", w->dir, name);
	return path;
}

static uint64_t file_checksum(const char *path)
{
	uint8_t buf[4096];
	uint64_t sum = 1469598103934665603ULL; /* FNV-1a */
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	assert_true(fd >= 0);
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < n; i++)
			sum = (sum ^ buf[i]) * 1099511628211ULL;
	}
	assert_int_equal(n, 0);
	close(fd);
	return sum;
}

static uint64_t file_size(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return (uint64_t)st.st_size;
}

/* The driver lays the queue out afresh (after a reattach or when descriptors run out). */
static void fresh_queue(struct fixture *f)
{
	memset(guest(f, AVAIL_ADDR, 6 + 2 * QSIZE), 0, 6 + 2 * QSIZE);
	memset(guest(f, USED_ADDR, 6 + 8 * QSIZE), 0, 6 + 8 * QSIZE);
	f->next_desc = 0;
	f->next_buf = HEAP_ADDR;
}

static void reset_queue(struct fixture *f)
{
	reset_dev(f->dev);
	fresh_queue(f);
	activate(f, f->dev, false);
}

/* Replaces the disk with one on the image and overlay (restore: from these layers, not
 * committed yet). */
static int try_attach_overlay(struct world *w, const char *overlay, bool restore,
			      const char *const *layers, unsigned layer_count)
{
	struct fixture *f = w->f;
	struct virtio_blk_options options = {.path = f->path,
					     .overlay = overlay,
					     .overlay_restore = restore,
					     .layers = layers,
					     .layer_count = layer_count};

	if (f->blk)
		detach(f);
	fresh_queue(f);
	assert_int_equal(event_loop_init(&f->loop), 0);
	int err = virtio_blk_create(&options, &f->mem, &f->loop, &f->log, &f->blk);
	if (err) {
		event_loop_destroy(&f->loop);
		f->blk = NULL;
		return err;
	}
	f->dev = virtio_blk_vdev(f->blk);
	activate(f, f->dev, false);
	return 0;
}

/* As a VM does it: a restore is committed once it all succeeded. */
static void attach_overlay(struct world *w, const char *overlay, bool restore,
			   const char *const *layers, unsigned layer_count)
{
	assert_int_equal(try_attach_overlay(w, overlay, restore, layers, layer_count), 0);
	assert_int_equal(virtio_blk_commit_overlays(&w->f->blk, 1), 0);
}

/* One request of len bytes at byte offset, kicked and waited for; OK asserted. */
static struct req io(struct world *w, uint32_t type, uint64_t offset, uint32_t len)
{
	struct fixture *f = w->f;

	if (f->next_desc + 3 > QSIZE || f->next_buf + len > RAM_SIZE - MIB)
		reset_queue(f);
	uint16_t done = used(f)->idx;
	struct req r = request(f, type, offset / SECTOR, len);
	kick_and_wait(f, (uint16_t)(done + 1));
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	return r;
}

static void disk_write(struct world *w, uint64_t offset, uint8_t fill, uint32_t len)
{
	struct fixture *f = w->f;

	if (f->next_desc + 3 > QSIZE || f->next_buf + len > RAM_SIZE - MIB)
		reset_queue(f);
	uint16_t done = used(f)->idx;
	struct req r = write_request(f, offset / SECTOR, fill, len);
	kick_and_wait(f, (uint16_t)(done + 1));
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	memset(w->model + offset, fill, len);
}

/* The whole disk, read by the guest, is what the model says. */
static void assert_disk_is_model(struct world *w)
{
	struct req r = io(w, VIRTIO_BLK_T_IN, 0, (uint32_t)w->disk_bytes);

	assert_memory_equal(guest(w->f, r.data, w->disk_bytes), w->model, w->disk_bytes);
}

static void freeze(struct world *w, const char *layer)
{
	assert_int_equal(virtio_blk_freeze_overlay(w->f->blk, layer, false), 0);
}

/* The clusters a sparse file holds data for, as a bitmap of DISK_CLUSTERS bits. */
static void data_clusters(const char *path, uint8_t map[DISK_CLUSTERS])
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	off_t end;

	assert_true(fd >= 0);
	end = lseek(fd, 0, SEEK_END);
	memset(map, 0, DISK_CLUSTERS);
	for (off_t pos = 0; pos < end;) {
		off_t data = lseek(fd, pos, SEEK_DATA);
		if (data < 0)
			break;
		off_t hole = lseek(fd, data, SEEK_HOLE);
		for (off_t c = data / CLUSTER; c * CLUSTER < hole && c < DISK_CLUSTERS; c++)
			map[c] = 1;
		pos = hole;
	}
	close(fd);
}

/* A layer holds data for exactly the clusters listed (ending with -1), each as the
 * model has it. */
static void assert_layer_holds(struct world *w, const char *layer, const int *clusters)
{
	uint8_t want[DISK_CLUSTERS] = {0}, have[DISK_CLUSTERS];
	uint8_t buf[CLUSTER];
	int fd = open(layer, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(file_size(layer), (w->disk_bytes + CLUSTER - 1) / CLUSTER * CLUSTER);
	for (const int *c = clusters; *c >= 0; c++) {
		want[*c] = 1;
		assert_int_equal(pread(fd, buf, CLUSTER, (off_t)*c * CLUSTER), CLUSTER);
		assert_memory_equal(buf, w->model + (uint64_t)*c * CLUSTER, CLUSTER);
	}
	close(fd);
	data_clusters(layer, have);
	assert_memory_equal(have, want, DISK_CLUSTERS);
}

static int world_setup(void **state)
{
	void *fixture;

	if (blk_driver_setup(&fixture) != 0)
		return -1;
	struct world *w = calloc(1, sizeof(*w));
	if (!w)
		return -1;
	w->f = fixture;
	snprintf(w->dir, sizeof(w->dir), "/tmp/mote-overlay-XXXXXX");
	if (!mkdtemp(w->dir))
		return -1;
	snprintf(w->overlay, sizeof(w->overlay), "%s/overlay", w->dir);
	w->disk_bytes = DISK_BYTES;
	w->model = malloc(DISK_BYTES);
	if (!w->model)
		return -1;
	for (uint64_t i = 0; i < DISK_BYTES; i++)
		w->model[i] = pattern(i);
	w->image_sum = file_checksum(w->f->path);
	detach(w->f);
	attach_overlay(w, w->overlay, false, NULL, 0);
	*state = w;
	return 0;
}

static int world_teardown(void **state)
{
	struct world *w = *state;
	void *fixture = w->f;
	DIR *dir = opendir(w->dir);
	struct dirent *entry;

	while (dir && (entry = readdir(dir))) {
		if (entry->d_name[0] != '.')
			unlink(in_dir(w, entry->d_name));
	}
	if (dir)
		closedir(dir);
	rmdir(w->dir);
	free(w->model);
	free(w);
	return blk_driver_teardown(&fixture);
}

/* The names in the test's directory, sorted, joined by spaces. */
static void dir_listing(struct world *w, char *out, size_t len)
{
	struct dirent **names;
	int n = scandir(w->dir, &names, NULL, alphasort);

	assert_true(n >= 0);
	out[0] = '\0';
	for (int i = 0; i < n; i++) {
		if (names[i]->d_name[0] != '.') {
			strncat(out, names[i]->d_name, len - strlen(out) - 1);
			strncat(out, " ", len - strlen(out) - 1);
		}
		free(names[i]);
	}
	free(names);
}

static void writes_land_in_the_overlay_and_the_image_never_changes(void **state)
{
	struct world *w = *state;
	uint8_t buf[CLUSTER];

	disk_write(w, 0, 0x11, CLUSTER);
	disk_write(w, 40 * CLUSTER, 0x22, 3 * CLUSTER);
	disk_write(w, DISK_BYTES - SECTOR, 0x33, SECTOR);
	assert_disk_is_model(w);
	assert_int_equal(file_checksum(w->f->path), w->image_sum);

	int fd = open(w->overlay, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, buf, CLUSTER, 41 * CLUSTER), CLUSTER);
	close(fd);
	assert_memory_equal(buf, w->model + 41 * CLUSTER, CLUSTER);
	assert_int_equal(file_size(w->overlay), DISK_BYTES);
}

static void a_new_overlay_holds_nothing_and_every_block_reads_from_the_image(void **state)
{
	struct world *w = *state;
	uint8_t map[DISK_CLUSTERS], none[DISK_CLUSTERS] = {0};

	assert_disk_is_model(w);
	data_clusters(w->overlay, map);
	assert_memory_equal(map, none, DISK_CLUSTERS);
	assert_int_equal(file_size(w->overlay), DISK_BYTES);
}

static void a_partial_cluster_write_keeps_the_rest_of_the_cluster_from_the_image(void **state)
{
	struct world *w = *state;
	uint8_t buf[CLUSTER];

	/* Sector 9 is the second of cluster 1; sectors 22..25 straddle clusters 2 and 3. */
	disk_write(w, 9 * SECTOR, 0x44, SECTOR);
	disk_write(w, 22 * SECTOR, 0x55, 4 * SECTOR);
	assert_disk_is_model(w);

	/* The overlay holds the clusters whole: the image's bytes were copied up. */
	int fd = open(w->overlay, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	for (int c = 1; c <= 3; c++) {
		assert_int_equal(pread(fd, buf, CLUSTER, c * CLUSTER), CLUSTER);
		assert_memory_equal(buf, w->model + c * CLUSTER, CLUSTER);
	}
	close(fd);
	assert_int_equal(file_checksum(w->f->path), w->image_sum);
}

static void a_read_in_scattered_segments_splits_between_overlay_and_image(void **state)
{
	struct world *w = *state;
	struct fixture *f = w->f;
	/* Clusters 1 and 3 written: 0 image, 1 overlay, 2 image, 3 overlay, 4 image. */
	const uint32_t lens[] = {1536, 2560, 7680, 512, 5632, 2560};
	uint64_t data = galloc(f, 5 * CLUSTER);
	struct seg segs[8];
	unsigned n = 0;

	disk_write(w, CLUSTER, 0x66, CLUSTER);
	disk_write(w, 3 * CLUSTER + 2 * SECTOR, 0x77, SECTOR);
	memset(guest(f, data, 5 * CLUSTER), 0xee, 5 * CLUSTER);
	segs[n++] = (struct seg){header(f, VIRTIO_BLK_T_IN, 0), 16, false};
	uint64_t at = data;
	for (unsigned i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		segs[n++] = (struct seg){at, lens[i], true};
		at += lens[i];
	}
	assert_int_equal(at - data, 5 * CLUSTER);
	uint64_t status = status_byte(f);
	segs[n++] = (struct seg){status, 1, true};
	uint16_t done = used(f)->idx;
	offer(f, segs, n);
	kick_and_wait(f, (uint16_t)(done + 1));
	assert_int_equal(*(uint8_t *)guest(f, status, 1), VIRTIO_BLK_S_OK);
	assert_memory_equal(guest(f, data, 5 * CLUSTER), w->model, 5 * CLUSTER);
}

/* Partial writes to blocks not yet copied up: each copies its block from the image on
 * the device thread, so one turn copies at most the budget's worth and asks to be served
 * again; the rest follow in later turns and every write lands. */
static void a_turn_copies_up_at_most_its_budget(void **state)
{
	struct world *w = *state;
	struct fixture *f = w->f;
	const int writes = VIRTIO_BLK_COPY_UP_BUDGET + 8;
	struct req r[VIRTIO_BLK_COPY_UP_BUDGET + 8];

	reset_queue(f);
	for (int i = 0; i < writes; i++) {
		r[i] = write_request(f, (uint64_t)(40 + i) * SECTORS_PER_CLUSTER + 1,
				     (uint8_t)(0x60 + i), SECTOR);
		memset(w->model + (uint64_t)(40 + i) * CLUSTER + SECTOR, 0x60 + i, SECTOR);
	}
	notify_dev(f->dev);
	assert_int_equal(f->transport.serve_again[BLK_QUEUE], 1);
	wait_used(f, (uint16_t)writes);
	for (int i = 0; i < writes; i++)
		assert_int_equal(status_of(f, r[i]), VIRTIO_BLK_S_OK);
	assert_disk_is_model(w);
}

static void two_partial_writes_to_one_cluster_in_flight_together_both_land(void **state)
{
	struct world *w = *state;
	struct fixture *f = w->f;

	uint16_t done = used(f)->idx;
	struct req a = write_request(f, 2 * SECTORS_PER_CLUSTER + 1, 0x81, SECTOR);
	struct req b = write_request(f, 2 * SECTORS_PER_CLUSTER + 6, 0x82, SECTOR);
	kick_and_wait(f, (uint16_t)(done + 2));
	assert_int_equal(status_of(f, a), VIRTIO_BLK_S_OK);
	assert_int_equal(status_of(f, b), VIRTIO_BLK_S_OK);
	memset(w->model + 2 * CLUSTER + SECTOR, 0x81, SECTOR);
	memset(w->model + 2 * CLUSTER + 6 * SECTOR, 0x82, SECTOR);
	assert_disk_is_model(w);
}

/* A read of a block whose first write is still in flight (its completion not reaped)
 * reads the image, not the overlay's hole; once the write is answered, the overlay. */
static void a_read_racing_the_first_write_of_a_block_reads_the_image(void **state)
{
	struct world *w = *state;
	struct fixture *f = w->f;

	uint16_t done = used(f)->idx;
	struct req write = write_request(f, 5 * SECTORS_PER_CLUSTER, 0x91, CLUSTER);
	notify_dev(f->dev);
	struct req read = request(f, VIRTIO_BLK_T_IN, 5 * SECTORS_PER_CLUSTER, CLUSTER);
	notify_dev(f->dev);
	wait_used(f, (uint16_t)(done + 2));
	assert_int_equal(status_of(f, write), VIRTIO_BLK_S_OK);
	assert_int_equal(status_of(f, read), VIRTIO_BLK_S_OK);
	assert_memory_equal(guest(f, read.data, CLUSTER), w->model + 5 * CLUSTER, CLUSTER);
	memset(w->model + 5 * CLUSTER, 0x91, CLUSTER);
	assert_disk_is_model(w);
}

/* A write over part of a block whose first write has not ended must wait for it
 * (blk_overlay_write_waits): ending first, it would end the block's pending state while
 * the overlay still has a hole around its bytes. */
static void a_partial_write_over_a_block_being_first_written_waits_for_that_write(void **state)
{
	struct world *w = *state;
	struct blk_overlay_options options = {.base = w->f->path, .overlay = in_dir(w, "second")};
	struct blk_overlay *ov;
	bool present;

	assert_int_equal(blk_overlay_open(&options, &w->f->log, &ov), 0);
	/* The first write covers block 3 whole: the block reads from the image meanwhile. */
	assert_false(blk_overlay_write_waits(ov, 3 * CLUSTER, CLUSTER));
	assert_int_equal(blk_overlay_prepare_write(ov, 3 * CLUSTER, CLUSTER), 0);
	assert_int_equal(blk_overlay_run(ov, 3 * CLUSTER, CLUSTER, &present), CLUSTER);
	assert_false(present);
	/* Another write over all of it leaves no hole, whichever ends first. */
	assert_false(blk_overlay_write_waits(ov, 3 * CLUSTER, CLUSTER));
	assert_false(blk_overlay_write_waits(ov, 2 * CLUSTER, 3 * CLUSTER));
	/* One over part of it waits, whichever end of the write covers it partly. */
	assert_true(blk_overlay_write_waits(ov, 3 * CLUSTER + SECTOR, SECTOR));
	assert_true(blk_overlay_write_waits(ov, 2 * CLUSTER + SECTOR, CLUSTER));
	assert_true(blk_overlay_write_waits(ov, 3 * CLUSTER + SECTOR, CLUSTER));
	/* Block 2, copied up by a partial write, is never pending: no wait there. */
	assert_int_equal(blk_overlay_prepare_write(ov, 2 * CLUSTER + SECTOR, SECTOR), 0);
	assert_false(blk_overlay_write_waits(ov, 2 * CLUSTER, SECTOR));

	/* Once the first write ended, block 3 reads from the overlay and waits for none. */
	blk_overlay_write_done(ov, 3 * CLUSTER, CLUSTER);
	assert_int_equal(blk_overlay_run(ov, 3 * CLUSTER, CLUSTER, &present), CLUSTER);
	assert_true(present);
	assert_false(blk_overlay_write_waits(ov, 3 * CLUSTER + SECTOR, SECTOR));
	blk_overlay_close(ov);
}

/* What the overlay file holds at byte offset. */
static uint8_t overlay_byte(struct world *w, uint64_t offset)
{
	uint8_t byte = 0;
	int fd = open(w->overlay, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &byte, 1, (off_t)offset), 1);
	close(fd);
	return byte;
}

/* The device keeps that order: a partial write over a block whose first write is in
 * flight gets no I/O of its own until that write was answered, and a read racing both
 * reads the image. */
static void a_partial_write_starts_only_once_the_first_write_was_answered(void **state)
{
	struct world *w = *state;
	struct fixture *f = w->f;
	const uint64_t block = 6 * CLUSTER, partial_at = block + 2 * SECTOR;

	uint16_t done = used(f)->idx;
	struct req first = write_request(f, block / SECTOR, 0xa1, CLUSTER);
	struct req partial = write_request(f, partial_at / SECTOR, 0xb2, SECTOR);
	struct req read = request(f, VIRTIO_BLK_T_IN, block / SECTOR, CLUSTER);
	notify_dev(f->dev);
	/* Submitted, and not reaped: only the test's event loop reaps. The first write
	 * lands; the partial one must not, however long it is given. */
	for (int i = 0; i < 200 && overlay_byte(w, block) != 0xa1; i++)
		usleep(5000);
	assert_int_equal(overlay_byte(w, block), 0xa1);
	usleep(50000);
	assert_int_equal(overlay_byte(w, partial_at), 0xa1);

	wait_used(f, (uint16_t)(done + 3));
	assert_int_equal(status_of(f, first), VIRTIO_BLK_S_OK);
	assert_int_equal(status_of(f, partial), VIRTIO_BLK_S_OK);
	assert_int_equal(status_of(f, read), VIRTIO_BLK_S_OK);
	assert_memory_equal(guest(f, read.data, CLUSTER), w->model + block, CLUSTER);
	memset(w->model + block, 0xa1, CLUSTER);
	memset(w->model + partial_at, 0xb2, SECTOR);
	assert_disk_is_model(w);
}

/* A pause answers the waiting write too; a reset drops it with the one it waited for,
 * and the disk goes on. */
static void a_waiting_write_is_answered_by_a_pause_and_dropped_by_a_reset(void **state)
{
	struct world *w = *state;
	struct fixture *f = w->f;

	uint16_t done = used(f)->idx;
	struct req first = write_request(f, 8 * SECTORS_PER_CLUSTER, 0xc3, CLUSTER);
	struct req partial = write_request(f, 8 * SECTORS_PER_CLUSTER + 1, 0xd4, SECTOR);
	notify_dev(f->dev);
	quiesce_dev(f->dev);
	assert_int_equal(used(f)->idx, (uint16_t)(done + 2));
	assert_int_equal(status_of(f, first), VIRTIO_BLK_S_OK);
	assert_int_equal(status_of(f, partial), VIRTIO_BLK_S_OK);
	memset(w->model + 8 * CLUSTER, 0xc3, CLUSTER);
	memset(w->model + 8 * CLUSTER + SECTOR, 0xd4, SECTOR);
	assert_disk_is_model(w);

	done = used(f)->idx;
	write_request(f, 12 * SECTORS_PER_CLUSTER, 0xe5, CLUSTER);
	write_request(f, 12 * SECTORS_PER_CLUSTER + 3, 0xf6, SECTOR);
	notify_dev(f->dev);
	reset_dev(f->dev);
	/* Neither answered, and the waiting one never started. */
	assert_int_equal(used(f)->idx, done);
	assert_int_not_equal(overlay_byte(w, 12 * CLUSTER + 3 * SECTOR), 0xf6);
	fresh_queue(f);
	activate(f, f->dev, false);
	/* Block 12 is undefined now, as after any write a reset dropped; written again, it
	 * and the rest read as they should. */
	disk_write(w, 12 * CLUSTER, 0x17, CLUSTER);
	assert_disk_is_model(w);
}

static void flush_succeeds_and_the_written_data_is_in_the_overlay_file(void **state)
{
	struct world *w = *state;
	uint8_t buf[SECTOR];

	disk_write(w, 7 * CLUSTER, 0x99, SECTOR);
	io(w, VIRTIO_BLK_T_FLUSH, 0, 0);
	int fd = open(w->overlay, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, buf, SECTOR, 7 * CLUSTER), SECTOR);
	close(fd);
	assert_memory_equal(buf, w->model + 7 * CLUSTER, SECTOR);
}

static void write_zeroes_writes_zeros_into_the_overlay_and_discard_changes_nothing(void **state)
{
	struct world *w = *state;
	struct fixture *f = w->f;
	struct virtio_blk_discard_write_zeroes unmap =
	    range(4 * SECTORS_PER_CLUSTER + 1, 3, VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP);
	struct virtio_blk_discard_write_zeroes zero =
	    range(9 * SECTORS_PER_CLUSTER, 2 * SECTORS_PER_CLUSTER, 0);
	struct virtio_blk_discard_write_zeroes discard[] = {range(0, 16 * SECTORS_PER_CLUSTER, 0)};
	uint8_t map[DISK_CLUSTERS];

	disk_write(w, 9 * CLUSTER, 0x12, CLUSTER);
	uint16_t done = used(f)->idx;
	struct req u = range_request(f, VIRTIO_BLK_T_WRITE_ZEROES, &unmap, 1);
	struct req z = range_request(f, VIRTIO_BLK_T_WRITE_ZEROES, &zero, 1);
	kick_and_wait(f, (uint16_t)(done + 2));
	assert_int_equal(status_of(f, u), VIRTIO_BLK_S_OK);
	assert_int_equal(status_of(f, z), VIRTIO_BLK_S_OK);
	memset(w->model + 4 * CLUSTER + SECTOR, 0, 3 * SECTOR);
	memset(w->model + 9 * CLUSTER, 0, 2 * CLUSTER);
	assert_disk_is_model(w);

	/* Zeros written, not holes punched: a hole would read from the image again. */
	data_clusters(w->overlay, map);
	assert_true(map[4] && map[9] && map[10]);

	done = used(f)->idx;
	struct req d = range_request(f, VIRTIO_BLK_T_DISCARD, discard, 1);
	kick_and_wait(f, (uint16_t)(done + 1));
	assert_int_equal(status_of(f, d), VIRTIO_BLK_S_OK);
	assert_disk_is_model(w);
	assert_int_equal(file_checksum(w->f->path), w->image_sum);
}

static void a_freeze_writes_exactly_the_clusters_written_since_the_last_one(void **state)
{
	struct world *w = *state;

	disk_write(w, 1 * CLUSTER, 0x01, CLUSTER);
	disk_write(w, 5 * CLUSTER, 0x02, 2 * CLUSTER);
	disk_write(w, 30 * CLUSTER + 3 * SECTOR, 0x03, SECTOR);
	freeze(w, in_dir(w, "l1"));
	assert_layer_holds(w, in_dir(w, "l1"), (const int[]){1, 5, 6, 30, -1});

	disk_write(w, 6 * CLUSTER, 0x04, SECTOR);
	disk_write(w, 100 * CLUSTER, 0x05, CLUSTER);
	freeze(w, in_dir(w, "l2"));
	assert_layer_holds(w, in_dir(w, "l2"), (const int[]){6, 100, -1});

	freeze(w, in_dir(w, "l3"));
	assert_layer_holds(w, in_dir(w, "l3"), (const int[]){-1});
	/* Nothing but the layers and the overlay: no temporary file left behind. */
	char listing[256];
	dir_listing(w, listing, sizeof(listing));
	assert_string_equal(listing, "l1 l2 l3 overlay ");
}

static void a_whole_freeze_writes_every_cluster_the_overlay_holds(void **state)
{
	struct world *w = *state;

	disk_write(w, 2 * CLUSTER, 0x21, CLUSTER);
	freeze(w, in_dir(w, "l1"));
	disk_write(w, 8 * CLUSTER, 0x22, CLUSTER);
	assert_int_equal(virtio_blk_freeze_overlay(w->f->blk, in_dir(w, "all"), true), 0);
	assert_layer_holds(w, in_dir(w, "all"), (const int[]){2, 8, -1});
	freeze(w, in_dir(w, "l2"));
	assert_layer_holds(w, in_dir(w, "l2"), (const int[]){-1});
}

static void a_restore_of_image_and_layers_reads_back_what_the_guest_had(void **state)
{
	struct world *w = *state;
	const char *layers[] = {in_dir(w, "l1"), in_dir(w, "l2")};

	disk_write(w, 0, 0x31, 3 * CLUSTER);
	disk_write(w, 50 * CLUSTER + SECTOR, 0x32, 2 * SECTOR);
	freeze(w, layers[0]);
	disk_write(w, CLUSTER, 0x33, SECTOR); /* over a cluster of l1: l2 wins */
	disk_write(w, 200 * CLUSTER, 0x34, 8 * CLUSTER);
	freeze(w, layers[1]);
	uint8_t *snapshot = malloc(DISK_BYTES);
	assert_non_null(snapshot);
	memcpy(snapshot, w->model, DISK_BYTES);
	disk_write(w, 10 * CLUSTER, 0x35, CLUSTER); /* after the snapshot: not restored */

	attach_overlay(w, in_dir(w, "copy"), true, layers, 2);
	memcpy(w->model, snapshot, DISK_BYTES);
	free(snapshot);
	assert_disk_is_model(w);
	assert_int_equal(file_checksum(w->f->path), w->image_sum);
	assert_int_equal(file_size(in_dir(w, "copy")), DISK_BYTES);
}

static void a_restore_replaces_an_overlay_that_held_other_data(void **state)
{
	struct world *w = *state;
	const char *layers[] = {in_dir(w, "l1")};

	disk_write(w, 3 * CLUSTER, 0x41, CLUSTER);
	freeze(w, layers[0]);
	uint8_t *snapshot = malloc(DISK_BYTES);
	assert_non_null(snapshot);
	memcpy(snapshot, w->model, DISK_BYTES);
	disk_write(w, 60 * CLUSTER, 0x42, CLUSTER);
	disk_write(w, 3 * CLUSTER, 0x43, SECTOR);

	/* The snapshot's own overlay, once its VM is gone. */
	attach_overlay(w, w->overlay, true, layers, 1);
	memcpy(w->model, snapshot, DISK_BYTES);
	free(snapshot);
	assert_disk_is_model(w);
}

/* A restore can still fail after its disks are built (a later device, the vCPUs' state):
 * until it commits, the overlay it is to replace keeps what the guest wrote after the
 * snapshot, and a failed one leaves no file behind, not even the overlay it created. */
static void a_restore_not_committed_leaves_the_overlay_as_it_was(void **state)
{
	struct world *w = *state;
	const char *layers[] = {in_dir(w, "l1")};
	char listing[256];

	disk_write(w, 3 * CLUSTER, 0x91, CLUSTER);
	freeze(w, layers[0]);
	uint8_t *snapshot = malloc(DISK_BYTES);
	assert_non_null(snapshot);
	memcpy(snapshot, w->model, DISK_BYTES);
	disk_write(w, 60 * CLUSTER, 0x92, CLUSTER); /* after the snapshot */
	disk_write(w, 3 * CLUSTER, 0x93, SECTOR);
	detach(w->f); /* its VM is gone */
	uint64_t before = file_checksum(w->overlay);

	assert_int_equal(try_attach_overlay(w, w->overlay, true, layers, 1), 0);
	uint8_t *written = w->model;
	w->model = snapshot;
	assert_disk_is_model(w); /* the restored disk, until the restore fails */
	/* The file it is to replace is taken meanwhile. */
	struct virtio_blk *other = NULL;
	struct virtio_blk_options options = {.path = w->f->path, .overlay = w->overlay};
	assert_int_equal(virtio_blk_create(&options, &w->f->mem, &w->f->loop, &w->f->log, &other),
			 -EBUSY);
	detach(w->f);
	assert_int_equal(file_checksum(w->overlay), before);
	assert_int_equal(try_attach_overlay(w, in_dir(w, "new"), true, layers, 1), 0);
	detach(w->f);
	dir_listing(w, listing, sizeof(listing));
	assert_string_equal(listing, "l1 overlay ");

	/* The overlay is still the one the guest wrote, and still an overlay. */
	w->model = written;
	attach_overlay(w, w->overlay, false, NULL, 0);
	assert_disk_is_model(w);
	/* A restore that commits replaces it. */
	attach_overlay(w, w->overlay, true, layers, 1);
	memcpy(w->model, snapshot, DISK_BYTES);
	free(snapshot);
	assert_disk_is_model(w);
	assert_true(file_checksum(w->overlay) != before);
	dir_listing(w, listing, sizeof(listing));
	assert_string_equal(listing, "l1 overlay ");
}

/* The name in the test's directory that starts with prefix (a temporary file). */
static const char *dir_entry_starting(struct world *w, const char *prefix)
{
	static char found[400];
	DIR *dir = opendir(w->dir);
	struct dirent *e;

	assert_non_null(dir);
	found[0] = '\0';
	while ((e = readdir(dir)) != NULL) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
			snprintf(found, sizeof(found), "%s/%s", w->dir, e->d_name);
	}
	closedir(dir);
	assert_true(found[0] != '\0');
	return found;
}

/* A VM's disks commit their restored overlays all or none: when the second cannot take
 * its name, the first, renamed already, gets its old file back. */
static void the_overlays_of_several_disks_are_committed_all_or_none(void **state)
{
	struct world *w = *state;
	struct fixture *f = w->f;
	const char *layers[] = {in_dir(w, "l1")};
	const char *second = in_dir(w, "second");
	struct virtio_blk *other = NULL;
	struct virtio_blk_options options = {.path = f->path,
					     .overlay = second,
					     .overlay_restore = true,
					     .layers = layers,
					     .layer_count = 1};
	char listing[256];

	disk_write(w, 3 * CLUSTER, 0xf1, CLUSTER);
	freeze(w, layers[0]);
	disk_write(w, 70 * CLUSTER, 0xf2, CLUSTER);
	detach(f);
	int fd = open(second, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, DISK_BYTES), 0);
	assert_int_equal(pwrite(fd, "second", 6, 9 * CLUSTER), 6);
	close(fd);
	uint64_t first_sum = file_checksum(w->overlay), second_sum = file_checksum(second);

	assert_int_equal(try_attach_overlay(w, w->overlay, true, layers, 1), 0);
	assert_int_equal(virtio_blk_create(&options, &f->mem, &f->loop, &f->log, &other), 0);
	/* The second disk's new file vanishes before the commit. */
	assert_int_equal(unlink(dir_entry_starting(w, "second.tmp-")), 0);
	struct virtio_blk *disks[] = {f->blk, other};
	assert_int_equal(virtio_blk_commit_overlays(disks, 2), -ENOENT);
	assert_int_equal(file_checksum(w->overlay), first_sum);
	assert_int_equal(file_checksum(second), second_sum);
	virtio_blk_destroy(other);
	detach(f);
	dir_listing(w, listing, sizeof(listing));
	assert_string_equal(listing, "l1 overlay second ");
}

/* Where a file system cannot exchange two names, the commit swaps them through a third
 * (link): swapping twice gives each name its file back, and no third name is left. */
static void names_swap_through_a_link_and_back(void **state)
{
	struct world *w = *state;
	const char *a = in_dir(w, "a"), *b = in_dir(w, "b");
	char listing[256];

	int fd = open(a, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0 && write(fd, "new", 3) == 3);
	close(fd);
	fd = open(b, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0 && write(fd, "old!", 4) == 4);
	close(fd);
	assert_int_equal(blk_overlay_swap_through_a_link(a, b), 0);
	assert_int_equal(file_size(a), 4);
	assert_int_equal(file_size(b), 3);
	assert_int_equal(blk_overlay_swap_through_a_link(a, b), 0);
	assert_int_equal(file_size(a), 3);
	assert_int_equal(file_size(b), 4);
	dir_listing(w, listing, sizeof(listing));
	assert_string_equal(listing, "a b overlay ");
	/* A missing name: nothing moves, nothing is left. */
	assert_int_equal(blk_overlay_swap_through_a_link(a, in_dir(w, "gone")), -ENOENT);
	dir_listing(w, listing, sizeof(listing));
	assert_string_equal(listing, "a b overlay ");
}

/* A restore through a link replaces the file the link names, and keeps the link; a boot
 * through a link to a file not there yet creates it. */
static void an_overlay_named_through_a_link_is_replaced_where_the_link_points(void **state)
{
	struct world *w = *state;
	const char *layers[] = {in_dir(w, "l1")};
	const char *link = in_dir(w, "link"), *dangling = in_dir(w, "dangling");
	struct stat st;

	disk_write(w, 3 * CLUSTER, 0x17, CLUSTER);
	freeze(w, layers[0]);
	detach(w->f);
	assert_int_equal(symlink(w->overlay, link), 0);
	attach_overlay(w, link, true, layers, 1);
	disk_write(w, 5 * CLUSTER, 0x18, CLUSTER);
	detach(w->f);
	assert_int_equal(lstat(link, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	attach_overlay(w, w->overlay, false, NULL, 0);
	assert_disk_is_model(w);

	assert_int_equal(symlink(in_dir(w, "made"), dangling), 0);
	attach_overlay(w, dangling, false, NULL, 0);
	assert_int_equal(file_size(in_dir(w, "made")), DISK_BYTES);
}

/* A restored overlay's O_DIRECT descriptor is opened while the file has its temporary
 * name; after the commit, its writes land in the file under the overlay's name. */
static void a_restored_direct_disk_writes_into_the_overlay_it_committed(void **state)
{
	struct world *w = *state;
	struct fixture *f = w->f;
	const char *layers[] = {in_dir(w, "l1")};
	struct virtio_blk_options options = {.path = f->path,
					     .overlay = in_dir(w, "copy"),
					     .direct = true,
					     .overlay_restore = true,
					     .layers = layers,
					     .layer_count = 1};

	disk_write(w, 30 * CLUSTER, 0xe1, CLUSTER);
	freeze(w, layers[0]);
	detach(f);
	fresh_queue(f);
	assert_int_equal(event_loop_init(&f->loop), 0);
	assert_int_equal(virtio_blk_create(&options, &f->mem, &f->loop, &f->log, &f->blk), 0);
	assert_int_equal(virtio_blk_commit_overlays(&f->blk, 1), 0);
	f->dev = virtio_blk_vdev(f->blk);
	activate(f, f->dev, false);
	disk_write(w, 40 * CLUSTER, 0xe2, 4 * CLUSTER);
	assert_disk_is_model(w);
	attach_overlay(w, in_dir(w, "copy"), false, NULL, 0);
	assert_disk_is_model(w);
}

static void after_a_restore_the_next_freeze_holds_only_new_writes(void **state)
{
	struct world *w = *state;
	const char *layers[] = {in_dir(w, "l1")};

	disk_write(w, 3 * CLUSTER, 0x51, CLUSTER);
	freeze(w, layers[0]);
	attach_overlay(w, in_dir(w, "copy"), true, layers, 1);
	freeze(w, in_dir(w, "l2"));
	assert_layer_holds(w, in_dir(w, "l2"), (const int[]){-1});
	disk_write(w, 4 * CLUSTER + SECTOR, 0x52, SECTOR);
	freeze(w, in_dir(w, "l3"));
	assert_layer_holds(w, in_dir(w, "l3"), (const int[]){4, -1});
}

static void a_reopened_overlay_rebuilds_what_it_holds(void **state)
{
	struct world *w = *state;

	disk_write(w, 12 * CLUSTER + 5 * SECTOR, 0x61, SECTOR);
	disk_write(w, 90 * CLUSTER, 0x62, 2 * CLUSTER);
	attach_overlay(w, w->overlay, false, NULL, 0);
	assert_disk_is_model(w);
	/* No layer holds those clusters yet: the first freeze after the reopen does. */
	freeze(w, in_dir(w, "l1"));
	assert_layer_holds(w, in_dir(w, "l1"), (const int[]){12, 90, 91, -1});
}

static void a_failed_freeze_changes_nothing_and_the_disk_goes_on(void **state)
{
	struct world *w = *state;
	const char *missing = in_dir(w, "missing/l1");

	disk_write(w, 7 * CLUSTER, 0x71, CLUSTER);
	assert_int_equal(virtio_blk_freeze_overlay(w->f->blk, missing, false), -ENOENT);
	assert_non_null(strstr(w->f->log_text, "missing/l1"));
	/* /sys takes no new files, even from root. */
	int err = virtio_blk_freeze_overlay(w->f->blk, "/sys/mote-test.layer", false);
	assert_true(err == -EACCES || err == -EROFS || err == -EPERM);

	disk_write(w, 8 * CLUSTER + SECTOR, 0x72, SECTOR);
	assert_disk_is_model(w);
	freeze(w, in_dir(w, "l1"));
	assert_layer_holds(w, in_dir(w, "l1"), (const int[]){7, 8, -1});
}

static void a_freeze_that_cannot_write_its_layer_leaves_no_file(void **state)
{
	struct world *w = *state;
	struct rlimit old, small = {.rlim_cur = 64 * 1024};
	char listing[256];

	disk_write(w, 200 * CLUSTER, 0x81, CLUSTER);
	/* A file size limit: writes past it fail with EFBIG, as on a full disk. */
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	small.rlim_max = old.rlim_max;
	signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
	int err = virtio_blk_freeze_overlay(w->f->blk, in_dir(w, "l1"), false);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	assert_int_equal(err, -EFBIG);
	dir_listing(w, listing, sizeof(listing));
	assert_string_equal(listing, "overlay ");
	freeze(w, in_dir(w, "l1"));
	assert_layer_holds(w, in_dir(w, "l1"), (const int[]){200, -1});
}

static void an_image_of_odd_size_keeps_its_size_and_restores(void **state)
{
	struct world *w = *state;
	const char *layers[] = {in_dir(w, "l1")};

	/* 5000 bytes: 10 sectors for the guest, the last partly past the end; 2 clusters. */
	detach(w->f);
	assert_int_equal(truncate(w->f->path, 5000), 0);
	w->image_sum = file_checksum(w->f->path);
	w->disk_bytes = 10 * SECTOR;
	memset(w->model + 5000, 0, 10 * SECTOR - 5000);
	attach_overlay(w, in_dir(w, "odd"), false, NULL, 0);
	assert_int_equal(CONFIG(w->f->dev, capacity), 10);
	assert_int_equal(file_size(in_dir(w, "odd")), 2 * CLUSTER);
	assert_disk_is_model(w);

	disk_write(w, 9 * SECTOR, 0x91, SECTOR);
	disk_write(w, 2 * SECTOR, 0x92, SECTOR);
	assert_disk_is_model(w);
	freeze(w, layers[0]);
	attach_overlay(w, in_dir(w, "copy"), true, layers, 1);
	assert_disk_is_model(w);
	assert_int_equal(file_size(w->f->path), 5000);
	assert_int_equal(file_checksum(w->f->path), w->image_sum);
}

static void a_direct_disk_with_an_overlay_reads_and_writes(void **state)
{
	struct world *w = *state;
	struct fixture *f = w->f;
	struct virtio_blk_options options = {
	    .path = f->path, .overlay = in_dir(w, "direct"), .direct = true};

	detach(f);
	fresh_queue(f);
	assert_int_equal(event_loop_init(&f->loop), 0);
	assert_int_equal(virtio_blk_create(&options, &f->mem, &f->loop, &f->log, &f->blk), 0);
	f->dev = virtio_blk_vdev(f->blk);
	activate(f, f->dev, false);
	disk_write(w, 20 * CLUSTER, 0xa1, 2 * CLUSTER);
	disk_write(w, 23 * CLUSTER + SECTOR, 0xa2, SECTOR);
	assert_disk_is_model(w);
	assert_int_equal(file_checksum(f->path), w->image_sum);
}

static void an_overlay_that_is_the_image_is_refused(void **state)
{
	struct world *w = *state;
	char link[200];

	assert_int_equal(try_attach_overlay(w, w->f->path, false, NULL, 0), -EINVAL);
	assert_non_null(strstr(w->f->log_text, "image itself"));
	/* Also under another name. */
	snprintf(link, sizeof(link), "%s/image-link", w->dir);
	assert_int_equal(symlink(w->f->path, link), 0);
	assert_int_equal(try_attach_overlay(w, link, false, NULL, 0), -EINVAL);
	assert_int_equal(file_checksum(w->f->path), w->image_sum);
}

/* An overlay or a layer that is a FIFO or a device is refused before it is opened
 * (file_open_kind): a FIFO with no writer would hang open(). */
static void an_overlay_or_layer_that_is_a_fifo_is_refused(void **state)
{
	struct world *w = *state;
	const char *fifo = in_dir(w, "fifo");
	const char *layers[] = {fifo};

	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(try_attach_overlay(w, fifo, false, NULL, 0), -EMEDIUMTYPE);
	assert_non_null(strstr(w->f->log_text, "an overlay must be a regular file"));
	assert_int_equal(try_attach_overlay(w, in_dir(w, "new"), true, layers, 1), -EMEDIUMTYPE);
	assert_non_null(strstr(w->f->log_text, "a layer must be a regular file"));
	assert_int_equal(try_attach_overlay(w, "/dev/null", false, NULL, 0), -EMEDIUMTYPE);
	unlink(fifo);
}

static void an_overlay_on_a_read_only_disk_is_refused(void **state)
{
	struct world *w = *state;
	struct virtio_blk *blk = NULL;
	struct virtio_blk_options options = {
	    .path = w->f->path, .overlay = in_dir(w, "ro"), .read_only = true};

	assert_int_equal(virtio_blk_create(&options, &w->f->mem, &w->f->loop, &w->f->log, &blk),
			 -EINVAL);
	assert_null(blk);
}

static void an_overlay_in_use_is_busy_even_for_a_restore(void **state)
{
	struct world *w = *state;
	struct fixture *f = w->f;
	struct virtio_blk *other = NULL;
	const char *layers[] = {in_dir(w, "l1")};
	struct virtio_blk_options options = {.path = f->path,
					     .overlay = w->overlay,
					     .overlay_restore = true,
					     .layers = layers,
					     .layer_count = 1};

	disk_write(w, 5 * CLUSTER, 0xb1, CLUSTER);
	freeze(w, layers[0]);
	disk_write(w, 6 * CLUSTER, 0xb2, CLUSTER);
	assert_int_equal(virtio_blk_create(&options, &f->mem, &f->loop, &f->log, &other), -EBUSY);
	assert_null(other);
	assert_non_null(strstr(f->log_text, "locked by another process"));
	/* The running disk's overlay was not replaced. */
	assert_disk_is_model(w);
}

/* A restore replaces its overlay; a file named as the overlay that cannot be one (not
 * the size of an overlay of this image) is refused and left as it was. */
static void a_restore_leaves_a_file_that_is_no_overlay_alone(void **state)
{
	struct world *w = *state;
	const char *layers[] = {in_dir(w, "l1")};
	const char *victim = in_dir(w, "notes.txt");
	static const char notes[] = "keep me\n";

	disk_write(w, 5 * CLUSTER, 0xc1, CLUSTER);
	freeze(w, layers[0]);
	int fd = open(victim, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, notes, sizeof(notes) - 1), (ssize_t)sizeof(notes) - 1);
	close(fd);

	assert_int_equal(try_attach_overlay(w, victim, true, layers, 1), -EINVAL);
	assert_non_null(strstr(w->f->log_text, "left alone"));
	assert_int_equal(file_size(victim), sizeof(notes) - 1);
	/* A new file, or one of an overlay's size, is taken and replaced. */
	attach_overlay(w, in_dir(w, "fresh"), true, layers, 1);
	assert_int_equal(file_size(in_dir(w, "fresh")), DISK_BYTES);
}

static void disks_on_one_image_share_it_while_no_one_writes_it(void **state)
{
	struct world *w = *state;
	struct fixture *f = w->f;
	struct virtio_blk *fork = NULL, *writer = NULL;
	struct virtio_blk_options options = {.path = f->path, .overlay = in_dir(w, "fork")};

	assert_int_equal(virtio_blk_create(&options, &f->mem, &f->loop, &f->log, &fork), 0);
	assert_int_equal(open_disk(f, f->path, false, NO_ID, &writer), -EBUSY);
	virtio_blk_destroy(fork);
	assert_null(writer);
}

static void a_missing_layer_fails_before_the_overlay_is_replaced(void **state)
{
	struct world *w = *state;
	const char *layers[] = {in_dir(w, "l1"), in_dir(w, "gone")};

	disk_write(w, 5 * CLUSTER, 0xc1, CLUSTER);
	freeze(w, layers[0]);
	detach(w->f);
	assert_int_equal(try_attach_overlay(w, w->overlay, true, layers, 2), -ENOENT);
	assert_non_null(strstr(w->f->log_text, "gone"));
	attach_overlay(w, w->overlay, false, NULL, 0);
	assert_disk_is_model(w);
}

static void a_layer_of_another_size_or_the_overlay_itself_is_refused(void **state)
{
	struct world *w = *state;
	const char *small[] = {in_dir(w, "small")};
	const char *self[] = {in_dir(w, "l1")};
	int fd = open(small[0], O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, DISK_BYTES / 2), 0);
	close(fd);
	disk_write(w, 5 * CLUSTER, 0xd1, CLUSTER);
	freeze(w, self[0]);
	assert_int_equal(try_attach_overlay(w, in_dir(w, "copy"), true, small, 1), -EINVAL);
	assert_non_null(strstr(w->f->log_text, "bytes"));
	/* The overlay about to be replaced is the layer to restore. */
	assert_int_equal(try_attach_overlay(w, self[0], true, self, 1), -EINVAL);
	assert_non_null(strstr(w->f->log_text, "also one of the disk's layers"));
	assert_layer_holds(w, self[0], (const int[]){5, -1});
}

static void an_overlay_larger_than_its_image_needs_is_refused(void **state)
{
	struct world *w = *state;
	const char *big = in_dir(w, "big");
	int fd = open(big, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 2 * DISK_BYTES), 0);
	close(fd);
	assert_int_equal(try_attach_overlay(w, big, false, NULL, 0), -EINVAL);
	assert_non_null(strstr(w->f->log_text, "another image"));
	assert_int_equal(file_size(big), 2 * DISK_BYTES);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, world_setup, world_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(writes_land_in_the_overlay_and_the_image_never_changes),
	    TEST(a_new_overlay_holds_nothing_and_every_block_reads_from_the_image),
	    TEST(a_partial_cluster_write_keeps_the_rest_of_the_cluster_from_the_image),
	    TEST(a_read_in_scattered_segments_splits_between_overlay_and_image),
	    TEST(two_partial_writes_to_one_cluster_in_flight_together_both_land),
	    TEST(a_read_racing_the_first_write_of_a_block_reads_the_image),
	    TEST(a_partial_write_over_a_block_being_first_written_waits_for_that_write),
	    TEST(a_partial_write_starts_only_once_the_first_write_was_answered),
	    TEST(a_waiting_write_is_answered_by_a_pause_and_dropped_by_a_reset),
	    TEST(a_turn_copies_up_at_most_its_budget),
	    TEST(flush_succeeds_and_the_written_data_is_in_the_overlay_file),
	    TEST(write_zeroes_writes_zeros_into_the_overlay_and_discard_changes_nothing),
	    TEST(a_freeze_writes_exactly_the_clusters_written_since_the_last_one),
	    TEST(a_whole_freeze_writes_every_cluster_the_overlay_holds),
	    TEST(a_restore_of_image_and_layers_reads_back_what_the_guest_had),
	    TEST(a_restore_replaces_an_overlay_that_held_other_data),
	    TEST(a_restore_not_committed_leaves_the_overlay_as_it_was),
	    TEST(a_restored_direct_disk_writes_into_the_overlay_it_committed),
	    TEST(the_overlays_of_several_disks_are_committed_all_or_none),
	    TEST(an_overlay_named_through_a_link_is_replaced_where_the_link_points),
	    TEST(names_swap_through_a_link_and_back),
	    TEST(after_a_restore_the_next_freeze_holds_only_new_writes),
	    TEST(a_reopened_overlay_rebuilds_what_it_holds),
	    TEST(a_failed_freeze_changes_nothing_and_the_disk_goes_on),
	    TEST(a_freeze_that_cannot_write_its_layer_leaves_no_file),
	    TEST(an_image_of_odd_size_keeps_its_size_and_restores),
	    TEST(a_direct_disk_with_an_overlay_reads_and_writes),
	    TEST(an_overlay_that_is_the_image_is_refused),
	    TEST(an_overlay_or_layer_that_is_a_fifo_is_refused),
	    TEST(an_overlay_on_a_read_only_disk_is_refused),
	    TEST(an_overlay_in_use_is_busy_even_for_a_restore),
	    TEST(a_restore_leaves_a_file_that_is_no_overlay_alone),
	    TEST(disks_on_one_image_share_it_while_no_one_writes_it),
	    TEST(a_missing_layer_fails_before_the_overlay_is_replaced),
	    TEST(a_layer_of_another_size_or_the_overlay_itself_is_refused),
	    TEST(an_overlay_larger_than_its_image_needs_is_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
