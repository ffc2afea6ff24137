/* virtio-blk's image replaced under a running disk (virtio_blk_replace_image(), the
 * device side of PATCH /drives/{id}): reads come from the new image, the guest is told a
 * new size and only then, the old image's lock is let go and the new one's taken, an
 * image resized in place is reread, and an image that cannot be had leaves the disk as
 * it was. The test driver is blk_driver.h. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmocka.h>

#include "blk_driver.h"

#define FILL 0x5a

/* A new image from the mkstemp() template path: size bytes of fill. */
static void new_filled_image(char *path, uint64_t size, uint8_t fill)
{
	int fd = mkstemp(path);
	uint8_t block[4096];

	assert_true(fd >= 0);
	memset(block, fill, sizeof(block));
	for (uint64_t done = 0; done < size; done += sizeof(block))
		assert_int_equal(write(fd, block, sizeof(block)), sizeof(block));
	close(fd);
}

/* Whether another open of path could take the lock (exclusive, or shared). */
static bool lockable(const char *path, int how)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	bool got = flock(fd, how | LOCK_NB) == 0;
	close(fd);
	return got;
}

/* Reads one sector at sector through the queue; returns its data in guest RAM. */
static const uint8_t *read_sector(struct fixture *f, uint64_t sector, uint16_t *used)
{
	struct req r = request(f, VIRTIO_BLK_T_IN, sector, SECTOR);

	kick_and_wait(f, ++*used);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	return guest(f, r.data, SECTOR);
}

static void assert_filled(const uint8_t *data, uint8_t fill)
{
	for (unsigned i = 0; i < SECTOR; i++)
		assert_int_equal(data[i], fill);
}

static void a_bigger_image_serves_reads_and_the_guest_is_told_its_size(void **state)
{
	struct fixture *f = *state;
	char path[64] = "/tmp/mote-blk-new-XXXXXX";
	uint16_t used = 0;

	assert_pattern(read_sector(f, 3, &used), 3 * SECTOR, SECTOR);
	new_filled_image(path, 4 * MIB, FILL);
	assert_int_equal(virtio_blk_replace_image(f->blk, path), 0);

	assert_int_equal(CONFIG(f->dev, capacity), 4 * MIB / SECTOR);
	assert_int_equal(f->transport.config_changes, 1);
	assert_filled(read_sector(f, 3, &used), FILL);
	/* Past the old image's end, within the new one's. */
	assert_filled(read_sector(f, IMAGE_SECTORS + 5, &used), FILL);
	/* The old image is free for others, the new one is the disk's. */
	assert_true(lockable(f->path, LOCK_EX));
	assert_false(lockable(path, LOCK_SH));
	assert_non_null(strstr(f->log_text, path));
	unlink(path);
}

static void an_image_of_the_same_size_tells_the_guest_nothing(void **state)
{
	struct fixture *f = *state;
	char path[64] = "/tmp/mote-blk-new-XXXXXX";
	uint16_t used = 0;

	new_filled_image(path, IMAGE_SECTORS * SECTOR, FILL);
	assert_int_equal(virtio_blk_replace_image(f->blk, path), 0);
	assert_int_equal(CONFIG(f->dev, capacity), IMAGE_SECTORS);
	assert_int_equal(f->transport.config_changes, 0);
	assert_filled(read_sector(f, 0, &used), FILL);
	/* Writes land in the new image, not the old. */
	struct req w = write_request(f, 1, 0x77, SECTOR);
	kick_and_wait(f, ++used);
	assert_int_equal(status_of(f, w), VIRTIO_BLK_S_OK);
	assert_image_pattern(f, SECTOR, SECTOR);
	unlink(path);
}

