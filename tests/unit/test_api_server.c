/* The control API over a real Unix socket, driven with libcurl (api_client.h), on a
 * controller that has no VM, or a bare one (vm_new): configuration lands in the
 * controller, every bad request gets its 4xx and a fault_message, the server keeps
 * answering, and an ended VM is still described. No KVM needed. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "vmm/api_client.h"
#include "vmm/api_server.h"
#include "vmm/vm.h"
#include "vmm/vm_command.h"

struct fixture {
	char dir[64];
	char sock[128];
	struct vm_controller controller;
	struct api_server *server;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct cli_options pending;
	struct mote_log log = {0};

	snprintf(f->dir, sizeof(f->dir), "/tmp/mote-api-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->sock, sizeof(f->sock), "%s/api.sock", f->dir);
	cli_options_init(&pending);
	vm_controller_init(&f->controller, &pending, 0, NULL, NULL);
	if (api_server_start(&f->controller, f->sock, &log, &f->server))
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	api_server_stop(f->server);
	vm_controller_destroy(&f->controller);
	rmdir(f->dir);
	free(f);
	return 0;
}

/* One request; the reply's status, and its fault_message copied into fault (may be
 * NULL). */
static long call(struct fixture *f, const char *method, const char *path, const char *body,
		 char *fault)
{
	struct api_client_reply reply;
	char error[256];

	assert_int_equal(
	    api_client_request(f->sock, method, path, body, &reply, error, sizeof(error)), 0);
	if (fault)
		snprintf(fault, 512, "%s", reply.fault);
	long status = reply.status;
	api_client_reply_free(&reply);
	return status;
}

/* A 4xx with a fault_message that names what is wrong. */
static void assert_refused(struct fixture *f, long want, const char *method, const char *path,
			   const char *body, const char *mentions)
{
	char fault[512];

	long status = call(f, method, path, body, fault);
	if (status != want || !fault[0] || (mentions && !strstr(fault, mentions)))
		fail_msg("%s %s %s: %ld \"%s\", wanted %ld mentioning \"%s\"", method, path,
			 body ? body : "", status, fault, want, mentions ? mentions : "");
}

/* GET's body as JSON. */
static cJSON *get_json(struct fixture *f, const char *path)
{
	struct api_client_reply reply;
	char error[256];

	assert_int_equal(
	    api_client_request(f->sock, "GET", path, NULL, &reply, error, sizeof(error)), 0);
	assert_int_equal(reply.status, 200);
	cJSON *json = cJSON_Parse(reply.body);
	assert_non_null(json);
	api_client_reply_free(&reply);
	return json;
}

static void assert_still_answers(struct fixture *f)
{
	cJSON *json = get_json(f, "/");
	cJSON_Delete(json);
}

static void get_root_describes_a_vm_not_started(void **state)
{
	struct fixture *f = *state;
	cJSON *json = get_json(f, "/");

	assert_string_equal(cJSON_GetObjectItem(json, "state")->valuestring, "Not started");
	assert_string_equal(cJSON_GetObjectItem(json, "vmm_version")->valuestring, MOTE_VERSION);
	assert_true(cJSON_IsString(cJSON_GetObjectItem(json, "id")));
	cJSON_Delete(json);
}

static void machine_config_put_is_visible_in_get(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(call(f, "PUT", "/machine-config",
			      "{\"vcpu_count\": 2, \"mem_size_mib\": 256, \"track_dirty_pages\": "
			      "true}",
			      NULL),
			 204);
	cJSON *json = get_json(f, "/machine-config");
	assert_int_equal(cJSON_GetObjectItem(json, "vcpu_count")->valueint, 2);
	assert_int_equal(cJSON_GetObjectItem(json, "mem_size_mib")->valueint, 256);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(json, "track_dirty_pages")));
	cJSON_Delete(json);
	assert_int_equal(f->controller.pending.cpus, 2);
	assert_int_equal(f->controller.pending.mem_bytes, 256ULL << 20);
	assert_true(f->controller.pending.track_dirty_pages);
}

static void machine_config_patch_changes_only_what_it_names(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(
	    call(f, "PUT", "/machine-config", "{\"vcpu_count\": 4, \"mem_size_mib\": 512}", NULL),
	    204);
	assert_int_equal(call(f, "PATCH", "/machine-config", "{\"mem_size_mib\": 64}", NULL), 204);
	assert_int_equal(f->controller.pending.cpus, 4);
	assert_int_equal(f->controller.pending.mem_bytes, 64ULL << 20);
	/* PUT needs both sizes. */
	assert_refused(f, 400, "PUT", "/machine-config", "{\"vcpu_count\": 1}", "mem_size_mib");
}

static void a_refused_update_changes_nothing(void **state)
{
	struct fixture *f = *state;

	assert_refused(f, 400, "PUT", "/machine-config",
		       "{\"vcpu_count\": 8, \"mem_size_mib\": 33}", "mem_size_mib");
	assert_int_equal(f->controller.pending.cpus, 1);
	assert_int_equal(f->controller.pending.mem_bytes, 128ULL << 20);
}

