/* libFuzzer target: the copy-on-write overlay of a virtio-blk disk (virtio/blk_overlay.h)
 * opened on files a snapshot left, which may be anything: a base image of any size (odd
 * ones too), up to three layer files and an overlay, each missing, a directory, a FIFO, or
 * a sparse file of a size and with data extents the input chooses (its data are the
 * clusters it holds); a layer may name the base, the overlay, another layer, no file, a
 * file on another file system; the base or the overlay may be locked by another VM.
 * Opened as a restore (the layers copied into a new overlay, committed or not) or as an
 * overlay kept, named directly or through a symbolic link. Then requests: writes done at
 * once, or started, landed and ended (or dropped) in any order, reads, freezes into new
 * layers (some refused). The input is a header XORed onto a valid one (a restore of three
 * layers over a base of 65,536 + 1,000 bytes), the requests, then the files XORed onto
 * valid ones, so the fuzzer works near valid files and short inputs reach the requests.
 *
 * Every file is modelled, and each promise of the header is checked (abort() on a breach):
 * the open fails exactly when and with the error it says; a failed or uncommitted restore
 * leaves the overlay's file as it was, and no temporary file; a restore reads as the base
 * with its layers applied oldest first, and its overlay's data are exactly those clusters;
 * a read sees the base where nothing was written, the old data while a first write is in
 * flight, the written data once it ended, zeros where a dropped write covered a cluster
 * that was not present; a write waits exactly when it covers partly a pending cluster; a
 * freeze writes the clusters written since the previous one, and one refused forgets
 * none; the overlay reopened reads as it was left, and so does a restore of the layers
 * frozen; the base never changes. The files live in a directory of /dev/shm (tmpfs: holes
 * found to the 4 KiB page, as the overlay needs), rewritten for each input. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "virtio/blk_overlay.h"

#define CLUSTER BLK_OVERLAY_CLUSTER
#define SECTOR 512ULL
#define MAX_BASE (1ULL << 20)
#define MAX_FILE (2 * MAX_BASE + 2 * CLUSTER) /* a layer or overlay "too big" */
#define FILE_WORDS (MAX_FILE / CLUSTER / 64 + 1)
#define DISK_WORDS (MAX_BASE / CLUSTER / 64 + 1)
#define MAX_EXTENTS 6
#define MAX_OPS 32
#define MAX_FROZEN 4 /* the last one is the session's final freeze */
#define FLIGHTS 2
/* Each file's data come from a source: source s at offset o is pattern[o + s * STRIDE]. */
#define SOURCE_BASE 0
#define SOURCE_FILE 1  /* + the file's index */
#define SOURCE_WRITE 5 /* + the write's number, modulo 16 */
#define SOURCES 21
#define STRIDE 4099

/* The files modelled: the overlay's, then each layer's own. */
enum { OVERLAY_FILE, LAYER_FILES = 3, FILES = 4 };
#define LAYER_FILE(i) (1 + (i))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input: a header, requests, then the files (struct files). */
struct extent_spec {
	uint32_t offset; /* modulo the file's size */
	uint16_t len;
} __attribute__((packed));

struct file_spec {
	uint8_t size_mode; /* enum size_mode, modulo 8 */
	uint32_t size_arg;
	struct extent_spec extent[MAX_EXTENTS];
} __attribute__((packed));

enum size_mode {
	SIZE_RIGHT,	/* the base's size rounded up to a cluster */
	SIZE_BASE,	/* the base's size exactly */
	SIZE_EMPTY,	/* 0 */
	SIZE_MISSING,	/* no file */
	SIZE_NEAR,	/* the right size + (int16_t)size_arg */
	SIZE_ANY,	/* size_arg modulo MAX_FILE + 1 */
	SIZE_DIRECTORY, /* a directory at its name */
	SIZE_FIFO,	/* a FIFO at its name (opening it would wait) */
};

#define FLAG_KEEP 0x01	    /* open the overlay as it is, not a restore */
#define FLAG_LAYERS_SHIFT 1 /* two bits: 3 - the number of layers */
#define FLAG_NO_COMMIT 0x08
#define FLAG_LINK 0x10 /* the overlay named through a symbolic link */
#define FLAG_NO_BASE 0x20
#define FLAG_OVERLAY_IS_BASE 0x40
#define FLAG_COMMIT_AMONG 0x80 /* committed in a list with no-ops around it */

/* What layer i names (modulo 8). */
enum layer_name {
	NAME_OWN,
	NAME_NEXT, /* layer (i + 1) % 3's file */
	NAME_OVERLAY,
	NAME_BASE,
	NAME_MISSING,
	NAME_DIRECTORY,
	NAME_FAR, /* its own file, on another file system (buffered copies: EXDEV) */
	NAME_NULL,
};

/* Locks another process (here: another open file) holds while the overlay opens. */
#define LOCK_BASE_SHARED 0x01 /* VMs may share a base */
#define LOCK_BASE 0x02	      /* a VM writes to it */
#define LOCK_OVERLAY 0x04     /* a VM runs on it */

struct header {
	uint8_t flags;
	uint32_t base_size; /* header_base_size() */
	uint8_t layer_name[LAYER_FILES];
	uint8_t ops; /* how many requests follow, modulo MAX_OPS + 1 */
	uint8_t locks;
} __attribute__((packed));

struct files {
	struct file_spec file[FILES]; /* the overlay's, then each layer's */
} __attribute__((packed));

/* Eight requests; an overlay holding two clusters and three layers, overlapping, over a
 * base of 17 clusters, the last one partial. */
static const struct header template = {.base_size = 65536 + 1000, .ops = 8};
static const struct files template_files = {{
    {.extent = {{2 * CLUSTER, CLUSTER}, {7 * CLUSTER, CLUSTER}}},
    {.extent = {{0, CLUSTER}, {3 * CLUSTER, 3 * CLUSTER}, {16 * CLUSTER, CLUSTER}}},
    {.extent = {{1 * CLUSTER, CLUSTER}, {4 * CLUSTER, CLUSTER}, {10 * CLUSTER, 2 * CLUSTER}}},
    {.extent = {{100, 50}, {5 * CLUSTER, CLUSTER}, {16 * CLUSTER + 10, 20}}},
}};

