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
 * frozen; the base never changes. The files, rewritten for each input in a directory of
 * /dev/shm, are fuzz_overlay_files.h's; this file holds the input, the model of the disk,
 * the requests and the checks. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_overlay_files.h"
#include "virtio/blk_overlay.h"

#define SECTOR 512ULL
#define DISK_WORDS (MAX_BASE / CLUSTER / 64 + 1)
#define MAX_OPS 32
#define FLIGHTS 2

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input: a header, requests, then the files (struct file_specs). The header's flags: */
#define FLAG_KEEP 0x01	    /* open the overlay as it is, not a restore */
#define FLAG_LAYERS_SHIFT 1 /* two bits: 3 - the number of layers */
#define FLAG_NO_COMMIT 0x08
#define FLAG_LINK 0x10 /* the overlay named through a symbolic link */
#define FLAG_NO_BASE 0x20
#define FLAG_OVERLAY_IS_BASE 0x40
#define FLAG_COMMIT_AMONG 0x80 /* committed in a list with no-ops around it */

struct header {
	uint8_t flags;
	uint32_t base_size; /* header_base_size() */
	uint8_t layer_name[LAYER_FILES];
	uint8_t ops; /* how many requests follow, modulo MAX_OPS + 1 */
	uint8_t locks;
} __attribute__((packed));

/* Eight requests; an overlay holding two clusters and three layers, overlapping, over a
 * base of 17 clusters, the last one partial. */
static const struct header template = {.base_size = 65536 + 1000, .ops = 8};
static const struct file_specs template_specs = {{
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
	struct fuzz_overlay_files *files; /* created once, rewritten for each input */
	struct session s;
	uint8_t overlay_model[MAX_BASE]; /* the overlay's file, zeros in holes */
	uint8_t written[MAX_BASE];	 /* what the guest wrote, where it is defined */
	uint8_t scratch[MAX_FILE];
	struct mote_log log;
};

static bool bit(const uint64_t *bits, uint64_t c)
{
	return blk_overlay_bit(bits, c);
}

static void clear_bit(uint64_t *bits, uint64_t c)
{
	bits[c / 64] &= ~(1ULL << (c % 64));
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
	static struct harness *h;

	if (state)
		return state > 0 ? h : NULL;
	state = -1;
	h = calloc(1, sizeof(*h));
	if (!h || !(h->files = fuzz_overlay_files_create()))
		return NULL;
	if (getenv("FUZZ_OVERLAY_LOG"))
		h->log.fn = log_to_stderr;
	state = 1;
	return h;
}

/* What blk_overlay_open must answer, in the order it looks (blk_overlay.h). */
static int expected_open(const struct harness *h, const struct header *hdr, unsigned layers,
			 uint64_t want)
{
	const struct file_model *own = &h->files->file[OVERLAY_FILE];
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
		int f = fuzz_overlay_layer_file(h->files, hdr->layer_name[i], i, &path);
		if (f == OVERLAY_FILE || !path)
			return -EINVAL; /* the overlay is also a layer; a layer without a path */
		if (path == h->files->missing || (f >= 0 && !h->files->file[f].exists))
			return -ENOENT;
		if (path == h->files->directory || (f >= 0 && h->files->file[f].type == S_IFDIR))
			return -EISDIR;
		if (f >= 0 && h->files->file[f].type == S_IFIFO)
			return -EMEDIUMTYPE;
		if ((f >= 0 ? h->files->file[f].size : h->files->base_size) != want)
			return -EINVAL;
	}
	return 0;
}

/* The overlay's file must be as the model says: there or not, its size, bytes, data
 * clusters and mode. */
