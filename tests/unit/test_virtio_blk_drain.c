/* virtio-blk reset and destroy return only once no request in flight can write into
 * guest memory any more, even when waiting on io_uring fails for good: a read landing
 * after the reset would write into buffers the driver took back (virtio 1.2 §2.4), one
 * landing after the destroy into memory that may be something else by then. The failure
 * is a real one: the ring's descriptor is replaced by /dev/null, so io_uring_enter(2)
 * answers EOPNOTSUPP, while the ring itself, kept alive by its mappings, goes on carrying
 * out the I/O and posting completions. A read is held on a pipe put in place of the
 * image, until data is written into the pipe.
 *
 * Where the device cannot know the I/O has ended (no completion for its stall bound, or
 * only SQEs the kernel never took), it gives the ring up rather than end the process
 * (blk_ring.h): the reset or destroy returns, the guest memory is kept mapped, the ring
 * is never entered again, a late completion answers nothing, and the disk stays out of
 * service. So does a destroy on a sound ring whose image stops answering (a read held
 * on the pipe past the stall bound); a reset waits for such a read however long it
 * takes, as the driver has its buffers back once the reset returns. The test driver is
 * blk_driver.h. */
#include <fcntl.h>
#include <pthread.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "vmm/clock.h"
#include "blk_driver.h"

#define HELD_MS 50
#define LATE_MS 1000
#define LANDED 0x3c /* what the held read brings */
/* The stall bound of a disk in the tests that give its ring up for want of completions:
 * short, so that the test is quick, and the read it holds stays held that long. */
#define STALL_MS 100
/* The slow-storage test's: its reads land SLOW_GAP_MS apart, well within SLOW_STALL_MS
 * each, and together well past it. */
#define SLOW_STALL_MS 1000
#define SLOW_GAP_MS 700
#define UNTOUCHED 0xee /* a request's data buffer until the device reads into it */
#define NO_STATUS 0xff /* a status byte until the device answers */
#define RING_LINK "anon_inode:[io_uring]"

/* Replaces the disk's io_uring descriptor by /dev/null. With kept, a descriptor of the
 * ring is kept in *kept first, to put it back with mend_the_ring_descriptor(). Returns
 * the number of the descriptor replaced. */
static int break_the_ring_descriptor_keeping(int *kept)
{
	int ring_fd = fd_linked_to(RING_LINK);
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);

	assert_true(null >= 0);
	if (kept) {
		*kept = fcntl(ring_fd, F_DUPFD_CLOEXEC, 0);
		assert_true(*kept >= 0);
	}
	assert_true(dup2(null, ring_fd) >= 0);
	close(null);
	return ring_fd;
}

static void break_the_ring_descriptor(void)
{
	break_the_ring_descriptor_keeping(NULL);
}

/* Puts the ring back at ring_fd: from here on it could be entered again. */
static void mend_the_ring_descriptor(int ring_fd, int kept)
{
	assert_true(dup3(kept, ring_fd, O_CLOEXEC) >= 0);
	close(kept);
}

/* A sector of LANDED into the pipe at fd, ms later. Should the disk be gone by then (a
 * failing test), the write fails with EPIPE, and the SIGPIPE, blocked here, ends with the
 * thread rather than the test program. */
static void release_held_read_after(int fd, long ms)
{
	uint8_t data[SECTOR];
	sigset_t pipe_signal;

	sigemptyset(&pipe_signal);
	sigaddset(&pipe_signal, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_signal, NULL);
	nanosleep(&(struct timespec){.tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000L}, NULL);
	memset(data, LANDED, sizeof(data));
	if (write(fd, data, sizeof(data)) != (ssize_t)sizeof(data))
		perror("release_held_read");
}

/* The thread that ends the hold, HELD_MS later. */
static void *release_held_read(void *arg)
{
	release_held_read_after(*(int *)arg, HELD_MS);
	return NULL;
}

/* The same LATE_MS later: long after a pause's deadline of HELD_MS. */
static void *release_held_read_late(void *arg)
{
	release_held_read_after(*(int *)arg, LATE_MS);
	return NULL;
}

/* A read of one sector in flight, held on the pipe, on a ring whose waits fail; the
 * thread that releases it started. */
