/* libFuzzer target: any bytes as what a guest's agent sends libmote's agent client
 * (vmm/agent_client.h), for each of its calls. The guest is hostile, and `mote exec`
 * and `mote cp` read what it sends into the host.
 *
 * The input, once written into one end of a socketpair whose sending side is then
 * shut, is the whole of what the "agent" says; the client works on the other end. Its
 * requests pile up unread in the socket's buffer (small: one short command, a 3000-byte
 * upload). Every wait therefore ends at the input's end of stream, never on a timer.
 *
 * Input: byte 0 chooses the first call (low 3 bits), byte 1 the second one, made if
 * the first left the connection usable; with bit 7 of byte 0 clear, a valid HELLO comes
 * before the rest of the input, so the fuzzer starts past the handshake. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "guest-init/agent_protocol.h"
#include "vmm/agent_client.h"

#define UPLOAD_BYTES 3000
#define HELLO_PAYLOAD 20 /* version, max payload, uptime, empty hostname */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What the calls read and write on the host: a small file to upload, and a file the
 * downloads go to (emptied before each). */
static char upload_path[] = "/tmp/mote-fuzz-agent-upload.XXXXXX";
static char download_path[] = "/tmp/mote-fuzz-agent-download.XXXXXX";
static bool files_ready;

static void remove_files(void)
{
	unlink(upload_path);
	unlink(download_path);
}

static bool prepare_files(void)
{
	uint8_t bytes[UPLOAD_BYTES];
	int up = mkstemp(upload_path);
	int down = mkstemp(download_path);

	if (up < 0 || down < 0)
		return false;
	atexit(remove_files);
	memset(bytes, 'u', sizeof(bytes));
	bool written = write(up, bytes, sizeof(bytes)) == (ssize_t)sizeof(bytes);
	close(up);
	close(down);
	return written;
}

static size_t hello_frame(uint8_t *out)
{
	struct agent_header h = {.length = HELLO_PAYLOAD, .type = AGENT_HELLO};

	agent_header_encode(out, &h);
	uint8_t *p = out + AGENT_HEADER_SIZE;
	agent_le32_put(p, AGENT_PROTOCOL_VERSION);
	agent_le32_put(p + 4, AGENT_MAX_PAYLOAD);
	agent_le64_put(p + 8, 1234);
	agent_le32_put(p + 16, 0);
	return AGENT_HEADER_SIZE + HELLO_PAYLOAD;
}

/* The second end of a socketpair holding the agent's bytes, its sending side shut; the
 * client's end is returned in *client. -1 when the input does not fit the buffer. */
static int agent_end(const uint8_t *hello, size_t hello_len, const uint8_t *data, size_t size,
		     int *client)
{
	int pair[2];
	int buffer = 1 << 20;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) < 0)
		return -1;
	(void)setsockopt(pair[1], SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
	(void)setsockopt(pair[0], SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
	(void)setsockopt(pair[0], SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
	(void)setsockopt(pair[1], SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
	int flags = fcntl(pair[1], F_GETFL);
	bool fits = flags >= 0 && fcntl(pair[1], F_SETFL, flags | O_NONBLOCK) == 0 &&
		    (hello_len == 0 || write(pair[1], hello, hello_len) == (ssize_t)hello_len) &&
		    (size == 0 || write(pair[1], data, size) == (ssize_t)size) &&
		    shutdown(pair[1], SHUT_WR) == 0;
	if (!fits) {
		close(pair[0]);
		close(pair[1]);
		return -1;
	}
	*client = pair[0];
	return pair[1];
}

static int discard_output(void *opaque, const void *data, size_t len)
{
	(void)opaque;
	(void)data;
	(void)len;
	return 0;
}

/* Stops the command on its first byte of stderr: the client then kills it and waits
 * for its end, another path through the protocol. */
static int refuse_stderr(void *opaque, const void *data, size_t len)
{
	(void)opaque;
	(void)data;
	(void)len;
	return -EPIPE;
}

static void run_exec(struct mote_agent *agent, bool tty, bool stop_on_stderr)
{
	const char *const argv[] = {"sh", "-c", "echo hi", NULL};
	const char *const env[] = {"A=1", NULL};
	struct mote_agent_exec exec;
	struct mote_agent_result result;

	mote_agent_exec_init(&exec);
	exec.argv = argv;
	exec.env = env;
	exec.cwd = "/tmp";
	exec.tty = tty;
	exec.on_stdout = discard_output;
	exec.on_stderr = stop_on_stderr ? refuse_stderr : discard_output;
	(void)mote_agent_exec(agent, &exec, &result);
}

static void run_call(struct mote_agent *agent, uint8_t choice)
{
	switch (choice & 7) {
	case 0:
		run_exec(agent, false, false);
		break;
	case 1:
		run_exec(agent, true, false);
		break;
	case 2:
		run_exec(agent, false, true);
		break;
	case 3:
	case 4: {
		int fd = open(upload_path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			(void)mote_agent_upload(agent, fd, "/tmp/x", 0644);
			close(fd);
		}
		break;
	}
	case 5:
	case 6: {
		int fd = open(download_path, O_WRONLY | O_TRUNC | O_CLOEXEC);
		uint32_t mode;
		if (fd >= 0) {
			(void)mote_agent_download(agent, "/tmp/x", fd, &mode);
			close(fd);
		}
		break;
	}
	default:
		(void)mote_agent_power_off(agent);
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t hello[AGENT_HEADER_SIZE + HELLO_PAYLOAD];
	size_t hello_len = 0;
	int client;

	if (size < 2)
		return 0;
	if (!files_ready) {
		if (!prepare_files())
			abort(); /* the host, not the input: no run would mean anything */
		files_ready = true;
	}
	uint8_t first = data[0], second = data[1];
	if (!(first & 0x80))
		hello_len = hello_frame(hello);
	int agent_fd = agent_end(hello, hello_len, data + 2, size - 2, &client);
	if (agent_fd < 0)
		return 0;

	struct mote_agent_options options;
	mote_agent_options_init(&options);
	options.io_timeout_ms = 2000;
	options.transfer_timeout_ms = 5000;
	options.max_download_bytes = 1 << 20;
	struct mote_agent *agent;
	if (mote_agent_attach(client, &options, &agent) == 0) {
		run_call(agent, first);
		if (!mote_agent_broken(agent))
			run_call(agent, second);
		mote_agent_close(agent);
	}
	close(agent_fd);
	return 0;
}
