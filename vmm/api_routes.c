/* The control API's paths and methods (api_server.h: api_handle): a request is matched to
 * a route, its body parsed into a vm_command (api_requests.h), and the controller runs
 * it. Nothing here touches HTTP itself, so the unit tests call it directly too. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_requests.h"
#include "api_server.h"
#include "json_keys.h"
#include "json_text.h"

enum api_method {
	API_GET = 1,
	API_PUT = 2,
	API_PATCH = 4,
};

enum api_route_kind {
	API_ROUTE_DESCRIBE,
	API_ROUTE_VERSION,
	API_ROUTE_VM_CONFIG,
	API_ROUTE_MACHINE_CONFIG,
	API_ROUTE_BOOT_SOURCE,
	API_ROUTE_DRIVE,
	API_ROUTE_NETWORK_INTERFACE,
	API_ROUTE_VSOCK,
	API_ROUTE_ACTIONS,
	API_ROUTE_VM,
	API_ROUTE_SNAPSHOT_CREATE,
	API_ROUTE_SNAPSHOT_LOAD,
};

struct api_route {
	const char *path; /* ends in '/' when an id follows */
	enum api_route_kind kind;
	unsigned methods;
	const char *allow; /* the Allow header of a 405 */
};

static const struct api_route api_routes[] = {
    {"/", API_ROUTE_DESCRIBE, API_GET, "GET"},
    {"/version", API_ROUTE_VERSION, API_GET, "GET"},
    {"/vm/config", API_ROUTE_VM_CONFIG, API_GET, "GET"},
    {"/machine-config", API_ROUTE_MACHINE_CONFIG, API_GET | API_PUT | API_PATCH, "GET, PUT, PATCH"},
    {"/boot-source", API_ROUTE_BOOT_SOURCE, API_PUT, "PUT"},
    {"/drives/", API_ROUTE_DRIVE, API_PUT | API_PATCH, "PUT, PATCH"},
    {"/network-interfaces/", API_ROUTE_NETWORK_INTERFACE, API_PUT, "PUT"},
    {"/vsock", API_ROUTE_VSOCK, API_PUT, "PUT"},
    {"/actions", API_ROUTE_ACTIONS, API_PUT, "PUT"},
    {"/vm", API_ROUTE_VM, API_PATCH, "PATCH"},
    {"/snapshot/create", API_ROUTE_SNAPSHOT_CREATE, API_PUT, "PUT"},
    {"/snapshot/load", API_ROUTE_SNAPSHOT_LOAD, API_PUT, "PUT"},
};

#define API_FAULT_MAX 512

/* The route for path, and the id after a route ending in '/' (one non-empty segment). */
static const struct api_route *api_find_route(const char *path, const char **id)
{
	for (size_t i = 0; i < sizeof(api_routes) / sizeof(api_routes[0]); i++) {
		const struct api_route *route = &api_routes[i];
		size_t n = strlen(route->path);

		if (n > 1 && route->path[n - 1] == '/') {
			if (strncmp(path, route->path, n) == 0 && path[n] &&
			    !strchr(path + n, '/')) {
				*id = path + n;
				return route;
			}
		} else if (strcmp(path, route->path) == 0) {
			return route;
		}
	}
	return NULL;
}

static void api_reply_json(struct api_reply *reply, unsigned status, cJSON *json)
{
	reply->status = status;
	reply->body = json ? cJSON_PrintUnformatted(json) : NULL;
	if (json && !reply->body)
		reply->status = 500; /* out of memory: the status alone says it */
	/* A path given on the command line, or a message quoting one, may hold any bytes;
	 * the reply is JSON, which is UTF-8. */
	if (reply->body)
		json_text_make_utf8(reply->body);
	cJSON_Delete(json);
}

void api_reply_fault(struct api_reply *reply, unsigned status, const char *message)
{
	cJSON *json = cJSON_CreateObject();

	*reply = (struct api_reply){0};
	if (json && !cJSON_AddStringToObject(json, "fault_message", message)) {
		cJSON_Delete(json);
		json = NULL;
	}
	api_reply_json(reply, json ? status : 500, json);
}

/* Firecracker's MachineConfiguration fields (GET /machine-config, and the machine-config
 * of GET /vm/config); false when out of memory. */
static bool api_add_machine_config(cJSON *object, unsigned vcpu_count, uint64_t mem_size_mib,
				   bool track_dirty_pages)
{
	return cJSON_AddNumberToObject(object, "vcpu_count", vcpu_count) &&
	       cJSON_AddNumberToObject(object, "mem_size_mib", (double)mem_size_mib) &&
	       cJSON_AddFalseToObject(object, "smt") &&
	       cJSON_AddBoolToObject(object, "track_dirty_pages", track_dirty_pages);
}

