/* virtio-blk's image file: what opening a disk refuses (a missing file, a directory, a
 * FIFO or device, an image another open locked, a second writable disk on one image, an
 * id too long), what it allows (read-only disks sharing an image, two disks side by
 * side), and an image that is not a whole number of sectors. The test driver is
 * blk_driver.h. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "blk_driver.h"

static void id_longer_than_20_bytes_is_refused(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk *blk = NULL;

	assert_int_equal(open_disk(f, f->path, true, "123456789012345678901", &blk), -EINVAL);
	assert_null(blk);
}

static void missing_file_is_enoent(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk *blk = NULL;

	assert_int_equal(open_disk(f, "/tmp/mote-blk-does-not-exist", false, NO_ID, &blk), -ENOENT);
	assert_null(blk);
	assert_non_null(strstr(f->log_text, "/tmp/mote-blk-does-not-exist"));
}

static void directory_is_eisdir(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk *blk = NULL;

	assert_int_equal(open_disk(f, "/tmp", false, NO_ID, &blk), -EISDIR);
	assert_int_equal(open_disk(f, "/tmp", true, NO_ID, &blk), -EISDIR);
	assert_null(blk);
	assert_non_null(strstr(f->log_text, "/tmp"));
}

/* A FIFO or a character device is refused before it is opened (file_open_kind): a
 * FIFO with no writer would hang open(), and opening some devices acts on them. */
static void fifo_or_char_device_is_not_a_disk(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk *blk = NULL;
	char fifo[] = "/tmp/mote-blk-fifo-XXXXXX";

	assert_non_null(mkdtemp(fifo));
	assert_int_equal(rmdir(fifo), 0);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(open_disk(f, fifo, false, NO_ID, &blk), -EMEDIUMTYPE);
	assert_non_null(strstr(f->log_text, "not a regular file or block device"));
	assert_int_equal(open_disk(f, "/dev/null", true, NO_ID, &blk), -EMEDIUMTYPE);
	assert_non_null(strstr(f->log_text, "/dev/null"));
	assert_null(blk);
	unlink(fifo);
}

static void image_locked_by_another_open_is_ebusy(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk *blk = NULL;

	detach(f);
	assert_int_equal(event_loop_init(&f->loop), 0);
	int fd = open(f->path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(flock(fd, LOCK_EX), 0);
	assert_int_equal(open_disk(f, f->path, false, NO_ID, &blk), -EBUSY);
	assert_int_equal(open_disk(f, f->path, true, NO_ID, &blk), -EBUSY);
	assert_null(blk);
	assert_non_null(strstr(f->log_text, f->path));
	assert_non_null(strstr(f->log_text, "locked by another process"));
	close(fd);
	event_loop_destroy(&f->loop);
}

static void second_writable_disk_on_one_image_is_ebusy(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk *blk = NULL;

	assert_int_equal(open_disk(f, f->path, false, NO_ID, &blk), -EBUSY);
	assert_int_equal(open_disk(f, f->path, true, NO_ID, &blk), -EBUSY);
	assert_null(blk);
}

static void read_only_disks_share_an_image(void **state)
{
	struct fixture *f = *state;
	struct virtio_blk *other = NULL;

	reattach_read_only(f);
	assert_int_equal(open_disk(f, f->path, true, NO_ID, &other), 0);
	virtio_blk_destroy(other);
}

static void two_disks_serve_requests_side_by_side(void **state)
{
	struct fixture *f = *state;
	char path[64] = "/tmp/mote-blk-XXXXXX";
	int fd = mkstemp(path);
	struct virtio_blk *second = NULL;

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 64 * SECTOR), 0);
	close(fd);
	assert_int_equal(open_disk(f, path, false, NO_ID, &second), 0);
	assert_int_equal(CONFIG(virtio_blk_vdev(second), capacity), 64);

	struct req r = request(f, VIRTIO_BLK_T_IN, 2, SECTOR);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_pattern(guest(f, r.data, SECTOR), 2 * SECTOR, SECTOR);
	virtio_blk_destroy(second);
	unlink(path);
}

static void read_past_end_of_a_partial_last_sector_is_zero_filled(void **state)
{
	struct fixture *f = *state;

	detach(f);
	assert_int_equal(truncate(f->path, 1000), 0);
	attach(f, false, NO_ID, false);
	assert_int_equal(CONFIG(f->dev, capacity), 2);

	struct req r = request(f, VIRTIO_BLK_T_IN, 1, SECTOR);
	kick_and_wait(f, 1);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(used_len_of(f, r), SECTOR + 1);
	uint8_t *data = guest(f, r.data, SECTOR);
	assert_pattern(data, SECTOR, 1000 - SECTOR);
	assert_zeros(data + 1000 - SECTOR, 2 * SECTOR - 1000);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, blk_driver_setup, blk_driver_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(id_longer_than_20_bytes_is_refused),
	    TEST(missing_file_is_enoent),
	    TEST(directory_is_eisdir),
	    TEST(fifo_or_char_device_is_not_a_disk),
	    TEST(image_locked_by_another_open_is_ebusy),
	    TEST(second_writable_disk_on_one_image_is_ebusy),
	    TEST(read_only_disks_share_an_image),
	    TEST(two_disks_serve_requests_side_by_side),
	    TEST(read_past_end_of_a_partial_last_sector_is_zero_filled),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