static void boot_source_drives_nics_and_vsock_configure_the_vm(void **state)
{
	struct fixture *f = *state;
	const struct cli_options *o = &f->controller.pending;

	assert_int_equal(call(f, "PUT", "/boot-source",
			      "{\"kernel_image_path\": \"/k\", \"boot_args\": \"quiet\"}", NULL),
			 204);
	assert_int_equal(call(f, "PUT", "/drives/rootfs",
			      "{\"drive_id\": \"rootfs\", \"path_on_host\": \"/r.img\", "
			      "\"is_root_device\": true, \"is_read_only\": false, \"overlay\": "
			      "\"/r.overlay\"}",
			      NULL),
			 204);
	assert_int_equal(call(f, "PUT", "/network-interfaces/eth0",
			      "{\"iface_id\": \"eth0\", \"host_dev_name\": \"tap0\", "
			      "\"guest_mac\": \"06:00:ac:10:00:02\"}",
			      NULL),
			 204);
	assert_int_equal(
	    call(f, "PUT", "/vsock", "{\"guest_cid\": 3, \"uds_path\": \"/tmp/v.sock\"}", NULL),
	    204);
	assert_string_equal(o->kernel, "/k");
	assert_string_equal(o->cmdline, "quiet");
	assert_int_equal(o->disk_count, 1);
	assert_string_equal(o->disks[0].id, "rootfs");
	assert_string_equal(o->disks[0].overlay, "/r.overlay");
	assert_true(o->disks[0].root);
	assert_int_equal(o->net_count, 1);
	assert_string_equal(o->nets[0].tap, "tap0");
	assert_int_equal(o->nets[0].mac[5], 0x02);
	assert_int_equal(o->vsock_cid, 3);
	/* The same drive_id again replaces the drive. */
	assert_int_equal(call(f, "PUT", "/drives/rootfs",
			      "{\"drive_id\": \"rootfs\", \"path_on_host\": \"/s.img\", "
			      "\"is_root_device\": true}",
			      NULL),
			 204);
	assert_int_equal(o->disk_count, 1);
	assert_string_equal(o->disks[0].path, "/s.img");
}

/* A request body: object printed as JSON. */
static char *json_text(const cJSON *object)
{
	char *text = cJSON_PrintUnformatted(object);

	assert_non_null(text);
	return text;
}

static void vm_config_reports_the_configuration_in_the_shape_put_takes(void **state)
{
	struct fixture *f = *state;
	static const char drive[] = "{\"drive_id\": \"rootfs\", \"path_on_host\": \"/r.img\", "
				    "\"is_root_device\": true, \"is_read_only\": false, "
				    "\"overlay\": \"/r.overlay\"}";
	static const char nic[] = "{\"iface_id\": \"net1\", \"host_dev_name\": \"tap7\", "
				  "\"guest_mac\": \"06:00:ac:10:00:02\"}";

	cJSON *json = get_json(f, "/vm/config");
	/* Nothing configured: no boot source and no vsock yet, empty device lists. */
	assert_null(cJSON_GetObjectItem(json, "boot-source"));
	assert_null(cJSON_GetObjectItem(json, "vsock"));
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(json, "drives")), 0);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(json, "network-interfaces")), 0);
	cJSON_Delete(json);

	assert_int_equal(call(f, "PUT", "/boot-source",
			      "{\"kernel_image_path\": \"/k\", \"boot_args\": \"quiet\"}", NULL),
			 204);
	assert_int_equal(call(f, "PUT", "/drives/rootfs", drive, NULL), 204);
	assert_int_equal(call(f, "PUT", "/network-interfaces/net1", nic, NULL), 204);
	assert_int_equal(
	    call(f, "PUT", "/vsock", "{\"guest_cid\": 5, \"uds_path\": \"/tmp/v.sock\"}", NULL),
	    204);
	assert_int_equal(
	    call(f, "PATCH", "/machine-config",
		 "{\"vcpu_count\": 2, \"mem_size_mib\": 256, \"track_dirty_pages\": true}", NULL),
	    204);

	json = get_json(f, "/vm/config");
	const cJSON *boot = cJSON_GetObjectItem(json, "boot-source");
	assert_string_equal(cJSON_GetObjectItem(boot, "kernel_image_path")->valuestring, "/k");
	assert_string_equal(cJSON_GetObjectItem(boot, "boot_args")->valuestring, "quiet");
	assert_null(cJSON_GetObjectItem(boot, "initrd_path"));
	const cJSON *machine = cJSON_GetObjectItem(json, "machine-config");
	assert_int_equal(cJSON_GetObjectItem(machine, "vcpu_count")->valueint, 2);
	assert_int_equal(cJSON_GetObjectItem(machine, "mem_size_mib")->valueint, 256);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(machine, "track_dirty_pages")));
	const cJSON *vsock = cJSON_GetObjectItem(json, "vsock");
	assert_int_equal(cJSON_GetObjectItem(vsock, "guest_cid")->valueint, 5);
	assert_string_equal(cJSON_GetObjectItem(vsock, "uds_path")->valuestring, "/tmp/v.sock");
	const cJSON *drives = cJSON_GetObjectItem(json, "drives");
	const cJSON *nics = cJSON_GetObjectItem(json, "network-interfaces");
	assert_int_equal(cJSON_GetArraySize(drives), 1);
	assert_int_equal(cJSON_GetArraySize(nics), 1);

	/* Each device comes back as the PUT that made it (direct defaults to false) ... */
	cJSON *want_drive = cJSON_Parse(drive), *want_nic = cJSON_Parse(nic);
	cJSON_AddFalseToObject(want_drive, "direct");
	assert_true(cJSON_Compare(cJSON_GetArrayItem(drives, 0), want_drive, true));
	assert_true(cJSON_Compare(cJSON_GetArrayItem(nics, 0), want_nic, true));
	/* ... and PUT again as it is, it is taken and changes nothing. */
	char *drive_again = json_text(cJSON_GetArrayItem(drives, 0));
	char *nic_again = json_text(cJSON_GetArrayItem(nics, 0));
	assert_int_equal(call(f, "PUT", "/drives/rootfs", drive_again, NULL), 204);
	assert_int_equal(call(f, "PUT", "/network-interfaces/net1", nic_again, NULL), 204);
	cJSON *again = get_json(f, "/vm/config");
	assert_true(cJSON_Compare(again, json, true));
	free(drive_again);
	free(nic_again);
	cJSON_Delete(again);
	cJSON_Delete(want_drive);
	cJSON_Delete(want_nic);
	cJSON_Delete(json);
}

