/* Request bodies of the control API turned into vm_commands (api_requests.h). Field names
 * and their meaning are Firecracker's (firecracker-api.yaml: MachineConfiguration,
 * BootSource, Drive, NetworkInterface, Vsock, InstanceActionInfo, Vm,
 * SnapshotCreateParams, SnapshotLoadParams); mote's additions are marked. Unknown fields
 * are refused, not ignored: a misspelt field must not silently do something else. */
#include "api_requests.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli_options.h"

#define api_fault(fault, fault_len, ...) cli_error((fault), (fault_len), __VA_ARGS__)

static int api_unknown_field(const cJSON *item, const char *where, char *fault, size_t fault_len)
{
	return api_fault(fault, fault_len, "%s: unknown field '%s'", where, item->string);
}

static int api_string(const cJSON *item, const char *where, const char **out, char *fault,
		      size_t fault_len)
{
	if (!cJSON_IsString(item) || !item->valuestring[0])
		return api_fault(fault, fault_len, "%s: %s must be a non-empty string", where,
				 item->string);
	*out = item->valuestring;
	return 0;
}

static int api_bool(const cJSON *item, const char *where, bool *out, char *fault, size_t fault_len)
{
	if (!cJSON_IsBool(item))
		return api_fault(fault, fault_len, "%s: %s must be true or false", where,
				 item->string);
	*out = cJSON_IsTrue(item);
	return 0;
}

static int api_uint(const cJSON *item, const char *where, double min, double max, uint64_t *out,
		    char *fault, size_t fault_len)
{
	/* Range first: converting an out-of-range double to an integer is undefined. */
	if (!cJSON_IsNumber(item) || !(item->valuedouble >= min && item->valuedouble <= max) ||
	    item->valuedouble != (double)(uint64_t)item->valuedouble)
		return api_fault(fault, fault_len, "%s: %s must be an integer from %.0f to %.0f",
				 where, item->string, min, max);
	*out = (uint64_t)item->valuedouble;
	return 0;
}

/* A string field that must hold one of the values listed (NULL-terminated); *index. */
static int api_enum(const cJSON *item, const char *where, const char *const *values,
		    unsigned *index, char *fault, size_t fault_len)
{
	if (cJSON_IsString(item)) {
		for (unsigned i = 0; values[i]; i++) {
			if (strcmp(item->valuestring, values[i]) == 0) {
				*index = i;
				return 0;
			}
		}
	}
	char list[128] = "";
	for (unsigned i = 0; values[i]; i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s\"%s\"",
			 i ? ", " : "", values[i]);
	return api_fault(fault, fault_len, "%s: %s must be one of %s", where, item->string, list);
}

static int api_object(const cJSON *body, const char *where, char *fault, size_t fault_len)
{
	if (!cJSON_IsObject(body))
		return api_fault(fault, fault_len, "%s: the body must be a JSON object", where);
	return 0;
}

static int api_missing(const char *where, const char *field, char *fault, size_t fault_len)
{
	return api_fault(fault, fault_len, "%s: %s is required", where, field);
}