static struct req read_held_on_a_broken_ring(struct fixture *f, int pipe_fds[2],
					     pthread_t *releaser)
{
	hold_reads_on_a_pipe(f, pipe_fds);
	struct req r = request(f, VIRTIO_BLK_T_IN, 0, SECTOR);
	notify_dev(f->dev);
	break_the_ring_descriptor();
	assert_int_equal(pthread_create(releaser, NULL, release_held_read, &pipe_fds[1]), 0);
	return r;
}

static void assert_landed_unanswered(struct fixture *f, struct req r, const uint8_t *seen)
{
	for (size_t i = 0; i < SECTOR; i++)
		assert_int_equal(seen[i], LANDED);
	assert_int_equal(status_of(f, r), NO_STATUS);
	assert_int_equal(used(f)->idx, 0);
}

static void reset_returns_only_after_the_read_in_flight_landed_though_waits_fail(void **state)
{
	struct fixture *f = *state;
	int pipe_fds[2];
	pthread_t releaser;
	uint8_t seen[SECTOR];

	struct req r = read_held_on_a_broken_ring(f, pipe_fds, &releaser);
	reset_dev(f->dev);
	memcpy(seen, guest(f, r.data, SECTOR), SECTOR);
	pthread_join(releaser, NULL);
	close(pipe_fds[1]);
	assert_landed_unanswered(f, r, seen);
}

static void destroy_returns_only_after_the_read_in_flight_landed_though_waits_fail(void **state)
{
	struct fixture *f = *state;
	int pipe_fds[2];
	pthread_t releaser;
	uint8_t seen[SECTOR];

	struct req r = read_held_on_a_broken_ring(f, pipe_fds, &releaser);
	detach(f);
	memcpy(seen, guest(f, r.data, SECTOR), SECTOR);
	pthread_join(releaser, NULL);
	close(pipe_fds[1]);
	assert_landed_unanswered(f, r, seen);
}

/* The disk again, with its stall bound at stall_ms. */
static void attach_with_stall(struct fixture *f, unsigned stall_ms)
{
	detach(f);
	attach_options(f, &(struct virtio_blk_options){.ring_stall_ms = stall_ms}, false);
}

/* A read whose SQE the kernel never took, on a ring that cannot be entered any more,
 * then a reset: with nothing else owed, the reset gives the ring up. */
static struct req give_the_ring_up(struct fixture *f)
{
	break_the_ring_descriptor();
	struct req r = request(f, VIRTIO_BLK_T_IN, 0, SECTOR);
	notify_dev(f->dev);
	reset_dev(f->dev);
	return r;
}

/* What a driver does after a reset before it starts the device again: fresh rings,
 * the queue set up again, and new chains from descriptors past those of before. */
static void driver_starts_over(struct fixture *f)
{
	avail(f)->idx = 0;
	used(f)->idx = 0;
	f->next_desc = QSIZE / 2;
	assert_int_equal(virtq_configure(&f->dev->queues[0], &f->mem, QSIZE, DESC_ADDR, AVAIL_ADDR,
					 USED_ADDR, false),
			 0);
}

static int activate_dev(struct vdev *dev)
{
	pthread_mutex_lock(&dev->lock);
	int ret = dev->ops->activate(dev);
	pthread_mutex_unlock(&dev->lock);
	return ret;
}

static void assert_untouched(struct fixture *f, struct req r)
{
	const uint8_t *data = guest(f, r.data, SECTOR);

	for (size_t i = 0; i < SECTOR; i++)
		assert_int_equal(data[i], UNTOUCHED);
	assert_int_equal(status_of(f, r), NO_STATUS);
	assert_int_equal(used(f)->idx, 0);
}

/* The one error of a ring given up names the disk, the requests given up and what
 * follows. */
static void assert_gave_up_logged(struct fixture *f, unsigned requests)
{
	char count[32];

	snprintf(count, sizeof(count), "gave up %u requests", requests);
	assert_non_null(strstr(f->log_text, f->path));
	assert_non_null(strstr(f->log_text, count));
	assert_non_null(strstr(f->log_text, "out of service"));
	assert_non_null(strstr(f->log_text, "guest memory stays mapped"));
}

static void reset_with_only_a_read_the_broken_ring_never_took_gives_the_ring_up(void **state)
{
	struct fixture *f = *state;

	struct req r = give_the_ring_up(f);
	assert_untouched(f, r);
	assert_true(f->mem.keep_mapped);
	assert_gave_up_logged(f, 1);
	/* At once, without waiting out the stall bound for a completion that cannot come. */
	assert_non_null(strstr(f->log_text, "the kernel never took them"));
}