/* Then requests on the open overlay, in sectors as virtio-blk makes them. */
struct op {
	uint8_t kind; /* enum op_kind, modulo OP_KINDS */
	uint8_t arg;  /* which write in flight; for a freeze, enum freeze_arg */
	uint16_t len; /* sectors - 1, modulo 256 */
	uint32_t sector;
} __attribute__((packed));

enum op_kind { OP_WRITE, OP_READ, OP_START, OP_LAND, OP_END, OP_FREEZE, OP_KINDS };

#define FREEZE_WHOLE 0x01
#define FREEZE_NO_DIRECTORY 0x02   /* into a directory that does not exist: refused */
#define FREEZE_ONTO_DIRECTORY 0x04 /* refused at the rename, once written */

struct file_model {
	bool exists;
	mode_t type; /* S_IFREG, S_IFDIR or S_IFIFO */
	uint64_t size;
	uint64_t data[FILE_WORDS]; /* clusters holding data */
	uint8_t content[MAX_FILE]; /* zeros in holes */
};

struct flight {
	bool used, landed;
	uint64_t offset, len;
	unsigned source;
};

/* The open overlay as the header says it must behave. */
struct session {
	struct blk_overlay *ov;
	uint64_t want; /* the overlay's size */
	uint64_t disk_bytes;
	uint64_t present[DISK_WORDS], pending[DISK_WORDS];
	uint64_t data[DISK_WORDS];	/* the overlay file's data clusters */
	uint64_t since[DISK_WORDS];	/* written since the last freeze */
	uint64_t undefined[DISK_WORDS]; /* a dropped write covered them whole */
	struct flight flight[FLIGHTS];
	unsigned writes;
	unsigned frozen;
};

struct harness {
	char dir[64];
	char path[FILES][96]; /* overlay, layer0, layer1, layer2 */
	char far_dir[64];     /* on another file system */
	char far[LAYER_FILES][96];
	const char *where[FILES]; /* path or far: where each file is for this input */
	char base[96], link[96], missing[96], missing_dir[112], directory[96];
	char frozen[MAX_FROZEN][96];
	int base_fd;
	uint64_t base_size; /* what the base holds now */
	uint8_t pattern[MAX_FILE + SOURCES * STRIDE];
	uint8_t base_model[MAX_BASE]; /* the base, zeros after its end */
	struct file_model file[FILES];
	struct session s;
	uint8_t overlay_model[MAX_BASE]; /* the overlay's file, zeros in holes */
	uint8_t written[MAX_BASE];	 /* what the guest wrote, where it is defined */
	uint8_t scratch[MAX_FILE];
	struct mote_log log;
};

static struct harness *harness_singleton;

static void remove_dir(const char *path)
{
	DIR *dir = opendir(path);
	struct dirent *entry;

	while (dir && (entry = readdir(dir))) {
		char name[400];
		snprintf(name, sizeof(name), "%s/%s", path, entry->d_name);
		if (entry->d_name[0] != '.' && unlink(name) != 0 && errno == EISDIR)
			rmdir(name);
	}
	if (dir)
		closedir(dir);
	rmdir(path);
}

static void harness_remove(void)
{
	if (!harness_singleton)
		return;
	remove_dir(harness_singleton->dir);
	if (harness_singleton->far_dir[0])
		remove_dir(harness_singleton->far_dir);
}

/* A broken promise: said, the files removed (the input reproduces them), and abort(). */
static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void fail(const char *fmt, ...)
{
	va_list args;

	va_start(args, fmt);
	fprintf(stderr, "fuzz_overlay_layers: ");
	vfprintf(stderr, fmt, args);
	fprintf(stderr, "\n");
	va_end(args);
	harness_remove();
	abort();
}

static bool bit(const uint64_t *bits, uint64_t c)
{
	return blk_overlay_bit(bits, c);
}

static void clear_bit(uint64_t *bits, uint64_t c)
{
	bits[c / 64] &= ~(1ULL << (c % 64));
}

static const uint8_t *source(const struct harness *h, unsigned s, uint64_t offset)
{
	return h->pattern + s * STRIDE + offset;
}

static void write_all(int fd, const uint8_t *buf, uint64_t len, uint64_t offset)
{
	if (pwrite(fd, buf, len, (off_t)offset) != (ssize_t)len)
		fail("host: pwrite of %llu bytes: %s", (unsigned long long)len, strerror(errno));
}

/* len bytes at offset, zeros past the file's end. */
static void read_all(int fd, uint8_t *buf, uint64_t len, uint64_t offset)
{
	uint64_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, buf + got, len - got, (off_t)(offset + got));
		if (n < 0)
			fail("host: pread: %s", strerror(errno));
		if (n == 0)
			break;
		got += (uint64_t)n;
	}
	memset(buf + got, 0, len - got);
}

/* The clusters of fd's first size bytes that SEEK_DATA reports as data. */
static void data_map(int fd, uint64_t size, uint64_t *bits, size_t words)
{
	memset(bits, 0, words * sizeof(*bits));
	for (off_t pos = 0; (uint64_t)pos < size;) {
		off_t data = lseek(fd, pos, SEEK_DATA);
		if (data < 0 && errno == ENXIO)
			break;
		off_t hole = data < 0 ? -1 : lseek(fd, data, SEEK_HOLE);
		if (hole < 0)
			fail("host: SEEK_DATA/SEEK_HOLE: %s", strerror(errno));
		for (uint64_t c = (uint64_t)data / CLUSTER; c * CLUSTER < (uint64_t)hole; c++)
			blk_overlay_set_bits(bits, c, 1);
		pos = hole;
	}
}

/* The overlay needs holes found to the 4 KiB cluster: a byte written in the third page of
 * a file of four must be data from 8192 to 12288 and nowhere else. */
