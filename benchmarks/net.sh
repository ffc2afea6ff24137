#!/bin/bash
# TCP throughput over virtio-net on a TAP: mote against QEMU's microvm machine
# (virtio-net-device on the same TAP, no vhost) with the same kernel, memory, vCPUs and
# root image, interleaved runs in one session. In each run the guest runs iperf3 (from
# Debian, in the root image) against an iperf3 server on the host end of the TAP, once
# guest to host and once host to guest (-R). Rows are compared by their medians; the
# target is mote >= QEMU on both.
#
# The TAP has a link-local address (design.md: test traffic goes nowhere else).
# Usage: benchmarks/run-net.sh (builds everything, supplies KVM), or directly with KVM
# and root: MOTE_BIN=... MOTE_KERNEL_DIR=... MOTE_ROOTFS=... benchmarks/net.sh
# Env: MOTE_BENCH_RUNS (3), MOTE_BENCH_MEM (256M), MOTE_BENCH_CPUS (2),
# MOTE_BENCH_SECONDS (iperf3 -t, 5), MOTE_BENCH_TIMEOUT (seconds per VM run, 150),
# MOTE_BENCH_ONLY (mote or qemu).
set -eu
# shellcheck source=benchmarks/lib.sh
. "$(dirname "$0")/lib.sh"

: "${MOTE_KERNEL_DIR:?}" "${MOTE_ROOTFS:?}"
ONLY=${MOTE_BENCH_ONLY:-}
case $ONLY in
"") monitors="mote qemu" ;;
mote | qemu) monitors=$ONLY ;;
*) echo "net benchmark: MOTE_BENCH_ONLY must be mote or qemu, not '$ONLY'" >&2; exit 2 ;;
esac
case " $monitors " in *" mote "*) : "${MOTE_BIN:?}" ;; esac
RUNS=${MOTE_BENCH_RUNS:-3}
MEM=${MOTE_BENCH_MEM:-256M}
CPUS=${MOTE_BENCH_CPUS:-2}
SECONDS_PER_ROW=${MOTE_BENCH_SECONDS:-5}
RUN_TIMEOUT=${MOTE_BENCH_TIMEOUT:-150}
KERNEL=$MOTE_KERNEL_DIR/vmlinux
TAP=mote-bench0
HOST_IP=169.254.200.1
GUEST_IP=169.254.200.2
GUEST_MAC=06:00:a9:fe:c8:02
IPERF="iperf3 -c $HOST_IP -t $SECONDS_PER_ROW -f m"
GUEST_COMMAND="ip addr add $GUEST_IP/30 dev eth0 && ip link set eth0 up && \
$IPERF && echo NETBENCH-REVERSE && $IPERF -R"

[ -c /dev/kvm ] || { echo "net benchmark: /dev/kvm missing; use benchmarks/run-net.sh" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "net benchmark: iperf3 missing (tools/setup.sh)" >&2; exit 1; }

work=$(mktemp -d "${MOTE_SCRATCH:-/var/tmp}/mote-net.XXXXXX")
server=""
cleanup() {
	[ -z "$server" ] || kill "$server" 2>/dev/null || :
	ip link del "$TAP" 2>/dev/null || :
	rm -rf "$work"
}
trap cleanup EXIT
root_img=$work/root.img
cp --sparse=always "$MOTE_ROOTFS" "$root_img"

ip link del "$TAP" 2>/dev/null || :
ip tuntap add dev "$TAP" mode tap
ip addr add "$HOST_IP/30" dev "$TAP"
ip link set "$TAP" up
iperf3 -s -B "$HOST_IP" >"$work/server.log" 2>&1 &
server=$!

run_mote() { # log
	timeout -k 5 "$RUN_TIMEOUT" "$MOTE_BIN" run --kernel "$KERNEL" --mem "$MEM" --cpus "$CPUS" \
		--disk "path=$root_img,ro,root" --net "tap=$TAP,mac=$GUEST_MAC" \
		--cmdline "console=ttyS0 reboot=k panic=1 quiet mote.run=\"$GUEST_COMMAND\"" \
		</dev/null >"$1" 2>&1
}

