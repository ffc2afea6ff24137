/* The JSON config file of `mote run --config FILE`. Its shape follows Firecracker's
 * --config-file where the two overlap ("boot-source", "machine-config"), so a
 * Firecracker user recognises it:
 *   {"boot-source": {"kernel_image_path": "vmlinux", "initrd_path": "initrd.cpio.gz",
 *                    "boot_args": "console=ttyS0"},
 *    "machine-config": {"vcpu_count": 2, "mem_size_mib": 256, "track_dirty_pages": false},
 *    "drives": [{"drive_id": "rootfs", "path_on_host": "rootfs.ext4",
 *                "is_root_device": true, "is_read_only": false,
 *                "overlay": "rootfs.overlay"}],
 *    "network-interfaces": [{"iface_id": "eth0", "host_dev_name": "tap0",
 *                            "guest_mac": "06:00:ac:10:00:02"}],
 *    "vsock": {"guest_cid": 3, "uds_path": "/tmp/v.sock"},
 *    "console": "stdio", "console_max_size": "1G", "exit_at_boot": false}
 * Unknown keys are errors, not ignored: a typo must not silently boot something else. */
#include "cli_options.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_keys.h"
#include "json_text.h"

#define CONFIG_FILE_MAX (1 << 20)

/* Every config error starts with "config: " (the format must be a string literal). */
#define config_error(error, error_len, ...) cli_error((error), (error_len), "config: " __VA_ARGS__)

static int take_string(const cJSON *item, const char *where, char **field, char *error,
		       size_t error_len)
{
	if (!cJSON_IsString(item) || !item->valuestring[0])
		return config_error(error, error_len, "%s.%s must be a non-empty string", where,
				    item->string);
	char *copy = strdup(item->valuestring);
	if (!copy)
		return config_error(error, error_len, "out of memory");
	free(*field);
	*field = copy;
	return 0;
}

static int take_uint(const cJSON *item, const char *where, double min, double max, double *value,
		     char *error, size_t error_len)
{
	/* Range first: converting an out-of-range double to an integer is undefined. */
	if (!cJSON_IsNumber(item) || !(item->valuedouble >= min && item->valuedouble <= max) ||
	    item->valuedouble != (double)(long long)item->valuedouble)
		return config_error(error, error_len, "%s.%s must be an integer from %.0f to %.0f",
				    where, item->string, min, max);
	*value = item->valuedouble;
	return 0;
}

static int take_bool(const cJSON *item, const char *where, bool *field, char *error,
		     size_t error_len)
{
	if (!cJSON_IsBool(item))
		return config_error(error, error_len, "%s.%s must be true or false", where,
				    item->string);
	*field = cJSON_IsTrue(item);
	return 0;
}

static int apply_boot_source(struct cli_options *opts, const cJSON *section, char *error,
			     size_t error_len)
{
	const cJSON *item;
	int ret = 0;

	cJSON_ArrayForEach(item, section)
	{
		if (strcmp(item->string, "kernel_image_path") == 0)
			ret = take_string(item, "boot-source", &opts->kernel, error, error_len);
		else if (strcmp(item->string, "initrd_path") == 0)
			ret = take_string(item, "boot-source", &opts->initrd, error, error_len);
		else if (strcmp(item->string, "boot_args") == 0)
			ret = take_string(item, "boot-source", &opts->cmdline, error, error_len);
		else
			ret = config_error(error, error_len, "unknown key boot-source.%s",
					   item->string);
		if (ret)
			return ret;
	}
	return 0;
}

static int apply_machine_config(struct cli_options *opts, const cJSON *section, char *error,
				size_t error_len)
{
	const cJSON *item;
	double value = 0;
	int ret = 0;

	cJSON_ArrayForEach(item, section)
	{
		if (strcmp(item->string, "vcpu_count") == 0) {
			ret = take_uint(item, "machine-config", 1, MOTE_MAX_CPUS, &value, error,
					error_len);
			if (!ret)
				opts->cpus = (unsigned)value;
		} else if (strcmp(item->string, "mem_size_mib") == 0) {
			ret = take_uint(item, "machine-config", 16, 1024 * 1024, &value, error,
					error_len);
			if (!ret && cli_memory_set(opts, (uint64_t)value << 20, error, error_len))
				ret = config_error(
				    error, error_len,
				    "machine-config.mem_size_mib must be even (2 MiB pages)");
		} else if (strcmp(item->string, "track_dirty_pages") == 0) {
			ret = take_bool(item, "machine-config", &opts->track_dirty_pages, error,
					error_len);
		} else {
			ret = config_error(error, error_len, "unknown key machine-config.%s",
					   item->string);
		}
		if (ret)
			return ret;
	}
	return 0;
}