static bool holes_by_cluster(const char *dir)
{
	char path[96];
	snprintf(path, sizeof(path), "%s/probe", dir);
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return false;
	unlink(path);
	bool ok = ftruncate(fd, 4 * CLUSTER) == 0 && pwrite(fd, "x", 1, 2 * CLUSTER + 5) == 1 &&
		  lseek(fd, 0, SEEK_DATA) == 2 * CLUSTER &&
		  lseek(fd, 2 * CLUSTER, SEEK_HOLE) == 3 * CLUSTER;
	close(fd);
	return ok;
}

static void log_to_stderr(void *opaque, enum mote_log_level level, const char *message)
{
	(void)opaque;
	(void)level;
	fprintf(stderr, "overlay: %s\n", message);
}

/* Created once, files and all: per-input setup would dominate the run. */
static struct harness *harness_get(void)
{
	static int state; /* 0 new, 1 ready, -1 failed */
	static const char *const names[FILES] = {"overlay", "layer0", "layer1", "layer2"};

	if (state)
		return state > 0 ? harness_singleton : NULL;
	state = -1;
	struct harness *h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	strcpy(h->dir, "/dev/shm/mote-fuzz-overlay-XXXXXX");
	if (!mkdtemp(h->dir))
		return NULL;
	harness_singleton = h;
	atexit(harness_remove);
	strcpy(h->far_dir, "/tmp/mote-fuzz-overlay-far-XXXXXX");
	if (!mkdtemp(h->far_dir)) {
		h->far_dir[0] = '\0';
		return NULL;
	}
	if (!holes_by_cluster(h->dir) || !holes_by_cluster(h->far_dir))
		return NULL;
	for (unsigned i = 0; i < FILES; i++)
		snprintf(h->path[i], sizeof(h->path[i]), "%s/%s", h->dir, names[i]);
	for (unsigned i = 0; i < LAYER_FILES; i++)
		snprintf(h->far[i], sizeof(h->far[i]), "%s/layer%u", h->far_dir, i);
	snprintf(h->base, sizeof(h->base), "%s/base", h->dir);
	snprintf(h->link, sizeof(h->link), "%s/link", h->dir);
	snprintf(h->missing, sizeof(h->missing), "%s/missing", h->dir);
	snprintf(h->missing_dir, sizeof(h->missing_dir), "%s/layer", h->missing);
	snprintf(h->directory, sizeof(h->directory), "%s/directory", h->dir);
	for (unsigned i = 0; i < MAX_FROZEN; i++)
		snprintf(h->frozen[i], sizeof(h->frozen[i]), "%s/frozen%u", h->dir, i);
	if (mkdir(h->directory, 0700) != 0 || symlink("overlay", h->link) != 0)
		return NULL;
	h->base_fd = open(h->base, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
	if (h->base_fd < 0)
		return NULL;
	uint64_t x = 0x9e3779b97f4a7c15ULL;
	for (size_t i = 0; i < sizeof(h->pattern); i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		h->pattern[i] = (uint8_t)(x >> 24);
	}
	if (getenv("FUZZ_OVERLAY_LOG"))
		h->log.fn = log_to_stderr;
	state = 1;
	return h;
}

/* The base: the pattern's first size bytes, written only where it grew. */
static void base_prepare(struct harness *h, uint64_t size, uint64_t want)
{
	if (size != h->base_size) {
		uint64_t old = h->base_size < size ? h->base_size : size;
		if (ftruncate(h->base_fd, (off_t)size) != 0)
			fail("host: sizing the base: %s", strerror(errno));
		write_all(h->base_fd, source(h, SOURCE_BASE, old), size - old, old);
		h->base_size = size;
	}
	memcpy(h->base_model, source(h, SOURCE_BASE, 0), size);
	memset(h->base_model + size, 0, want - size);
}

static uint64_t spec_size(const struct file_spec *spec, uint64_t want, uint64_t base_size)
{
	int64_t near = (int64_t)want + (int16_t)spec->size_arg;

	switch (spec->size_mode % 8) {
	case SIZE_BASE:
		return base_size;
	case SIZE_EMPTY:
		return 0;
	case SIZE_NEAR:
		return near < 0 ? 0 : near > (int64_t)MAX_FILE ? MAX_FILE : (uint64_t)near;
	case SIZE_ANY:
		return spec->size_arg % (MAX_FILE + 1);
	default:
		return want;
	}
}

/* Rewrites file i as spec says: gone, a directory, a FIFO, or a sparse file whose data are
 * its extents. */
static void file_prepare(struct harness *h, unsigned i, const struct file_spec *spec, uint64_t want)
{
	struct file_model *m = &h->file[i];
	unsigned mode = spec->size_mode % 8;
	struct stat st;

	if (lstat(h->where[i], &st) == 0 && !S_ISREG(st.st_mode) &&
	    (S_ISDIR(st.st_mode) ? rmdir(h->where[i]) : unlink(h->where[i])) != 0)
		fail("host: removing %s: %s", h->where[i], strerror(errno));
	m->exists = mode != SIZE_MISSING;
	m->type = mode == SIZE_DIRECTORY ? S_IFDIR : mode == SIZE_FIFO ? S_IFIFO : S_IFREG;
	if (!m->exists || m->type != S_IFREG) {
		if (unlink(h->where[i]) != 0 && errno != ENOENT)
			fail("host: unlink %s: %s", h->where[i], strerror(errno));
		int err = m->type == S_IFDIR   ? mkdir(h->where[i], 0700)
			  : m->type == S_IFIFO ? mkfifo(h->where[i], 0600)
					       : 0;
		if (err)
			fail("host: making %s: %s", h->where[i], strerror(errno));
		return;
	}
	m->size = spec_size(spec, want, h->base_size);
	memset(m->data, 0, sizeof(m->data));
	memset(m->content, 0, m->size);
	int fd = open(h->where[i], O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0640);
	if (fd < 0 || fchmod(fd, 0640) != 0)
		fail("host: %s: %s", h->where[i], strerror(errno));
	for (unsigned e = 0; e < MAX_EXTENTS && m->size; e++) {
		uint64_t offset = spec->extent[e].offset % m->size;
		uint64_t len = spec->extent[e].len;
		if (len > m->size - offset)
			len = m->size - offset;
		if (!len)
			continue;
		const uint8_t *bytes = source(h, SOURCE_FILE + i, offset);
		write_all(fd, bytes, len, offset);
		memcpy(m->content + offset, bytes, len);
		uint64_t first = offset / CLUSTER;
		blk_overlay_set_bits(m->data, first, (offset + len - 1) / CLUSTER - first + 1);
	}
	if (ftruncate(fd, (off_t)m->size) != 0)
		fail("host: sizing %s: %s", h->where[i], strerror(errno));
	close(fd);
}

/* The file layer i names: one of h->file (its index), or -1 with *path set. */
static int layer_file(const struct harness *h, const struct header *hdr, unsigned i,
		      const char **path)
{
	switch (hdr->layer_name[i] % 8) {
	case NAME_NEXT:
		*path = h->where[LAYER_FILE((i + 1) % LAYER_FILES)];
		return LAYER_FILE((i + 1) % LAYER_FILES);
	case NAME_OVERLAY:
		*path = h->path[OVERLAY_FILE];
		return OVERLAY_FILE;
	case NAME_BASE:
		*path = h->base;
		return -1;
	case NAME_MISSING:
		*path = h->missing;
		return -1;
	case NAME_DIRECTORY:
		*path = h->directory;
		return -1;
	case NAME_NULL:
		*path = NULL;
		return -1;
	default:
		*path = h->where[LAYER_FILE(i)];
		return LAYER_FILE(i);
	}
}

/* What blk_overlay_open must answer, in the order it looks (blk_overlay.h). */
static int expected_open(const struct harness *h, const struct header *hdr, unsigned layers,
			 uint64_t want)
{
	const struct file_model *own = &h->file[OVERLAY_FILE];
	uint64_t own_size = own->exists ? own->size : 0; /* created empty */

	if (hdr->flags & FLAG_NO_BASE)
		return -ENOENT;
	if (hdr->locks & LOCK_BASE)
		return -EBUSY;
	if (hdr->flags & FLAG_OVERLAY_IS_BASE)
		return -EINVAL;
	if (own->exists && own->type != S_IFREG)
		return own->type == S_IFDIR ? -EISDIR : -EMEDIUMTYPE;
	if ((hdr->locks & LOCK_OVERLAY) && own->exists)
		return -EBUSY;
	if (hdr->flags & FLAG_KEEP)
		return own_size > want ? -EINVAL : 0;
	if (own_size != 0 && own_size != want)
		return -EINVAL;
	for (unsigned i = 0; i < layers; i++) {
		const char *path;
		int f = layer_file(h, hdr, i, &path);
		if (f == OVERLAY_FILE || !path)
			return -EINVAL; /* the overlay is also a layer; a layer without a path */
		if (path == h->missing || (f >= 0 && !h->file[f].exists))
			return -ENOENT;
		if (path == h->directory || (f >= 0 && h->file[f].type == S_IFDIR))
			return -EISDIR;
		if (f >= 0 && h->file[f].type == S_IFIFO)
			return -EMEDIUMTYPE;
		if ((f >= 0 ? h->file[f].size : h->base_size) != want)
			return -EINVAL;
	}
	return 0;
}

/* The overlay's file must be as the model says: there or not, its size, bytes, data
 * clusters and mode. */
static void check_overlay_file(struct harness *h, const char *when, bool exists, uint64_t size,
			       const uint8_t *content, const uint64_t *data, bool ours)
{
	const char *path = h->path[OVERLAY_FILE];
	uint64_t map[FILE_WORDS];
	struct stat st;

	if (stat(path, &st) != 0) {
		if (exists || errno != ENOENT)
			fail("%s: the overlay is gone: %s", when, strerror(errno));
		return;
	}
	if (!exists)
		fail("%s: an overlay of %llu bytes where there was none", when,
		     (unsigned long long)st.st_size);
	if ((uint64_t)st.st_size != size)
		fail("%s: the overlay has %llu bytes, not %llu", when,
		     (unsigned long long)st.st_size, (unsigned long long)size);
	if (ours && (st.st_mode & 07777) != 0640)
		fail("%s: the overlay's mode is %o, not 0640", when, st.st_mode & 07777);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		fail("host: %s: %s", path, strerror(errno));
	read_all(fd, h->scratch, size, 0);
	data_map(fd, size, map, FILE_WORDS);
	close(fd);
	if (memcmp(h->scratch, content, size) != 0)
		fail("%s: the overlay's bytes changed", when);
	for (uint64_t c = 0; c * CLUSTER < size; c++)
		if (bit(map, c) != bit(data, c))
			fail("%s: the overlay's cluster %llu is %s", when, (unsigned long long)c,
			     bit(map, c) ? "data where there was a hole"
					 : "a hole where there was data");
}

/* No temporary file, no spare link, nothing but the harness's own files (and the new
 * overlay of a restore open and not committed). */
static void check_directory(const struct harness *h, const char *when)
{
	const char *temp = h->s.ov ? strrchr(blk_overlay_file_path(h->s.ov), '/') : NULL;
	static const char *const known[] = {"base",    "layer0",  "layer1",    "layer2",
					    "overlay", "link",	  "directory", "frozen0",
					    "frozen1", "frozen2", "frozen3"};
	DIR *dir = opendir(h->dir);
	struct dirent *entry;

	if (!dir)
		fail("host: %s: %s", h->dir, strerror(errno));
	while ((entry = readdir(dir))) {
		bool ok = entry->d_name[0] == '.';
		for (size_t i = 0; i < sizeof(known) / sizeof(known[0]) && !ok; i++)
			ok = strcmp(entry->d_name, known[i]) == 0;
		ok = ok || (temp && strcmp(entry->d_name, temp + 1) == 0);
		if (!ok)
			fail("%s: %s left in the directory", when, entry->d_name);
	}
	closedir(dir);
}

static void check_base(struct harness *h)
{
	struct stat st, named;

	if (fstat(h->base_fd, &st) != 0 || stat(h->base, &named) != 0 ||
	    st.st_ino != named.st_ino || (uint64_t)st.st_size != h->base_size)
		fail("the base was replaced or resized");
	read_all(h->base_fd, h->scratch, h->base_size, 0);
	if (memcmp(h->scratch, source(h, SOURCE_BASE, 0), h->base_size) != 0)
		fail("the base changed");
}

/* What a read of the disk may give, cluster by cluster. */
enum expect {
	EXPECT_SESSION,	 /* the overlay where present and not pending, else the base */
	EXPECT_REOPENED, /* the overlay where its file has data, else the base */
	EXPECT_RESTORED, /* the same, but a hole left present (a dropped write) may have been
			    frozen as zeros (read as such) or as a hole (read from the base) */
};

static bool same(const uint8_t *got, const uint8_t *want, uint64_t len)
{
	return memcmp(got, want, len) == 0;
}

static bool cluster_reads(const struct harness *h, enum expect how, uint64_t c, uint64_t from,
			  uint64_t len, const uint8_t *got)
{
	const struct session *s = &h->s;
	const uint8_t *overlay = h->overlay_model + c * CLUSTER + from;
	const uint8_t *base = h->base_model + c * CLUSTER + from;

	switch (how) {
	case EXPECT_SESSION:
		return same(got, bit(s->present, c) && !bit(s->pending, c) ? overlay : base, len);
	case EXPECT_REOPENED:
		return same(got, bit(s->data, c) ? overlay : base, len);
	default:
		if (bit(s->present, c) && !bit(s->data, c))
			return same(got, overlay, len) || same(got, base, len);
		return same(got, bit(s->data, c) ? overlay : base, len);
	}
}

/* Reads [offset, offset + len) as virtio-blk does (blk_request.c): run by run, from the
 * overlay or the base, zeros past the base's end; then compares it with the model and,
 * with no write in flight, with what the guest wrote where that is defined. */
static void check_disk(struct harness *h, struct blk_overlay *ov, enum expect how, uint64_t offset,
		       uint64_t len, const char *when)
{
	const struct session *s = &h->s;
	bool quiet = !s->flight[0].used && !s->flight[1].used;

	for (uint64_t pos = offset; pos < offset + len;) {
		bool present;
		uint64_t run = blk_overlay_run(ov, pos, offset + len - pos, &present);
		if (run == 0 || run > offset + len - pos)
			fail("%s: a run of %llu bytes at %llu", when, (unsigned long long)run,
			     (unsigned long long)pos);
		read_all(present ? ov->fd : ov->base_fd, h->scratch + pos - offset, run, pos);
		pos += run;
	}
	for (uint64_t pos = offset; pos < offset + len;) {
		uint64_t c = pos / CLUSTER, from = pos % CLUSTER;
		uint64_t n =
		    CLUSTER - from < offset + len - pos ? CLUSTER - from : offset + len - pos;
		const uint8_t *got = h->scratch + pos - offset;
		if (!cluster_reads(h, how, c, from, n, got))
			fail(
			    "%s: cluster %llu (bytes %llu+%llu) reads wrong: present %d pending %d "
			    "data %d",
			    when, (unsigned long long)c, (unsigned long long)from,
			    (unsigned long long)n, bit(s->present, c), bit(s->pending, c),
			    bit(s->data, c));
		if (quiet && !bit(s->undefined, c) && !same(got, h->written + pos, n))
			fail("%s: cluster %llu (bytes %llu+%llu) is not what was written", when,
			     (unsigned long long)c, (unsigned long long)from,
			     (unsigned long long)n);
		pos += n;
	}
}

static bool model_waits(const struct session *s, uint64_t offset, uint64_t len)
{
	uint64_t end = offset + len;

	return (offset % CLUSTER && bit(s->pending, offset / CLUSTER)) ||
	       (end % CLUSTER && bit(s->pending, (end - 1) / CLUSTER));
}

/* A write starts: it waits, or it is prepared and the clusters it covers read as before. */
static bool write_start(struct harness *h, struct flight *f, uint64_t offset, uint64_t len)
{
	struct session *s = &h->s;
	uint64_t first = offset / CLUSTER, last = (offset + len - 1) / CLUSTER;
	bool waits = blk_overlay_write_waits(s->ov, offset, len);

	if (waits != model_waits(s, offset, len))
		fail("a write of %llu+%llu %s", (unsigned long long)offset, (unsigned long long)len,
		     waits ? "waits for nothing" : "does not wait");
	if (waits)
		return false;
	int err = blk_overlay_prepare_write(s->ov, offset, len);
	if (err)
		fail("prepare_write %llu+%llu: %s", (unsigned long long)offset,
		     (unsigned long long)len, strerror(-err));
	for (uint64_t c = first; c <= last; c++) {
		bool partial =
		    (c == first && offset % CLUSTER) || (c == last && (offset + len) % CLUSTER);
		if (!bit(s->present, c) && partial) {
			memcpy(h->overlay_model + c * CLUSTER, h->base_model + c * CLUSTER,
			       CLUSTER);
			blk_overlay_set_bits(s->data, c, 1);
		} else if (!bit(s->present, c)) {
			blk_overlay_set_bits(s->pending, c, 1);
		}
		blk_overlay_set_bits(s->present, c, 1);
		blk_overlay_set_bits(s->since, c, 1);
	}
	*f = (struct flight){
	    .used = true, .offset = offset, .len = len, .source = SOURCE_WRITE + s->writes++ % 16};
	check_disk(h, s->ov, EXPECT_SESSION, offset, len, "a write prepared");
	return true;
}

/* Its data reach the overlay's file. */
static void write_land(struct harness *h, struct flight *f)
{
	struct session *s = &h->s;
	const uint8_t *bytes = source(h, f->source, f->offset);
	uint64_t first = f->offset / CLUSTER, last = (f->offset + f->len - 1) / CLUSTER;

	write_all(s->ov->fd, bytes, f->len, f->offset);
	memcpy(h->overlay_model + f->offset, bytes, f->len);
	memcpy(h->written + f->offset, bytes, f->len);
	blk_overlay_set_bits(s->data, first, last - first + 1);
	for (uint64_t c = first; c <= last; c++)
		if (f->offset <= c * CLUSTER && (c + 1) * CLUSTER <= f->offset + f->len)
			clear_bit(s->undefined, c);
	f->landed = true;
}

/* It ended: landed, or dropped (what it covered whole is undefined then). */
static void write_end(struct harness *h, struct flight *f)
{
	struct session *s = &h->s;
	uint64_t first = f->offset / CLUSTER, last = (f->offset + f->len - 1) / CLUSTER;

	blk_overlay_write_done(s->ov, f->offset, f->len);
	for (uint64_t c = first; c <= last; c++) {
		clear_bit(s->pending, c);
		if (!f->landed && f->offset <= c * CLUSTER &&
		    (c + 1) * CLUSTER <= f->offset + f->len)
			blk_overlay_set_bits(s->undefined, c, 1);
	}
	f->used = false;
	check_disk(h, s->ov, EXPECT_SESSION, f->offset, f->len, "a write ended");
}

static void writes_finish(struct harness *h)
{
	for (unsigned i = 0; i < FLIGHTS; i++) {
		struct flight *f = &h->s.flight[i];
		if (f->used && !f->landed)
			write_land(h, f);
		if (f->used)
			write_end(h, f);
	}
}

/* A freeze writes a layer of the clusters written since the previous one (all that are
 * present, whole), then forgets them. */
static void freeze(struct harness *h, bool whole)
{
	struct session *s = &h->s;
	const char *path = h->frozen[s->frozen++];
	uint64_t map[DISK_WORDS];
	struct stat st;

	writes_finish(h); /* no request may be in flight */
	int err = blk_overlay_freeze(s->ov, path, whole);
	if (err)
		fail("freeze into %s: %s", path, strerror(-err));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0 || (uint64_t)st.st_size != s->want)
		fail("the layer frozen is not there, or not of the overlay's size");
	data_map(fd, s->want, map, DISK_WORDS);
	close(fd);
	const uint64_t *held = whole ? s->present : s->since;
	for (uint64_t c = 0; c * CLUSTER < s->want; c++) {
		/* A hole left present by a dropped write may go either way. */
		if (bit(map, c) != bit(held, c) && !(bit(held, c) && !bit(s->data, c)))
			fail("the layer frozen %s cluster %llu", bit(map, c) ? "holds" : "lacks",
			     (unsigned long long)c);
	}
	memset(s->since, 0, sizeof(s->since));
	for (size_t w = 0; w < (s->want / CLUSTER + 63) / 64; w++)
		if (s->ov->since[w])
			fail("a freeze left clusters written since");
}

