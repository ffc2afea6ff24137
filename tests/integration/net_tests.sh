# virtio-net on TAP: the guest's MAC, ping, TCP both ways with the data checked end to
# end, two NICs, a missing TAP. The TAPs get link-local addresses only (design.md:
# test traffic never goes anywhere else) and are deleted afterwards.
# Sourced by run.sh; boots from ROOT_IMG (with mote-pattern and mote-pipe) and checks with
# MOTE_PATTERN on the host.
# shellcheck shell=bash

HOST_IP=169.254.100.1
GUEST_IP=169.254.100.2
GUEST_MAC=06:00:a9:fe:64:02

# tap_up NAME ADDR: a TAP with ADDR/30, up. A KVM test never skips: without TUN the
# test fails and says so.
tap_up() {
	ip link del "$1" >/dev/null 2>&1 || :
	if ! ip tuntap add dev "$1" mode tap >"$WORK/tap.err" 2>&1; then
		fail "cannot create TAP $1 (is the tun module loaded?): $(cat "$WORK/tap.err")"
		return 1
	fi
	if ! { ip addr add "$2/30" dev "$1" && ip link set "$1" up; } >"$WORK/tap.err" 2>&1; then
		fail "cannot give TAP $1 the address $2 or bring it up: $(cat "$WORK/tap.err")"
		return 1
	fi
}

tap_down() {
	ip link del "$1" >/dev/null 2>&1 || :
}

# The guest side of a NIC: its address and link, before the command proper.
guest_net_up() { # DEV ADDR
	echo "ip addr add $2/30 dev $1 && ip link set $1 up"
}

# net_boot NAME CMD [mote args...]: boots from the root image (mote-pattern is there).
net_boot() {
	local name=$1 cmd=$2
	shift 2
	mote_run "$name" run --kernel "$VMLINUX" --mem 256M --disk "path=$ROOT_IMG,ro,root" \
		--cmdline "$BASE_CMDLINE mote.run=\"$cmd\"" "$@"
}

test_guest_pings_the_host_over_tap_with_its_mac() {
	tap_up mote-n1 "$HOST_IP" || return
	net_boot n1 "cat /sys/class/net/eth0/address && $(guest_net_up eth0 $GUEST_IP) && \
ping -c 3 -W 10 $HOST_IP" --net "tap=mote-n1,mac=$GUEST_MAC"
	tap_down mote-n1
	expect_status 0
	has_line "$out" "$GUEST_MAC" || fail "the guest's eth0 is not $GUEST_MAC: $(tr '\n' '|' <"$out")"
	expect_in "$out" "3 packets transmitted, 3 packets received"
	expect_guest_status 0
}

test_tcp_transfers_both_ways_over_tap_arrive_intact() {
	local size=33554432 # 32 MiB each way
	tap_up mote-n2 "$HOST_IP" || return
	# Guest to host: the host checks what arrives. Host to guest: the guest listens,
	# the host connects once it does (retrying) and the guest checks.
	(timeout 300 socat -u "TCP-LISTEN:5001,bind=$HOST_IP,reuseaddr" - |
		"$MOTE_PATTERN" verify - 0 $size 41 >"$WORK/n2.host-verify" 2>&1) &
	local host_rx=$!
	(
		for _ in $(seq 1 600); do
			"$MOTE_PATTERN" write - 0 $size 43 2>/dev/null |
				socat -u - "TCP:$GUEST_IP:5002,connect-timeout=1" 2>"$WORK/n2.host-send" &&
				exit 0
			sleep 0.5
		done
		exit 1
	) &
	local host_tx=$!
	net_boot n2 "$(guest_net_up eth0 $GUEST_IP) && mote-pattern write - 0 $size 41 | \
mote-pipe tcp-connect $HOST_IP 5001 && mote-pipe tcp-listen 5002 </dev/null | \
mote-pattern verify - 0 $size 43" \
		--net "tap=mote-n2,mac=$GUEST_MAC"
	settle $host_rx
	local rx_status=$?
	settle $host_tx
	local tx_status=$?
	tap_down mote-n2
	expect_status 0
	expect_in "$out" "pattern: verified $size bytes"
	expect_guest_status 0
	[ $rx_status -eq 0 ] || fail "guest to host: $(cat "$WORK/n2.host-verify")"
	[ $tx_status -eq 0 ] || fail "host to guest: the host could not send: $(tail -n 2 "$WORK/n2.host-send" | tr '\n' '|')"
	expect_in "$WORK/n2.host-verify" "pattern: verified $size bytes"
}

test_two_nics_each_get_their_tap() {
	tap_up mote-n3a 169.254.101.1 || return
	tap_up mote-n3b 169.254.102.1 || return
	net_boot n3 "$(guest_net_up eth0 169.254.101.2) && $(guest_net_up eth1 169.254.102.2) && \
ping -c 1 -W 10 169.254.101.1 && ping -c 1 -W 10 169.254.102.1 && \
cat /sys/class/net/eth1/address" \
		--net "tap=mote-n3a,mac=06:00:00:00:03:0a" --net "tap=mote-n3b,mac=06:00:00:00:03:0b"
	tap_down mote-n3a
	tap_down mote-n3b
	expect_status 0
	expect_guest_status 0
	has_line "$out" "06:00:00:00:03:0b" || fail "eth1 does not have the second NIC's MAC"
}

test_a_missing_tap_is_a_clear_error() {
	tap_down mote-n4
	net_boot n4 "true" --net tap=mote-n4
	expect_status 4
	expect_in "$err" "mote-n4"
	# An interface that exists but is no TAP: unusable like a missing one, not a bad
	# command line.
	net_boot n4-lo "true" --net tap=lo
	expect_status 4
	expect_in "$err" "lo is not a single-queue TAP interface"
}