# QEMU at its fastest settings (design.md), the NIC on the same TAP without vhost.
run_qemu() { # log
	# shellcheck disable=SC2046 # one word per argument
	timeout -k 5 "$RUN_TIMEOUT" $(qemu_microvm "$KERNEL" "$MEM" "$CPUS") \
		-drive "id=root,file=$root_img,format=raw,if=none,readonly=on" \
		-device virtio-blk-device,drive=root \
		-netdev "tap,id=n0,ifname=$TAP,script=no,downscript=no,vhost=off" \
		-device "virtio-net-device,netdev=n0,mac=$GUEST_MAC" \
		-append "console=ttyS0 reboot=t panic=1 quiet root=/dev/vda ro mote.run=\"$GUEST_COMMAND\"" \
		</dev/null >"$1" 2>&1
}

# The receiver's summary line of an iperf3 client run, in Mbit/s.
receiver_mbps() { # log-part
	awk '/receiver/ { for (i = 1; i < NF; i++) if ($(i + 1) == "Mbits/sec") v = $i } END {
		if (v != "") print v }' "$1"
}

failures=0 mote_failures=0
: >"$work/results"
run_one() { # monitor run
	local log=$work/$1.$2.log status=0 why=""
	"run_$1" "$log" || status=$?
	tr -d '\r' <"$log" >"$log.txt"
	sed -n '1,/^NETBENCH-REVERSE$/p' "$log.txt" >"$log.up"
	sed -n '/^NETBENCH-REVERSE$/,$p' "$log.txt" >"$log.down"
	local up down
	up=$(receiver_mbps "$log.up")
	down=$(receiver_mbps "$log.down")
	if [ $status -eq 124 ] || [ $status -eq 137 ]; then
		why="timed out after ${RUN_TIMEOUT}s (MOTE_BENCH_TIMEOUT)"
	elif ! grep -q '^mote-init: command exited with status 0$' "$log.txt"; then
		why="the guest command did not exit with status 0"
	elif [ -z "$up" ] || [ -z "$down" ]; then
		why="iperf3 printed no receiver summary"
	fi
	if [ -n "$why" ]; then
		echo "run $2: $1 FAILED: $why; last console lines:" >&2
		tail -n 12 "$log.txt" | sed 's/^/    /' >&2
		failures=$((failures + 1))
		[ "$1" = qemu ] || mote_failures=$((mote_failures + 1))
		return 0
	fi
	echo "$1 guest-to-host $up" >>"$work/results"
	echo "$1 host-to-guest $down" >>"$work/results"
	echo "run $2: $1 guest-to-host $up Mbit/s, host-to-guest $down Mbit/s" >&2
}

for i in $(seq 1 "$RUNS"); do
	order=$monitors
	# shellcheck disable=SC2086 # one word per monitor
	[ $((i % 2)) -eq 1 ] || order=$(bench_reverse $monitors)
	for m in $order; do
		run_one "$m" "$i"
	done
done

median() { # monitor row
	awk -v m="$1" -v r="$2" '$1 == m && $2 == r { print $3 }' "$work/results" | bench_median %.0f
}

echo
echo "TCP over virtio-net on a TAP (iperf3, ${SECONDS_PER_ROW} s per row), medians of $RUNS" \
	"interleaved run(s) per monitor, $MEM, $CPUS vCPUs"
printf '%-16s %-7s %10s %14s %10s\n' row unit mote "qemu microvm" mote/qemu
met=0 missed=""
for row in guest-to-host host-to-guest; do
	mote=$(median mote $row)
	qemu=$(median qemu $row)
	ratio=-
	if [ "$mote" != - ] && [ "$qemu" != - ]; then
		ratio=$(awk -v a="$mote" -v b="$qemu" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')
		if awk -v a="$mote" -v b="$qemu" 'BEGIN { exit !(a >= b) }'; then
			met=$((met + 1))
		else
			missed="$missed $row($ratio)"
		fi
	fi
	printf '%-16s %-7s %10s %14s %10s\n' "$row" Mbit/s "$mote" "$qemu" "$ratio"
done
echo "runs used: $(for m in $monitors; do echo "$m $(grep -c "^$m guest-to-host" "$work/results" || :) of $RUNS"; done | paste -sd, - | sed 's/,/, /g')"
if [ -n "$ONLY" ]; then
	echo "target: mote >= QEMU microvm on both rows: not evaluated (MOTE_BENCH_ONLY=$ONLY)"
elif [ $met -eq 2 ] && [ $mote_failures -eq 0 ]; then
	echo "target: mote >= QEMU microvm on both rows: met"
else
	echo "target: mote >= QEMU microvm on both rows: MISSED${missed:+ (below:$missed)}"
fi
if [ $failures -ne 0 ]; then
	echo "net benchmark: $failures run(s) failed (see above)" >&2
	exit 1
fi