static void *run_controller(void *arg)
{
	struct mote_exit exit_info;

	return (void *)(intptr_t)vm_controller_run(arg, &exit_info);
}

/* A VM with setup's machine and devices, as a restore builds one from a snapshot, but
 * bare (vm_new: no KVM, no vCPU, no device): mote_vm_run() starts its event thread and
 * waits for its end. */
static struct mote_vm *bare_vm_with_setup(const struct mote_config *setup)
{
	struct mote_log log = {0};
	struct mote_vm *vm = vm_new(&log, 0, 0);

	assert_non_null(vm);
	assert_int_equal(vm_setup_from_config(&vm->setup, setup), 0);
	vm->track_dirty = setup->track_dirty_pages;
	serial_init(&vm->serial, -1, NULL, NULL);
	assert_int_equal(event_loop_init(&vm->events), 0);
	return vm;
}

/* What vm_controller_adopt() does with the VM a command built. */
static void controller_adopt(struct vm_controller *c, struct mote_vm *vm)
{
	pthread_mutex_lock(&c->lock);
	c->vm = vm;
	c->phase = VM_CONTROLLER_HAS_VM;
	pthread_cond_broadcast(&c->changed);
	pthread_mutex_unlock(&c->lock);
}

/* Firecracker goes on reporting the configuration a VM ran with: after the end, not the
 * process's defaults (the pending configuration of a `mote restore` or a snapshot load). */
static void the_configuration_of_an_ended_vm_is_still_reported(void **state)
{
	struct fixture *f = *state;
	struct mote_config setup;
	pthread_t runner;
	void *result;

	mote_config_init(&setup);
	setup.cpus = 2;
	setup.mem_bytes = 256ULL << 20;
	setup.track_dirty_pages = true;
	setup.disk_count = 1;
	setup.disks[0] = (struct mote_disk){
	    .path = "/r.img", .id = "rootfs", .overlay = "/r.overlay", .root = true};
	setup.net_count = 1;
	setup.nets[0] = (struct mote_net){.tap = "tap7",
					  .id = "net1",
					  .has_mac = true,
					  .mac = {0x06, 0x00, 0xac, 0x10, 0x00, 0x02}};
	setup.vsock = (struct mote_vsock){.guest_cid = 5, .uds_path = "/tmp/v.sock"};
	controller_adopt(&f->controller, bare_vm_with_setup(&setup));
	assert_int_equal(pthread_create(&runner, NULL, run_controller, &f->controller), 0);
	cJSON *while_running = get_json(f, "/vm/config");
	cJSON *machine_while_running = get_json(f, "/machine-config");

	vm_controller_stop(&f->controller);
	assert_int_equal(pthread_join(runner, &result), 0);
	assert_int_equal((intptr_t)result, 0);

	cJSON *json = get_json(f, "/");
	assert_string_equal(cJSON_GetObjectItem(json, "state")->valuestring, "Ended");
	cJSON_Delete(json);
	json = get_json(f, "/machine-config");
	assert_int_equal(cJSON_GetObjectItem(json, "vcpu_count")->valueint, 2);
	assert_int_equal(cJSON_GetObjectItem(json, "mem_size_mib")->valueint, 256);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(json, "track_dirty_pages")));
	assert_true(cJSON_Compare(json, machine_while_running, true));
	cJSON_Delete(json);
	json = get_json(f, "/vm/config");
	const cJSON *drive = cJSON_GetArrayItem(cJSON_GetObjectItem(json, "drives"), 0);
	const cJSON *nic = cJSON_GetArrayItem(cJSON_GetObjectItem(json, "network-interfaces"), 0);
	assert_string_equal(cJSON_GetObjectItem(drive, "drive_id")->valuestring, "rootfs");
	assert_string_equal(cJSON_GetObjectItem(drive, "overlay")->valuestring, "/r.overlay");
	assert_string_equal(cJSON_GetObjectItem(nic, "host_dev_name")->valuestring, "tap7");
	assert_string_equal(cJSON_GetObjectItem(nic, "guest_mac")->valuestring,
			    "06:00:ac:10:00:02");
	assert_int_equal(
	    cJSON_GetObjectItem(cJSON_GetObjectItem(json, "vsock"), "guest_cid")->valueint, 5);
	assert_true(cJSON_Compare(json, while_running, true));
	cJSON_Delete(json);
	cJSON_Delete(machine_while_running);
	cJSON_Delete(while_running);
}

static void version_is_firecrackers_shape_with_motes_version(void **state)
{
	struct fixture *f = *state;
	cJSON *json = get_json(f, "/version");

	assert_string_equal(cJSON_GetObjectItem(json, "firecracker_version")->valuestring,
			    MOTE_VERSION);
	cJSON_Delete(json);
	assert_refused(f, 405, "PUT", "/version", "{}", "GET");
	assert_refused(f, 405, "PUT", "/vm/config", "{}", "GET");
}