/* A freeze that fails changes nothing: what was written since is kept for the next one,
 * and no file is left. */
static void freeze_refused(struct harness *h, const char *path, bool whole)
{
	struct blk_overlay *ov = h->s.ov;
	size_t bytes = (h->s.want / CLUSTER + 63) / 64 * sizeof(uint64_t);
	uint64_t since[DISK_WORDS];

	writes_finish(h);
	memcpy(since, ov->since, bytes);
	if (blk_overlay_freeze(ov, path, whole) == 0)
		fail("a freeze into %s succeeded", path);
	if (memcmp(since, ov->since, bytes) != 0)
		fail("a freeze refused forgot what was written since");
	check_directory(h, "a freeze refused");
}

static void op_run(struct harness *h, const struct op *op)
{
	struct session *s = &h->s;
	uint64_t sectors = s->disk_bytes / SECTOR;
	struct flight *f = &s->flight[op->arg % FLIGHTS];
	struct flight now = {0};

	if (!sectors)
		return;
	uint64_t offset = op->sector % sectors * SECTOR;
	uint64_t len = (op->len % 256 + 1) * SECTOR;
	if (len > s->disk_bytes - offset)
		len = s->disk_bytes - offset;
	switch (op->kind % OP_KINDS) {
	case OP_WRITE:
		if (write_start(h, &now, offset, len)) {
			write_land(h, &now);
			write_end(h, &now);
		}
		break;
	case OP_READ:
		check_disk(h, s->ov, EXPECT_SESSION, offset, len, "a read");
		break;
	case OP_START:
		if (!f->used)
			write_start(h, f, offset, len);
		break;
	case OP_LAND:
		if (f->used && !f->landed)
			write_land(h, f);
		break;
	case OP_END:
		if (f->used)
			write_end(h, f);
		break;
	default:
		if (op->arg & FREEZE_NO_DIRECTORY)
			freeze_refused(h, h->missing_dir, op->arg & FREEZE_WHOLE);
		else if (op->arg & FREEZE_ONTO_DIRECTORY)
			freeze_refused(h, h->directory, op->arg & FREEZE_WHOLE);
		else if (s->frozen < MAX_FROZEN - 1)
			freeze(h, op->arg & FREEZE_WHOLE);
		break;
	}
}

