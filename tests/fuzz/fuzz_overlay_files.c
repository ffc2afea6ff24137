/* The files of fuzz_overlay_layers (fuzz_overlay_files.h). */
#include "fuzz_overlay_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* What the exit handler removes. */
static struct fuzz_overlay_files *created;

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

static void files_remove(void)
{
	if (!created)
		return;
	remove_dir(created->dir);
	if (created->far_dir[0])
		remove_dir(created->far_dir);
}

void fuzz_overlay_fail(const char *fmt, ...)
{
	va_list args;

	va_start(args, fmt);
	fprintf(stderr, "fuzz_overlay_layers: ");
	vfprintf(stderr, fmt, args);
	fprintf(stderr, "\n");
	va_end(args);
	files_remove();
	abort();
}

void fuzz_overlay_write_all(int fd, const uint8_t *buf, uint64_t len, uint64_t offset)
{
	if (pwrite(fd, buf, len, (off_t)offset) != (ssize_t)len)
		fuzz_overlay_fail("host: pwrite of %llu bytes: %s", (unsigned long long)len,
				  strerror(errno));
}

void fuzz_overlay_read_all(int fd, uint8_t *buf, uint64_t len, uint64_t offset)
{
	uint64_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, buf + got, len - got, (off_t)(offset + got));
		if (n < 0)
			fuzz_overlay_fail("host: pread: %s", strerror(errno));
		if (n == 0)
			break;
		got += (uint64_t)n;
	}
	memset(buf + got, 0, len - got);
}

