#!/bin/bash
# vsock: guest-to-host stream throughput under mote (its in-VMM device, to a host Unix
# socket) and under QEMU's microvm machine (vhost-vsock-device, to a host AF_VSOCK
# socket), interleaved; and the agent's exec round trip under mote (`mote exec -- true`,
# process start included). In the guest, `mote-pattern write - 0 SIZE` piped into
# mote-vsock-pipe, timed there with `time -p` from the first byte written to the
# host's end of file; the host side checks every byte with mote-pattern verify.
# Targets: vsock >= 1 Gbit/s in the nested setup (the issue's), and mote next to QEMU.
#
# Usage: benchmarks/run-vsock.sh, or with KVM: MOTE_BIN=... MOTE_KERNEL_DIR=...
# MOTE_ROOTFS=... MOTE_PATTERN=... benchmarks/vsock.sh
# Env: MOTE_BENCH_RUNS (3), MOTE_BENCH_SIZE (256M), MOTE_BENCH_EXECS (100),
# MOTE_BENCH_TIMEOUT (seconds per VM run, 150).
set -eu

: "${MOTE_BIN:?}" "${MOTE_KERNEL_DIR:?}" "${MOTE_ROOTFS:?}" "${MOTE_PATTERN:?}"
RUNS=${MOTE_BENCH_RUNS:-3}
SIZE=${MOTE_BENCH_SIZE:-256M}
EXECS=${MOTE_BENCH_EXECS:-100}
RUN_TIMEOUT=${MOTE_BENCH_TIMEOUT:-150}
KERNEL=$MOTE_KERNEL_DIR/vmlinux
PORT=7000
GUEST_COMMAND="time -p sh -c 'mote-pattern write - 0 $SIZE 9 2>/dev/null | mote-vsock-pipe connect 2 $PORT'"

[ -c /dev/kvm ] || { echo "vsock benchmark: /dev/kvm missing; use benchmarks/run-vsock.sh" >&2; exit 1; }
work=$(mktemp -d "${MOTE_SCRATCH:-/var/tmp}/mote-vsock.XXXXXX")
trap 'rm -rf "$work"' EXIT
root_img=$work/root.img
cp --sparse=always "$MOTE_ROOTFS" "$root_img"
uds=$work/v.sock

run_mote() { # log
	rm -f "$uds" "${uds}_$PORT"
	timeout 300 socat -u "UNIX-LISTEN:${uds}_$PORT" - | "$MOTE_PATTERN" verify - 0 "$SIZE" 9 \
		>"$1.host" 2>&1 &
	local host=$!
	timeout -k 5 "$RUN_TIMEOUT" "$MOTE_BIN" run --kernel "$KERNEL" --mem 256M --cpus 2 \
		--disk "path=$root_img,ro,root" --vsock "cid=3,uds=$uds" \
		--cmdline "console=ttyS0 reboot=k panic=1 quiet mote.run=\"$GUEST_COMMAND\"" \
		</dev/null >"$1" 2>&1 || :
	kill "$host" 2>/dev/null || :
	wait "$host" 2>/dev/null || :
}

run_qemu() { # log
	timeout 300 socat -u "VSOCK-LISTEN:$PORT" - | "$MOTE_PATTERN" verify - 0 "$SIZE" 9 \
		>"$1.host" 2>&1 &
	local host=$!
	timeout -k 5 "$RUN_TIMEOUT" qemu-system-x86_64 -M microvm,acpi=off,pit=off,pic=off,rtc=off \
		-accel kvm -cpu host -m 256M -smp 2 -nodefaults -no-user-config -nographic \
		-serial stdio -no-reboot -kernel "$KERNEL" \
		-drive "id=root,file=$root_img,format=raw,if=none,readonly=on" \
		-device virtio-blk-device,drive=root -device vhost-vsock-device,guest-cid=4 \
		-append "console=ttyS0 reboot=t panic=1 quiet root=/dev/vda ro mote.run=\"$GUEST_COMMAND\"" \
		</dev/null >"$1" 2>&1 || :
	kill "$host" 2>/dev/null || :
	wait "$host" 2>/dev/null || :
}

bytes=$("$MOTE_PATTERN" write - 0 "$SIZE" 9 2>/dev/null | wc -c)
: >"$work/results"
failures=0
for i in $(seq 1 "$RUNS"); do
	order="mote qemu"
	[ $((i % 2)) -eq 1 ] || order="qemu mote"
	for m in $order; do
		log=$work/$m.$i.log
		"run_$m" "$log"
		secs=$(tr -d '\r' <"$log" | awk '$1 == "real" { print $2 }')
		if ! grep -q "pattern: verified $bytes bytes" "$log.host" || [ -z "$secs" ]; then
			echo "run $i: $m FAILED; console and host side:" >&2
			tr -d '\r' <"$log" | tail -n 8 | sed 's/^/    /' >&2
			sed 's/^/    host: /' "$log.host" >&2
			failures=$((failures + 1))
			continue
		fi
		mbps=$(awk -v b="$bytes" -v s="$secs" 'BEGIN { printf "%.0f", b * 8 / s / 1e6 }')
		echo "$m $mbps" >>"$work/results"
		echo "run $i: $m $mbps Mbit/s ($bytes bytes in $secs s)" >&2
	done
done

median() { # monitor
	awk -v m="$1" '$1 == m { print $2 }' "$work/results" | sort -n | awk '{ v[NR] = $1 }
		END { if (!NR) { print "-"; exit }
		printf "%.0f\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
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
exec_ms=$(sort -n "$work/exec-us" | awk '{ v[NR] = $1 } END { if (!NR) { print "-"; exit }
	printf "%.2f\n", ((NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) / 1000 }')

mote=$(median mote)
qemu=$(median qemu)
echo
echo "vsock guest to host ($SIZE stream, checked), medians of $RUNS interleaved run(s), 2 vCPUs"
printf '%-28s %12s %12s\n' "" mote "qemu microvm"
printf '%-28s %12s %12s\n' "throughput (Mbit/s)" "$mote" "$qemu"
printf '%-28s %12s %12s\n' "agent exec 'true' (ms)" "$exec_ms" "-"
echo "exec round trip: median of $(wc -l <"$work/exec-us") runs of mote exec, process start included"
if [ "$mote" != - ] && awk -v a="$mote" 'BEGIN { exit !(a >= 1000) }'; then
	echo "target: vsock >= 1 Gbit/s: met"
else
	echo "target: vsock >= 1 Gbit/s: MISSED"
fi
[ $failures -eq 0 ] || { echo "vsock benchmark: $failures run(s) failed (see above)" >&2; exit 1; }
