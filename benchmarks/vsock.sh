#!/bin/bash
# vsock: stream throughput both ways under mote (its in-VMM device, to and from a host
# Unix socket) and under QEMU's microvm machine (vhost-vsock-device, to and from a host
# AF_VSOCK socket), interleaved; and the agent's exec round trip under mote (`mote exec
# -- true`, process start included). One boot per run does both directions:
# - guest to host: `mote-pipe --bytes N` sends N bytes read from /dev/zero, timed in the
#   guest with `time -p` from its start to the host's end of file; the host counts what
#   arrived;
# - host to guest: the guest listens (`mote-pipe --stats vsock-listen`), the host streams
#   zeros into it with socat, and the guest reports what it received and how long it
#   took from its accept to the host's end of stream.
# What is measured is the stream, not the tools at its ends: zeros, not mote-pattern (an
# emulated guest computing a pattern would be the bottleneck; the integration tests check
# the bytes); no `dd | mote-pipe` in the guest (an emulated pipe copy of 1 MiB blocks cost
# more than the stream); and socat with 1 MiB buffers on the host (its default of 8 KiB
# capped a Unix socket at ~200 Mbit/s in the nested setup, with no VM at all). The same
# tools and buffers serve both monitors.
# Targets: vsock >= 1 Gbit/s in the nested setup (the issue's), and mote next to QEMU.
#
# Usage: benchmarks/run-vsock.sh, or with KVM: MOTE_BIN=... MOTE_KERNEL_DIR=...
# MOTE_ROOTFS=... benchmarks/vsock.sh
# Env: MOTE_BENCH_RUNS (3), MOTE_BENCH_MIB (256), MOTE_BENCH_EXECS (100),
# MOTE_BENCH_TIMEOUT (seconds per VM run, 150).
set -eu
# shellcheck source=benchmarks/lib.sh
. "$(dirname "$0")/lib.sh"

: "${MOTE_BIN:?}" "${MOTE_KERNEL_DIR:?}" "${MOTE_ROOTFS:?}"
RUNS=${MOTE_BENCH_RUNS:-3}
MIB=${MOTE_BENCH_MIB:-256}
EXECS=${MOTE_BENCH_EXECS:-100}
RUN_TIMEOUT=${MOTE_BENCH_TIMEOUT:-150}
KERNEL=$MOTE_KERNEL_DIR/vmlinux
PORT=7000    # the host's listener, guest to host
IN_PORT=7001 # the guest's listener, host to guest
SOCAT_BUFFER=1048576
GUEST_COMMAND="time -p mote-pipe --bytes $((MIB * 1048576)) vsock-connect 2 $PORT </dev/zero; echo ready-to-receive; mote-pipe --stats vsock-listen $IN_PORT </dev/null >/dev/null"

[ -c /dev/kvm ] || { echo "vsock benchmark: /dev/kvm missing; use benchmarks/run-vsock.sh" >&2; exit 1; }
work=$(mktemp -d "${MOTE_SCRATCH:-/var/tmp}/mote-vsock.XXXXXX")
trap 'rm -rf "$work"' EXIT
root_img=$work/root.img
cp --sparse=always "$MOTE_ROOTFS" "$root_img"
uds=$work/v.sock

# Host to guest: once the guest says it listens, streams MIB MiB of zeros to ADDRESS
# (socat's), HANDSHAKE first; tries again while the guest's listener is not up yet.
feed_guest() { # log address handshake
	local deadline=$((SECONDS + RUN_TIMEOUT))
	until grep -q ready-to-receive "$1" 2>/dev/null; do
		[ $SECONDS -lt $deadline ] || return 0
		sleep 0.2
	done
	while [ $SECONDS -lt $deadline ] && ! grep -q "pipe: received" "$1"; do
		{ printf '%b' "$3"; dd if=/dev/zero bs=1048576 count="$MIB" 2>/dev/null; } |
			socat -b $SOCAT_BUFFER -u - "$2" 2>/dev/null && return 0
		sleep 0.2
	done
}

run_mote() { # log
	rm -f "$uds" "${uds}_$PORT"
	: >"$1"
	timeout 300 socat -b $SOCAT_BUFFER -u "UNIX-LISTEN:${uds}_$PORT" - | wc -c >"$1.host" &
	local host=$!
	feed_guest "$1" "UNIX-CONNECT:$uds" "CONNECT $IN_PORT\\n" &
	local feeder=$!
	timeout -k 5 "$RUN_TIMEOUT" "$MOTE_BIN" run --kernel "$KERNEL" --mem 256M --cpus 2 \
		--disk "path=$root_img,ro,root" --vsock "cid=3,uds=$uds" \
		--cmdline "console=ttyS0 reboot=k panic=1 quiet mote.run=\"$GUEST_COMMAND\"" \
		</dev/null >"$1" 2>&1 || :
	pkill -P "$feeder" 2>/dev/null || :
	kill "$host" "$feeder" 2>/dev/null || :
	wait "$host" "$feeder" 2>/dev/null || :
}