/* What Firecracker's own clients send along, with values mote can honour. */
static void firecracker_defaults_are_accepted(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(call(f, "PUT", "/machine-config",
			      "{\"vcpu_count\": 1, \"mem_size_mib\": 128, \"smt\": false, "
			      "\"cpu_template\": \"None\", \"huge_pages\": \"None\"}",
			      NULL),
			 204);
	assert_int_equal(call(f, "PUT", "/drives/d",
			      "{\"drive_id\": \"d\", \"path_on_host\": \"/d\", "
			      "\"is_root_device\": false, \"cache_type\": \"Unsafe\", "
			      "\"io_engine\": \"Async\"}",
			      NULL),
			 204);
	assert_int_equal(call(f, "PUT", "/vsock",
			      "{\"vsock_id\": \"v\", \"guest_cid\": 3, \"uds_path\": \"/v\"}",
			      NULL),
			 204);
	assert_refused(f, 400, "PUT", "/machine-config",
		       "{\"vcpu_count\": 2, \"mem_size_mib\": 128, \"smt\": true}", "smt");
	assert_refused(f, 400, "PUT", "/drives/d",
		       "{\"drive_id\": \"d\", \"path_on_host\": \"/d\", \"is_root_device\": "
		       "false, \"cache_type\": \"None\"}",
		       "cache_type");
}

static void malformed_json_is_400_and_the_server_keeps_answering(void **state)
{
	struct fixture *f = *state;
	const char *bodies[] = {"{",
				"{\"vcpu_count\": 2,}",
				"not json",
				"{} trailing",
				"[]",
				"\"text\"",
				"{\"vcpu_count\": 2, \"mem_size_mib\": 256}}"};

	for (size_t i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		assert_refused(f, 400, "PUT", "/machine-config", bodies[i], NULL);
		assert_still_answers(f);
	}
	assert_refused(f, 400, "PUT", "/machine-config", NULL, "body");
	/* cJSON would cut the string at the NUL: /img would be taken for /img\0junk. */
	assert_refused(f, 400, "PUT", "/boot-source",
		       "{\"kernel_image_path\": \"/img\\u0000junk\"}", "u0000");
	/* JSON between systems is UTF-8 (RFC 8259 §8.1): a stray byte, an overlong form
	 * and a surrogate are refused; a path in UTF-8 is taken. */
	assert_refused(f, 400, "PUT", "/boot-source", "{\"kernel_image_path\": \"/img\xff\"}",
		       "UTF-8");
	assert_refused(f, 400, "PUT", "/boot-source", "{\"kernel_image_path\": \"/img\xc0\xaf\"}",
		       "UTF-8");
	assert_refused(f, 400, "PUT", "/boot-source",
		       "{\"kernel_image_path\": \"/img\xed\xa0\x80\"}", "UTF-8");
	assert_still_answers(f);
	assert_int_equal(
	    call(f, "PUT", "/boot-source", "{\"kernel_image_path\": \"/caf\xc3\xa9\"}", NULL), 204);
	/* A key twice in one object is refused, not taken as its last value. */
	assert_refused(f, 400, "PUT", "/machine-config",
		       "{\"vcpu_count\": 2, \"mem_size_mib\": 256, \"vcpu_count\": 8}",
		       "\"vcpu_count\" is given twice");
	/* An escaped backslash before u0000 is no NUL: a path like any other. */
	char fault[512];
	assert_int_equal(
	    call(f, "PUT", "/boot-source", "{\"kernel_image_path\": \"/no\\\\u0000\"}", fault),
	    204);
}

static void wrong_types_are_400(void **state)
{
	struct fixture *f = *state;

	assert_refused(f, 400, "PUT", "/machine-config",
		       "{\"vcpu_count\": \"2\", \"mem_size_mib\": 256}", "vcpu_count");
	assert_refused(f, 400, "PUT", "/machine-config",
		       "{\"vcpu_count\": 2.5, \"mem_size_mib\": 256}", "vcpu_count");
	assert_refused(f, 400, "PUT", "/machine-config",
		       "{\"vcpu_count\": 2, \"mem_size_mib\": 256, \"track_dirty_pages\": 1}",
		       "track_dirty_pages");
	assert_refused(f, 400, "PUT", "/boot-source", "{\"kernel_image_path\": 7}",
		       "kernel_image_path");
	assert_refused(f, 400, "PUT", "/vsock", "{\"guest_cid\": 2, \"uds_path\": \"/v\"}",
		       "guest_cid");
	assert_refused(f, 400, "PATCH", "/vm", "{\"state\": true}", "state");
	assert_still_answers(f);
}

static void unknown_fields_and_values_are_400(void **state)
{
	struct fixture *f = *state;

	assert_refused(f, 400, "PUT", "/machine-config",
		       "{\"vcpu_count\": 1, \"mem_size_mib\": 128, \"cpus\": 1}", "cpus");
	assert_refused(f, 400, "PUT", "/actions", "{\"action_type\": \"Reboot\"}", "action_type");
	assert_refused(f, 400, "PUT", "/actions", "{\"action_type\": \"FlushMetrics\"}",
		       "action_type");
	assert_refused(f, 400, "PATCH", "/vm", "{\"state\": \"Stopped\"}", "Paused");
	assert_refused(f, 400, "PUT", "/snapshot/create",
		       "{\"snapshot_path\": \"/s\", \"mem_file_path\": \"/m\", \"snapshot_type\": "
		       "\"Incremental\"}",
		       "snapshot_type");
	assert_refused(f, 400, "PUT", "/drives/d",
		       "{\"drive_id\": \"d\", \"path_on_host\": \"/d\", \"is_root_device\": false, "
		       "\"rate_limiter\": {}}",
		       "rate_limiter");
	assert_still_answers(f);
}

