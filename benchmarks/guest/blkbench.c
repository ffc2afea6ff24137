/* mote-blkbench: the block workload of benchmarks/blk.sh, run inside the guest (static,
 * no io_uring or libaio needed from the guest kernel).
 *
 *   mote-blkbench DEVICE AMOUNT
 *
 * Opens DEVICE (a block device, or a file on a file system that supports O_DIRECT)
 * with O_DIRECT, so every request reaches the virtio disk, and runs eight rows:
 * sequential 1 MiB reads, sequential 1 MiB writes, random 4 KiB reads and random 4 KiB
 * writes, each at queue depth 1 and 32. Depth N is N threads each issuing synchronous
 * pread/pwrite; sequential rows hand out consecutive blocks from one shared counter
 * (wrapping at the end of DEVICE), random rows pick blocks by hashing the request
 * number, so every run issues the same offsets. A write row ends with fdatasync,
 * counted in its time: the data has then reached the host's file.
 *
 * AMOUNT per row is a time ("5s", "0.5s") or a byte count ("256M"; K, M, G suffixes,
 * powers of 1024). Each row prints one line:
 *   blkbench seq-read-1m qd1 MiBps=123.4 iops=123 ops=617 seconds=5.00
 * Writes destroy DEVICE's contents. Exit status: 0 done, 1 an I/O error (named), 2 bad
 * usage. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEPTH 32
/* O_DIRECT buffers must be aligned to the logical block size; a page covers them all. */
#define BUFFER_ALIGN 4096
/* Synchronous I/O needs little stack; 32 default 8 MiB stacks would crowd a small guest. */
#define WORKER_STACK (256 * 1024)
/* A row in which no request completes for this long is reported as stalled (a lost
 * completion in the VMM), rather than left for the benchmark's timeout. */
#define STALL_SECONDS 30.0
#define POLL_SECONDS 0.1

struct row {
	const char *name;
	size_t block;
	bool write;
	bool random;
};

static const struct row rows[] = {
    {"seq-read-1m", 1024 * 1024, false, false},
    {"seq-write-1m", 1024 * 1024, true, false},
    {"rand-read-4k", 4096, false, true},
    {"rand-write-4k", 4096, true, true},
};
static const unsigned depths[] = {1, MAX_DEPTH};

/* What one row's workers share. */
struct job {
	int fd;
	const struct row *row;
	uint64_t blocks;  /* DEVICE's size in units of row->block */
	uint64_t max_ops; /* UINT64_MAX when the row is timed */
	atomic_uint_fast64_t next_op;
	atomic_uint_fast64_t completed;
	atomic_uint running; /* workers not yet finished */
	atomic_bool stop;
	pthread_barrier_t start;
	/* The first failure; the others stop at their next request. */
	pthread_mutex_t error_lock;
	int error;
	uint64_t error_offset;
};

struct worker {
	pthread_t thread;
	struct job *job;
	uint8_t *buf;
	uint64_t ops;
	double finished; /* when its last request completed */
};

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

static double now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t op_offset(const struct job *job, uint64_t op)
{
	uint64_t block = job->row->random ? mix64(op) % job->blocks : op % job->blocks;
	return block * job->row->block;
}

static void job_fail(struct job *job, int error, uint64_t offset)
{
	pthread_mutex_lock(&job->error_lock);
	if (!job->error) {
		job->error = error;
		job->error_offset = offset;
	}
	pthread_mutex_unlock(&job->error_lock);
	atomic_store(&job->stop, true);
}

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	struct job *job = w->job;
	size_t len = job->row->block;

	pthread_barrier_wait(&job->start);
	while (!atomic_load_explicit(&job->stop, memory_order_relaxed)) {
		uint64_t op = atomic_fetch_add(&job->next_op, 1);
		if (op >= job->max_ops)
			break;
		uint64_t offset = op_offset(job, op);
		ssize_t n = job->row->write ? pwrite(job->fd, w->buf, len, (off_t)offset)
					    : pread(job->fd, w->buf, len, (off_t)offset);
		if (n < 0 && errno == EINTR)
			continue;
		if (n != (ssize_t)len) {
			job_fail(job, n < 0 ? errno : EIO, offset);
			break;
		}
		w->ops++;
		atomic_fetch_add_explicit(&job->completed, 1, memory_order_relaxed);
	}
	w->finished = now_seconds();
	atomic_fetch_sub(&job->running, 1);
	return NULL;
}