static void destroy_with_a_read_that_never_completes_gives_the_ring_up(void **state)
{
	struct fixture *f = *state;
	int pipe_fds[2];

	attach_with_stall(f, STALL_MS);
	hold_reads_on_a_pipe(f, pipe_fds);
	struct req r = request(f, VIRTIO_BLK_T_IN, 0, SECTOR);
	notify_dev(f->dev);
	break_the_ring_descriptor();
	detach(f);
	close(pipe_fds[1]);
	assert_untouched(f, r);
	assert_true(f->mem.keep_mapped);
	assert_gave_up_logged(f, 1);
	char why[64];
	snprintf(why, sizeof(why), "no completion for %d ms", STALL_MS);
	assert_non_null(strstr(f->log_text, why));
}

/* A read held on the pipe for good, on a sound ring: the image does not answer. */
static struct req read_that_never_lands(struct fixture *f, int pipe_fds[2])
{
	attach_with_stall(f, STALL_MS);
	hold_reads_on_a_pipe(f, pipe_fds);
	struct req r = request(f, VIRTIO_BLK_T_IN, 0, SECTOR);
	notify_dev(f->dev);
	return r;
}

/* Given up after STALL_MS without a completion (not before), naming why. */
static void assert_gave_up_after_the_stall(struct fixture *f, struct req r, int64_t start_ns)
{
	char why[96];

	assert_true(clock_now_ns() - start_ns >= STALL_MS * NS_PER_MS);
	assert_untouched(f, r);
	assert_true(f->mem.keep_mapped);
	assert_gave_up_logged(f, 1);
	snprintf(why, sizeof(why), "no completion for %d ms: its image does not answer", STALL_MS);
	assert_non_null(strstr(f->log_text, why));
}

/* A reset gives nothing up on a sound ring: a read landing LATE_MS later, well past the
 * stall bound, lands before the reset returns. */
static void reset_waits_past_the_stall_bound_for_a_read_on_a_sound_ring(void **state)
{
	struct fixture *f = *state;
	int pipe_fds[2];
	pthread_t releaser;
	uint8_t seen[SECTOR];

	struct req r = read_that_never_lands(f, pipe_fds);
	assert_int_equal(pthread_create(&releaser, NULL, release_held_read_late, &pipe_fds[1]), 0);
	reset_dev(f->dev);
	memcpy(seen, guest(f, r.data, SECTOR), SECTOR);
	pthread_join(releaser, NULL);
	close(pipe_fds[1]);
	assert_landed_unanswered(f, r, seen);
	assert_false(f->mem.keep_mapped);
	assert_null(strstr(f->log_text, "gave up"));
	assert_int_equal(activate_dev(f->dev), 0);
}

static void destroy_gives_a_sound_ring_up_when_its_image_stops_answering(void **state)
{
	struct fixture *f = *state;
	int pipe_fds[2];

	struct req r = read_that_never_lands(f, pipe_fds);
	int64_t start_ns = clock_now_ns();
	detach(f);
	assert_gave_up_after_the_stall(f, r, start_ns);
	close(pipe_fds[1]);
}

/* The pipe's writer for the slow-storage test: a sector every SLOW_GAP_MS, twice. */
static void *release_two_reads_slowly(void *arg)
{
	for (int i = 0; i < 2; i++)
		release_held_read_after(*(int *)arg, SLOW_GAP_MS);
	return NULL;
}

/* Slow storage that answers is waited for: two reads that land SLOW_GAP_MS apart, each
 * within the stall bound and both together past it, land before the destroy returns
 * (each completion starts the bound anew), and nothing is given up. */
static void destroy_waits_for_slow_storage_that_answers(void **state)
{
	struct fixture *f = *state;
	int pipe_fds[2];
	pthread_t releaser;
	uint8_t seen[2][SECTOR];

	attach_with_stall(f, SLOW_STALL_MS);
	hold_reads_on_a_pipe(f, pipe_fds);
	struct req r[2];
	for (int i = 0; i < 2; i++)
		r[i] = request(f, VIRTIO_BLK_T_IN, 0, SECTOR);
	notify_dev(f->dev);
	assert_int_equal(pthread_create(&releaser, NULL, release_two_reads_slowly, &pipe_fds[1]),
			 0);
	detach(f);
	for (int i = 0; i < 2; i++)
		memcpy(seen[i], guest(f, r[i].data, SECTOR), SECTOR);
	pthread_join(releaser, NULL);
	close(pipe_fds[1]);
	for (int i = 0; i < 2; i++)
		assert_landed_unanswered(f, r[i], seen[i]);
	assert_false(f->mem.keep_mapped);
	assert_null(strstr(f->log_text, "gave up"));
}

