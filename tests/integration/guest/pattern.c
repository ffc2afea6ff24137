/* mote-pattern: writes or verifies a deterministic pattern on a regular file or a block
 * device, so a test can write data on one side of a virtio disk and check it on the
 * other (host then guest, or guest then host). Static, so it also runs in the guest.
 *
 *   mote-pattern [-d] write|verify PATH OFFSET LENGTH SEED
 *
 * Every 8-byte word of PATH holds a hash of SEED and the word's absolute byte offset,
 * stored little-endian. Data written to the wrong place, left over from a write with
 * another seed, or never written at all therefore fails verification. OFFSET and LENGTH
 * are bytes with an optional K, M or G suffix (powers of 1024) and need not be
 * multiples of 8; SEED is a number (decimal or 0x hex). -d opens PATH with O_DIRECT;
 * OFFSET and LENGTH must then be multiples of the device's logical block size.
 *
 * write:  writes the range, then fsync()s PATH; prints "pattern: wrote N bytes".
 * verify: prints "pattern: verified N bytes", or "pattern: MISMATCH at offset X" for
 *         the first byte that differs (or where PATH ends too early), then a line with
 *         what was expected and found.
 * PATH "-" is a stream: write sends the range's bytes to stdout (and its message to
 * stderr), verify reads them from stdin and also fails when more bytes follow. So a
 * network or vsock transfer can be checked end to end: `mote-pattern write - 0 32M 7 |
 * nc HOST PORT` on one side, `... | mote-pattern verify - 0 32M 7` on the other.
 * Exit status: 0 done, 1 mismatch, 2 bad usage or an I/O error (named on stderr). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define CHUNK_BYTES (1024 * 1024)
/* O_DIRECT buffers must be aligned to the logical block size; a page covers them all. */
#define BUFFER_ALIGN 4096

enum { EXIT_MISMATCH = 1, EXIT_USAGE_OR_IO = 2 };

static void usage(void)
{
	fprintf(stderr, "usage: mote-pattern [-d] write|verify PATH OFFSET LENGTH SEED\n");
	exit(EXIT_USAGE_OR_IO);
}

/* splitmix64's finaliser: every input bit affects every output bit. */
static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

static uint64_t pattern_word(uint64_t seed, uint64_t word_offset)
{
	return mix64(seed ^ mix64(word_offset + 0x9e3779b97f4a7c15ULL));
}

/* The pattern bytes for [offset, offset + len), byte by byte so that neither end needs
 * to be word aligned and the result does not depend on the host's byte order. */
static void pattern_fill(uint8_t *buf, uint64_t offset, size_t len, uint64_t seed)
{
	size_t i = 0;

	while (i < len) {
		uint64_t pos = offset + i;
		uint64_t word = pattern_word(seed, pos & ~7ULL);
		for (unsigned byte = pos & 7; byte < 8 && i < len; byte++, i++)
			buf[i] = (uint8_t)(word >> (8 * byte));
	}
}

/* "4096", "0x1000", "4K", "1M", "2G". Returns false on anything else or overflow. */
static bool parse_bytes(const char *text, uint64_t *out)
{
	char *end;
	uint64_t shift = 0;

	if (text[0] < '0' || text[0] > '9')
		return false;
	errno = 0;
	unsigned long long value = strtoull(text, &end, 0);
	if (errno)
		return false;
	switch (*end) {
	case 'K':
		shift = 10;
		break;
	case 'M':
		shift = 20;
		break;
	case 'G':
		shift = 30;
		break;
	case '\0':
		break;
	default:
		return false;
	}
	if (shift && end[1] != '\0')
		return false;
	if (value > (UINT64_MAX >> shift))
		return false;
	*out = (uint64_t)value << shift;
	return true;
}

static bool use_direct;
static bool use_stream; /* PATH "-": stdin or stdout, no offsets, no fsync */

/* pwrite/pread on a file, write/read on the stream. */
static ssize_t put_bytes(int fd, const void *buf, size_t n, uint64_t at)
{
	return use_stream ? write(fd, buf, n) : pwrite(fd, buf, n, (off_t)at);
}

static ssize_t get_bytes(int fd, void *buf, size_t n, uint64_t at)
{
	return use_stream ? read(fd, buf, n) : pread(fd, buf, n, (off_t)at);
}

/* O_DIRECT refuses requests that are not block aligned with a bare EINVAL. */
static const char *direct_hint(int error)
{
	return use_direct && error == EINVAL
		   ? " (with -d, OFFSET and LENGTH must be multiples of the block size)"
		   : "";
}

