/* `--net tap=NAME[,mac=MAC][,id=NAME]` and the list of NICs it builds, shared by the
 * command line and the config file's "network-interfaces" (cli_options.h). */
#include <errno.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_options.h"

static void cli_net_free(struct cli_net *net)
{
	free(net->tap);
	free(net->id);
	memset(net, 0, sizeof(*net));
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int cli_mac_parse(const char *text, uint8_t mac[6])
{
	/* Six two-digit groups separated by ':', nothing more. */
	if (strlen(text) != 17)
		return -EINVAL;
	for (int i = 0; i < 6; i++) {
		int high = hex_digit(text[3 * i]), low = hex_digit(text[3 * i + 1]);
		if (high < 0 || low < 0 || (i < 5 && text[3 * i + 2] != ':'))
			return -EINVAL;
		mac[i] = (uint8_t)(high << 4 | low);
	}
	/* The I/G bit (IEEE 802): a multicast address cannot be a NIC's own; nor can all
	 * zeros, which Linux's drivers refuse to bring up (is_valid_ether_addr). */
	static const uint8_t zero[6];
	return (mac[0] & 1) || memcmp(mac, zero, sizeof(zero)) == 0 ? -EINVAL : 0;
}

int cli_net_parse(const char *text, struct cli_net *net, char *error, size_t error_len)
{
	const char *part = text;

	memset(net, 0, sizeof(*net));
	while (*part) {
		size_t n = strcspn(part, ",");
		int ret = 0;

		if (n > 4 && strncmp(part, "tap=", 4) == 0) {
			ret = cli_replace_part(&net->tap, part + 4, n - 4);
		} else if (n > 3 && strncmp(part, "id=", 3) == 0) {
			ret = cli_replace_part(&net->id, part + 3, n - 3);
		} else if (n > 4 && strncmp(part, "mac=", 4) == 0) {
			char mac[32];
			snprintf(mac, sizeof(mac), "%.*s", (int)(n - 4), part + 4);
			if (n - 4 >= sizeof(mac) || cli_mac_parse(mac, net->mac))
				ret = cli_error(error, error_len,
						"--net %s: mac must be a unicast address like "
						"06:00:ac:10:00:02",
						text);
			net->has_mac = true;
		} else {
			ret = cli_error(error, error_len,
					"--net %s: unknown part '%.*s' (expected "
					"tap=NAME[,mac=MAC][,id=NAME])",
					text, (int)n, part);
		}
		if (ret) {
			cli_net_free(net);
			return ret == -ENOMEM ? cli_error(error, error_len, "out of memory") : ret;
		}
		part += n;
		if (*part == ',')
			part++;
	}
	if (!net->tap) {
		cli_net_free(net);
		return cli_error(error, error_len, "--net %s: tap=NAME is required", text);
	}
	return 0;
}

/* What the kernel takes as an interface name (dev_valid_name()). */
static bool is_interface_name(const char *name)
{
	size_t len = strlen(name);

	return len > 0 && len < IFNAMSIZ && strcmp(name, ".") != 0 && strcmp(name, "..") != 0 &&
	       strpbrk(name, "/: \t\n") == NULL;
}

int cli_net_add(struct cli_options *opts, struct cli_net *net, char *error, size_t error_len)
{
	unsigned slot = opts->net_count;
	int ret = 0;

	if (!is_interface_name(net->tap)) {
		ret = cli_error(error, error_len, "tap %s: not an interface name (1 to %d bytes)",
				net->tap, IFNAMSIZ - 1);
		goto fail;
	}
	if (net->id && strlen(net->id) > MOTE_NET_ID_MAX) {
		ret = cli_error(error, error_len, "network interface id %s: longer than %d bytes",
				net->id, MOTE_NET_ID_MAX);
		goto fail;
	}
	for (unsigned i = 0; i < opts->net_count; i++) {
		if (!net->id || !opts->nets[i].id || strcmp(net->id, opts->nets[i].id) != 0)
			continue;
		if (!cli_origin_replaces(opts->nets[i].origin, net->origin)) {
			ret = cli_error(error, error_len, "network interface id %s: given twice",
					net->id);
			goto fail;
		}
		slot = i;
	}
	for (unsigned i = 0; i < opts->net_count; i++) {
		if (i != slot && strcmp(net->tap, opts->nets[i].tap) == 0) {
			ret = cli_error(error, error_len, "tap %s: used by two network interfaces",
					net->tap);
			goto fail;
		}
	}
	if (slot == MOTE_MAX_NETS) {
		ret = cli_error(error, error_len, "tap %s: at most %d network interfaces", net->tap,
				MOTE_MAX_NETS);
		goto fail;
	}
	if (slot < opts->net_count)
		cli_net_free(&opts->nets[slot]);
	else
		opts->net_count++;
	opts->nets[slot] = *net;
	memset(net, 0, sizeof(*net));
	return 0;
fail:
	cli_net_free(net);
	return ret;
}

void cli_nets_free(struct cli_options *opts)
{
	for (unsigned i = 0; i < opts->net_count; i++)
		cli_net_free(&opts->nets[i]);
	opts->net_count = 0;
}
