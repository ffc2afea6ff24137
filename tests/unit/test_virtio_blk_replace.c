/* virtio-blk's image replaced under a running disk (virtio_blk_open_replacement(),
 * virtio_blk_swap_image(), virtio_blk_replacement_close(): the device side of PATCH
 * /drives/{id}): reads and writes go to the new image, the guest is told a new size and
 * nothing else, the old image's lock is let go and the new one's taken, an image resized
 * in place is sized again, and an image that cannot be had leaves the disk as it was.
 * The test driver is blk_driver.h; its disk is idle between requests, as in a pause. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
#include "virtio/blk_request.h"

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

/* The three steps, as mote_vm_update_disk() takes them. */
static int replace_image(struct fixture *f, const char *path)
{
	struct virtio_blk_replacement r;
	int err = virtio_blk_open_replacement(f->blk, path, &r);

	if (!err)
		err = virtio_blk_swap_image(f->blk, &r);
	virtio_blk_replacement_close(&r);
	return err;
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
	assert_int_equal(replace_image(f, path), 0);

	assert_int_equal(CONFIG(f->dev, capacity), 4 * MIB / SECTOR);
	assert_int_equal(f->transport.config_changes, 1);
	assert_filled(read_sector(f, 3, &used), FILL);
	/* Past the old image's end, within the new one's. */
	assert_filled(read_sector(f, IMAGE_SECTORS + 5, &used), FILL);
	/* The old image is free for others, the new one is the disk's. */
	assert_true(lockable(f->path, LOCK_EX));
	assert_false(lockable(path, LOCK_SH));
	assert_non_null(strstr(f->log_text, path));
	/* The device's name, which the bus and the transport point at, says so too. */
	assert_non_null(strstr(f->dev->name, path));
	unlink(path);
}

static void an_image_of_the_same_size_tells_the_guest_nothing(void **state)
{
	struct fixture *f = *state;
	char path[64] = "/tmp/mote-blk-new-XXXXXX";
	uint16_t used = 0;

	new_filled_image(path, IMAGE_SECTORS * SECTOR, FILL);
	assert_int_equal(replace_image(f, path), 0);
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
	assert_int_equal(replace_image(f, f->path), 0);
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

	assert_int_equal(replace_image(f, "/tmp/mote-blk-does-not-exist"), -ENOENT);
	assert_non_null(strstr(f->log_text, "/tmp/mote-blk-does-not-exist"));
	assert_int_equal(replace_image(f, "/tmp"), -EISDIR);

	/* Another VM's image. */
	new_filled_image(path, 4 * MIB, FILL);
	int other = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(other >= 0);
	assert_int_equal(flock(other, LOCK_EX), 0);
	assert_int_equal(replace_image(f, path), -EBUSY);
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
	assert_int_equal(replace_image(f, path), 0);
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
	assert_int_equal(replace_image(f, path), -EINVAL);
	assert_non_null(strstr(f->log_text, "overlay"));
	assert_pattern(read_sector(f, 4, &used), 4 * SECTOR, SECTOR);
	assert_true(lockable(path, LOCK_EX));
	detach(f);
	unlink(overlay);
	unlink(path);
}

/* The swap needs the disk idle, as a pause leaves it: with a read in flight it changes
 * nothing, and the image opened for it is let go. */
static void a_disk_with_a_request_in_flight_is_not_swapped(void **state)
{
	struct fixture *f = *state;
	char path[64] = "/tmp/mote-blk-new-XXXXXX";
	struct virtio_blk_replacement r;
	uint8_t landed[SECTOR];
	int pipe_fds[2];

	hold_reads_on_a_pipe(f, pipe_fds);
	struct req held = request(f, VIRTIO_BLK_T_IN, 0, SECTOR);
	notify_dev(f->dev);
	new_filled_image(path, 4 * MIB, FILL);
	assert_int_equal(virtio_blk_open_replacement(f->blk, path, &r), 0);
	assert_int_equal(virtio_blk_swap_image(f->blk, &r), -EBUSY);
	assert_non_null(strstr(f->log_text, "in flight"));
	virtio_blk_replacement_close(&r);
	assert_true(lockable(path, LOCK_EX));
	assert_int_equal(CONFIG(f->dev, capacity), IMAGE_SECTORS);
	assert_int_equal(f->transport.config_changes, 0);

	memset(landed, 0x42, sizeof(landed));
	assert_int_equal(write(pipe_fds[1], landed, sizeof(landed)), sizeof(landed));
	wait_used(f, 1);
	assert_int_equal(status_of(f, held), VIRTIO_BLK_S_OK);
	close(pipe_fds[1]);
	unlink(path);
}

/* A direct disk's O_DIRECT descriptor moves to the new image with the other. */
static void a_direct_disk_reads_its_new_image_direct(void **state)
{
	struct fixture *f = *state;
	char path[64] = "/tmp/mote-blk-new-XXXXXX";
	char old_real[PATH_MAX], new_real[PATH_MAX];
	struct virtio_blk_options options = {.direct = true};
	int unused;

	detach(f);
	attach_options(f, &options, false);
	new_filled_image(path, IMAGE_SECTORS * SECTOR, FILL);
	assert_non_null(realpath(f->path, old_real));
	assert_non_null(realpath(path, new_real));
	assert_int_equal(fds_linked_to(old_real, &unused), 2);
	assert_int_equal(replace_image(f, path), 0);
	assert_int_equal(fds_linked_to(old_real, &unused), 0);
	assert_int_equal(fds_linked_to(new_real, &unused), 2);

	uint64_t data = galloc_aligned(f, SECTOR, BLK_DIRECT_ALIGN);
	struct req r = request_at(f, VIRTIO_BLK_T_IN, 2, data, SECTOR);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_filled(guest(f, data, SECTOR), FILL);
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
	    TEST(a_disk_with_a_request_in_flight_is_not_swapped),
	    TEST(a_direct_disk_reads_its_new_image_direct),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
