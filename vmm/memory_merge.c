/* Merging a full memory file and its diffs into one full file (mote.h:
 * mote_memory_merge). Firecracker's snapshot-editor rebases a diff onto its base in
 * place; here the result is a new file, so a VM that maps the base keeps what it maps
 * and the inputs stay valid for the restores that name them.
 *
 * The merged memory is built in a memfd: the full file's data extents read into it and
 * checked against the file's checksum, then each diff checked and laid over in order,
 * as a restore does. Writing it is writing a full snapshot of that memory, with the
 * last diff's snapshot id: the state file that diff was taken with names that id, so
 * it restores from the merged file alone. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "guest_memory.h"
#include "output_file.h"
#include "snapshot_memory.h"

/* The full file read into mem, which it sizes: identity is the file's. */
static int merge_load_full(struct guest_memory *mem, const char *path,
			   struct snapshot_memory_identity *identity, const struct mote_log *log)
{
	int fd = snapshot_memory_open(path, false, log);

	if (fd < 0)
		return fd;
	int ret = snapshot_memory_probe(fd, identity, path, log);
	if (!ret)
		ret = snapshot_memory_check_chain(identity, path, NULL, NULL, log);
	if (!ret)
		ret = guest_memory_create(mem, identity->guest_bytes, log);
	if (!ret)
		ret = snapshot_memory_load_full(mem, fd, identity, path, log);
	close(fd);
	return ret;
}

/* One diff, which must apply on the memory whose identity is previous, checked and laid
 * over mem; previous becomes the diff's. */
static int merge_apply_diff(struct guest_memory *mem, const char *path,
			    struct snapshot_memory_identity *previous, const char *previous_path,
			    const struct mote_log *log)
{
	struct snapshot_memory_identity identity;
	int fd = snapshot_memory_open(path, true, log);

	if (fd < 0)
		return fd;
	int ret = snapshot_memory_read_identity(fd, mem->size, &identity, path, log);
	if (!ret)
		ret = snapshot_memory_check_chain(&identity, path, previous, previous_path, log);
	if (!ret)
		ret = snapshot_memory_apply_diff(mem, fd, &identity, true, path, log);
	close(fd);
	if (!ret)
		*previous = identity;
	return ret;
}

int mote_memory_merge(const struct mote_memory_merge_params *params)
{
	struct mote_log log = {params->log, params->log_opaque};
	struct snapshot_memory_identity identity;
	struct output_file out = {.fd = -1};
	struct guest_memory mem;

	if (!params->mem_path || !params->out_path || params->diff_count == 0 ||
	    !params->diff_paths) {
		log_error(&log, "merge: a full memory file, at least one diff and an output file "
				"are required");
		return -EINVAL;
	}
	memset(&mem, 0, sizeof(mem));
	mem.memfd = mem.source_fd = -1;
	int ret = merge_load_full(&mem, params->mem_path, &identity, &log);
	for (unsigned i = 0; i < params->diff_count && !ret; i++)
		ret = merge_apply_diff(&mem, params->diff_paths[i], &identity,
				       i ? params->diff_paths[i - 1] : params->mem_path, &log);
	if (!ret)
		ret = output_file_open(&out, params->out_path, &log);
	if (!ret) {
		/* The last diff's snapshot, now whole: its id, no base. */
		memset(identity.base_id, 0, SNAPSHOT_ID_SIZE);
		ret = snapshot_memory_write(&mem, NULL, out.fd, &identity, params->out_path, &log);
	}
	if (!ret)
		ret = output_file_commit(&out, &log);
	output_file_abandon(&out);
	guest_memory_destroy(&mem);
	return ret;
}
