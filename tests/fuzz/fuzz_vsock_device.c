/* The virtio-vsock fuzz targets' device (fuzz_vsock_device.h). */
#include "fuzz_vsock_device.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* What the exit handler removes. */
static struct {
	char dir[32];
	char uds_path[96];
	struct virtio_vsock *vsock;
} created;

static void remove_created(void)
{
	char path[sizeof(created.dir) + 256 + 1];

	virtio_vsock_destroy(created.vsock); /* removes uds_path */
	created.vsock = NULL;
	DIR *dir = opendir(created.dir);
	for (struct dirent *entry; dir && (entry = readdir(dir));) {
		if (strcmp(entry->d_name, ".") && strcmp(entry->d_name, "..")) {
			snprintf(path, sizeof(path), "%s/%s", created.dir, entry->d_name);
			unlink(path);
		}
	}
	if (dir)
		closedir(dir);
	rmdir(created.dir);
}

int fuzz_vsock_device_create(struct guest_memory *mem, struct event_loop *loop, unsigned timeout_ms,
			     struct virtio_vsock **vsock, struct virtio_mmio *mmio,
			     const char **uds_path)
{
	if (created.dir[0])
		return -1; /* once per process */
	snprintf(created.dir, sizeof(created.dir), "/tmp/mote-fuzz-vsock-XXXXXX");
	if (!mkdtemp(created.dir))
		return -1;
	atexit(remove_created);
	snprintf(created.uds_path, sizeof(created.uds_path), "%s/v.sock", created.dir);
	struct virtio_vsock_options options = {.guest_cid = FUZZ_VSOCK_GUEST_CID,
					       .uds_path = created.uds_path,
					       .timeout_ms = timeout_ms};
	if (virtio_vsock_create(&options, mem, loop, NULL, &created.vsock) ||
	    fuzz_mmio_attach(mmio, virtio_vsock_vdev(created.vsock), loop, 3))
		return -1;
	*vsock = created.vsock;
	*uds_path = created.uds_path;
	return 0;
}

int fuzz_unix_socket(const char *path, bool listen_there)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0 || strlen(path) >= sizeof(addr.sun_path)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	memcpy(addr.sun_path, path, strlen(path) + 1);
	int ok = listen_there
		     ? bind(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0 && listen(fd, 64) == 0
		     : connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0;
	if (!ok) {
		close(fd);
		return -1;
	}
	return fd;
}