static int overlay_open(struct harness *h, const char *base, const char *overlay, bool restore,
			const char *const *layers, unsigned count, struct blk_overlay **ov)
{
	struct blk_overlay_options options = {.base = base,
					      .overlay = overlay,
					      .restore = restore,
					      .layer_count = count,
					      .layers = layers};
	return blk_overlay_open(&options, &h->log, ov);
}

/* Alone, or as one disk among others that have nothing to commit. */
static void commit(struct blk_overlay *ov, bool among)
{
	struct blk_overlay *all[3] = {NULL, ov, NULL};
	int err = among ? blk_overlay_commit(all, 3) : blk_overlay_commit(&ov, 1);

	if (err)
		fail("commit: %s", strerror(-err));
	if (strcmp(blk_overlay_file_path(ov), ov->path) != 0)
		fail("committed, the overlay is still %s", blk_overlay_file_path(ov));
}

/* The overlay as a restore builds it: the base, then each layer's data clusters. */
static void model_restore(struct harness *h, const struct header *hdr, unsigned layers)
{
	struct session *s = &h->s;
	size_t words = (s->want / CLUSTER + 63) / 64;

	memset(h->overlay_model, 0, s->want);
	for (unsigned i = 0; i < layers; i++) {
		const char *path;
		int f = layer_file(h, hdr, i, &path);
		for (uint64_t c = 0; c * CLUSTER < s->want; c++) {
			if (f >= 0 && !bit(h->file[f].data, c))
				continue;
			const uint8_t *from = f >= 0 ? h->file[f].content : h->base_model;
			memcpy(h->overlay_model + c * CLUSTER, from + c * CLUSTER, CLUSTER);
			blk_overlay_set_bits(s->present, c, 1);
		}
	}
	memcpy(s->data, s->present, words * sizeof(uint64_t));
}

