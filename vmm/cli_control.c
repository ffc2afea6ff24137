/* `mote pause`, `resume`, `snapshot`, `update-disk` and `restore` to a waiting mote: API
 * clients (cli_control.h). */
#include "cli_control.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "api_client.h"
#include "cli_options.h"
#include "../virtio/vsock_uds.h"

enum {
	OPT_API_SOCK = 1000,
	OPT_STATE,
	OPT_MEM,
	OPT_DIFF,
	OPT_RESUME,
	OPT_DISK,
	OPT_PATH,
	OPT_HELP,
};

static const struct option control_options[] = {
    {"api-sock", required_argument, NULL, OPT_API_SOCK},
    {"state", required_argument, NULL, OPT_STATE},
    {"mem", required_argument, NULL, OPT_MEM},
    {"diff", no_argument, NULL, OPT_DIFF},
    {"resume", no_argument, NULL, OPT_RESUME},
    {"disk", required_argument, NULL, OPT_DISK},
    {"path", required_argument, NULL, OPT_PATH},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* Where the value of an option given at most once goes. */
static const char **cli_control_value(struct cli_control_options *opts, int option)
{
	switch (option) {
	case OPT_STATE:
		return &opts->state_path;
	case OPT_MEM:
		return &opts->mem_path;
	case OPT_DISK:
		return &opts->disk;
	default:
		return &opts->image_path;
	}
}

/* Whether option belongs to command (--api-sock and --help, every command's, are taken
 * before this is asked). */
static bool cli_control_takes(enum cli_control_command command, int option)
{
	switch (option) {
	case OPT_STATE:
	case OPT_MEM:
	case OPT_DIFF:
	case OPT_RESUME:
		return command == CLI_CONTROL_SNAPSHOT;
	case OPT_DISK:
	case OPT_PATH:
		return command == CLI_CONTROL_UPDATE_DISK;
	default:
		return false;
	}
}

int cli_control_parse(struct cli_control_options *opts, int argc, char **argv, char *error,
		      size_t error_len)
{
	const char *name = argv[0];
	int option;

	memset(opts, 0, sizeof(*opts));
	if (strcmp(name, "pause") == 0)
		opts->command = CLI_CONTROL_PAUSE;
	else if (strcmp(name, "resume") == 0)
		opts->command = CLI_CONTROL_RESUME;
	else if (strcmp(name, "snapshot") == 0)
		opts->command = CLI_CONTROL_SNAPSHOT;
	else if (strcmp(name, "update-disk") == 0)
		opts->command = CLI_CONTROL_UPDATE_DISK;
	else
		return cli_error(error, error_len, "unknown command %s", name);
	cli_getopt_restart();
	int index = -1;
	while ((option = getopt_long(argc, argv, "", control_options, &index)) != -1) {
		switch (option) {
		case OPT_API_SOCK:
			opts->api_sock = optarg;
			continue;
		case OPT_HELP:
			opts->help = true;
			continue;
		case OPT_STATE:
		case OPT_MEM:
		case OPT_DISK:
		case OPT_PATH: {
			const char **value = cli_control_value(opts, option);
			if (cli_file_option_once(*value, name, control_options[index].name, error,
						 error_len))
				return -EINVAL;
			*value = optarg;
			break;
		}
		case OPT_DIFF:
			opts->diff = true;
			break;
		case OPT_RESUME:
			opts->resume = true;
			break;
		default: {
			char buf[3];
			return cli_error(error, error_len, "%s: unknown or incomplete option %s",
					 name, cli_refused_option(argv, buf));
		}
		}
		/* An option of another command (argv[optind - 1] may be its value). */
		if (!cli_control_takes(opts->command, option))
			return cli_error(error, error_len, "%s: unknown option --%s", name,
					 control_options[index].name);
	}
	if (optind < argc)
		return cli_error(error, error_len, "%s: unexpected argument %s", name,
				 argv[optind]);
	if (opts->help)
		return 0;
	if (!opts->api_sock || !opts->api_sock[0])
		return cli_error(error, error_len, "%s: --api-sock PATH is required", name);
	if (opts->command == CLI_CONTROL_SNAPSHOT && (!opts->state_path || !opts->mem_path))
		return cli_error(error, error_len,
				 "snapshot: --state FILE and --mem FILE are required");
	if (opts->command == CLI_CONTROL_UPDATE_DISK) {
		if (!opts->disk || !opts->image_path || !opts->image_path[0])
			return cli_error(error, error_len,
					 "update-disk: --disk ID and --path FILE are required");
		/* It goes into the request's path, /drives/ID, unescaped. */
		if (!opts->disk[0] || strspn(opts->disk, CLI_DISK_ID_CHARS) != strlen(opts->disk))
			return cli_error(error, error_len,
					 "update-disk: --disk %s: an id is letters, digits, '.', "
					 "'-' and '_'",
					 opts->disk);
	}
	return 0;
}

bool cli_api_socket_is_served(const char *path)
{
	struct sockaddr_un address = {.sun_family = AF_UNIX};

	if (strlen(path) >= sizeof(address.sun_path))
		return false;
	memcpy(address.sun_path, path, strlen(path));
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	bool served = connect(fd, (struct sockaddr *)&address, sizeof(address)) == 0;
	close(fd);
	return served;
}

/* One request; prints why it failed. The exit code; *status the reply's status. */
static int cli_call(const char *api_sock, const char *method, const char *path, const char *body,
		    long *status)
{
	struct api_client_reply reply;
	char error[512] = "";

	*status = 0;
	int ret = api_client_request(api_sock, method, path, body, &reply, error, sizeof(error));
	if (ret == -ENOSYS) {
		fprintf(stderr, "mote: error: %s\n", error);
		return CLI_CONTROL_UNREACHABLE;
	}
	if (ret) {
		fprintf(stderr, "mote: error: no mote answers on %s\n", error);
		return CLI_CONTROL_UNREACHABLE;
	}
	*status = reply.status;
	int code = CLI_CONTROL_DONE;
	if (reply.status < 200 || reply.status > 299) {
		fprintf(stderr, "mote: error: %s %s: %s\n", method, path,
			reply.fault[0] ? reply.fault : "refused without a reason");
		code = CLI_CONTROL_REFUSED;
	}
	api_client_reply_free(&reply);
	return code;
}

/* The VM's state as GET / reports it, or NULL; *code set when the call failed. */
static char *cli_vm_state(const char *api_sock, int *code)
{
	struct api_client_reply reply;
	char error[512] = "";
	char *state = NULL;

	*code = CLI_CONTROL_DONE;
	if (api_client_request(api_sock, "GET", "/", NULL, &reply, error, sizeof(error))) {
		fprintf(stderr, "mote: error: no mote answers on %s\n", error);
		*code = CLI_CONTROL_UNREACHABLE;
		return NULL;
	}
	cJSON *json = cJSON_Parse(reply.body ? reply.body : "");
	const cJSON *item = cJSON_GetObjectItemCaseSensitive(json, "state");
	if (reply.status == 200 && cJSON_IsString(item))
		state = strdup(item->valuestring);
	if (!state) {
		fprintf(stderr, "mote: error: %s does not answer like a mote (GET /)\n", api_sock);
		*code = CLI_CONTROL_UNREACHABLE;
	}
	cJSON_Delete(json);
	api_client_reply_free(&reply);
	return state;
}

/* A path made absolute (malloc'd; NULL without memory or working directory): the mote
 * that serves the socket opens it from its own working directory, which need not be
 * ours. */
static char *cli_absolute_path(const char *path)
{
	if (path[0] == '/')
		return strdup(path);
	char *cwd = getcwd(NULL, 0);
	char *absolute = NULL;
	if (cwd && asprintf(&absolute, "%s/%s", cwd, path) < 0)
		absolute = NULL;
	free(cwd);
	return absolute;
}

/* Adds path, made absolute, to object as name; a NULL path adds nothing. */
static bool cli_add_path(cJSON *object, const char *name, const char *path)
{
	if (!path)
		return true;
	char *absolute = cli_absolute_path(path);
	bool ok = absolute && cJSON_AddStringToObject(object, name, absolute);
	free(absolute);
	return ok;
}

static char *cli_snapshot_body(const struct cli_control_options *opts)
{
	cJSON *json = cJSON_CreateObject();
	char *body = NULL;

	if (json && cli_add_path(json, "snapshot_path", opts->state_path) &&
	    cli_add_path(json, "mem_file_path", opts->mem_path) &&
	    cJSON_AddStringToObject(json, "snapshot_type", opts->diff ? "Diff" : "Full"))
		body = cJSON_PrintUnformatted(json);
	cJSON_Delete(json);
	return body;
}

static int cli_snapshot(const struct cli_control_options *opts)
{
	static const char pause[] = "{\"state\":\"Paused\"}";
	static const char resume[] = "{\"state\":\"Resumed\"}";
	long status;
	int code;
	char *state = cli_vm_state(opts->api_sock, &code);

	if (!state)
		return code;
	/* Firecracker's snapshot/create wants a paused VM: pause a running one first. */
	if (strcmp(state, "Running") == 0)
		code = cli_call(opts->api_sock, "PATCH", "/vm", pause, &status);
	free(state);
	if (code)
		return code;
	char *body = cli_snapshot_body(opts);
	if (!body) {
		fprintf(stderr, "mote: error: out of memory\n");
		return CLI_CONTROL_REFUSED;
	}
	code = cli_call(opts->api_sock, "PUT", "/snapshot/create", body, &status);
	free(body);
	if (code == CLI_CONTROL_UNREACHABLE || !opts->resume)
		return code;
	/* Asked to go on running: also after a failed snapshot, which left the VM intact. */
	int resumed = cli_call(opts->api_sock, "PATCH", "/vm", resume, &status);
	return code ? code : resumed;
}

static int cli_update_disk(const struct cli_control_options *opts)
{
	cJSON *json = cJSON_CreateObject();
	char *body = NULL, *path = NULL;
	long status;

	if (json && cJSON_AddStringToObject(json, "drive_id", opts->disk) &&
	    cli_add_path(json, "path_on_host", opts->image_path))
		body = cJSON_PrintUnformatted(json);
	cJSON_Delete(json);
	if (!body || asprintf(&path, "/drives/%s", opts->disk) < 0) {
		free(body);
		fprintf(stderr, "mote: error: out of memory\n");
		return CLI_CONTROL_REFUSED;
	}
	int code = cli_call(opts->api_sock, "PATCH", path, body, &status);
	free(path);
	free(body);
	return code;
}

int cli_control_main(int argc, char **argv)
{
	struct cli_control_options opts;
	char error[CLI_ERROR_MAX] = "";
	long status;
	int code;

	if (cli_control_parse(&opts, argc, argv, error, sizeof(error))) {
		fprintf(stderr, "mote: %s\n", error);
		return CLI_CONTROL_USAGE;
	}
	if (opts.help) {
		printf("usage: mote %s --api-sock PATH%s (mote --help)\n", argv[0],
		       opts.command == CLI_CONTROL_SNAPSHOT
			   ? " --state FILE --mem FILE [--diff] [--resume]"
		       : opts.command == CLI_CONTROL_UPDATE_DISK ? " --disk ID --path FILE"
								 : "");
		return 0;
	}
	switch (opts.command) {
	case CLI_CONTROL_PAUSE:
		code = cli_call(opts.api_sock, "PATCH", "/vm", "{\"state\":\"Paused\"}", &status);
		break;
	case CLI_CONTROL_RESUME:
		code = cli_call(opts.api_sock, "PATCH", "/vm", "{\"state\":\"Resumed\"}", &status);
		break;
	case CLI_CONTROL_UPDATE_DISK:
		code = cli_update_disk(&opts);
		break;
	default:
		code = cli_snapshot(&opts);
		break;
	}
	return code;
}

static bool cli_add_path_array(cJSON *parent, const char *name, const char *const *paths,
			       unsigned count)
{
	cJSON *array = cJSON_AddArrayToObject(parent, name);

	for (unsigned i = 0; array && i < count; i++) {
		char *absolute = cli_absolute_path(paths[i]);
		cJSON *item = absolute ? cJSON_CreateString(absolute) : NULL;
		free(absolute);
		if (!item || !cJSON_AddItemToArray(array, item)) {
			cJSON_Delete(item);
			return false;
		}
	}
	return array != NULL;
}

static bool cli_add_overrides(cJSON *json, const struct mote_restore_config *r)
{
	cJSON *array;

	if (r->net_override_count) {
		if (!(array = cJSON_AddArrayToObject(json, "network_overrides")))
			return false;
		for (unsigned i = 0; i < r->net_override_count; i++) {
			cJSON *o = cJSON_CreateObject();
			if (!o || !cJSON_AddItemToArray(array, o) ||
			    !cJSON_AddStringToObject(o, "iface_id", r->net_overrides[i].nic) ||
			    !cJSON_AddStringToObject(o, "host_dev_name", r->net_overrides[i].tap))
				return false;
		}
	}
	if (r->disk_override_count) {
		if (!(array = cJSON_AddArrayToObject(json, "disk_overrides")))
			return false;
		for (unsigned i = 0; i < r->disk_override_count; i++) {
			const struct mote_disk_override *d = &r->disk_overrides[i];
			cJSON *o = cJSON_CreateObject();
			if (!o || !cJSON_AddItemToArray(array, o) ||
			    !cJSON_AddStringToObject(o, "drive_id", d->disk) ||
			    !cli_add_path(o, "path_on_host", d->path) ||
			    !cli_add_path(o, "overlay", d->overlay))
				return false;
		}
	}
	if (r->vsock_uds_path) {
		cJSON *o = cJSON_AddObjectToObject(json, "vsock_override");
		if (!o || !cli_add_path(o, "uds_path", r->vsock_uds_path))
			return false;
	}
	return true;
}

char *cli_restore_request_body(const struct cli_restore_options *opts)
{
	const struct mote_restore_config *r = &opts->restore;
	cJSON *json = cJSON_CreateObject();
	cJSON *backend = NULL;
	char *body = NULL;

	bool ok = json && cli_add_path(json, "snapshot_path", r->state_path) &&
		  (backend = cJSON_AddObjectToObject(json, "mem_backend")) &&
		  cJSON_AddStringToObject(backend, "backend_type", "File") &&
		  cli_add_path(backend, "backend_path", r->mem_path) &&
		  cJSON_AddBoolToObject(json, "resume_vm", !r->paused) &&
		  cJSON_AddBoolToObject(json, "track_dirty_pages", r->track_dirty_pages) &&
		  (!r->verify_memory || cJSON_AddBoolToObject(json, "verify_memory", true)) &&
		  cli_add_overrides(json, r);
	if (ok && r->mem_diff_count)
		ok = cli_add_path_array(json, "mem_diff_paths", r->mem_diff_paths,
					r->mem_diff_count);
	if (ok)
		body = cJSON_PrintUnformatted(json);
	cJSON_Delete(json);
	return body;
}

int cli_restore_send(const struct cli_restore_options *opts)
{
	const char *uds = opts->restore.vsock_uds_path;
	char *absolute = uds ? cli_absolute_path(uds) : NULL;
	bool too_long = absolute && vsock_uds_path_check(absolute) == -ENAMETOOLONG;
	free(absolute);
	if (too_long) {
		fprintf(stderr,
			"mote: --vsock-uds %s: made absolute for the mote that serves %s, it is "
			"too long for a Unix socket path\n",
			uds, opts->api_sock);
		return CLI_CONTROL_USAGE;
	}
	char *body = cli_restore_request_body(opts);
	long status;

	if (!body) {
		fprintf(stderr, "mote: error: out of memory\n");
		return CLI_CONTROL_REFUSED;
	}
	int code = cli_call(opts->api_sock, "PUT", "/snapshot/load", body, &status);
	free(body);
	return code;
}