int api_parse_machine_config(const cJSON *body, bool partial, struct vm_command *command,
			     char *fault, size_t fault_len)
{
	static const char where[] = "machine-config";
	static const char *const huge_pages[] = {"None", NULL};
	static const char *const cpu_templates[] = {"None", NULL};
	struct vm_command_machine_config *m = &command->machine_config;
	const cJSON *item;
	int ret = api_object(body, where, fault, fault_len);

	*command = (struct vm_command){.kind = VM_COMMAND_MACHINE_CONFIG};
	cJSON_ArrayForEach(item, body)
	{
		uint64_t value = 0;
		bool flag = false;
		unsigned index;

		if (ret)
			break;
		if (strcmp(item->string, "vcpu_count") == 0) {
			ret = api_uint(item, where, 1, MOTE_MAX_CPUS, &value, fault, fault_len);
			m->vcpu_count = (unsigned)value;
			m->has_vcpu_count = true;
		} else if (strcmp(item->string, "mem_size_mib") == 0) {
			ret =
			    api_uint(item, where, 16, 1 << 20, &m->mem_size_mib, fault, fault_len);
			m->has_mem_size_mib = true;
		} else if (strcmp(item->string, "track_dirty_pages") == 0) {
			ret = api_bool(item, where, &m->track_dirty_pages, fault, fault_len);
			m->has_track_dirty_pages = true;
		} else if (strcmp(item->string, "smt") == 0) {
			ret = api_bool(item, where, &flag, fault, fault_len);
			if (!ret && flag)
				ret =
				    api_fault(fault, fault_len, "%s: smt is not supported", where);
		} else if (strcmp(item->string, "huge_pages") == 0) {
			ret = api_enum(item, where, huge_pages, &index, fault, fault_len);
		} else if (strcmp(item->string, "cpu_template") == 0) {
			ret = api_enum(item, where, cpu_templates, &index, fault, fault_len);
		} else {
			ret = api_unknown_field(item, where, fault, fault_len);
		}
	}
	if (ret || partial)
		return ret;
	/* PUT: both sizes required, and what is left out goes back to its default. */
	if (!m->has_vcpu_count || !m->has_mem_size_mib)
		return api_missing(where, "vcpu_count and mem_size_mib", fault, fault_len);
	m->has_track_dirty_pages = true;
	return 0;
}

int api_parse_boot_source(const cJSON *body, struct vm_command *command, char *fault,
			  size_t fault_len)
{
	static const char where[] = "boot-source";
	struct vm_command_boot_source *b = &command->boot_source;
	const cJSON *item;
	int ret = api_object(body, where, fault, fault_len);

	*command = (struct vm_command){.kind = VM_COMMAND_BOOT_SOURCE};
	cJSON_ArrayForEach(item, body)
	{
		if (ret)
			break;
		if (strcmp(item->string, "kernel_image_path") == 0)
			ret = api_string(item, where, &b->kernel_image_path, fault, fault_len);
		else if (strcmp(item->string, "initrd_path") == 0)
			ret = api_string(item, where, &b->initrd_path, fault, fault_len);
		else if (strcmp(item->string, "boot_args") == 0)
			ret = api_string(item, where, &b->boot_args, fault, fault_len);
		else
			ret = api_unknown_field(item, where, fault, fault_len);
	}
	if (!ret && !b->kernel_image_path)
		ret = api_missing(where, "kernel_image_path", fault, fault_len);
	return ret;
}

/* Firecracker requires the body's id to repeat the path's. */
static int api_check_id(const char *where, const char *field, const char *in_body,
			const char *in_path, char *fault, size_t fault_len)
{
	if (!in_body)
		return api_missing(where, field, fault, fault_len);
	if (strcmp(in_body, in_path) != 0)
		return api_fault(fault, fault_len, "%s: %s '%s' differs from the path's '%s'",
				 where, field, in_body, in_path);
	return 0;
}

int api_parse_drive(const cJSON *body, const char *drive_id, struct vm_command *command,
		    char *fault, size_t fault_len)
{
	static const char where[] = "drives";
	/* Accepted for Firecracker's clients, same effect either way: mote always submits
	 * through io_uring and always honours the guest's flushes (safer than "Unsafe"). */
	static const char *const cache_types[] = {"Unsafe", "Writeback", NULL};
	static const char *const io_engines[] = {"Sync", "Async", NULL};
	struct vm_command_drive *d = &command->drive;
	unsigned index;
	const char *id = NULL;
	bool has_root = false;
	const cJSON *item;
	int ret = api_object(body, where, fault, fault_len);

	*command = (struct vm_command){.kind = VM_COMMAND_DRIVE};
	cJSON_ArrayForEach(item, body)
	{
		if (ret)
			break;
		if (strcmp(item->string, "drive_id") == 0) {
			ret = api_string(item, where, &id, fault, fault_len);
		} else if (strcmp(item->string, "path_on_host") == 0) {
			ret = api_string(item, where, &d->path_on_host, fault, fault_len);
		} else if (strcmp(item->string, "is_root_device") == 0) {
			ret = api_bool(item, where, &d->is_root_device, fault, fault_len);
			has_root = true;
		} else if (strcmp(item->string, "is_read_only") == 0) {
			ret = api_bool(item, where, &d->is_read_only, fault, fault_len);
		} else if (strcmp(item->string, "overlay") == 0) { /* mote */
			ret = api_string(item, where, &d->overlay, fault, fault_len);
		} else if (strcmp(item->string, "direct") == 0) { /* mote */
			ret = api_bool(item, where, &d->direct, fault, fault_len);
		} else if (strcmp(item->string, "cache_type") == 0) {
			ret = api_enum(item, where, cache_types, &index, fault, fault_len);
		} else if (strcmp(item->string, "io_engine") == 0) {
			ret = api_enum(item, where, io_engines, &index, fault, fault_len);
		} else {
			ret = api_unknown_field(item, where, fault, fault_len);
		}
	}
	if (!ret)
		ret = api_check_id(where, "drive_id", id, drive_id, fault, fault_len);
	if (!ret && !has_root)
		ret = api_missing(where, "is_root_device", fault, fault_len);
	if (!ret && !d->path_on_host)
		ret = api_missing(where, "path_on_host", fault, fault_len);
	d->drive_id = drive_id;
	return ret;
}