/* The overlay as it is kept: its file, grown to the overlay's size, all written since. */
static void model_keep(struct harness *h)
{
	struct session *s = &h->s;
	const struct file_model *own = &h->file[OVERLAY_FILE];
	uint64_t size = own->exists ? own->size : 0;
	size_t words = (s->want / CLUSTER + 63) / 64;

	memcpy(h->overlay_model, own->content, size);
	memset(h->overlay_model + size, 0, s->want - size);
	if (size)
		memcpy(s->present, own->data, words * sizeof(uint64_t));
	memcpy(s->data, s->present, words * sizeof(uint64_t));
	memcpy(s->since, s->present, words * sizeof(uint64_t));
}

/* The overlay's presence map must be its file's data. */
static void check_present(struct harness *h, struct blk_overlay *ov, const char *when)
{
	uint64_t map[DISK_WORDS];
	size_t words = (h->s.want / CLUSTER + 63) / 64;

	data_map(ov->fd, h->s.want, map, DISK_WORDS);
	if (memcmp(map, ov->present, words * sizeof(uint64_t)) != 0)
		fail("%s: the overlay's data clusters are not the present ones", when);
}

/* The overlay left by the session, reopened as it is: what it held. */
static void reopen(struct harness *h, const char *overlay)
{
	struct blk_overlay *ov;
	size_t words = (h->s.want / CLUSTER + 63) / 64;

	int err = overlay_open(h, h->base, overlay, false, NULL, 0, &ov);
	if (err)
		fail("reopening the overlay: %s", strerror(-err));
	if (memcmp(ov->since, ov->present, words * sizeof(uint64_t)) != 0)
		fail("reopened, not all of the overlay counts as written since");
	check_disk(h, ov, EXPECT_REOPENED, 0, h->s.disk_bytes, "reopened");
	blk_overlay_close(ov);
}