static void sleep_seconds(double seconds)
{
	struct timespec ts = {.tv_sec = (time_t)seconds,
			      .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9)};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
	}
}

/* Waits until the workers are done, ending a timed row at its deadline. Returns false
 * (after saying so) when no request has completed for STALL_SECONDS: the stuck thread
 * cannot be joined then, and the process can only report it and exit. */
static bool wait_workers(struct job *job, unsigned depth, double start, double seconds)
{
	uint64_t last = 0;
	double last_progress = start;

	while (atomic_load(&job->running) > 0) {
		double now = now_seconds();
		double nap = POLL_SECONDS;
		if (seconds > 0 && !atomic_load(&job->stop)) {
			if (now >= start + seconds) {
				atomic_store(&job->stop, true);
				continue;
			}
			if (start + seconds - now < nap)
				nap = start + seconds - now;
		}
		uint64_t done = atomic_load_explicit(&job->completed, memory_order_relaxed);
		if (done != last) {
			last = done;
			last_progress = now;
		} else if (now - last_progress > STALL_SECONDS) {
			fprintf(stderr,
				"blkbench: %s qd%u stalled: no request completed for %.0f s "
				"(%u worker(s) still waiting, %" PRIu64 " requests done)\n",
				job->row->name, depth, now - last_progress,
				atomic_load(&job->running), done);
			return false;
		}
		sleep_seconds(nap);
	}
	return true;
}

/* Runs one row at one depth and prints its line. Returns 0, or 1 after naming an error. */
static int run_row(int fd, uint64_t device_bytes, const struct row *row, unsigned depth,
		   double seconds, uint64_t bytes, uint8_t *const *buffers)
{
	struct job job = {.fd = fd, .row = row, .blocks = device_bytes / row->block};
	struct worker workers[MAX_DEPTH] = {0};
	pthread_attr_t attr;
	unsigned started = 0;

	job.max_ops = seconds > 0 ? UINT64_MAX : (bytes + row->block - 1) / row->block;
	atomic_init(&job.next_op, 0);
	atomic_init(&job.completed, 0);
	atomic_init(&job.running, depth);
	atomic_init(&job.stop, false);
	pthread_mutex_init(&job.error_lock, NULL);
	pthread_barrier_init(&job.start, NULL, depth + 1);
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, WORKER_STACK);
	for (; started < depth; started++) {
		workers[started] = (struct worker){.job = &job, .buf = buffers[started]};
		int err =
		    pthread_create(&workers[started].thread, &attr, worker_run, &workers[started]);
		if (err) {
			fprintf(stderr, "blkbench: pthread_create: %s\n", strerror(err));
			exit(1);
		}
	}
	pthread_attr_destroy(&attr);

	pthread_barrier_wait(&job.start);
	double start = now_seconds();
	if (!wait_workers(&job, depth, start, seconds))
		_exit(1);
	/* The row's time ends when its last request does (not when this thread wakes up to
	 * notice), plus the flush of a write row. */
	uint64_t ops = 0;
	double end = start;
	for (unsigned i = 0; i < started; i++) {
		pthread_join(workers[i].thread, NULL);
		ops += workers[i].ops;
		if (workers[i].finished > end)
			end = workers[i].finished;
	}
	double elapsed = end - start;
	if (!job.error && row->write) {
		double flush_start = now_seconds();
		if (fdatasync(fd) < 0)
			job_fail(&job, errno, 0);
		elapsed += now_seconds() - flush_start;
	}
	pthread_barrier_destroy(&job.start);
	pthread_mutex_destroy(&job.error_lock);

	if (job.error) {
		fprintf(stderr, "blkbench: %s qd%u: %s at offset %" PRIu64 ": %s\n", row->name,
			depth, row->write ? "write" : "read", job.error_offset,
			strerror(job.error));
		return 1;
	}
	printf("blkbench %s qd%u MiBps=%.1f iops=%.0f ops=%" PRIu64 " seconds=%.2f\n", row->name,
	       depth, (double)ops * (double)row->block / (1024.0 * 1024.0) / elapsed,
	       (double)ops / elapsed, ops, elapsed);
	fflush(stdout);
	return 0;
}

