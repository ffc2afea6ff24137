/* `mote run --net` and `--vsock`, and the config file's "network-interfaces" and
 * "vsock" (Firecracker's shapes): what is accepted, and a reason for what is not. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cli_test_parse.h"

/* Parses "mote run --kernel k" and args. */
static int parse(struct cli_options *opts, char *error, const char *const *args)
{
	static const char *const run[] = {"run", "--kernel", "k", NULL};

	return cli_test_parse(opts, error, run, args);
}

/* Parses one option that must be refused, with a reason naming what is wrong. */
static void assert_refused(const char *option, const char *value, const char *reason)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *args[] = {option, value, NULL};

	if (parse(&o, error, args) != -EINVAL)
		fail_msg("accepted: %s %s", option, value);
	if (!strstr(error, reason))
		fail_msg("%s %s: reason \"%s\" lacks \"%s\"", option, value, error, reason);
	cli_options_free(&o);
}

static void nics_come_in_order_with_mac_and_id(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *args[] = {"--net", "tap=tap0", "--net", "tap=tap1,mac=06:00:AC:10:00:0f,id=lan",
			      NULL};

	(void)state;
	assert_int_equal(parse(&o, error, args), 0);
	assert_int_equal(o.net_count, 2);
	assert_string_equal(o.nets[0].tap, "tap0");
	assert_false(o.nets[0].has_mac);
	assert_null(o.nets[0].id);
	assert_string_equal(o.nets[1].tap, "tap1");
	assert_true(o.nets[1].has_mac);
	const uint8_t mac[6] = {0x06, 0x00, 0xac, 0x10, 0x00, 0x0f};
	assert_memory_equal(o.nets[1].mac, mac, 6);
	assert_string_equal(o.nets[1].id, "lan");
	cli_options_free(&o);
}

static void bad_nics_are_refused_with_a_reason(void **state)
{
	(void)state;
	assert_refused("--net", "mac=06:00:00:00:00:01", "tap=NAME is required");
	assert_refused("--net", "tap=", "unknown part");
	assert_refused("--net", "tap=tap0,bridge=br0", "unknown part 'bridge=br0'");
	assert_refused("--net", "tap=a-name-far-too-long-for-linux", "not an interface name");
	assert_refused("--net", "tap=a/b", "not an interface name");
	assert_refused("--net", "tap=tap0,mac=06:00:00:00:00", "mac must be");
	assert_refused("--net", "tap=tap0,mac=06:00:00:00:00:0g", "mac must be");
	assert_refused("--net", "tap=tap0,mac=06-00-00-00-00-01", "mac must be");
	/* The I/G bit set: a multicast address. */
	assert_refused("--net", "tap=tap0,mac=01:00:5e:00:00:01", "mac must be");
	/* All zeros: no NIC's address (Linux will not bring such a NIC up). */
	assert_refused("--net", "tap=tap0,mac=00:00:00:00:00:00", "mac must be");
}

static void two_nics_on_one_tap_are_refused(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *args[] = {"--net", "tap=tap0", "--net", "tap=tap0", NULL};

	(void)state;
	assert_int_equal(parse(&o, error, args), -EINVAL);
	assert_non_null(strstr(error, "used by two"));
	cli_options_free(&o);
}

static void too_many_nics_are_refused(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	struct cli_net net;

	(void)state;
	cli_options_init(&o);
	for (int i = 0; i < MOTE_MAX_NETS; i++) {
		char text[32];
		snprintf(text, sizeof(text), "tap=tap%d", i);
		assert_int_equal(cli_net_parse(text, &net, error, sizeof(error)), 0);
		assert_int_equal(cli_net_add(&o, &net, error, sizeof(error)), 0);
	}
	assert_int_equal(cli_net_parse("tap=extra", &net, error, sizeof(error)), 0);
	assert_int_equal(cli_net_add(&o, &net, error, sizeof(error)), -EINVAL);
	assert_non_null(strstr(error, "at most"));
	assert_int_equal(o.net_count, MOTE_MAX_NETS);
	cli_options_free(&o);
}

static void config_network_interfaces_are_firecracker_shaped(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *json = "{\"network-interfaces\": [{\"iface_id\": \"eth0\", "
			   "\"host_dev_name\": \"tap7\", \"guest_mac\": \"06:00:ac:10:00:02\"}]}";

	(void)state;
	cli_options_init(&o);
	assert_int_equal(config_file_apply(&o, json, error, sizeof(error)), 0);
	assert_int_equal(o.net_count, 1);
	assert_string_equal(o.nets[0].id, "eth0");
	assert_string_equal(o.nets[0].tap, "tap7");
	assert_true(o.nets[0].has_mac);
	assert_int_equal(o.nets[0].mac[5], 0x02);
	cli_options_free(&o);
}