int api_parse_drive_update(const cJSON *body, const char *drive_id, struct vm_command *command,
			   char *fault, size_t fault_len)
{
	static const char where[] = "drives";
	struct vm_command_drive_update *d = &command->drive_update;
	const char *id = NULL;
	const cJSON *item;
	int ret = api_object(body, where, fault, fault_len);

	*command = (struct vm_command){.kind = VM_COMMAND_DRIVE_UPDATE};
	cJSON_ArrayForEach(item, body)
	{
		if (ret)
			break;
		if (strcmp(item->string, "drive_id") == 0)
			ret = api_string(item, where, &id, fault, fault_len);
		else if (strcmp(item->string, "path_on_host") == 0)
			ret = api_string(item, where, &d->path_on_host, fault, fault_len);
		else if (strcmp(item->string, "rate_limiter") == 0)
			ret = api_fault(fault, fault_len, "%s: rate limiters are not supported",
					where);
		else
			ret = api_unknown_field(item, where, fault, fault_len);
	}
	if (!ret)
		ret = api_check_id(where, "drive_id", id, drive_id, fault, fault_len);
	if (!ret && !d->path_on_host)
		ret = api_missing(where, "path_on_host", fault, fault_len);
	d->drive_id = drive_id;
	return ret;
}

int api_parse_network_interface(const cJSON *body, const char *iface_id, struct vm_command *command,
				char *fault, size_t fault_len)
{
	static const char where[] = "network-interfaces";
	struct vm_command_network_interface *n = &command->network_interface;
	const char *id = NULL, *mac = NULL;
	const cJSON *item;
	int ret = api_object(body, where, fault, fault_len);

	*command = (struct vm_command){.kind = VM_COMMAND_NETWORK_INTERFACE};
	cJSON_ArrayForEach(item, body)
	{
		if (ret)
			break;
		if (strcmp(item->string, "iface_id") == 0)
			ret = api_string(item, where, &id, fault, fault_len);
		else if (strcmp(item->string, "host_dev_name") == 0)
			ret = api_string(item, where, &n->host_dev_name, fault, fault_len);
		else if (strcmp(item->string, "guest_mac") == 0)
			ret = api_string(item, where, &mac, fault, fault_len);
		else
			ret = api_unknown_field(item, where, fault, fault_len);
	}
	if (!ret)
		ret = api_check_id(where, "iface_id", id, iface_id, fault, fault_len);
	if (!ret && !n->host_dev_name)
		ret = api_missing(where, "host_dev_name", fault, fault_len);
	if (!ret && mac) {
		if (cli_mac_parse(mac, n->guest_mac))
			ret = api_fault(fault, fault_len,
					"%s: guest_mac %s is not a unicast MAC address like "
					"06:00:ac:10:00:02",
					where, mac);
		n->has_guest_mac = true;
	}
	n->iface_id = iface_id;
	return ret;
}

