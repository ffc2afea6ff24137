/* `--vsock cid=N,uds=PATH`, shared by the command line and the config file's "vsock"
 * (cli_options.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "cli_options.h"

/* CIDs 0-2 are the hypervisor, local and host addresses; UINT32_MAX is VMADDR_CID_ANY
 * (<linux/vm_sockets.h>). */
#define FIRST_GUEST_CID 3
#define LAST_GUEST_CID (UINT32_MAX - 1)

/* The guest reaching host port P connects to "uds_P": room for the longest suffix. */
#define PORT_SUFFIX_MAX sizeof("_4294967295")

int cli_vsock_set(struct cli_options *opts, uint64_t cid, const char *uds, char *error,
		  size_t error_len)
{
	if (cid < FIRST_GUEST_CID || cid > LAST_GUEST_CID)
		return cli_error(error, error_len, "vsock cid %" PRIu64 ": must be from %d to %u",
				 cid, FIRST_GUEST_CID, (unsigned)LAST_GUEST_CID);
	if (!uds || !*uds)
		return cli_error(error, error_len, "vsock: uds=PATH is required");
	if (strlen(uds) + PORT_SUFFIX_MAX > sizeof(((struct sockaddr_un *)0)->sun_path))
		return cli_error(error, error_len,
				 "vsock uds %s: too long for a Unix socket path (with the _PORT "
				 "suffix, at most %zu bytes)",
				 uds,
				 sizeof(((struct sockaddr_un *)0)->sun_path) - PORT_SUFFIX_MAX);
	if (cli_replace_part(&opts->vsock_uds, uds, strlen(uds)))
		return cli_error(error, error_len, "out of memory");
	opts->vsock_cid = (uint32_t)cid;
	return 0;
}

int cli_vsock_parse(struct cli_options *opts, const char *text, char *error, size_t error_len)
{
	const char *part = text;
	uint64_t cid = 0;
	bool cid_given = false;
	char *uds = NULL;
	int ret = 0;

	while (*part && !ret) {
		size_t n = strcspn(part, ",");

		if (n > 4 && strncmp(part, "cid=", 4) == 0) {
			char *end;
			errno = 0;
			cid = strtoull(part + 4, &end, 10);
			cid_given = true;
			if (errno || end != part + n || part[4] < '0' || part[4] > '9')
				ret = cli_error(error, error_len,
						"--vsock %s: cid must be a number", text);
		} else if (n > 4 && strncmp(part, "uds=", 4) == 0) {
			if (cli_replace_part(&uds, part + 4, n - 4))
				ret = cli_error(error, error_len, "out of memory");
		} else {
			ret = cli_error(error, error_len,
					"--vsock %s: unknown part '%.*s' (expected cid=N,uds=PATH)",
					text, (int)n, part);
		}
		part += n;
		if (*part == ',')
			part++;
	}
	if (!ret && !cid_given)
		ret = cli_error(error, error_len, "--vsock %s: cid=N is required", text);
	if (!ret)
		ret = cli_vsock_set(opts, cid, uds, error, error_len);
	free(uds);
	return ret;
}