run_qemu() { # log
	: >"$1"
	timeout 300 socat -b $SOCAT_BUFFER -u "VSOCK-LISTEN:$PORT" - | wc -c >"$1.host" &
	local host=$!
	feed_guest "$1" "VSOCK-CONNECT:4:$IN_PORT" "" &
	local feeder=$!
	# shellcheck disable=SC2046 # one word per argument
	timeout -k 5 "$RUN_TIMEOUT" $(qemu_microvm "$KERNEL" 256M 2) \
		-drive "id=root,file=$root_img,format=raw,if=none,readonly=on" \
		-device virtio-blk-device,drive=root -device vhost-vsock-device,guest-cid=4 \
		-append "console=ttyS0 reboot=t panic=1 quiet root=/dev/vda ro mote.run=\"$GUEST_COMMAND\"" \
		</dev/null >"$1" 2>&1 || :
	pkill -P "$feeder" 2>/dev/null || :
	kill "$host" "$feeder" 2>/dev/null || :
	wait "$host" "$feeder" 2>/dev/null || :
}

bytes=$((MIB * 1048576))
: >"$work/results"
failures=0
for i in $(seq 1 "$RUNS"); do
	order="mote qemu"
	[ $((i % 2)) -eq 1 ] || order="qemu mote"
	for m in $order; do
		log=$work/$m.$i.log
		"run_$m" "$log"
		secs=$(tr -d '\r' <"$log" | awk '$1 == "real" { print $2 }')
		if [ "$(cat "$log.host")" != "$bytes" ] || [ -z "$secs" ]; then
			echo "run $i: $m guest to host FAILED; console and host side:" >&2
			tr -d '\r' <"$log" | tail -n 8 | sed 's/^/    /' >&2
			echo "    host received $(cat "$log.host") of $bytes bytes" >&2
			failures=$((failures + 1))
		else
			mbps=$(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.0f", b * 8 / s / 1e6 }')
			echo "out $m $mbps" >>"$work/results"
			echo "run $i: $m guest to host $mbps Mbit/s ($bytes bytes in $secs s)" >&2
		fi
		# "pipe: received BYTES bytes in SECONDS s"
		received=$(tr -d '\r' <"$log" | awk '$1 == "pipe:" && $2 == "received" { print $3, $6 }')
		if [ "${received% *}" != "$bytes" ]; then
			echo "run $i: $m host to guest FAILED; the guest reported: ${received:-nothing}" >&2
			tr -d '\r' <"$log" | tail -n 4 | sed 's/^/    /' >&2
			failures=$((failures + 1))
		else
			mbps=$(awk -v b="$bytes" -v s="${received#* }" 'BEGIN { printf "%.0f", b * 8 / s / 1e6 }')
			echo "in $m $mbps" >>"$work/results"
			echo "run $i: $m host to guest $mbps Mbit/s ($bytes bytes in ${received#* } s)" >&2
		fi
	done
done

median() { # direction monitor
	awk -v d="$1" -v m="$2" '$1 == d && $2 == m { print $3 }' "$work/results" | bench_median %.0f
}

# The agent's exec round trip: one VM, EXECS runs of `mote exec -- true`.
rm -f "$uds"
"$MOTE_BIN" run --kernel "$KERNEL" --mem 256M --cpus 2 --disk "path=$root_img,ro,root" \
	--vsock "cid=3,uds=$uds" --cmdline "console=ttyS0 reboot=k panic=1 quiet mote.agent" \
	</dev/null >"$work/agent.log" 2>&1 &
vm=$!
"$MOTE_BIN" exec --vsock "$uds" --wait 120 -- true || echo "vsock benchmark: the agent did not answer" >&2
for _ in $(seq 1 "$EXECS"); do
	t0=$(date +%s%N)
	"$MOTE_BIN" exec --vsock "$uds" -- true
	echo $((($(date +%s%N) - t0) / 1000)) >>"$work/exec-us"
done
"$MOTE_BIN" exec --vsock "$uds" -- poweroff >/dev/null 2>&1 || :
timeout 60 tail --pid="$vm" -f /dev/null || kill "$vm"
exec_ms=$(awk '{ print $1 / 1000 }' "$work/exec-us" | bench_median %.2f)

echo
echo "vsock ($MIB MiB streams), medians of $RUNS interleaved run(s), 2 vCPUs"
printf '%-32s %12s %12s\n' "" mote "qemu microvm"
printf '%-32s %12s %12s\n' "guest to host (Mbit/s)" "$(median out mote)" "$(median out qemu)"
printf '%-32s %12s %12s\n' "host to guest (Mbit/s)" "$(median in mote)" "$(median in qemu)"
printf '%-32s %12s %12s\n' "agent exec 'true' (ms)" "$exec_ms" "-"
runs_used() { awk -v d="$1" -v m="$2" '$1 == d && $2 == m' "$work/results" | wc -l; }
echo "runs in each median: guest to host mote $(runs_used out mote), qemu $(runs_used out qemu);" \
	"host to guest mote $(runs_used in mote), qemu $(runs_used in qemu) (of $RUNS)"
echo "exec round trip: median of $(wc -l <"$work/exec-us") runs of mote exec, process start included"
for direction in out in; do
	name="guest to host"
	[ $direction = out ] || name="host to guest"
	mote=$(median $direction mote)
	if [ "$mote" != - ] && awk -v a="$mote" 'BEGIN { exit !(a >= 1000) }'; then
		echo "target: vsock $name >= 1 Gbit/s: met"
	else
		echo "target: vsock $name >= 1 Gbit/s: MISSED"
	fi
done
[ $failures -eq 0 ] || { echo "vsock benchmark: $failures run(s) failed (see above)" >&2; exit 1; }