int api_parse_vsock(const cJSON *body, struct vm_command *command, char *fault, size_t fault_len)
{
	static const char where[] = "vsock";
	struct vm_command_vsock *v = &command->vsock;
	const char *unused;
	const cJSON *item;
	int ret = api_object(body, where, fault, fault_len);

	*command = (struct vm_command){.kind = VM_COMMAND_VSOCK};
	cJSON_ArrayForEach(item, body)
	{
		if (ret)
			break;
		if (strcmp(item->string, "guest_cid") == 0)
			ret = api_uint(item, where, 3, UINT32_MAX - 1.0, &v->guest_cid, fault,
				       fault_len);
		else if (strcmp(item->string, "uds_path") == 0)
			ret = api_string(item, where, &v->uds_path, fault, fault_len);
		else if (strcmp(item->string, "vsock_id") == 0) /* deprecated, one device */
			ret = api_string(item, where, &unused, fault, fault_len);
		else
			ret = api_unknown_field(item, where, fault, fault_len);
	}
	if (!ret && (!v->guest_cid || !v->uds_path))
		ret = api_missing(where, "guest_cid and uds_path", fault, fault_len);
	return ret;
}

int api_parse_action(const cJSON *body, struct vm_command *command, char *fault, size_t fault_len)
{
	static const char where[] = "actions";
	static const char *const actions[] = {"InstanceStart", "SendCtrlAltDel", NULL};
	static const enum vm_command_kind kinds[] = {VM_COMMAND_INSTANCE_START,
						     VM_COMMAND_SEND_CTRL_ALT_DEL};
	const cJSON *item;
	bool has_action = false;
	int ret = api_object(body, where, fault, fault_len);

	*command = (struct vm_command){.kind = VM_COMMAND_INSTANCE_START};
	cJSON_ArrayForEach(item, body)
	{
		unsigned index = 0;

		if (ret)
			break;
		if (strcmp(item->string, "action_type") == 0) {
			ret = api_enum(item, where, actions, &index, fault, fault_len);
			command->kind = kinds[index];
			has_action = true;
		} else {
			ret = api_unknown_field(item, where, fault, fault_len);
		}
	}
	if (!ret && !has_action)
		ret = api_missing(where, "action_type", fault, fault_len);
	return ret;
}

int api_parse_vm_state(const cJSON *body, struct vm_command *command, char *fault, size_t fault_len)
{
	static const char where[] = "vm";
	static const char *const states[] = {"Paused", "Resumed", NULL};
	const cJSON *item;
	bool has_state = false;
	int ret = api_object(body, where, fault, fault_len);

	*command = (struct vm_command){.kind = VM_COMMAND_PAUSE};
	cJSON_ArrayForEach(item, body)
	{
		unsigned index = 0;

		if (ret)
			break;
		if (strcmp(item->string, "state") == 0) {
			ret = api_enum(item, where, states, &index, fault, fault_len);
			command->kind = index == 0 ? VM_COMMAND_PAUSE : VM_COMMAND_RESUME;
			has_state = true;
		} else {
			ret = api_unknown_field(item, where, fault, fault_len);
		}
	}
	if (!ret && !has_state)
		ret = api_missing(where, "state", fault, fault_len);
	return ret;
}

int api_parse_snapshot_create(const cJSON *body, struct vm_command *command, char *fault,
			      size_t fault_len)
{
	static const char where[] = "snapshot/create";
	static const char *const types[] = {"Full", "Diff", NULL};
	struct vm_command_snapshot_create *s = &command->snapshot_create;
	const cJSON *item;
	int ret = api_object(body, where, fault, fault_len);

	*command = (struct vm_command){.kind = VM_COMMAND_SNAPSHOT_CREATE};
	cJSON_ArrayForEach(item, body)
	{
		unsigned index = 0;

		if (ret)
			break;
		if (strcmp(item->string, "snapshot_path") == 0) {
			ret = api_string(item, where, &s->snapshot_path, fault, fault_len);
		} else if (strcmp(item->string, "mem_file_path") == 0) {
			ret = api_string(item, where, &s->mem_file_path, fault, fault_len);
		} else if (strcmp(item->string, "snapshot_type") == 0) {
			ret = api_enum(item, where, types, &index, fault, fault_len);
			s->type = index == 0 ? MOTE_SNAPSHOT_FULL : MOTE_SNAPSHOT_DIFF;
		} else {
			ret = api_unknown_field(item, where, fault, fault_len);
		}
	}
	if (!ret && (!s->snapshot_path || !s->mem_file_path))
		ret = api_missing(where, "snapshot_path and mem_file_path", fault, fault_len);
	return ret;
}