static void api_describe(struct vm_controller *c, bool machine, struct api_reply *reply)
{
	struct vm_controller_description d;
	cJSON *json = cJSON_CreateObject();

	vm_controller_describe(c, &d);
	if (!json) {
		reply->status = 500;
		return;
	}
	bool ok;
	if (machine) {
		ok =
		    api_add_machine_config(json, d.vcpu_count, d.mem_size_mib, d.track_dirty_pages);
	} else {
		/* Firecracker's InstanceInfo; "anonymous-instance" is its id when none is set. */
		ok = cJSON_AddStringToObject(json, "id", "anonymous-instance") &&
		     cJSON_AddStringToObject(json, "state", d.state) &&
		     cJSON_AddStringToObject(json, "vmm_version", mote_version()) &&
		     cJSON_AddStringToObject(json, "app_name", "mote");
	}
	if (!ok) {
		cJSON_Delete(json);
		reply->status = 500;
		return;
	}
	api_reply_json(reply, 200, json);
}

/* Firecracker's FirecrackerVersion, with mote's version in it. */
static void api_version(struct api_reply *reply)
{
	cJSON *json = cJSON_CreateObject();

	if (!json || !cJSON_AddStringToObject(json, "firecracker_version", mote_version())) {
		cJSON_Delete(json);
		reply->status = 500;
		return;
	}
	api_reply_json(reply, 200, json);
}

/* A disk's or NIC's name where the configuration gave none: the guest's name for it,
 * which PUT /snapshot/load's overrides accept too (vm_setup_find_disk). */
static const char *api_device_name(const char *id, const char *format, unsigned i, char *buf,
				   size_t len)
{
	if (id)
		return id;
	snprintf(buf, len, format, i);
	return buf;
}

/* Adds name: string to object unless value is NULL; false when out of memory. */
static bool api_add_optional_string(cJSON *object, const char *name, const char *value)
{
	return !value || cJSON_AddStringToObject(object, name, value);
}

static cJSON *api_drive_json(const struct mote_disk *disk, unsigned i)
{
	cJSON *json = cJSON_CreateObject();
	char name[16];

	if (json &&
	    cJSON_AddStringToObject(
		json, "drive_id", api_device_name(disk->id, "vd%c", 'a' + i, name, sizeof(name))) &&
	    cJSON_AddStringToObject(json, "path_on_host", disk->path) &&
	    cJSON_AddBoolToObject(json, "is_root_device", disk->root) &&
	    cJSON_AddBoolToObject(json, "is_read_only", disk->read_only) &&
	    api_add_optional_string(json, "overlay", disk->overlay) &&
	    cJSON_AddBoolToObject(json, "direct", disk->direct))
		return json;
	cJSON_Delete(json);
	return NULL;
}

static cJSON *api_nic_json(const struct mote_net *net, unsigned i)
{
	cJSON *json = cJSON_CreateObject();
	char name[16], mac[18];

	snprintf(mac, sizeof(mac), "%02x:%02x:%02x:%02x:%02x:%02x", net->mac[0], net->mac[1],
		 net->mac[2], net->mac[3], net->mac[4], net->mac[5]);
	if (json &&
	    cJSON_AddStringToObject(json, "iface_id",
				    api_device_name(net->id, "eth%u", i, name, sizeof(name))) &&
	    cJSON_AddStringToObject(json, "host_dev_name", net->tap) &&
	    (!net->has_mac || cJSON_AddStringToObject(json, "guest_mac", mac)))
		return json;
	cJSON_Delete(json);
	return NULL;
}

/* Firecracker's FullVmConfiguration, for the parts mote has: boot-source (none for a
 * restored VM, as in Firecracker), drives, machine-config, network-interfaces, vsock.
 * Each object has the fields its PUT takes. */
static cJSON *api_vm_config_json(const struct mote_config *config)
{
	cJSON *json = cJSON_CreateObject(), *part;
	bool ok = json != NULL;

	if (ok && config->kernel_path) {
		ok = (part = cJSON_AddObjectToObject(json, "boot-source")) &&
		     cJSON_AddStringToObject(part, "kernel_image_path", config->kernel_path) &&
		     api_add_optional_string(part, "initrd_path", config->initrd_path) &&
		     api_add_optional_string(part, "boot_args", config->cmdline);
	}
	ok = ok && (part = cJSON_AddArrayToObject(json, "drives"));
	for (unsigned i = 0; ok && i < config->disk_count; i++) {
		cJSON *drive = api_drive_json(&config->disks[i], i);
		ok = drive && cJSON_AddItemToArray(part, drive);
	}
	ok = ok && (part = cJSON_AddObjectToObject(json, "machine-config")) &&
	     api_add_machine_config(part, config->cpus, config->mem_bytes >> 20,
				    config->track_dirty_pages);
	ok = ok && (part = cJSON_AddArrayToObject(json, "network-interfaces"));
	for (unsigned i = 0; ok && i < config->net_count; i++) {
		cJSON *nic = api_nic_json(&config->nets[i], i);
		ok = nic && cJSON_AddItemToArray(part, nic);
	}
	if (ok && config->vsock.guest_cid) {
		ok = (part = cJSON_AddObjectToObject(json, "vsock")) &&
		     cJSON_AddNumberToObject(part, "guest_cid", config->vsock.guest_cid) &&
		     api_add_optional_string(part, "uds_path", config->vsock.uds_path);
	}
	if (ok)
		return json;
	cJSON_Delete(json);
	return NULL;
}