void fuzz_overlay_data_map(int fd, uint64_t size, uint64_t *bits, size_t words)
{
	memset(bits, 0, words * sizeof(*bits));
	for (off_t pos = 0; (uint64_t)pos < size;) {
		off_t data = lseek(fd, pos, SEEK_DATA);
		if (data < 0 && errno == ENXIO)
			break;
		off_t hole = data < 0 ? -1 : lseek(fd, data, SEEK_HOLE);
		if (hole < 0)
			fuzz_overlay_fail("host: SEEK_DATA/SEEK_HOLE: %s", strerror(errno));
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

struct fuzz_overlay_files *fuzz_overlay_files_create(void)
{
	static const char *const names[FILES] = {"overlay", "layer0", "layer1", "layer2"};
	struct fuzz_overlay_files *files = calloc(1, sizeof(*files));

	if (!files)
		return NULL;
	strcpy(files->dir, "/dev/shm/mote-fuzz-overlay-XXXXXX");
	if (!mkdtemp(files->dir))
		return NULL;
	created = files;
	atexit(files_remove);
	strcpy(files->far_dir, "/tmp/mote-fuzz-overlay-far-XXXXXX");
	if (!mkdtemp(files->far_dir)) {
		files->far_dir[0] = '\0';
		return NULL;
	}
	if (!holes_by_cluster(files->dir) || !holes_by_cluster(files->far_dir))
		return NULL;
	for (unsigned i = 0; i < FILES; i++)
		snprintf(files->path[i], sizeof(files->path[i]), "%s/%s", files->dir, names[i]);
	for (unsigned i = 0; i < LAYER_FILES; i++)
		snprintf(files->far[i], sizeof(files->far[i]), "%s/layer%u", files->far_dir, i);
	snprintf(files->base, sizeof(files->base), "%s/base", files->dir);
	snprintf(files->link, sizeof(files->link), "%s/link", files->dir);
	snprintf(files->missing, sizeof(files->missing), "%s/missing", files->dir);
	snprintf(files->missing_dir, sizeof(files->missing_dir), "%s/layer", files->missing);
	snprintf(files->directory, sizeof(files->directory), "%s/directory", files->dir);
	for (unsigned i = 0; i < MAX_FROZEN; i++)
		snprintf(files->frozen[i], sizeof(files->frozen[i]), "%s/frozen%u", files->dir, i);
	if (mkdir(files->directory, 0700) != 0 || symlink("overlay", files->link) != 0)
		return NULL;
	files->base_fd = open(files->base, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
	if (files->base_fd < 0)
		return NULL;
	uint64_t x = 0x9e3779b97f4a7c15ULL;
	for (size_t i = 0; i < sizeof(files->pattern); i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		files->pattern[i] = (uint8_t)(x >> 24);
	}
	return files;
}

/* The base: the pattern's first size bytes, written only where it grew. */
static void base_prepare(struct fuzz_overlay_files *files, uint64_t size, uint64_t want)
{
	if (size != files->base_size) {
		uint64_t old = files->base_size < size ? files->base_size : size;
		if (ftruncate(files->base_fd, (off_t)size) != 0)
			fuzz_overlay_fail("host: sizing the base: %s", strerror(errno));
		fuzz_overlay_write_all(files->base_fd, fuzz_overlay_source(files, SOURCE_BASE, old),
				       size - old, old);
		files->base_size = size;
	}
	memcpy(files->base_model, fuzz_overlay_source(files, SOURCE_BASE, 0), size);
	memset(files->base_model + size, 0, want - size);
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
static void file_prepare(struct fuzz_overlay_files *files, unsigned i, const struct file_spec *spec,
			 uint64_t want)
{
	struct file_model *m = &files->file[i];
	const char *where = files->where[i];
	unsigned mode = spec->size_mode % 8;
	struct stat st;

	if (lstat(where, &st) == 0 && !S_ISREG(st.st_mode) &&
	    (S_ISDIR(st.st_mode) ? rmdir(where) : unlink(where)) != 0)
		fuzz_overlay_fail("host: removing %s: %s", where, strerror(errno));
	m->exists = mode != SIZE_MISSING;
	m->type = mode == SIZE_DIRECTORY ? S_IFDIR : mode == SIZE_FIFO ? S_IFIFO : S_IFREG;
	if (!m->exists || m->type != S_IFREG) {
		if (unlink(where) != 0 && errno != ENOENT)
			fuzz_overlay_fail("host: unlink %s: %s", where, strerror(errno));
		int err = m->type == S_IFDIR   ? mkdir(where, 0700)
			  : m->type == S_IFIFO ? mkfifo(where, 0600)
					       : 0;
		if (err)
			fuzz_overlay_fail("host: making %s: %s", where, strerror(errno));
		return;
	}
	m->size = spec_size(spec, want, files->base_size);
	memset(m->data, 0, sizeof(m->data));
	memset(m->content, 0, m->size);
	int fd = open(where, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0640);
	if (fd < 0 || fchmod(fd, 0640) != 0)
		fuzz_overlay_fail("host: %s: %s", where, strerror(errno));
	for (unsigned e = 0; e < MAX_EXTENTS && m->size; e++) {
		uint64_t offset = spec->extent[e].offset % m->size;
		uint64_t len = spec->extent[e].len;
		if (len > m->size - offset)
			len = m->size - offset;
		if (!len)
			continue;
		const uint8_t *bytes = fuzz_overlay_source(files, SOURCE_FILE + i, offset);
		fuzz_overlay_write_all(fd, bytes, len, offset);
		memcpy(m->content + offset, bytes, len);
		uint64_t first = offset / CLUSTER;
		blk_overlay_set_bits(m->data, first, (offset + len - 1) / CLUSTER - first + 1);
	}
	if (ftruncate(fd, (off_t)m->size) != 0)
		fuzz_overlay_fail("host: sizing %s: %s", where, strerror(errno));
	close(fd);
}

int fuzz_overlay_layer_file(const struct fuzz_overlay_files *files, uint8_t name, unsigned i,
			    const char **path)
{
	switch (name % 8) {
	case NAME_NEXT:
		*path = files->where[LAYER_FILE((i + 1) % LAYER_FILES)];
		return LAYER_FILE((i + 1) % LAYER_FILES);
	case NAME_OVERLAY:
		*path = files->path[OVERLAY_FILE];
		return OVERLAY_FILE;
	case NAME_BASE:
		*path = files->base;
		return -1;
	case NAME_MISSING:
		*path = files->missing;
		return -1;
	case NAME_DIRECTORY:
		*path = files->directory;
		return -1;
	case NAME_NULL:
		*path = NULL;
		return -1;
	default:
		*path = files->where[LAYER_FILE(i)];
		return LAYER_FILE(i);
	}
}

void fuzz_overlay_files_prepare(struct fuzz_overlay_files *files, uint64_t base_size, uint64_t want,
				const uint8_t *layer_name, unsigned count,
				const struct file_specs *specs, const char **layers)
{
	bool prepared[FILES] = {false};

	base_prepare(files, base_size, want);
	for (unsigned f = 0; f < FILES; f++)
		files->where[f] = files->path[f];
	for (unsigned i = 0; i < count; i++)
		if (layer_name[i] % 8 == NAME_FAR)
			files->where[LAYER_FILE(i)] = files->far[i];
	for (unsigned i = 0; i < count; i++) {
		int f = fuzz_overlay_layer_file(files, layer_name[i], i, &layers[i]);
		if (f >= 0 && !prepared[f])
			file_prepare(files, (unsigned)f, &specs->file[f], want);
		if (f >= 0)
			prepared[f] = true;
	}
	if (!prepared[OVERLAY_FILE])
		file_prepare(files, OVERLAY_FILE, &specs->file[OVERLAY_FILE], want);
}

int fuzz_overlay_locks_take(struct fuzz_overlay_files *files, uint8_t locks)
{
	int fd = -1;

	if (locks & (LOCK_BASE | LOCK_BASE_SHARED) &&
	    flock(files->base_fd, (locks & LOCK_BASE ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0)
		fuzz_overlay_fail("host: locking the base: %s", strerror(errno));
	if (locks & LOCK_OVERLAY && files->file[OVERLAY_FILE].exists &&
	    files->file[OVERLAY_FILE].type == S_IFREG) {
		fd = open(files->path[OVERLAY_FILE], O_RDONLY | O_CLOEXEC);
		if (fd < 0 || flock(fd, LOCK_SH | LOCK_NB) != 0)
			fuzz_overlay_fail("host: locking the overlay: %s", strerror(errno));
	}
	return fd;
}

void fuzz_overlay_locks_release(struct fuzz_overlay_files *files, int fd)
{
	flock(files->base_fd, LOCK_UN);
	if (fd >= 0)
		close(fd);
}