/* SnapshotLoadParams.mem_backend: {"backend_type": "File", "backend_path": PATH}; a UFFD
 * backend is Firecracker's alone. */
static int api_parse_mem_backend(const cJSON *backend, const char *where, const char **path,
				 char *fault, size_t fault_len)
{
	static const char *const types[] = {"File", NULL};
	bool has_type = false;
	const cJSON *item;
	int ret = api_object(backend, where, fault, fault_len);

	cJSON_ArrayForEach(item, backend)
	{
		unsigned index;

		if (ret)
			break;
		if (strcmp(item->string, "backend_type") == 0) {
			ret = api_enum(item, where, types, &index, fault, fault_len);
			has_type = true;
		} else if (strcmp(item->string, "backend_path") == 0) {
			ret = api_string(item, where, path, fault, fault_len);
		} else {
			ret = api_unknown_field(item, where, fault, fault_len);
		}
	}
	if (!ret && (!has_type || !*path))
		ret = api_missing(where, "backend_type and backend_path", fault, fault_len);
	return ret;
}

/* network_overrides (Firecracker's) and disk_overrides (mote's): arrays of objects. */
static int api_parse_overrides(const cJSON *array, bool disks, struct mote_restore_config *r,
			       char *fault, size_t fault_len)
{
	const char *where =
	    disks ? "snapshot/load: disk_overrides[]" : "snapshot/load: network_overrides[]";
	unsigned max = disks ? MOTE_MAX_DISKS : MOTE_MAX_NETS;
	unsigned used = disks ? r->disk_override_count : r->net_override_count;
	const cJSON *element, *item;
	int ret = 0;

	if (!cJSON_IsArray(array))
		return api_fault(fault, fault_len, "%s must be an array", where);
	/* Counting those of a repeated key too: the arrays are fixed. */
	if ((unsigned)cJSON_GetArraySize(array) > max - used)
		return api_fault(fault, fault_len, "%s: at most %u", where, max);
	cJSON_ArrayForEach(element, array)
	{
		struct mote_disk_override *disk = &r->disk_overrides[r->disk_override_count];
		struct mote_net_override *net = &r->net_overrides[r->net_override_count];

		ret = api_object(element, where, fault, fault_len);
		cJSON_ArrayForEach(item, element)
		{
			if (ret)
				break;
			if (disks && strcmp(item->string, "drive_id") == 0)
				ret = api_string(item, where, &disk->disk, fault, fault_len);
			else if (disks && strcmp(item->string, "path_on_host") == 0)
				ret = api_string(item, where, &disk->path, fault, fault_len);
			else if (disks && strcmp(item->string, "overlay") == 0)
				ret = api_string(item, where, &disk->overlay, fault, fault_len);
			else if (!disks && strcmp(item->string, "iface_id") == 0)
				ret = api_string(item, where, &net->nic, fault, fault_len);
			else if (!disks && strcmp(item->string, "host_dev_name") == 0)
				ret = api_string(item, where, &net->tap, fault, fault_len);
			else
				ret = api_unknown_field(item, where, fault, fault_len);
		}
		if (ret)
			return ret;
		if (disks && !disk->disk)
			return api_missing(where, "drive_id", fault, fault_len);
		if (!disks && (!net->nic || !net->tap))
			return api_missing(where, "iface_id and host_dev_name", fault, fault_len);
		if (disks)
			r->disk_override_count++;
		else
			r->net_override_count++;
	}
	return 0;
}

static int api_parse_mem_diffs(const cJSON *array, struct mote_restore_config *r, char *fault,
			       size_t fault_len)
{
	static const char where[] = "snapshot/load: mem_diff_paths";
	const cJSON *item;

	if (!cJSON_IsArray(array) ||
	    (unsigned)cJSON_GetArraySize(array) > MOTE_MAX_MEM_DIFFS - r->mem_diff_count)
		return api_fault(fault, fault_len, "%s must be an array of at most %d paths", where,
				 MOTE_MAX_MEM_DIFFS);
	cJSON_ArrayForEach(item, array)
	{
		if (!cJSON_IsString(item) || !item->valuestring[0])
			return api_fault(fault, fault_len, "%s: each must be a non-empty string",
					 where);
		r->mem_diff_paths[r->mem_diff_count++] = item->valuestring;
	}
	return 0;
}