/* A read held on a pipe, on a disk that gives its ring up after STALL_MS; once a reset
 * did, the read's data is written into the pipe, and the kernel carries it out: on
 * return, the data landed in the guest's buffer and its completion is on the ring. */
static struct req land_a_read_after_its_ring_was_given_up(struct fixture *f)
{
	int pipe_fds[2];
	uint8_t data[SECTOR];

	attach_with_stall(f, STALL_MS);
	hold_reads_on_a_pipe(f, pipe_fds);
	struct req r = request(f, VIRTIO_BLK_T_IN, 0, SECTOR);
	notify_dev(f->dev);
	break_the_ring_descriptor();
	reset_dev(f->dev);
	assert_true(f->mem.keep_mapped);
	assert_untouched(f, r);

	memset(data, LANDED, sizeof(data));
	assert_int_equal(write(pipe_fds[1], data, sizeof(data)), (ssize_t)sizeof(data));
	close(pipe_fds[1]);
	/* The read goes on from task work that runs as this thread leaves the kernel, and
	 * posts its completion once its data is in. */
	for (int i = 0; i < 5000 && *(uint8_t *)guest(f, r.data + SECTOR - 1, 1) != LANDED; i++)
		nanosleep(&(struct timespec){.tv_nsec = 1000000L}, NULL);
	assert_memory_equal(guest(f, r.data, SECTOR), data, SECTOR); /* kept mapped */
	return r;
}

static void assert_unanswered(struct fixture *f, struct req r)
{
	assert_int_equal(status_of(f, r), NO_STATUS);
	assert_int_equal(used(f)->idx, 0);
	assert_int_equal(f->transport.interrupts[BLK_QUEUE], 0);
}

static void a_read_landing_after_its_ring_was_given_up_is_not_answered_on_completion(void **state)
{
	struct fixture *f = *state;

	struct req r = land_a_read_after_its_ring_was_given_up(f);
	/* The completion's eventfd: its handler ran. */
	assert_int_equal(event_loop_run_once(&f->loop, 5000), 1);
	assert_unanswered(f, r);
}

static void a_read_landing_after_its_ring_was_given_up_is_not_answered_by_a_pause(void **state)
{
	struct fixture *f = *state;

	struct req r = land_a_read_after_its_ring_was_given_up(f);
	quiesce_dev(f->dev);
	assert_unanswered(f, r);
}

static void a_disk_whose_ring_was_given_up_does_not_start_again(void **state)
{
	struct fixture *f = *state;

	give_the_ring_up(f);
	driver_starts_over(f);
	assert_int_equal(activate_dev(f->dev), -EIO);
}

static void a_notified_disk_whose_ring_was_given_up_takes_nothing_and_asks_for_a_reset(void **state)
{
	struct fixture *f = *state;

	give_the_ring_up(f);
	driver_starts_over(f);
	struct req id = request(f, VIRTIO_BLK_T_GET_ID, 0, VIRTIO_BLK_ID_MAX);
	for (int i = 1; i <= 2; i++) {
		notify_dev(f->dev);
		assert_int_equal(f->transport.needs_reset, i);
	}
	assert_int_equal(used(f)->idx, 0);
	assert_int_equal(status_of(f, id), NO_STATUS);
}

/* Once its descriptor is back, the ring could be entered again: its SQE would read the
 * image into the driver's buffer. Neither a pause, a notification, a completion handler
 * nor the destroy (io_uring_queue_exit) enters it. */
