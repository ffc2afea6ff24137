/* `--disk path=IMG[,overlay=FILE][,ro][,id=NAME][,root][,direct]` and the list of disks it builds,
 * shared by the command line and the config file's "drives" (cli_options.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"

static void cli_disk_free(struct cli_disk *disk)
{
	free(disk->path);
	free(disk->id);
	free(disk->overlay);
	memset(disk, 0, sizeof(*disk));
}

int cli_disk_parse(const char *text, struct cli_disk *disk, char *error, size_t error_len)
{
	const char *part = text;

	memset(disk, 0, sizeof(*disk));
	while (*part) {
		size_t n = strcspn(part, ",");
		int ret = 0;

		if (n > 5 && strncmp(part, "path=", 5) == 0)
			ret = cli_replace_part(&disk->path, part + 5, n - 5);
		else if (n > 8 && strncmp(part, "overlay=", 8) == 0)
			ret = cli_replace_part(&disk->overlay, part + 8, n - 8);
		else if (n > 3 && strncmp(part, "id=", 3) == 0)
			ret = cli_replace_part(&disk->id, part + 3, n - 3);
		else if (n == 2 && strncmp(part, "ro", 2) == 0)
			disk->read_only = true;
		else if (n == 4 && strncmp(part, "root", 4) == 0)
			disk->root = true;
		else if (n == 6 && strncmp(part, "direct", 6) == 0)
			disk->direct = true;
		else
			ret = cli_error(error, error_len,
					"--disk %s: unknown part '%.*s' (expected "
					"path=IMG[,overlay=FILE][,ro][,id=NAME][,root][,direct])",
					text, (int)n, part);
		if (ret) {
			cli_disk_free(disk);
			return ret == -ENOMEM ? cli_error(error, error_len, "out of memory") : ret;
		}
		part += n;
		if (*part == ',')
			part++;
	}
	if (!disk->path) {
		cli_disk_free(disk);
		return cli_error(error, error_len, "--disk %s: path=IMG is required", text);
	}
	return 0;
}

int cli_disk_add(struct cli_options *opts, struct cli_disk *disk, char *error, size_t error_len)
{
	unsigned slot = opts->disk_count;
	int ret = 0;

	if (disk->overlay && disk->read_only) {
		ret = cli_error(error, error_len,
				"disk %s: an overlay takes the guest's writes, so the disk cannot "
				"be read-only (drop ro or the overlay)",
				disk->path);
		goto fail;
	}
	if (disk->overlay && strcmp(disk->overlay, disk->path) == 0) {
		ret = cli_error(error, error_len,
				"disk %s: the overlay must be another file than the image",
				disk->path);
		goto fail;
	}
	if (disk->id && strlen(disk->id) > MOTE_DISK_ID_MAX) {
		ret = cli_error(error, error_len, "disk id %s: longer than %d bytes", disk->id,
				MOTE_DISK_ID_MAX);
		goto fail;
	}
	for (unsigned i = 0; i < opts->disk_count; i++) {
		if (!disk->id || !opts->disks[i].id || strcmp(disk->id, opts->disks[i].id) != 0)
			continue;
		if (!cli_origin_replaces(opts->disks[i].origin, disk->origin)) {
			ret = cli_error(error, error_len, "disk id %s: given twice", disk->id);
			goto fail;
		}
		slot = i;
	}
	for (unsigned i = 0; i < opts->disk_count; i++) {
		if (i != slot && disk->root && opts->disks[i].root) {
			ret =
			    cli_error(error, error_len,
				      "disk %s: only one disk can be the root device", disk->path);
			goto fail;
		}
	}
	if (slot == MOTE_MAX_DISKS) {
		ret = cli_error(error, error_len, "disk %s: at most %d disks", disk->path,
				MOTE_MAX_DISKS);
		goto fail;
	}
	if (slot < opts->disk_count)
		cli_disk_free(&opts->disks[slot]);
	else
		opts->disk_count++;
	opts->disks[slot] = *disk;
	memset(disk, 0, sizeof(*disk));
	return 0;
fail:
	cli_disk_free(disk);
	return ret;
}

void cli_disks_free(struct cli_options *opts)
{
	for (unsigned i = 0; i < opts->disk_count; i++)
		cli_disk_free(&opts->disks[i]);
	opts->disk_count = 0;
}