static void oversized_bodies_are_refused(void **state)
{
	struct fixture *f = *state;
	size_t len = API_BODY_MAX + 1;
	char *big = malloc(len + 1);

	/* A valid JSON string, just too long. */
	memset(big, ' ', len);
	big[0] = '{';
	big[len - 1] = '}';
	big[len] = '\0';
	assert_refused(f, 413, "PUT", "/machine-config", big, "larger");
	free(big);
	assert_still_answers(f);
	assert_int_equal(f->controller.pending.cpus, 1);
}

/* curl's read callback for a chunked upload of n spaces inside braces. */
struct chunked_body {
	size_t left;
	bool started;
};

static size_t chunked_read(char *buffer, size_t size, size_t count, void *opaque)
{
	struct chunked_body *body = opaque;
	size_t n = size * count < body->left ? size * count : body->left;

	memset(buffer, ' ', n);
	if (!body->started && n)
		buffer[0] = '{';
	body->started = true;
	body->left -= n;
	if (!body->left && n)
		buffer[n - 1] = '}';
	return n;
}

static void oversized_chunked_body_without_a_length_is_413(void **state)
{
	struct fixture *f = *state;
	struct chunked_body body = {.left = 3 * API_BODY_MAX};
	struct curl_slist *headers = curl_slist_append(NULL, "Transfer-Encoding: chunked");
	CURL *curl = curl_easy_init();
	long status = 0;

	curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, f->sock);
	curl_easy_setopt(curl, CURLOPT_URL, "http://localhost/machine-config");
	curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(curl, CURLOPT_READFUNCTION, chunked_read);
	curl_easy_setopt(curl, CURLOPT_READDATA, &body);
	curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, NULL);
	FILE *sink = fopen("/dev/null", "w");
	curl_easy_setopt(curl, CURLOPT_WRITEDATA, sink);
	assert_int_equal(curl_easy_perform(curl), CURLE_OK);
	curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
	fclose(sink);
	curl_slist_free_all(headers);
	curl_easy_cleanup(curl);
	assert_int_equal(status, 413);
	assert_still_answers(f);
}

static void unknown_path_is_404_and_wrong_method_is_405(void **state)
{
	struct fixture *f = *state;

	assert_refused(f, 404, "GET", "/nope", NULL, "/nope");
	assert_refused(f, 404, "PUT", "/drives/", "{}", NULL);
	assert_refused(f, 404, "PUT", "/drives/a/b", "{}", NULL);
	assert_refused(f, 405, "DELETE", "/vm", NULL, "PATCH");
	assert_refused(f, 405, "PUT", "/vm", "{\"state\": \"Paused\"}", "PATCH");
	assert_refused(f, 405, "POST", "/actions", "{\"action_type\": \"InstanceStart\"}", "PUT");
	assert_refused(f, 405, "GET", "/snapshot/create", NULL, NULL);
	assert_still_answers(f);
}

static void pause_resume_snapshot_and_ctrl_alt_del_before_start_are_400(void **state)
{
	struct fixture *f = *state;

	assert_refused(f, 400, "PATCH", "/vm", "{\"state\": \"Paused\"}", "not started");
	assert_refused(f, 400, "PATCH", "/vm", "{\"state\": \"Resumed\"}", "not started");
	assert_refused(f, 400, "PUT", "/actions", "{\"action_type\": \"SendCtrlAltDel\"}",
		       "not started");
	assert_refused(f, 400, "PUT", "/snapshot/create",
		       "{\"snapshot_path\": \"/s\", \"mem_file_path\": \"/m\"}", "not started");
	/* PATCH /drives is Firecracker's post-boot update; before, PUT configures. */
	assert_refused(f, 400, "PATCH", "/drives/d",
		       "{\"drive_id\": \"d\", \"path_on_host\": \"/d\"}", "not started");
}

static void drive_updates_that_cannot_mean_anything_are_400(void **state)
{
	struct fixture *f = *state;

	assert_refused(f, 400, "PATCH", "/drives/d", "{\"drive_id\": \"d\"}", "path_on_host");
	assert_refused(f, 400, "PATCH", "/drives/d", "{\"path_on_host\": \"/d\"}", "drive_id");
	assert_refused(f, 400, "PATCH", "/drives/d",
		       "{\"drive_id\": \"e\", \"path_on_host\": \"/d\"}", "differs");
	assert_refused(f, 400, "PATCH", "/drives/d",
		       "{\"drive_id\": \"d\", \"path_on_host\": \"\"}", "path_on_host");
	assert_refused(f, 400, "PATCH", "/drives/d",
		       "{\"drive_id\": \"d\", \"path_on_host\": \"/d\", \"rate_limiter\": {}}",
		       "rate limiters");
	/* PUT's fields are not PATCH's. */
	assert_refused(f, 400, "PATCH", "/drives/d",
		       "{\"drive_id\": \"d\", \"path_on_host\": \"/d\", \"is_read_only\": true}",
		       "is_read_only");
	assert_still_answers(f);
}

static void instance_start_without_a_kernel_is_400(void **state)
{
	struct fixture *f = *state;

	assert_refused(f, 400, "PUT", "/actions", "{\"action_type\": \"InstanceStart\"}", "kernel");
	/* With a kernel that cannot be read: the library's reason, still no VM. */
	assert_int_equal(call(f, "PUT", "/boot-source",
			      "{\"kernel_image_path\": \"/nonexistent/vmlinux\"}", NULL),
			 204);
	assert_refused(f, 400, "PUT", "/actions", "{\"action_type\": \"InstanceStart\"}",
		       "/nonexistent/vmlinux");
	cJSON *json = get_json(f, "/");
	assert_string_equal(cJSON_GetObjectItem(json, "state")->valuestring, "Not started");
	cJSON_Delete(json);
}

