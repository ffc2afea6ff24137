/* The agent's file transfers (AGENT_PROTOCOL.md "Files") on the host, in a temporary
 * directory: streamed uploads and downloads of any size, atomic replacement, modes,
 * and the errors a client must be able to tell apart. */
#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <signal.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "tests/unit/agent_test_wire.h"

#define FIFTY_MIB (50u << 20)

struct answer {
	uint16_t type;
	uint32_t error;
	uint64_t size;
	uint32_t mode;
};

/* The next frame for id: OK (size, mode) or ERROR (errno). */
static struct answer expect_answer(struct wire_fixture *f, uint32_t id)
{
	struct answer a = {0};
	struct agent_reader rd;

	do
		assert_int_equal(wire_recv(f->server.fd, &f->frame), 0);
	while (f->frame.h.id != id);
	a.type = f->frame.h.type;
	agent_reader_init(&rd, f->frame.payload, f->frame.h.length);
	if (a.type == AGENT_OK) {
		a.size = agent_get_u64(&rd);
		a.mode = agent_get_u32(&rd);
	} else {
		assert_int_equal(a.type, AGENT_ERROR);
		a.error = agent_get_u32(&rd);
	}
	return a;
}

static void send_upload_begin(struct wire_fixture *f, uint32_t id, const char *path, uint32_t mode)
{
	uint8_t payload[64 + AGENT_PATH_MAX];
	struct agent_writer w;

	agent_writer_init(&w, payload, sizeof(payload));
	agent_put_u32(&w, mode);
	agent_put_u32(&w, 0);
	agent_put_string(&w, path);
	assert_int_equal(wire_send(f->server.fd, AGENT_UPLOAD, id, payload, w.len), 0);
}

/* Uploads size bytes of the xorshift stream from seed; returns the stream's hash. */
static uint64_t upload(struct wire_fixture *f, uint32_t id, const char *path, uint32_t mode,
		       size_t size, uint64_t seed)
{
	static uint8_t chunk[AGENT_CHUNK_MAX];
	uint64_t hash = WIRE_FNV_INIT;

	send_upload_begin(f, id, path, mode);
	assert_int_equal(expect_answer(f, id).type, AGENT_OK);
	for (size_t sent = 0; sent < size;) {
		size_t n = size - sent < sizeof(chunk) ? size - sent : sizeof(chunk);
		wire_fill(chunk, n, &seed);
		hash = wire_fnv(hash, chunk, n);
		assert_int_equal(wire_send(f->server.fd, AGENT_UPLOAD_DATA, id, chunk, n), 0);
		sent += n;
	}
	assert_int_equal(wire_send(f->server.fd, AGENT_UPLOAD_END, id, NULL, 0), 0);
	struct answer end = expect_answer(f, id);
	assert_int_equal(end.type, AGENT_OK);
	assert_int_equal(end.size, size);
	return hash;
}

static void send_download(struct wire_fixture *f, uint32_t id, const char *path)
{
	uint8_t payload[8 + AGENT_PATH_MAX];
	struct agent_writer w;

	agent_writer_init(&w, payload, sizeof(payload));
	agent_put_string(&w, path);
	assert_int_equal(wire_send(f->server.fd, AGENT_DOWNLOAD, id, payload, w.len), 0);
}

static uint64_t file_hash(const char *path, uint64_t *size)
{
	static uint8_t buf[1 << 16];
	uint64_t hash = WIRE_FNV_INIT;
	int fd = open(path, O_RDONLY);
	ssize_t n;

	assert_true(fd >= 0);
	*size = 0;
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		hash = wire_fnv(hash, buf, (size_t)n);
		*size += (uint64_t)n;
	}
	close(fd);
	return hash;
}

static void path_in(const struct wire_fixture *f, const char *name, char *out, size_t cap)
{
	snprintf(out, cap, "%s/%s", f->dir, name);
}

static int entries_in(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	closedir(d);
	return n;
}