/* buf: CHUNK_BYTES, aligned for O_DIRECT. */
static int pattern_write(int fd, const char *path, uint64_t offset, uint64_t length, uint64_t seed,
			 uint8_t *buf)
{
	uint64_t done = 0;

	while (done < length) {
		size_t n = length - done < CHUNK_BYTES ? (size_t)(length - done) : CHUNK_BYTES;
		pattern_fill(buf, offset + done, n, seed);
		size_t put = 0;
		while (put < n) {
			ssize_t r = put_bytes(fd, buf + put, n - put, offset + done + put);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0) {
				fprintf(stderr, "pattern: write %s at offset %" PRIu64 ": %s%s\n",
					path, offset + done + put,
					r < 0 ? strerror(errno) : "wrote nothing",
					direct_hint(r < 0 ? errno : 0));
				return EXIT_USAGE_OR_IO;
			}
			put += (size_t)r;
		}
		done += n;
	}
	if (use_stream) {
		fprintf(stderr, "pattern: wrote %" PRIu64 " bytes\n", length);
		return 0;
	}
	/* Durable before we say so: the other side may read the disk right after. */
	if (fsync(fd) < 0) {
		fprintf(stderr, "pattern: fsync %s: %s\n", path, strerror(errno));
		return EXIT_USAGE_OR_IO;
	}
	printf("pattern: wrote %" PRIu64 " bytes\n", length);
	return 0;
}

static void report_mismatch(uint64_t at, const uint8_t *expected, const uint8_t *found)
{
	printf("pattern: MISMATCH at offset %" PRIu64 "\n", at);
	if (found)
		printf("pattern: expected byte 0x%02x, found 0x%02x\n", *expected, *found);
	else
		printf("pattern: expected byte 0x%02x, found the end of the file\n", *expected);
}

/* buf and want: CHUNK_BYTES each, buf aligned for O_DIRECT. */
static int pattern_verify(int fd, const char *path, uint64_t offset, uint64_t length, uint64_t seed,
			  uint8_t *buf, uint8_t *want)
{
	uint64_t done = 0;

	while (done < length) {
		size_t n = length - done < CHUNK_BYTES ? (size_t)(length - done) : CHUNK_BYTES;
		pattern_fill(want, offset + done, n, seed);
		size_t got = 0;
		while (got < n) {
			ssize_t r = get_bytes(fd, buf + got, n - got, offset + done + got);
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0) {
				fprintf(stderr, "pattern: read %s at offset %" PRIu64 ": %s%s\n",
					path, offset + done + got, strerror(errno),
					direct_hint(errno));
				return EXIT_USAGE_OR_IO;
			}
			if (r == 0)
				break;
			got += (size_t)r;
		}
		for (size_t i = 0; i < got; i++) {
			if (buf[i] != want[i]) {
				report_mismatch(offset + done + i, &want[i], &buf[i]);
				return EXIT_MISMATCH;
			}
		}
		if (got < n) {
			report_mismatch(offset + done + got, &want[got], NULL);
			return EXIT_MISMATCH;
		}
		done += n;
	}
	if (use_stream) {
		ssize_t r;
		while ((r = read(fd, buf, 1)) < 0 && errno == EINTR)
			;
		if (r > 0) {
			printf("pattern: MISMATCH at offset %" PRIu64 ": more bytes follow\n",
			       offset + length);
			return EXIT_MISMATCH;
		}
	}
	printf("pattern: verified %" PRIu64 " bytes\n", length);
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t offset, length, seed;
	int opt;

	while ((opt = getopt(argc, argv, "+d")) != -1) {
		if (opt != 'd')
			usage();
		use_direct = true;
	}
	if (argc - optind != 5)
		usage();
	const char *mode = argv[optind];
	const char *path = argv[optind + 1];
	bool writing = strcmp(mode, "write") == 0;
	if (!writing && strcmp(mode, "verify") != 0)
		usage();
	if (!parse_bytes(argv[optind + 2], &offset) || !parse_bytes(argv[optind + 3], &length) ||
	    offset + length < offset) {
		fprintf(stderr, "pattern: bad OFFSET or LENGTH '%s' '%s'\n", argv[optind + 2],
			argv[optind + 3]);
		return EXIT_USAGE_OR_IO;
	}
	char *end;
	errno = 0;
	seed = strtoull(argv[optind + 4], &end, 0);
	if (errno || *end || end == argv[optind + 4]) {
		fprintf(stderr, "pattern: bad SEED '%s'\n", argv[optind + 4]);
		return EXIT_USAGE_OR_IO;
	}

	int flags = writing ? O_WRONLY | O_CREAT : O_RDONLY;
	if (use_direct)
		flags |= O_DIRECT;
	use_stream = strcmp(path, "-") == 0;
	if (use_stream && use_direct) {
		fprintf(stderr, "pattern: -d needs a file, not the stream -\n");
		return EXIT_USAGE_OR_IO;
	}
	int fd = use_stream ? (writing ? STDOUT_FILENO : STDIN_FILENO)
			    : open(path, flags | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "pattern: open %s%s: %s\n", path, use_direct ? " (O_DIRECT)" : "",
			strerror(errno));
		return EXIT_USAGE_OR_IO;
	}
	void *buf = NULL;
	uint8_t *want = malloc(CHUNK_BYTES);
	if (posix_memalign(&buf, BUFFER_ALIGN, CHUNK_BYTES) != 0 || !want) {
		fprintf(stderr, "pattern: out of memory\n");
		return EXIT_USAGE_OR_IO;
	}
	int status = writing ? pattern_write(fd, path, offset, length, seed, buf)
			     : pattern_verify(fd, path, offset, length, seed, buf, want);
	free(want);
	free(buf);
	close(fd);
	return status;
}