static void snapshot_load_is_refused_after_configuration(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(call(f, "PUT", "/boot-source", "{\"kernel_image_path\": \"/k\"}", NULL),
			 204);
	assert_refused(f, 400, "PUT", "/snapshot/load",
		       "{\"snapshot_path\": \"/s\", \"mem_file_path\": \"/m\"}", "configured");
}

static void snapshot_load_needs_exactly_one_memory_file(void **state)
{
	struct fixture *f = *state;

	assert_refused(f, 400, "PUT", "/snapshot/load", "{\"snapshot_path\": \"/s\"}",
		       "mem_file_path");
	assert_refused(f, 400, "PUT", "/snapshot/load",
		       "{\"snapshot_path\": \"/s\", \"mem_file_path\": \"/m\", \"mem_backend\": "
		       "{\"backend_type\": \"File\", \"backend_path\": \"/m\"}}",
		       "exactly one");
	assert_refused(f, 400, "PUT", "/snapshot/load",
		       "{\"snapshot_path\": \"/s\", \"mem_backend\": {\"backend_type\": "
		       "\"Uffd\", \"backend_path\": \"/u\"}}",
		       "backend_type");
}

static void snapshot_load_of_a_damaged_state_file_is_400_and_builds_nothing(void **state)
{
	struct fixture *f = *state;
	char state_path[160], body[512];

	snprintf(state_path, sizeof(state_path), "%s/state", f->dir);
	int fd = open(state_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "not a snapshot", 14), 14);
	close(fd);
	snprintf(body, sizeof(body),
		 "{\"snapshot_path\": \"%s\", \"mem_backend\": {\"backend_type\": \"File\", "
		 "\"backend_path\": \"%s\"}, \"resume_vm\": true}",
		 state_path, state_path);
	assert_refused(f, 400, "PUT", "/snapshot/load", body, state_path);
	unlink(state_path);
	cJSON *json = get_json(f, "/");
	assert_string_equal(cJSON_GetObjectItem(json, "state")->valuestring, "Not started");
	cJSON_Delete(json);
	/* Nothing was configured by the failed load: configuration still works. */
	assert_int_equal(call(f, "PATCH", "/machine-config", "{\"vcpu_count\": 2}", NULL), 204);
}

/* A raw connection to the server, for what a well-behaved client never sends. */
static int connect_raw(struct fixture *f)
{
	struct sockaddr_un address = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	memcpy(address.sun_path, f->sock, strlen(f->sock));
	assert_int_equal(connect(fd, (struct sockaddr *)&address, sizeof(address)), 0);
	return fd;
}

/* Reads fd until the server closes it, waiting at most timeout_ms for each piece; the
 * bytes read, NUL-terminated in buf. Fails the test if the server never closes it. */
static size_t read_to_close(int fd, char *buf, size_t size, int timeout_ms)
{
	size_t len = 0;

	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (poll(&p, 1, timeout_ms) != 1)
			fail_msg("the server neither answered nor closed within %d ms", timeout_ms);
		ssize_t n = recv(fd, buf + len, size - 1 - len, 0);
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	return len;
}

static void assert_reply_starts_with(const char *reply, const char *prefix)
{
	if (strncmp(reply, prefix, strlen(prefix)) != 0)
		fail_msg("reply \"%.60s\" does not start with \"%s\"", reply, prefix);
}

static bool readable_within(int fd, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, timeout_ms) == 1;
}

static void a_stalled_client_holds_up_no_other(void **state)
{
	struct fixture *f = *state;
	static const char half[] = "PATCH /machine-config HTTP/1.1\r\nContent-Length: 50\r\n\r\n{";
	int stalled = connect_raw(f);
	int silent = connect_raw(f);

	assert_int_equal(send(stalled, half, sizeof(half) - 1, 0), (ssize_t)sizeof(half) - 1);
	assert_still_answers(f);
	assert_int_equal(call(f, "PATCH", "/machine-config", "{\"vcpu_count\": 3}", NULL), 204);
	close(stalled);
	close(silent);
	assert_int_equal(f->controller.pending.cpus, 3);
}

static void malformed_http_is_400_and_closes_only_its_connection(void **state)
{
	struct fixture *f = *state;
	static const char garbage[] = "GET / HTTP/1.1\r\nno colon here\r\n\r\n";
	char reply[1024];
	int fd = connect_raw(f);

	assert_int_equal(send(fd, garbage, sizeof(garbage) - 1, 0), (ssize_t)sizeof(garbage) - 1);
	/* The server answers and closes: reading ends at EOF, not in a hang. */
	read_to_close(fd, reply, sizeof(reply), 10000);
	close(fd);
	assert_reply_starts_with(reply, "HTTP/1.1 400 ");
	assert_non_null(strstr(reply, "fault_message"));
	assert_still_answers(f);
}

static void an_idle_connection_is_closed_and_a_slow_request_is_not(void **state)
{
	struct fixture *f = *state;
	static const char *const pieces[] = {"GET / HTTP/1.1\r\n", "Host: mote\r\n",
					     "Connection: close\r\n", "Accept: */*\r\n", "\r\n"};
	const int64_t idle_ms = 1000;
	char reply[2048];

	api_server_set_idle_timeout(f->server, idle_ms * 1000000);
	int idle = connect_raw(f);
	int slow = connect_raw(f);
	/* 1.2 s from the first piece to the last, never more than 0.3 s apart. */
	for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
		if (i)
			usleep(300 * 1000);
		assert_int_equal(send(slow, pieces[i], strlen(pieces[i]), MSG_NOSIGNAL),
				 (ssize_t)strlen(pieces[i]));
	}
	read_to_close(slow, reply, sizeof(reply), 10000);
	assert_reply_starts_with(reply, "HTTP/1.1 200 ");
	/* The silent one was closed by now, or is closed soon: EOF, no reply. */
	assert_int_equal(read_to_close(idle, reply, sizeof(reply), 10000), 0);
	close(idle);
	close(slow);
	assert_still_answers(f);
}