static void fifty_mib_upload_and_download_are_byte_identical(void **state)
{
	struct wire_fixture *f = *state;
	char path[128];
	uint64_t size, received = 0, hash = WIRE_FNV_INIT;
	struct agent_reader rd;

	path_in(f, "big.bin", path, sizeof(path));
	wire_expect_hello(f);
	uint64_t sent_hash = upload(f, 1, path, 0644, FIFTY_MIB, 7);
	assert_true(file_hash(path, &size) == sent_hash);
	assert_int_equal(size, FIFTY_MIB);

	send_download(f, 2, path);
	struct answer open_answer = expect_answer(f, 2);
	assert_int_equal(open_answer.type, AGENT_OK);
	assert_int_equal(open_answer.size, FIFTY_MIB);
	for (;;) {
		assert_int_equal(wire_recv(f->server.fd, &f->frame), 0);
		assert_int_equal(f->frame.h.id, 2);
		if (f->frame.h.type == AGENT_END)
			break;
		assert_int_equal(f->frame.h.type, AGENT_DATA);
		assert_true(f->frame.h.length <= AGENT_CHUNK_MAX);
		hash = wire_fnv(hash, f->frame.payload, f->frame.h.length);
		received += f->frame.h.length;
	}
	agent_reader_init(&rd, f->frame.payload, f->frame.h.length);
	assert_int_equal(agent_get_u64(&rd), FIFTY_MIB);
	assert_int_equal(received, FIFTY_MIB);
	assert_true(hash == sent_hash);
}

static void upload_sets_the_mode_and_replaces_the_old_file(void **state)
{
	struct wire_fixture *f = *state;
	char path[128];
	struct stat st;
	uint64_t size;

	path_in(f, "script", path, sizeof(path));
	wire_expect_hello(f);
	upload(f, 1, path, 0644, 100000, 1);
	uint64_t hash = upload(f, 2, path, 0750, 10, 2);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0750);
	assert_true(file_hash(path, &size) == hash);
	assert_int_equal(size, 10);
	assert_int_equal(entries_in(f->dir), 1);
}

static void empty_upload_makes_an_empty_file(void **state)
{
	struct wire_fixture *f = *state;
	char path[128];
	struct stat st;

	path_in(f, "empty", path, sizeof(path));
	wire_expect_hello(f);
	upload(f, 1, path, 0600, 0, 1);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, 0);
}

static void upload_into_a_missing_directory_is_enoent(void **state)
{
	struct wire_fixture *f = *state;
	char path[128];

	path_in(f, "no/such/dir/file", path, sizeof(path));
	wire_expect_hello(f);
	send_upload_begin(f, 1, path, 0644);
	struct answer a = expect_answer(f, 1);
	assert_int_equal(a.type, AGENT_ERROR);
	assert_int_equal(a.error, ENOENT);
}

static void upload_onto_a_directory_is_eisdir(void **state)
{
	struct wire_fixture *f = *state;

	wire_expect_hello(f);
	send_upload_begin(f, 1, f->dir, 0644);
	struct answer a = expect_answer(f, 1);
	assert_int_equal(a.type, AGENT_ERROR);
	assert_int_equal(a.error, EISDIR);
}

static void upload_below_a_file_is_enotdir(void **state)
{
	struct wire_fixture *f = *state;
	char file[128], path[160];

	path_in(f, "plain", file, sizeof(file));
	snprintf(path, sizeof(path), "%s/below", file);
	wire_expect_hello(f);
	upload(f, 1, file, 0644, 1, 1);
	send_upload_begin(f, 2, path, 0644);
	struct answer a = expect_answer(f, 2);
	assert_int_equal(a.type, AGENT_ERROR);
	assert_int_equal(a.error, ENOTDIR);
}

static void upload_data_for_no_upload_is_esrch(void **state)
{
	struct wire_fixture *f = *state;

	wire_expect_hello(f);
	assert_int_equal(wire_send(f->server.fd, AGENT_UPLOAD_DATA, 4, "x", 1), 0);
	struct answer a = expect_answer(f, 4);
	assert_int_equal(a.type, AGENT_ERROR);
	assert_int_equal(a.error, ESRCH);
}

/* A write that fails (here the file size limit, EFBIG) is the upload's one ERROR: the
 * UPLOAD_END that follows, even a malformed one, ends it without another (the agent
 * used to answer that one too, naming a path it had freed: "(null)"). */