static int api_parse_vsock_override(const cJSON *object, struct mote_restore_config *r, char *fault,
				    size_t fault_len)
{
	static const char where[] = "snapshot/load: vsock_override";
	const cJSON *item;
	int ret = api_object(object, where, fault, fault_len);

	cJSON_ArrayForEach(item, object)
	{
		if (ret)
			break;
		if (strcmp(item->string, "uds_path") == 0)
			ret = api_string(item, where, &r->vsock_uds_path, fault, fault_len);
		else
			ret = api_unknown_field(item, where, fault, fault_len);
	}
	if (!ret && !r->vsock_uds_path)
		ret = api_missing(where, "uds_path", fault, fault_len);
	return ret;
}

int api_parse_snapshot_load(const cJSON *body, struct vm_command *command, char *fault,
			    size_t fault_len)
{
	static const char where[] = "snapshot/load";
	static const char *const huge_pages[] = {"Snapshot", "None", NULL};
	struct mote_restore_config *r = &command->snapshot_load.restore;
	const char *mem_file = NULL, *backend = NULL;
	bool resume = false, flag = false;
	const cJSON *item;
	int ret = api_object(body, where, fault, fault_len);

	*command = (struct vm_command){.kind = VM_COMMAND_SNAPSHOT_LOAD};
	mote_restore_config_init(r);
	cJSON_ArrayForEach(item, body)
	{
		unsigned index;
		const char *name = item->string;

		if (ret)
			break;
		if (strcmp(name, "snapshot_path") == 0) {
			ret = api_string(item, where, &r->state_path, fault, fault_len);
		} else if (strcmp(name, "mem_file_path") == 0) {
			ret = api_string(item, where, &mem_file, fault, fault_len);
		} else if (strcmp(name, "mem_backend") == 0) {
			ret = api_parse_mem_backend(item, "snapshot/load: mem_backend", &backend,
						    fault, fault_len);
		} else if (strcmp(name, "resume_vm") == 0) {
			ret = api_bool(item, where, &resume, fault, fault_len);
		} else if (strcmp(name, "track_dirty_pages") == 0 ||
			   strcmp(name, "enable_diff_snapshots") == 0) { /* the deprecated name */
			ret = api_bool(item, where, &flag, fault, fault_len);
			r->track_dirty_pages = r->track_dirty_pages || flag;
		} else if (strcmp(name, "network_overrides") == 0) {
			ret = api_parse_overrides(item, false, r, fault, fault_len);
		} else if (strcmp(name, "vsock_override") == 0) {
			ret = api_parse_vsock_override(item, r, fault, fault_len);
		} else if (strcmp(name, "clock_realtime") == 0) {
			/* mote's clock resumes where it stopped: Firecracker's default. */
			ret = api_bool(item, where, &flag, fault, fault_len);
			if (!ret && flag)
				ret = api_fault(fault, fault_len,
						"%s: clock_realtime is not supported", where);
		} else if (strcmp(name, "huge_pages") == 0) {
			ret = api_enum(item, where, huge_pages, &index, fault, fault_len);
		} else if (strcmp(name, "disk_overrides") == 0) { /* mote */
			ret = api_parse_overrides(item, true, r, fault, fault_len);
		} else if (strcmp(name, "mem_diff_paths") == 0) { /* mote */
			ret = api_parse_mem_diffs(item, r, fault, fault_len);
		} else if (strcmp(name, "verify_memory") == 0) { /* mote */
			ret = api_bool(item, where, &r->verify_memory, fault, fault_len);
		} else {
			ret = api_unknown_field(item, where, fault, fault_len);
		}
	}
	if (ret)
		return ret;
	if (!r->state_path)
		return api_missing(where, "snapshot_path", fault, fault_len);
	if (!mem_file == !backend)
		return api_fault(fault, fault_len,
				 "%s: exactly one of mem_backend and mem_file_path is required",
				 where);
	r->mem_path = mem_file ? mem_file : backend;
	r->paused = !resume;
	return 0;
}