/* A client sending data in pieces of piece bytes, one every 200 ms, over and over,
 * under a request timeout of 1 s: the server answers 408 and closes the connection
 * before the 40th piece, though the client never fell idle; then it answers others. */
static void assert_trickle_gets_408(struct fixture *f, const char *data, size_t len, size_t piece)
{
	char reply[256];
	bool closed = false;

	api_server_set_request_timeout(f->server, 1000 * 1000000LL);
	int fd = connect_raw(f);
	for (size_t i = 0; i < 40 && !closed; i++) {
		if (send(fd, data + (i * piece) % len, piece, MSG_NOSIGNAL) != (ssize_t)piece)
			closed = true;
		else
			closed = readable_within(fd, 200);
	}
	assert_true(closed);
	read_to_close(fd, reply, sizeof(reply), 10000);
	assert_reply_starts_with(reply, "HTTP/1.1 408 ");
	close(fd);
	assert_still_answers(f);
}

/* A client that sends a byte at a time is closed once its request has taken longer
 * than the request timeout, though it never fell idle. */
static void a_request_sent_too_slowly_is_closed(void **state)
{
	/* A byte every 200 ms: the whole request would take 9 s. */
	static const char request[] = "GET / HTTP/1.1\r\nHost: mote\r\nAccept: */*\r\n\r\n";

	assert_trickle_gets_408(*state, request, sizeof(request) - 1, 1);
}

/* Blank lines before a request are bytes too: a client that sends nothing else is
 * under the request timeout, and not idle for ever. */
static void blank_lines_without_a_request_are_timed_out(void **state)
{
	assert_trickle_gets_408(*state, "\r\n", 2, 2);
}

/* Each request of a pipelined connection gets the whole timeout: the next one's time
 * starts with its own first bytes, even when they come in one read with the end of the
 * one before. */