static void the_image_itself_grown_in_place_is_only_resized(void **state)
{
	struct fixture *f = *state;
	uint16_t used = 0;

	/* Its own lock stays: a second lock on it would be refused (EBUSY). */
	assert_int_equal(truncate(f->path, 2 * IMAGE_SECTORS * SECTOR), 0);
	assert_int_equal(virtio_blk_replace_image(f->blk, f->path), 0);
	assert_int_equal(CONFIG(f->dev, capacity), 2 * IMAGE_SECTORS);
	assert_int_equal(f->transport.config_changes, 1);
	assert_pattern(read_sector(f, 7, &used), 7 * SECTOR, SECTOR);
	assert_zeros(read_sector(f, IMAGE_SECTORS + 1, &used), SECTOR);
	assert_false(lockable(f->path, LOCK_SH));
}

static void an_image_that_cannot_be_had_leaves_the_disk_as_it_was(void **state)
{
	struct fixture *f = *state;
	char path[64] = "/tmp/mote-blk-new-XXXXXX";
	uint16_t used = 0;

	assert_int_equal(virtio_blk_replace_image(f->blk, "/tmp/mote-blk-does-not-exist"),
			 -ENOENT);
	assert_non_null(strstr(f->log_text, "/tmp/mote-blk-does-not-exist"));
	assert_int_equal(virtio_blk_replace_image(f->blk, "/tmp"), -EISDIR);

	/* Another VM's image. */
	new_filled_image(path, 4 * MIB, FILL);
	int other = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(other >= 0);
	assert_int_equal(flock(other, LOCK_EX), 0);
	assert_int_equal(virtio_blk_replace_image(f->blk, path), -EBUSY);
	assert_non_null(strstr(f->log_text, "locked by another process"));
	close(other);

	assert_int_equal(CONFIG(f->dev, capacity), IMAGE_SECTORS);
	assert_int_equal(f->transport.config_changes, 0);
	assert_pattern(read_sector(f, 9, &used), 9 * SECTOR, SECTOR);
	assert_false(lockable(f->path, LOCK_SH));
	assert_true(lockable(path, LOCK_EX));
	unlink(path);
}

static void a_read_only_disk_takes_its_new_image_read_only(void **state)
{
	struct fixture *f = *state;
	char path[64] = "/tmp/mote-blk-new-XXXXXX";
	uint16_t used = 0;

	reattach_read_only(f);
	new_filled_image(path, IMAGE_SECTORS * SECTOR, FILL);
	assert_int_equal(virtio_blk_replace_image(f->blk, path), 0);
	/* Shared, as read-only disks lock their images: another may read it too. */
	assert_true(lockable(path, LOCK_SH));
	assert_false(lockable(path, LOCK_EX));
	struct req w = write_request(f, 0, 0x77, SECTOR);
	kick_and_wait(f, ++used);
	assert_int_equal(status_of(f, w), VIRTIO_BLK_S_IOERR);
	assert_filled(read_sector(f, 0, &used), FILL);
	unlink(path);
}

static void a_disk_with_an_overlay_keeps_its_image(void **state)
{
	struct fixture *f = *state;
	char overlay[64] = "/tmp/mote-blk-overlay-XXXXXX";
	char path[64] = "/tmp/mote-blk-new-XXXXXX";
	uint16_t used = 0;

	assert_non_null(mkdtemp(overlay));
	assert_int_equal(rmdir(overlay), 0);
	struct virtio_blk_options options = {.overlay = overlay};
	detach(f);
	attach_options(f, &options, false);
	new_filled_image(path, IMAGE_SECTORS * SECTOR, FILL);
	assert_int_equal(virtio_blk_replace_image(f->blk, path), -EINVAL);
	assert_non_null(strstr(f->log_text, "overlay"));
	assert_pattern(read_sector(f, 4, &used), 4 * SECTOR, SECTOR);
	assert_true(lockable(path, LOCK_EX));
	detach(f);
	unlink(overlay);
	unlink(path);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, blk_driver_setup, blk_driver_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(a_bigger_image_serves_reads_and_the_guest_is_told_its_size),
	    TEST(an_image_of_the_same_size_tells_the_guest_nothing),
	    TEST(the_image_itself_grown_in_place_is_only_resized),
	    TEST(an_image_that_cannot_be_had_leaves_the_disk_as_it_was),
	    TEST(a_read_only_disk_takes_its_new_image_read_only),
	    TEST(a_disk_with_an_overlay_keeps_its_image),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