static void check_overlay_file(struct harness *h, const char *when, bool exists, uint64_t size,
			       const uint8_t *content, const uint64_t *data, bool ours)
{
	const char *path = h->files->path[OVERLAY_FILE];
	uint64_t map[FILE_WORDS];
	struct stat st;

	if (stat(path, &st) != 0) {
		if (exists || errno != ENOENT)
			fuzz_overlay_fail("%s: the overlay is gone: %s", when, strerror(errno));
		return;
	}
	if (!exists)
		fuzz_overlay_fail("%s: an overlay of %llu bytes where there was none", when,
				  (unsigned long long)st.st_size);
	if ((uint64_t)st.st_size != size)
		fuzz_overlay_fail("%s: the overlay has %llu bytes, not %llu", when,
				  (unsigned long long)st.st_size, (unsigned long long)size);
	if (ours && (st.st_mode & 07777) != 0640)
		fuzz_overlay_fail("%s: the overlay's mode is %o, not 0640", when,
				  st.st_mode & 07777);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		fuzz_overlay_fail("host: %s: %s", path, strerror(errno));
	fuzz_overlay_read_all(fd, h->scratch, size, 0);
	fuzz_overlay_data_map(fd, size, map, FILE_WORDS);
	close(fd);
	if (memcmp(h->scratch, content, size) != 0)
		fuzz_overlay_fail("%s: the overlay's bytes changed", when);
	for (uint64_t c = 0; c * CLUSTER < size; c++)
		if (bit(map, c) != bit(data, c))
			fuzz_overlay_fail("%s: the overlay's cluster %llu is %s", when,
					  (unsigned long long)c,
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
	DIR *dir = opendir(h->files->dir);
	struct dirent *entry;

	if (!dir)
		fuzz_overlay_fail("host: %s: %s", h->files->dir, strerror(errno));
	while ((entry = readdir(dir))) {
		bool ok = entry->d_name[0] == '.';
		for (size_t i = 0; i < sizeof(known) / sizeof(known[0]) && !ok; i++)
			ok = strcmp(entry->d_name, known[i]) == 0;
		ok = ok || (temp && strcmp(entry->d_name, temp + 1) == 0);
		if (!ok)
			fuzz_overlay_fail("%s: %s left in the directory", when, entry->d_name);
	}
	closedir(dir);
}

static void check_base(struct harness *h)
{
	struct stat st, named;

	if (fstat(h->files->base_fd, &st) != 0 || stat(h->files->base, &named) != 0 ||
	    st.st_ino != named.st_ino || (uint64_t)st.st_size != h->files->base_size)
		fuzz_overlay_fail("the base was replaced or resized");
	fuzz_overlay_read_all(h->files->base_fd, h->scratch, h->files->base_size, 0);
	if (memcmp(h->scratch, fuzz_overlay_source(h->files, SOURCE_BASE, 0),
		   h->files->base_size) != 0)
		fuzz_overlay_fail("the base changed");
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
	const uint8_t *base = h->files->base_model + c * CLUSTER + from;

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
			fuzz_overlay_fail("%s: a run of %llu bytes at %llu", when,
					  (unsigned long long)run, (unsigned long long)pos);
		fuzz_overlay_read_all(present ? ov->fd : ov->base_fd, h->scratch + pos - offset,
				      run, pos);
		pos += run;
	}
	for (uint64_t pos = offset; pos < offset + len;) {
		uint64_t c = pos / CLUSTER, from = pos % CLUSTER;
		uint64_t n =
		    CLUSTER - from < offset + len - pos ? CLUSTER - from : offset + len - pos;
		const uint8_t *got = h->scratch + pos - offset;
		if (!cluster_reads(h, how, c, from, n, got))
			fuzz_overlay_fail(
			    "%s: cluster %llu (bytes %llu+%llu) reads wrong: present %d pending %d "
			    "data %d",
			    when, (unsigned long long)c, (unsigned long long)from,
			    (unsigned long long)n, bit(s->present, c), bit(s->pending, c),
			    bit(s->data, c));
		if (quiet && !bit(s->undefined, c) && !same(got, h->written + pos, n))
			fuzz_overlay_fail(
			    "%s: cluster %llu (bytes %llu+%llu) is not what was written", when,
			    (unsigned long long)c, (unsigned long long)from, (unsigned long long)n);
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
		fuzz_overlay_fail("a write of %llu+%llu %s", (unsigned long long)offset,
				  (unsigned long long)len,
				  waits ? "waits for nothing" : "does not wait");
	if (waits)
		return false;
	int err = blk_overlay_prepare_write(s->ov, offset, len);
	if (err)
		fuzz_overlay_fail("prepare_write %llu+%llu: %s", (unsigned long long)offset,
				  (unsigned long long)len, strerror(-err));
	for (uint64_t c = first; c <= last; c++) {
		bool partial =
		    (c == first && offset % CLUSTER) || (c == last && (offset + len) % CLUSTER);
		if (!bit(s->present, c) && partial) {
			memcpy(h->overlay_model + c * CLUSTER, h->files->base_model + c * CLUSTER,
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
	const uint8_t *bytes = fuzz_overlay_source(h->files, f->source, f->offset);
	uint64_t first = f->offset / CLUSTER, last = (f->offset + f->len - 1) / CLUSTER;

	fuzz_overlay_write_all(s->ov->fd, bytes, f->len, f->offset);
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
	const char *path = h->files->frozen[s->frozen++];
	uint64_t map[DISK_WORDS];
	struct stat st;

	writes_finish(h); /* no request may be in flight */
	int err = blk_overlay_freeze(s->ov, path, whole);
	if (err)
		fuzz_overlay_fail("freeze into %s: %s", path, strerror(-err));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0 || (uint64_t)st.st_size != s->want)
		fuzz_overlay_fail("the layer frozen is not there, or not of the overlay's size");
	fuzz_overlay_data_map(fd, s->want, map, DISK_WORDS);
	close(fd);
	const uint64_t *held = whole ? s->present : s->since;
	for (uint64_t c = 0; c * CLUSTER < s->want; c++) {
		/* A hole left present by a dropped write may go either way. */
		if (bit(map, c) != bit(held, c) && !(bit(held, c) && !bit(s->data, c)))
			fuzz_overlay_fail("the layer frozen %s cluster %llu",
					  bit(map, c) ? "holds" : "lacks", (unsigned long long)c);
	}
	memset(s->since, 0, sizeof(s->since));
	for (size_t w = 0; w < (s->want / CLUSTER + 63) / 64; w++)
		if (s->ov->since[w])
			fuzz_overlay_fail("a freeze left clusters written since");
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
		fuzz_overlay_fail("a freeze into %s succeeded", path);
	if (memcmp(since, ov->since, bytes) != 0)
		fuzz_overlay_fail("a freeze refused forgot what was written since");
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
			freeze_refused(h, h->files->missing_dir, op->arg & FREEZE_WHOLE);
		else if (op->arg & FREEZE_ONTO_DIRECTORY)
			freeze_refused(h, h->files->directory, op->arg & FREEZE_WHOLE);
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
		fuzz_overlay_fail("commit: %s", strerror(-err));
	if (strcmp(blk_overlay_file_path(ov), ov->path) != 0)
		fuzz_overlay_fail("committed, the overlay is still %s", blk_overlay_file_path(ov));
}

/* The overlay as a restore builds it: the base, then each layer's data clusters. */
static void model_restore(struct harness *h, const struct header *hdr, unsigned layers)
{
	struct session *s = &h->s;
	size_t words = (s->want / CLUSTER + 63) / 64;

	memset(h->overlay_model, 0, s->want);
	for (unsigned i = 0; i < layers; i++) {
		const char *path;
		int f = fuzz_overlay_layer_file(h->files, hdr->layer_name[i], i, &path);
		for (uint64_t c = 0; c * CLUSTER < s->want; c++) {
			if (f >= 0 && !bit(h->files->file[f].data, c))
				continue;
			const uint8_t *from =
			    f >= 0 ? h->files->file[f].content : h->files->base_model;
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
	const struct file_model *own = &h->files->file[OVERLAY_FILE];
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

	fuzz_overlay_data_map(ov->fd, h->s.want, map, DISK_WORDS);
	if (memcmp(map, ov->present, words * sizeof(uint64_t)) != 0)
		fuzz_overlay_fail("%s: the overlay's data clusters are not the present ones", when);
}

/* The overlay left by the session, reopened as it is: what it held. */
static void reopen(struct harness *h, const char *overlay)
{
	struct blk_overlay *ov;
	size_t words = (h->s.want / CLUSTER + 63) / 64;

	int err = overlay_open(h, h->files->base, overlay, false, NULL, 0, &ov);
	if (err)
		fuzz_overlay_fail("reopening the overlay: %s", strerror(-err));
	if (memcmp(ov->since, ov->present, words * sizeof(uint64_t)) != 0)
		fuzz_overlay_fail("reopened, not all of the overlay counts as written since");
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
		all[count + i] = h->files->frozen[i];
	int err = overlay_open(h, h->files->base, overlay, true, all, count + h->s.frozen, &ov);
	if (err)
		fuzz_overlay_fail("restoring the layers frozen: %s", strerror(-err));
	for (size_t w = 0; w < (h->s.want / CLUSTER + 63) / 64; w++)
		if (ov->since[w])
			fuzz_overlay_fail("restored, clusters count as written since");
	commit(ov, false);
	check_present(h, ov, "restored from the layers frozen");
	check_disk(h, ov, EXPECT_RESTORED, 0, h->s.disk_bytes, "restored from the layers frozen");
	blk_overlay_close(ov);
}

/* The overlay's file as it was before the open (a restore that failed or was not
 * committed must leave it so); while a restore is open, a missing one has been created
 * empty. Through a dangling link, the file created is kept (blk_overlay.c: created only
 * when the open made the name). */
static void check_overlay_as_before(struct harness *h, const char *when, bool open, bool dangling)
{
	const struct file_model *own = &h->files->file[OVERLAY_FILE];
	uint64_t empty[FILE_WORDS] = {0};
	struct stat st;

	if (own->exists && own->type != S_IFREG) {
		if (lstat(h->files->path[OVERLAY_FILE], &st) != 0 ||
		    (st.st_mode & S_IFMT) != own->type)
			fuzz_overlay_fail("%s: the overlay's directory or FIFO is gone", when);
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
			memcpy(h->written + c * CLUSTER, h->files->base_model + c * CLUSTER,
			       CLUSTER);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct harness *h = harness_get();
	struct header hdr = template;
	struct file_specs specs = template_specs;
	const char *layers[LAYER_FILES];

	if (!h)
		abort(); /* the host, not the input: no run would mean anything */
	struct session *s = &h->s;
	for (size_t i = 0; i < sizeof(hdr) && i < size; i++)
		((uint8_t *)&hdr)[i] ^= data[i];
	size_t ops = sizeof(hdr), ops_end = ops + hdr.ops % (MAX_OPS + 1) * sizeof(struct op);
	for (size_t i = 0; i < sizeof(specs) && ops_end + i < size; i++)
		((uint8_t *)&specs)[i] ^= data[ops_end + i];
	memset(s, 0, sizeof(*s));
	uint64_t base_size = header_base_size(&hdr);
	s->want = (base_size + CLUSTER - 1) / CLUSTER * CLUSTER;
	s->disk_bytes = (base_size + SECTOR - 1) / SECTOR * SECTOR;
	bool keep = hdr.flags & FLAG_KEEP;
	unsigned count = keep ? 0 : 3 - (hdr.flags >> FLAG_LAYERS_SHIFT & 3);
	fuzz_overlay_files_prepare(h->files, base_size, s->want, hdr.layer_name, count, &specs,
				   layers);

	const char *base = hdr.flags & FLAG_NO_BASE ? h->files->missing : h->files->base;
	const char *overlay = hdr.flags & FLAG_LINK ? h->files->link : h->files->path[OVERLAY_FILE];
	if (hdr.flags & FLAG_OVERLAY_IS_BASE)
		overlay = h->files->base;
	bool dangling =
	    (hdr.flags & (FLAG_LINK | FLAG_NO_BASE | FLAG_OVERLAY_IS_BASE)) == FLAG_LINK &&
	    !(hdr.locks & LOCK_BASE) && !h->files->file[OVERLAY_FILE].exists;
	int expected = expected_open(h, &hdr, count, s->want);
	int locked = fuzz_overlay_locks_take(h->files, hdr.locks);
	int err = overlay_open(h, base, overlay, !keep, layers, count, &s->ov);
	fuzz_overlay_locks_release(h->files, locked);
	if (err != expected && !(expected == -EISDIR && err == -EMEDIUMTYPE))
		fuzz_overlay_fail("open: %s, where %s was due", strerror(-err),
				  strerror(-expected));
	if (err) {
		check_overlay_as_before(h, "a failed open", false, dangling);
		check_directory(h, "a failed open");
		check_base(h);
		return 0;
	}

	model_opened(h, &hdr, count);
	check_present(h, s->ov, "opened");
	bool ours = h->files->file[OVERLAY_FILE].exists;
	bool committed = keep || !(hdr.flags & FLAG_NO_COMMIT);
	if (!keep) {
		if (strcmp(blk_overlay_file_path(s->ov), s->ov->path) == 0)
			fuzz_overlay_fail(
			    "a restore not committed works on the overlay's file itself");
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