/* The files fuzz_overlay_layers opens the overlay on: a directory of /dev/shm (tmpfs: holes
 * found to the 4 KiB page, as the overlay needs) and one in /tmp for a layer on another file
 * system, removed at exit or on a failure; in them the base, the layers and the overlay,
 * rewritten for each input as its specs say, with what each holds; the host I/O that reads
 * and writes them, and the locks another VM would hold on them. Its names are that target's
 * alone (the two files are one harness). */
#ifndef MOTE_TESTS_FUZZ_OVERLAY_FILES_H
#define MOTE_TESTS_FUZZ_OVERLAY_FILES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "virtio/blk_overlay.h"

#define CLUSTER BLK_OVERLAY_CLUSTER
#define MAX_BASE (1ULL << 20)
#define MAX_FILE (2 * MAX_BASE + 2 * CLUSTER) /* a layer or overlay "too big" */
#define FILE_WORDS (MAX_FILE / CLUSTER / 64 + 1)
#define MAX_EXTENTS 6
#define MAX_FROZEN 4 /* the last one is the session's final freeze */
/* Each file's data come from a source: source s at offset o is pattern[o + s * STRIDE]. */
#define SOURCE_BASE 0
#define SOURCE_FILE 1  /* + the file's index */
#define SOURCE_WRITE 5 /* + the write's number, modulo 16 */
#define SOURCES 21
#define STRIDE 4099

/* The files modelled: the overlay's, then each layer's own. */
enum { OVERLAY_FILE, LAYER_FILES = 3, FILES = 4 };
#define LAYER_FILE(i) (1 + (i))

/* The input's part that says what each file is (the input: fuzz_overlay_layers.c). */
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

struct file_specs {
	struct file_spec file[FILES]; /* the overlay's, then each layer's */
} __attribute__((packed));

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

struct file_model {
	bool exists;
	mode_t type; /* S_IFREG, S_IFDIR or S_IFIFO */
	uint64_t size;
	uint64_t data[FILE_WORDS]; /* clusters holding data */
	uint8_t content[MAX_FILE]; /* zeros in holes */
};

struct fuzz_overlay_files {
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
};

/* A broken promise, or the host failing: said, the files removed (the input reproduces
 * them), and abort(). */
void fuzz_overlay_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Once per process: the two directories, removed at exit, each checked to find holes to
 * the cluster; every name the harness uses in them (a directory made at directory, a
 * symbolic link from link to the overlay); the base, empty and open; the pattern. NULL
 * when the host fails (the directories made so far are removed at exit all the same). */
struct fuzz_overlay_files *fuzz_overlay_files_create(void);

/* The files, as the snapshot left them: the base of base_size bytes (its model zeros up to
 * want, the overlay's size), the files the first count layers name, layer i as
 * layer_name[i] says (each file once, as specs says), and the overlay; layers[i] is the
 * name layer i passes to the overlay. */
void fuzz_overlay_files_prepare(struct fuzz_overlay_files *files, uint64_t base_size, uint64_t want,
				const uint8_t *layer_name, unsigned count,
				const struct file_specs *specs, const char **layers);

/* The file layer i names as name says (enum layer_name, modulo 8): one of files->file (its
 * index), or -1; *path is the name. */
int fuzz_overlay_layer_file(const struct fuzz_overlay_files *files, uint8_t name, unsigned i,
			    const char **path);

/* Takes the locks (LOCK_*) another VM would hold: the fd locking the overlay, or -1. */
int fuzz_overlay_locks_take(struct fuzz_overlay_files *files, uint8_t locks);
void fuzz_overlay_locks_release(struct fuzz_overlay_files *files, int fd);

static inline const uint8_t *fuzz_overlay_source(const struct fuzz_overlay_files *files, unsigned s,
						 uint64_t offset)
{
	return files->pattern + s * STRIDE + offset;
}

/* len bytes at offset, all of them (a short write fails). */
void fuzz_overlay_write_all(int fd, const uint8_t *buf, uint64_t len, uint64_t offset);

/* len bytes at offset, zeros past the file's end. */
void fuzz_overlay_read_all(int fd, uint8_t *buf, uint64_t len, uint64_t offset);

/* The clusters of fd's first size bytes that SEEK_DATA reports as data, as bits. */
void fuzz_overlay_data_map(int fd, uint64_t size, uint64_t *bits, size_t words);

#endif