static void api_vm_config_reply(const struct mote_config *config, void *opaque)
{
	struct api_reply *reply = opaque;
	cJSON *json = api_vm_config_json(config);

	if (json)
		api_reply_json(reply, 200, json);
	else
		reply->status = 500;
}

static int api_parse_command(const struct api_route *route, unsigned method, const char *id,
			     const cJSON *body, struct vm_command *command, char *fault,
			     size_t fault_len)
{
	switch (route->kind) {
	case API_ROUTE_MACHINE_CONFIG:
		return api_parse_machine_config(body, method == API_PATCH, command, fault,
						fault_len);
	case API_ROUTE_BOOT_SOURCE:
		return api_parse_boot_source(body, command, fault, fault_len);
	case API_ROUTE_DRIVE:
		if (method == API_PATCH)
			return api_parse_drive_update(body, id, command, fault, fault_len);
		return api_parse_drive(body, id, command, fault, fault_len);
	case API_ROUTE_NETWORK_INTERFACE:
		return api_parse_network_interface(body, id, command, fault, fault_len);
	case API_ROUTE_VSOCK:
		return api_parse_vsock(body, command, fault, fault_len);
	case API_ROUTE_ACTIONS:
		return api_parse_action(body, command, fault, fault_len);
	case API_ROUTE_VM:
		return api_parse_vm_state(body, command, fault, fault_len);
	case API_ROUTE_SNAPSHOT_CREATE:
		return api_parse_snapshot_create(body, command, fault, fault_len);
	case API_ROUTE_SNAPSHOT_LOAD:
		return api_parse_snapshot_load(body, command, fault, fault_len);
	case API_ROUTE_DESCRIBE:
	case API_ROUTE_VERSION:
	case API_ROUTE_VM_CONFIG:
		break;
	}
	return cli_error(fault, fault_len, "no command for this path");
}

static unsigned api_method_bit(const char *method)
{
	if (strcmp(method, "GET") == 0)
		return API_GET;
	if (strcmp(method, "PUT") == 0)
		return API_PUT;
	if (strcmp(method, "PATCH") == 0)
		return API_PATCH;
	return 0;
}

void api_handle(struct vm_controller *c, const char *method, const char *path, const char *body,
		size_t len, struct api_reply *reply)
{
	char fault[API_FAULT_MAX];
	const char *id = NULL;
	const struct api_route *route = api_find_route(path, &id);
	unsigned method_bit = api_method_bit(method);

	*reply = (struct api_reply){0};
	if (!route) {
		snprintf(fault, sizeof(fault), "no such path: %s", path);
		api_reply_fault(reply, 404, fault);
		return;
	}
	if (!(route->methods & method_bit)) {
		snprintf(fault, sizeof(fault), "%s %s: method not allowed (allowed: %s)", method,
			 path, route->allow);
		api_reply_fault(reply, 405, fault);
		reply->allow = route->allow;
		return;
	}
	if (method_bit == API_GET) {
		if (route->kind == API_ROUTE_VERSION)
			api_version(reply);
		else if (route->kind == API_ROUTE_VM_CONFIG)
			vm_controller_with_config(c, api_vm_config_reply, reply);
		else
			api_describe(c, route->kind == API_ROUTE_MACHINE_CONFIG, reply);
		return;
	}
	if (!body || !len) {
		api_reply_fault(reply, 400, "a JSON body is required");
		return;
	}
	if (json_text_holds_nul(body, len)) {
		api_reply_fault(reply, 400,
				"malformed JSON: the body holds a NUL byte or a \\u0000 escape");
		return;
	}
	if (!json_text_is_utf8(body, len)) {
		api_reply_fault(reply, 400,
				"malformed JSON: the body is not UTF-8 (RFC 8259, section 8.1)");
		return;
	}
	/* cJSON wants the text NUL-terminated to refuse anything after the value. */
	char *text = malloc(len + 1);
	if (!text) {
		reply->status = 500;
		return;
	}
	memcpy(text, body, len);
	text[len] = '\0';
	const char *end = NULL;
	/* The parse end, not cJSON_GetErrorPtr(): that one is process-global state. */
	cJSON *json = cJSON_ParseWithLengthOpts(text, len + 1, &end, 1);
	if (!json) {
		snprintf(fault, sizeof(fault), "malformed JSON at byte %td",
			 end ? end - text : (ptrdiff_t)0);
		free(text);
		api_reply_fault(reply, 400, fault);
		return;
	}
	struct vm_command command;
	const char *twice = NULL;
	int ret = json_find_duplicate_key(json, &twice);
	if (ret == -EEXIST)
		snprintf(fault, sizeof(fault), "the key \"%s\" is given twice in one object",
			 twice);
	else if (ret)
		snprintf(fault, sizeof(fault), "out of memory");
	if (!ret)
		ret =
		    api_parse_command(route, method_bit, id, json, &command, fault, sizeof(fault));
	if (!ret)
		ret = vm_controller_execute(c, &command, fault, sizeof(fault));
	cJSON_Delete(json);
	free(text);
	if (ret)
		api_reply_fault(reply, ret == -ENOMEM ? 500 : 400, fault);
	else
		reply->status = 204;
}