/* Re-reads a reason cli_*_add() wrote into error with the prefix every config error has. */
static int config_reason(char *error, size_t error_len)
{
	char reason[CLI_ERROR_MAX];

	snprintf(reason, sizeof(reason), "%s", error);
	return config_error(error, error_len, "%s", reason);
}

/* One element of "drives", Firecracker's shape; drive_id becomes the disk's id. */
static int apply_drive(struct cli_options *opts, const cJSON *drive, char *error, size_t error_len)
{
	struct cli_disk disk = {.origin = CLI_FROM_CONFIG};
	const cJSON *item;
	int ret = 0;

	if (!cJSON_IsObject(drive))
		return config_error(error, error_len, "each element of drives must be an object");
	cJSON_ArrayForEach(item, drive)
	{
		if (strcmp(item->string, "drive_id") == 0)
			ret = take_string(item, "drives[]", &disk.id, error, error_len);
		else if (strcmp(item->string, "path_on_host") == 0)
			ret = take_string(item, "drives[]", &disk.path, error, error_len);
		else if (strcmp(item->string, "is_root_device") == 0)
			ret = take_bool(item, "drives[]", &disk.root, error, error_len);
		else if (strcmp(item->string, "is_read_only") == 0)
			ret = take_bool(item, "drives[]", &disk.read_only, error, error_len);
		else if (strcmp(item->string, "direct") == 0)
			ret = take_bool(item, "drives[]", &disk.direct, error, error_len);
		else if (strcmp(item->string, "overlay") == 0)
			ret = take_string(item, "drives[]", &disk.overlay, error, error_len);
		else
			ret =
			    config_error(error, error_len, "unknown key drives[].%s", item->string);
		if (ret)
			break;
	}
	if (!ret && !disk.path)
		ret = config_error(error, error_len, "drives[].path_on_host is required");
	if (ret) {
		free(disk.id);
		free(disk.path);
		free(disk.overlay);
		return ret;
	}
	return cli_disk_add(opts, &disk, error, error_len) ? config_reason(error, error_len) : 0;
}

/* One element of "network-interfaces", Firecracker's shape; iface_id becomes the
 * NIC's id. */
static int apply_network_interface(struct cli_options *opts, const cJSON *iface, char *error,
				   size_t error_len)
{
	struct cli_net net = {.origin = CLI_FROM_CONFIG};
	char *mac = NULL;
	const cJSON *item;
	int ret = 0;

	if (!cJSON_IsObject(iface))
		return config_error(error, error_len,
				    "each element of network-interfaces must be an object");
	cJSON_ArrayForEach(item, iface)
	{
		if (strcmp(item->string, "iface_id") == 0)
			ret = take_string(item, "network-interfaces[]", &net.id, error, error_len);
		else if (strcmp(item->string, "host_dev_name") == 0)
			ret = take_string(item, "network-interfaces[]", &net.tap, error, error_len);
		else if (strcmp(item->string, "guest_mac") == 0)
			ret = take_string(item, "network-interfaces[]", &mac, error, error_len);
		else
			ret = config_error(error, error_len, "unknown key network-interfaces[].%s",
					   item->string);
		if (ret)
			break;
	}
	if (!ret && mac) {
		if (cli_mac_parse(mac, net.mac))
			ret = config_error(error, error_len,
					   "network-interfaces[].guest_mac %s: not a unicast MAC "
					   "address like 06:00:ac:10:00:02",
					   mac);
		net.has_mac = true;
	}
	free(mac);
	if (!ret && !net.tap)
		ret = config_error(error, error_len,
				   "network-interfaces[].host_dev_name is required");
	if (ret) {
		free(net.id);
		free(net.tap);
		return ret;
	}
	return cli_net_add(opts, &net, error, error_len) ? config_reason(error, error_len) : 0;
}

/* "vsock": {"guest_cid": 3, "uds_path": "v.sock"}, Firecracker's shape (its vsock_id
 * is accepted and unused: there is one vsock device). */
static int apply_vsock(struct cli_options *opts, const cJSON *vsock, char *error, size_t error_len)
{
	const cJSON *item;
	double cid = -1;
	const char *uds = NULL;

	cJSON_ArrayForEach(item, vsock)
	{
		if (strcmp(item->string, "guest_cid") == 0) {
			/* Any whole number reaches cli_vsock_set, which names the valid range. */
			int ret = take_uint(item, "vsock", 0, UINT32_MAX, &cid, error, error_len);
			if (ret)
				return ret;
		} else if (strcmp(item->string, "uds_path") == 0 && cJSON_IsString(item))
			uds = item->valuestring;
		else if (strcmp(item->string, "vsock_id") == 0 && cJSON_IsString(item))
			continue;
		else
			return config_error(error, error_len, "unknown or malformed key vsock.%s",
					    item->string);
	}
	if (cid < 0)
		return config_error(error, error_len, "vsock.guest_cid is required");
	if (cli_vsock_set(opts, (uint64_t)cid, uds, error, error_len))
		return config_reason(error, error_len);
	return 0;
}