/* "5s" or "0.5s": a time per row; "256M", "4096": bytes per row. */
static bool parse_amount(const char *text, double *seconds, uint64_t *bytes)
{
	char *end;
	unsigned shift = 0;

	*seconds = 0;
	*bytes = 0;
	if (text[0] < '0' || text[0] > '9')
		return false;
	size_t len = strlen(text);
	if (text[len - 1] == 's') {
		errno = 0;
		*seconds = strtod(text, &end);
		return errno == 0 && end == text + len - 1 && *seconds > 0 && *seconds < 1e6;
	}
	errno = 0;
	unsigned long long value = strtoull(text, &end, 10);
	if (errno || value == 0)
		return false;
	if (*end == 'K')
		shift = 10;
	else if (*end == 'M')
		shift = 20;
	else if (*end == 'G')
		shift = 30;
	else if (*end != '\0')
		return false;
	if ((shift && end[1] != '\0') || value > (UINT64_MAX >> shift))
		return false;
	*bytes = (uint64_t)value << shift;
	return true;
}

static uint64_t device_size(int fd, const char *path)
{
	struct stat st;
	uint64_t size;

	if (fstat(fd, &st) < 0) {
		fprintf(stderr, "blkbench: stat %s: %s\n", path, strerror(errno));
		exit(1);
	}
	if (!S_ISBLK(st.st_mode))
		return (uint64_t)st.st_size;
	if (ioctl(fd, BLKGETSIZE64, &size) < 0) {
		fprintf(stderr, "blkbench: BLKGETSIZE64 %s: %s\n", path, strerror(errno));
		exit(1);
	}
	return size;
}

int main(int argc, char **argv)
{
	uint8_t *buffers[MAX_DEPTH];
	double seconds;
	uint64_t bytes;

	if (argc != 3 || !parse_amount(argv[2], &seconds, &bytes)) {
		fprintf(stderr, "usage: mote-blkbench DEVICE SECONDSs|BYTES[K|M|G]\n");
		return 2;
	}
	const char *path = argv[1];
	int fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "blkbench: open %s (O_DIRECT): %s\n", path, strerror(errno));
		return 1;
	}
	uint64_t size = device_size(fd, path);
	if (size < rows[0].block) {
		fprintf(stderr, "blkbench: %s has %" PRIu64 " bytes; it needs at least %zu\n", path,
			size, rows[0].block);
		return 1;
	}
	/* Writes carry non-zero data, so no layer can treat them as holes. */
	for (unsigned i = 0; i < MAX_DEPTH; i++) {
		if (posix_memalign((void **)&buffers[i], BUFFER_ALIGN, rows[0].block) != 0) {
			fprintf(stderr, "blkbench: out of memory\n");
			return 1;
		}
		for (size_t j = 0; j < rows[0].block; j += 8) {
			uint64_t word = mix64(((uint64_t)i << 40) + j);
			memcpy(buffers[i] + j, &word, sizeof(word));
		}
	}
	printf("blkbench: %s, %" PRIu64 " bytes, %s per row, O_DIRECT\n", path, size, argv[2]);
	fflush(stdout);

	int status = 0;
	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]) && status == 0; r++) {
		for (size_t d = 0; d < sizeof(depths) / sizeof(depths[0]) && status == 0; d++)
			status = run_row(fd, size, &rows[r], depths[d], seconds, bytes, buffers);
	}
	for (unsigned i = 0; i < MAX_DEPTH; i++)
		free(buffers[i]);
	close(fd);
	return status;
}