/* The layers frozen, over those the session was restored from: the disk as it was left. */
static void restore_frozen(struct harness *h, const char *overlay, const char *const *layers,
			   unsigned count)
{
	const char *all[LAYER_FILES + MAX_FROZEN];
	struct blk_overlay *ov;

	memcpy(all, layers, count * sizeof(*all));
	for (unsigned i = 0; i < h->s.frozen; i++)
		all[count + i] = h->frozen[i];
	int err = overlay_open(h, h->base, overlay, true, all, count + h->s.frozen, &ov);
	if (err)
		fail("restoring the layers frozen: %s", strerror(-err));
	for (size_t w = 0; w < (h->s.want / CLUSTER + 63) / 64; w++)
		if (ov->since[w])
			fail("restored, clusters count as written since");
	commit(ov, false);
	check_present(h, ov, "restored from the layers frozen");
	check_disk(h, ov, EXPECT_RESTORED, 0, h->s.disk_bytes, "restored from the layers frozen");
	blk_overlay_close(ov);
}

/* Takes the locks another VM would hold: the fd locking the overlay, or -1. */
static int locks_take(struct harness *h, uint8_t locks)
{
	int fd = -1;

	if (locks & (LOCK_BASE | LOCK_BASE_SHARED) &&
	    flock(h->base_fd, (locks & LOCK_BASE ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0)
		fail("host: locking the base: %s", strerror(errno));
	if (locks & LOCK_OVERLAY && h->file[OVERLAY_FILE].exists &&
	    h->file[OVERLAY_FILE].type == S_IFREG) {
		fd = open(h->path[OVERLAY_FILE], O_RDONLY | O_CLOEXEC);
		if (fd < 0 || flock(fd, LOCK_SH | LOCK_NB) != 0)
			fail("host: locking the overlay: %s", strerror(errno));
	}
	return fd;
}

static void locks_release(struct harness *h, int fd)
{
	flock(h->base_fd, LOCK_UN);
	if (fd >= 0)
		close(fd);
}

/* The overlay's file as it was before the open (a restore that failed or was not
 * committed must leave it so); while a restore is open, a missing one has been created
 * empty. Through a dangling link, the file created is kept (blk_overlay.c: created only
 * when the open made the name). */
static void check_overlay_as_before(struct harness *h, const char *when, bool open, bool dangling)
{
	const struct file_model *own = &h->file[OVERLAY_FILE];
	uint64_t empty[FILE_WORDS] = {0};
	struct stat st;

	if (own->exists && own->type != S_IFREG) {
		if (lstat(h->path[OVERLAY_FILE], &st) != 0 || (st.st_mode & S_IFMT) != own->type)
			fail("%s: the overlay's directory or FIFO is gone", when);
	} else if (own->exists)
		check_overlay_file(h, when, true, own->size, own->content, own->data, true);
	else
		check_overlay_file(h, when, open || dangling, 0, (const uint8_t *)empty, empty,
				   false);
}

/* Modulo MAX_BASE + 1, shifted right by the top three bits: small bases are the most
 * frequent, and the fastest. */
static uint64_t header_base_size(const struct header *hdr)
{
	return hdr->base_size % (MAX_BASE + 1) >> (hdr->base_size >> 29);
}

/* The files, as the header says the snapshot left them: the base, the layers named (each
 * file once) and the overlay. */
static void files_prepare(struct harness *h, const struct header *hdr, const struct files *files,
			  unsigned count, const char **layers)
{
	bool prepared[FILES] = {false};

	base_prepare(h, header_base_size(hdr), h->s.want);
	for (unsigned f = 0; f < FILES; f++)
		h->where[f] = h->path[f];
	for (unsigned i = 0; i < count; i++)
		if (hdr->layer_name[i] % 8 == NAME_FAR)
			h->where[LAYER_FILE(i)] = h->far[i];
	for (unsigned i = 0; i < count; i++) {
		int f = layer_file(h, hdr, i, &layers[i]);
		if (f >= 0 && !prepared[f])
			file_prepare(h, (unsigned)f, &files->file[f], h->s.want);
		if (f >= 0)
			prepared[f] = true;
	}
	if (!prepared[OVERLAY_FILE])
		file_prepare(h, OVERLAY_FILE, &files->file[OVERLAY_FILE], h->s.want);
}

/* What the guest reads at first: the overlay where present, the base elsewhere. */
static void model_opened(struct harness *h, const struct header *hdr, unsigned count)
{
	struct session *s = &h->s;

	if (hdr->flags & FLAG_KEEP)
		model_keep(h);
	else
		model_restore(h, hdr, count);
	memcpy(h->written, h->overlay_model, s->want);
	for (uint64_t c = 0; c * CLUSTER < s->want; c++)
		if (!bit(s->present, c))
			memcpy(h->written + c * CLUSTER, h->base_model + c * CLUSTER, CLUSTER);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct harness *h = harness_get();
	struct header hdr = template;
	struct files files = template_files;
	const char *layers[LAYER_FILES];

	if (!h)
		abort(); /* the host, not the input: no run would mean anything */
	struct session *s = &h->s;
	for (size_t i = 0; i < sizeof(hdr) && i < size; i++)
		((uint8_t *)&hdr)[i] ^= data[i];
	size_t ops = sizeof(hdr), ops_end = ops + hdr.ops % (MAX_OPS + 1) * sizeof(struct op);
	for (size_t i = 0; i < sizeof(files) && ops_end + i < size; i++)
		((uint8_t *)&files)[i] ^= data[ops_end + i];
	memset(s, 0, sizeof(*s));
	uint64_t base_size = header_base_size(&hdr);
	s->want = (base_size + CLUSTER - 1) / CLUSTER * CLUSTER;
	s->disk_bytes = (base_size + SECTOR - 1) / SECTOR * SECTOR;
	bool keep = hdr.flags & FLAG_KEEP;
	unsigned count = keep ? 0 : 3 - (hdr.flags >> FLAG_LAYERS_SHIFT & 3);
	files_prepare(h, &hdr, &files, count, layers);

	const char *base = hdr.flags & FLAG_NO_BASE ? h->missing : h->base;
	const char *overlay = hdr.flags & FLAG_LINK ? h->link : h->path[OVERLAY_FILE];
	if (hdr.flags & FLAG_OVERLAY_IS_BASE)
		overlay = h->base;
	bool dangling =
	    (hdr.flags & (FLAG_LINK | FLAG_NO_BASE | FLAG_OVERLAY_IS_BASE)) == FLAG_LINK &&
	    !(hdr.locks & LOCK_BASE) && !h->file[OVERLAY_FILE].exists;
	int expected = expected_open(h, &hdr, count, s->want);
	int locked = locks_take(h, hdr.locks);
	int err = overlay_open(h, base, overlay, !keep, layers, count, &s->ov);
	locks_release(h, locked);
	if (err != expected && !(expected == -EISDIR && err == -EMEDIUMTYPE))
		fail("open: %s, where %s was due", strerror(-err), strerror(-expected));
	if (err) {
		check_overlay_as_before(h, "a failed open", false, dangling);
		check_directory(h, "a failed open");
		check_base(h);
		return 0;
	}

	model_opened(h, &hdr, count);
	check_present(h, s->ov, "opened");
	bool ours = h->file[OVERLAY_FILE].exists;
	bool committed = keep || !(hdr.flags & FLAG_NO_COMMIT);
	if (!keep) {
		if (strcmp(blk_overlay_file_path(s->ov), s->ov->path) == 0)
			fail("a restore not committed works on the overlay's file itself");
		check_overlay_as_before(h, "a restore not committed", true, dangling);
		if (committed)
			commit(s->ov, hdr.flags & FLAG_COMMIT_AMONG);
	}
	if (committed)
		check_overlay_file(h, "opened", true, s->want, h->overlay_model, s->data, ours);
	check_disk(h, s->ov, EXPECT_SESSION, 0, s->disk_bytes, "opened");

	for (; ops + sizeof(struct op) <= ops_end && ops + sizeof(struct op) <= size;
	     ops += sizeof(struct op)) {
		struct op op;
		memcpy(&op, data + ops, sizeof(op));
		op_run(h, &op);
	}
	freeze(h, false);
	check_disk(h, s->ov, EXPECT_SESSION, 0, s->disk_bytes, "frozen");
	blk_overlay_close(s->ov);
	s->ov = NULL;

	if (committed) {
		check_overlay_file(h, "closed", true, s->want, h->overlay_model, s->data, ours);
		reopen(h, overlay);
	} else {
		check_overlay_as_before(h, "a restore closed uncommitted", false, dangling);
	}
	check_directory(h, "closed");
	restore_frozen(h, overlay, layers, count);
	check_directory(h, "restored");
	check_base(h);
	return 0;
}