static void bad_config_network_interfaces_are_refused(void **state)
{
	const char *cases[] = {
	    "{\"network-interfaces\": [{\"iface_id\": \"eth0\"}]}",
	    "{\"network-interfaces\": [{\"host_dev_name\": \"t\", \"guest_mac\": \"zz\"}]}",
	    "{\"network-interfaces\": [{\"host_dev_name\": \"t\", \"rx_rate_limiter\": {}}]}",
	    "{\"network-interfaces\": [\"tap0\"]}",
	    "{\"network-interfaces\": {\"host_dev_name\": \"t\"}}",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char error[CLI_ERROR_MAX];

		assert_config_refused(cases[i], error);
		assert_non_null(strstr(error, "config: "));
	}
}

static void vsock_takes_a_cid_and_a_socket_path(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";
	const char *args[] = {"--vsock", "cid=3,uds=/tmp/v.sock", NULL};

	(void)state;
	assert_int_equal(parse(&o, error, args), 0);
	assert_int_equal(o.vsock_cid, 3);
	assert_string_equal(o.vsock_uds, "/tmp/v.sock");
	cli_options_free(&o);
}

static void bad_vsock_values_are_refused_with_a_reason(void **state)
{
	char long_uds[160];

	(void)state;
	/* 108 bytes of sun_path hold no 100-byte path plus "_PORT". */
	snprintf(long_uds, sizeof(long_uds), "cid=3,uds=/%0100d", 0);
	assert_refused("--vsock", "uds=/tmp/v.sock", "cid=N is required");
	assert_refused("--vsock", "cid=3", "uds=PATH is required");
	assert_refused("--vsock", "cid=2,uds=/v", "must be from 3");
	assert_refused("--vsock", "cid=0,uds=/v", "must be from 3"); /* given, if wrong */
	assert_refused("--vsock", "cid=4294967295,uds=/v", "must be from 3");
	assert_refused("--vsock", "cid=-5,uds=/v", "cid must be a number");
	assert_refused("--vsock", "cid=3x,uds=/v", "cid must be a number");
	assert_refused("--vsock", "cid=3,uds=/v,port=5", "unknown part 'port=5'");
	assert_refused("--vsock", long_uds, "too long");
}

static void config_vsock_is_firecracker_shaped(void **state)
{
	struct cli_options o;
	char error[CLI_ERROR_MAX] = "";

	(void)state;
	cli_options_init(&o);
	assert_int_equal(
	    config_file_apply(
		&o, "{\"vsock\": {\"vsock_id\": \"v\", \"guest_cid\": 52, \"uds_path\": \"/v.s\"}}",
		error, sizeof(error)),
	    0);
	assert_int_equal(o.vsock_cid, 52);
	assert_string_equal(o.vsock_uds, "/v.s");
	assert_int_equal(config_file_apply(&o,
					   "{\"vsock\": {\"guest_cid\": 3.5, \"uds_path\": "
					   "\"/v\"}}",
					   error, sizeof(error)),
			 -EINVAL);
	assert_int_equal(config_file_apply(&o,
					   "{\"vsock\": {\"guest_cid\": 1, \"uds_path\": \"/v\"}}",
					   error, sizeof(error)),
			 -EINVAL);
	assert_non_null(strstr(error, "config: "));
	/* Out of any range, and negative: refused before any conversion, naming the range
	 * a whole number is checked against. */
	const char *bad_cids[] = {"4294967296", "-1", "1e300"};
	for (size_t i = 0; i < sizeof(bad_cids) / sizeof(bad_cids[0]); i++) {
		char text[128];
		snprintf(text, sizeof(text),
			 "{\"vsock\": {\"guest_cid\": %s, \"uds_path\": \"/v\"}}", bad_cids[i]);
		assert_int_equal(config_file_apply(&o, text, error, sizeof(error)), -EINVAL);
		assert_non_null(strstr(error, "guest_cid must be an integer"));
	}
	assert_int_equal(
	    config_file_apply(&o, "{\"vsock\": {\"uds_path\": \"/v\"}}", error, sizeof(error)),
	    -EINVAL);
	assert_non_null(strstr(error, "guest_cid is required"));
	cli_options_free(&o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(nics_come_in_order_with_mac_and_id),
	    cmocka_unit_test(bad_nics_are_refused_with_a_reason),
	    cmocka_unit_test(two_nics_on_one_tap_are_refused),
	    cmocka_unit_test(too_many_nics_are_refused),
	    cmocka_unit_test(config_network_interfaces_are_firecracker_shaped),
	    cmocka_unit_test(bad_config_network_interfaces_are_refused),
	    cmocka_unit_test(vsock_takes_a_cid_and_a_socket_path),
	    cmocka_unit_test(bad_vsock_values_are_refused_with_a_reason),
	    cmocka_unit_test(config_vsock_is_firecracker_shaped),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