static void a_ring_given_up_is_never_entered_again_though_it_could_be(void **state)
{
	struct fixture *f = *state;
	int kept;

	int ring_fd = break_the_ring_descriptor_keeping(&kept);
	struct req r = request(f, VIRTIO_BLK_T_IN, 0, SECTOR);
	notify_dev(f->dev);
	reset_dev(f->dev);
	mend_the_ring_descriptor(ring_fd, kept);
	assert_true(f->mem.keep_mapped);

	quiesce_dev(f->dev);
	driver_starts_over(f);
	request(f, VIRTIO_BLK_T_IN, 1, SECTOR);
	notify_dev(f->dev);
	assert_true(event_loop_run_once(&f->loop, 0) >= 0);
	detach(f);
	nanosleep(&(struct timespec){.tv_nsec = HELD_MS * 1000000L}, NULL);
	const uint8_t *data = guest(f, r.data, SECTOR);
	for (size_t i = 0; i < SECTOR; i++)
		assert_int_equal(data[i], UNTOUCHED);
	assert_int_equal(status_of(f, r), NO_STATUS);
}

/* A file that stops answering (a pipe with nothing in it, here, until LATE_MS) holds a
 * pause up only for its stall bound: the quiesce answers -ETIMEDOUT with the read still
 * in flight and unanswered (a snapshot is refused), on a ring as sound as before: once
 * the data comes, the event thread's completion handler answers the read with it, as
 * after a pause that was abandoned. A quiesce that ignored its bound would return 0 at
 * LATE_MS, with the read answered. */
static void a_pause_fails_when_a_read_stalls_and_leaves_it_to_land_later(void **state)
{
	struct fixture *f = *state;
	int pipe_fds[2];
	pthread_t releaser;

	hold_reads_on_a_pipe(f, pipe_fds);
	struct req r = request(f, VIRTIO_BLK_T_IN, 0, SECTOR);
	notify_dev(f->dev);
	assert_int_equal(pthread_create(&releaser, NULL, release_held_read_late, &pipe_fds[1]), 0);
	int64_t start_ns = clock_now_ns();
	assert_int_equal(quiesce_dev_bounded(f->dev, HELD_MS * NS_PER_MS), -ETIMEDOUT);
	assert_true(clock_now_ns() - start_ns >= HELD_MS * NS_PER_MS);
	assert_int_equal(status_of(f, r), NO_STATUS);
	assert_int_equal(used(f)->idx, 0);
	assert_int_equal(save_dev(f->dev), -EBUSY);

	/* As the event thread does: its completion handler answers the read once it lands
	 * (a wait may also end early, the kernel running this thread's task work). */
	for (int i = 0; i < 100 && status_of(f, r) == NO_STATUS; i++)
		assert_true(event_loop_run_once(&f->loop, 100) >= 0);
	pthread_join(releaser, NULL);
	close(pipe_fds[1]);
	assert_int_equal(status_of(f, r), VIRTIO_BLK_S_OK);
	assert_int_equal(used(f)->idx, 1);
	const uint8_t *data = guest(f, r.data, SECTOR);
	for (size_t i = 0; i < SECTOR; i++)
		assert_int_equal(data[i], LANDED);
	assert_false(f->mem.keep_mapped);
}

static void a_disk_whose_ring_was_given_up_refuses_a_snapshot(void **state)
{
	struct fixture *f = *state;

	give_the_ring_up(f);
	quiesce_dev(f->dev);
	assert_int_equal(save_dev(f->dev), -EIO);
}

#define TEST(name) cmocka_unit_test_setup_teardown(name, blk_driver_setup, blk_driver_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    TEST(reset_returns_only_after_the_read_in_flight_landed_though_waits_fail),
	    TEST(destroy_returns_only_after_the_read_in_flight_landed_though_waits_fail),
	    TEST(reset_with_only_a_read_the_broken_ring_never_took_gives_the_ring_up),
	    TEST(destroy_with_a_read_that_never_completes_gives_the_ring_up),
	    TEST(a_read_landing_after_its_ring_was_given_up_is_not_answered_on_completion),
	    TEST(a_read_landing_after_its_ring_was_given_up_is_not_answered_by_a_pause),
	    TEST(a_disk_whose_ring_was_given_up_does_not_start_again),
	    TEST(a_notified_disk_whose_ring_was_given_up_takes_nothing_and_asks_for_a_reset),
	    TEST(a_ring_given_up_is_never_entered_again_though_it_could_be),
	    TEST(a_disk_whose_ring_was_given_up_refuses_a_snapshot),
	    TEST(a_pause_fails_when_a_read_stalls_and_leaves_it_to_land_later),
	    TEST(reset_waits_past_the_stall_bound_for_a_read_on_a_sound_ring),
	    TEST(destroy_gives_a_sound_ring_up_when_its_image_stops_answering),
	    TEST(destroy_waits_for_slow_storage_that_answers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