int config_file_apply(struct cli_options *opts, const char *text, char *error, size_t error_len)
{
	const char *end = NULL;
	const cJSON *item;
	int ret = 0;

	if (json_text_holds_nul(text, strlen(text)))
		return config_error(error, error_len,
				    "a string holds the escape \\u0000, which no path or name may");
	/* The parse end, not cJSON_GetErrorPtr(): that one is process-global state. */
	cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
	if (!root)
		return config_error(error, error_len, "not valid JSON at byte %td",
				    end ? end - text : (ptrdiff_t)0);
	if (!cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return config_error(error, error_len, "the top level must be an object");
	}
	const char *twice = NULL;
	ret = json_find_duplicate_key(root, &twice);
	if (ret) {
		ret = ret == -ENOMEM ? config_error(error, error_len, "out of memory")
				     : config_error(error, error_len,
						    "the key \"%s\" is given twice "
						    "in one object",
						    twice);
		cJSON_Delete(root);
		return ret;
	}
	cJSON_ArrayForEach(item, root)
	{
		if (strcmp(item->string, "boot-source") == 0 && cJSON_IsObject(item)) {
			ret = apply_boot_source(opts, item, error, error_len);
		} else if (strcmp(item->string, "machine-config") == 0 && cJSON_IsObject(item)) {
			ret = apply_machine_config(opts, item, error, error_len);
		} else if (strcmp(item->string, "drives") == 0 && cJSON_IsArray(item)) {
			const cJSON *drive;
			cJSON_ArrayForEach(drive, item)
			{
				ret = apply_drive(opts, drive, error, error_len);
				if (ret)
					break;
			}
		} else if (strcmp(item->string, "network-interfaces") == 0 && cJSON_IsArray(item)) {
			const cJSON *iface;
			cJSON_ArrayForEach(iface, item)
			{
				ret = apply_network_interface(opts, iface, error, error_len);
				if (ret)
					break;
			}
		} else if (strcmp(item->string, "vsock") == 0 && cJSON_IsObject(item)) {
			ret = apply_vsock(opts, item, error, error_len);
		} else if (strcmp(item->string, "console") == 0) {
			if (!cJSON_IsString(item) || cli_console_parse(opts, item->valuestring))
				ret = config_error(
				    error, error_len,
				    "console must be \"stdio\", \"none\" or \"file:PATH\"");
		} else if (strcmp(item->string, "console_max_size") == 0) {
			if (!cJSON_IsString(item) ||
			    cli_console_max_parse(&opts->console_max_bytes, item->valuestring,
						  error, error_len))
				ret =
				    config_error(error, error_len,
						 "console_max_size must be a size such as \"64M\"");
		} else if (strcmp(item->string, "exit_at_boot") == 0) {
			if (cJSON_IsBool(item))
				opts->exit_at_boot = cJSON_IsTrue(item);
			else
				ret = config_error(error, error_len,
						   "exit_at_boot must be true or false");
		} else {
			ret = config_error(error, error_len, "unknown or malformed key %s",
					   item->string);
		}
		if (ret)
			break;
	}
	cJSON_Delete(root);
	return ret;
}

int config_file_load(struct cli_options *opts, const char *path, char *error, size_t error_len)
{
	FILE *file = fopen(path, "re");
	char *text;
	size_t len;
	int ret;

	if (!file)
		return config_error(error, error_len, "%s: %s", path, strerror(errno));
	text = malloc(CONFIG_FILE_MAX + 1);
	if (!text) {
		fclose(file);
		return config_error(error, error_len, "out of memory");
	}
	len = fread(text, 1, CONFIG_FILE_MAX + 1, file);
	if (ferror(file)) {
		ret = config_error(error, error_len, "%s: read error", path);
	} else if (len > CONFIG_FILE_MAX) {
		ret = config_error(error, error_len, "%s: larger than 1 MiB", path);
	} else if (memchr(text, '\0', len)) {
		ret = config_error(error, error_len, "%s: contains a NUL byte", path);
	} else {
		text[len] = '\0';
		ret = config_file_apply(opts, text, error, error_len);
	}
	free(text);
	fclose(file);
	return ret;
}