static void each_pipelined_request_has_its_own_timeout(void **state)
{
	struct fixture *f = *state;
	static const char first[] = "GET / HTTP/1.1\r\nHost: mote\r\n";
	static const char rest_and_second[] = "\r\nGET / HTTP/1.1\r\nHost: mote\r\n";
	static const char end[] = "Connection: close\r\n\r\n";
	char reply[4096];

	api_server_set_request_timeout(f->server, 1000 * 1000000LL);
	int fd = connect_raw(f);
	assert_int_equal(send(fd, first, sizeof(first) - 1, 0), (ssize_t)sizeof(first) - 1);
	usleep(700 * 1000);
	assert_int_equal(send(fd, rest_and_second, sizeof(rest_and_second) - 1, 0),
			 (ssize_t)sizeof(rest_and_second) - 1);
	usleep(700 * 1000); /* 1.4 s after the first request began */
	assert_int_equal(send(fd, end, sizeof(end) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(end) - 1);
	read_to_close(fd, reply, sizeof(reply), 10000);
	close(fd);
	assert_reply_starts_with(reply, "HTTP/1.1 200 ");
	const char *second = strstr(reply + 1, "HTTP/1.1 ");
	assert_non_null(second);
	assert_reply_starts_with(second, "HTTP/1.1 200 ");
}

/* Every connection taken by clients that wait between requests (pooled keep-alive
 * connections): a new client is let in after a second by closing the one that waited
 * longest, which loses nothing. */
static void a_new_client_takes_the_place_of_the_longest_idle_connection(void **state)
{
	struct fixture *f = *state;
	static const char get[] = "GET / HTTP/1.1\r\nConnection: close\r\n\r\n";
	int held[API_CONNECTIONS_MAX];
	char reply[2048];

	for (int i = 0; i < API_CONNECTIONS_MAX; i++) {
		held[i] = connect_raw(f);
		usleep(5000); /* accepted in this order */
	}
	int extra = connect_raw(f);
	assert_int_equal(send(extra, get, sizeof(get) - 1, 0), (ssize_t)sizeof(get) - 1);
	/* Not at once: a client that just connected gets time to send its request. */
	assert_false(readable_within(extra, 300));
	read_to_close(extra, reply, sizeof(reply), 10000);
	assert_reply_starts_with(reply, "HTTP/1.1 200 ");
	close(extra);
	/* The first held, and only it, was closed for it. */
	assert_int_equal(read_to_close(held[0], reply, sizeof(reply), 1000), 0);
	for (int i = 1; i < API_CONNECTIONS_MAX; i++)
		assert_false(readable_within(held[i], 0));
	for (int i = 0; i < API_CONNECTIONS_MAX; i++)
		close(held[i]);
	assert_still_answers(f);
}

/* Connections in the middle of a request are never closed for a new client: it waits
 * until their request timeout ends them. */
static void requests_in_progress_keep_their_connections(void **state)
{
	struct fixture *f = *state;
	static const char get[] = "GET / HTTP/1.1\r\nConnection: close\r\n\r\n";
	static const char half[] = "GET / HTTP/1.1\r\nHost: mote\r\n";
	int held[API_CONNECTIONS_MAX];
	char reply[2048];

	api_server_set_request_timeout(f->server, 2500 * 1000000LL);
	for (int i = 0; i < API_CONNECTIONS_MAX; i++) {
		held[i] = connect_raw(f);
		assert_int_equal(send(held[i], half, sizeof(half) - 1, 0),
				 (ssize_t)sizeof(half) - 1);
	}
	int extra = connect_raw(f);
	assert_int_equal(send(extra, get, sizeof(get) - 1, 0), (ssize_t)sizeof(get) - 1);
	/* Past the second after which an idle connection would have been closed. */
	assert_false(readable_within(extra, 1600));
	read_to_close(extra, reply, sizeof(reply), 10000);
	assert_reply_starts_with(reply, "HTTP/1.1 200 ");
	close(extra);
	for (int i = 0; i < API_CONNECTIONS_MAX; i++) {
		read_to_close(held[i], reply, sizeof(reply), 10000);
		assert_reply_starts_with(reply, "HTTP/1.1 408 ");
		close(held[i]);
	}
	assert_still_answers(f);
}

static void a_live_socket_and_a_non_socket_path_are_refused(void **state)
{
	struct fixture *f = *state;
	struct vm_controller other;
	struct cli_options pending;
	struct api_server *server = NULL;
	struct mote_log log = {0};
	char file_path[160];

	cli_options_init(&pending);
	vm_controller_init(&other, &pending, 0, NULL, NULL);
	assert_int_equal(api_server_start(&other, f->sock, &log, &server), -EADDRINUSE);
	snprintf(file_path, sizeof(file_path), "%s/plain", f->dir);
	int fd = open(file_path, O_WRONLY | O_CREAT, 0600);
	close(fd);
	assert_int_equal(api_server_start(&other, file_path, &log, &server), -EEXIST);
	struct stat st;
	assert_int_equal(stat(file_path, &st), 0); /* left alone */
	unlink(file_path);
	vm_controller_destroy(&other);
	assert_still_answers(f);
}

static void a_stale_socket_is_replaced_and_the_socket_goes_at_stop(void **state)
{
	struct fixture *f = *state;
	struct vm_controller other;
	struct cli_options pending;
	struct api_server *server = NULL;
	struct mote_log log = {0};
	struct sockaddr_un address = {.sun_family = AF_UNIX};
	struct stat st;
	char stale[160];

	/* A socket bound and closed: nobody listens there any more. */
	snprintf(stale, sizeof(stale), "%s/stale.sock", f->dir);
	assert_true(strlen(stale) < sizeof(address.sun_path));
	memcpy(address.sun_path, stale, strlen(stale));
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&address, sizeof(address)), 0);
	close(fd);
	cli_options_init(&pending);
	vm_controller_init(&other, &pending, 0, NULL, NULL);
	assert_int_equal(api_server_start(&other, stale, &log, &server), 0);
	assert_int_equal(stat(stale, &st), 0);
	api_server_stop(server);
	assert_int_equal(stat(stale, &st), -1);
	vm_controller_destroy(&other);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(get_root_describes_a_vm_not_started, setup, teardown),
	    cmocka_unit_test_setup_teardown(machine_config_put_is_visible_in_get, setup, teardown),
	    cmocka_unit_test_setup_teardown(machine_config_patch_changes_only_what_it_names, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(a_refused_update_changes_nothing, setup, teardown),
	    cmocka_unit_test_setup_teardown(boot_source_drives_nics_and_vsock_configure_the_vm,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(
		vm_config_reports_the_configuration_in_the_shape_put_takes, setup, teardown),
	    cmocka_unit_test_setup_teardown(the_configuration_of_an_ended_vm_is_still_reported,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(version_is_firecrackers_shape_with_motes_version, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(firecracker_defaults_are_accepted, setup, teardown),
	    cmocka_unit_test_setup_teardown(malformed_json_is_400_and_the_server_keeps_answering,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(wrong_types_are_400, setup, teardown),
	    cmocka_unit_test_setup_teardown(unknown_fields_and_values_are_400, setup, teardown),
	    cmocka_unit_test_setup_teardown(oversized_bodies_are_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(oversized_chunked_body_without_a_length_is_413, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(unknown_path_is_404_and_wrong_method_is_405, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(
		pause_resume_snapshot_and_ctrl_alt_del_before_start_are_400, setup, teardown),
	    cmocka_unit_test_setup_teardown(drive_updates_that_cannot_mean_anything_are_400, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(instance_start_without_a_kernel_is_400, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(snapshot_load_is_refused_after_configuration, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(snapshot_load_needs_exactly_one_memory_file, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(
		snapshot_load_of_a_damaged_state_file_is_400_and_builds_nothing, setup, teardown),
	    cmocka_unit_test_setup_teardown(a_stalled_client_holds_up_no_other, setup, teardown),
	    cmocka_unit_test_setup_teardown(malformed_http_is_400_and_closes_only_its_connection,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(an_idle_connection_is_closed_and_a_slow_request_is_not,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(a_request_sent_too_slowly_is_closed, setup, teardown),
	    cmocka_unit_test_setup_teardown(blank_lines_without_a_request_are_timed_out, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(each_pipelined_request_has_its_own_timeout, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(
		a_new_client_takes_the_place_of_the_longest_idle_connection, setup, teardown),
	    cmocka_unit_test_setup_teardown(requests_in_progress_keep_their_connections, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(a_live_socket_and_a_non_socket_path_are_refused, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(a_stale_socket_is_replaced_and_the_socket_goes_at_stop,
					    setup, teardown),
	};

	curl_global_init(CURL_GLOBAL_DEFAULT);
	int failed = cmocka_run_group_tests(tests, NULL, NULL);
	curl_global_cleanup();
	return failed;
}