static void failed_upload_gets_one_error_only(void **state)
{
	struct wire_fixture *f = *state;
	struct rlimit old_limit;
	char path[128];

	/* A server of its own, started under the limit (SIGXFSZ ignored: write fails). */
	assert_true(WIFEXITED(wire_server_stop(&f->server)));
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old_limit), 0);
	/* The soft limit only: lowering the hard one could not be undone unprivileged. */
	struct rlimit one_byte = {.rlim_cur = 1, .rlim_max = old_limit.rlim_max};
	void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &one_byte), 0);
	int started = wire_server_start(&f->server, &f->config);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old_limit), 0);
	signal(SIGXFSZ, old_handler);
	assert_int_equal(started, 0);

	path_in(f, "too-big", path, sizeof(path));
	wire_expect_hello(f);
	send_upload_begin(f, 1, path, 0644);
	assert_int_equal(expect_answer(f, 1).type, AGENT_OK);
	assert_int_equal(wire_send(f->server.fd, AGENT_UPLOAD_DATA, 1, "four", 4), 0);
	struct answer a = expect_answer(f, 1);
	assert_int_equal(a.type, AGENT_ERROR);
	assert_int_equal(a.error, EFBIG);
	assert_int_equal(wire_send(f->server.fd, AGENT_UPLOAD_END, 1, "x", 1), 0);
	/* The upload is over: the next frame for id 1 finds none, and nothing came before. */
	assert_int_equal(wire_send(f->server.fd, AGENT_UPLOAD_DATA, 1, "x", 1), 0);
	a = expect_answer(f, 1);
	assert_int_equal(a.type, AGENT_ERROR);
	assert_int_equal(a.error, ESRCH);
	assert_int_equal(entries_in(f->dir), 0);
}

static void unfinished_upload_leaves_nothing_behind(void **state)
{
	struct wire_fixture *f = *state;
	char path[128];

	path_in(f, "partial", path, sizeof(path));
	wire_expect_hello(f);
	send_upload_begin(f, 1, path, 0644);
	assert_int_equal(expect_answer(f, 1).type, AGENT_OK);
	assert_int_equal(wire_send(f->server.fd, AGENT_UPLOAD_DATA, 1, "half", 4), 0);
	int status = wire_server_stop(&f->server);
	assert_true(WIFEXITED(status));
	assert_int_equal(entries_in(f->dir), 0);
}

static void download_of_a_missing_file_is_enoent(void **state)
{
	struct wire_fixture *f = *state;
	char path[128];

	path_in(f, "absent", path, sizeof(path));
	wire_expect_hello(f);
	send_download(f, 1, path);
	struct answer a = expect_answer(f, 1);
	assert_int_equal(a.type, AGENT_ERROR);
	assert_int_equal(a.error, ENOENT);
}

static void download_of_a_directory_is_eisdir(void **state)
{
	struct wire_fixture *f = *state;

	wire_expect_hello(f);
	send_download(f, 1, f->dir);
	struct answer a = expect_answer(f, 1);
	assert_int_equal(a.type, AGENT_ERROR);
	assert_int_equal(a.error, EISDIR);
}

static void download_of_a_device_is_refused(void **state)
{
	struct wire_fixture *f = *state;

	wire_expect_hello(f);
	send_download(f, 1, "/dev/zero");
	struct answer a = expect_answer(f, 1);
	assert_int_equal(a.type, AGENT_ERROR);
	assert_int_equal(a.error, EINVAL);
}

static void download_reports_size_and_mode_first(void **state)
{
	struct wire_fixture *f = *state;
	char path[128];

	path_in(f, "small", path, sizeof(path));
	wire_expect_hello(f);
	upload(f, 1, path, 0751, 5, 3);
	send_download(f, 2, path);
	struct answer a = expect_answer(f, 2);
	assert_int_equal(a.type, AGENT_OK);
	assert_int_equal(a.size, 5);
	assert_int_equal(a.mode, 0751);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, wire_setup, wire_teardown)
	    T(fifty_mib_upload_and_download_are_byte_identical),
	    T(upload_sets_the_mode_and_replaces_the_old_file),
	    T(empty_upload_makes_an_empty_file),
	    T(upload_into_a_missing_directory_is_enoent),
	    T(upload_onto_a_directory_is_eisdir),
	    T(upload_below_a_file_is_enotdir),
	    T(upload_data_for_no_upload_is_esrch),
	    T(failed_upload_gets_one_error_only),
	    T(unfinished_upload_leaves_nothing_behind),
	    T(download_of_a_missing_file_is_enoent),
	    T(download_of_a_directory_is_eisdir),
	    T(download_of_a_device_is_refused),
	    T(download_reports_size_and_mode_first),
#undef T
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
