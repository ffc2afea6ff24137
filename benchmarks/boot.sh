#!/bin/bash
# Boot latency and memory: mote against QEMU's microvm machine, same kernel, initramfs,
# memory and command line, interleaved runs in one session. Each run is timed from
# process start to process exit after guest-init's boot-complete write: QEMU's
# isa-debug-exit on the same port ends QEMU at that write, mote's --exit-at-boot ends
# mote at it.
#
# Usage: benchmarks/run-boot.sh (builds everything and supplies KVM), or directly
# with KVM: MOTE_BIN=... MOTE_MEASURE_BIN=... MOTE_KERNEL_DIR=... MOTE_INITRD=... boot.sh
# Env: MOTE_BENCH_RUNS (default 10), MOTE_BENCH_MEM (default 128M),
# MOTE_BENCH_KERNEL (vmlinux or bzImage, default vmlinux).
set -eu

: "${MOTE_BIN:?}" "${MOTE_MEASURE_BIN:?}" "${MOTE_KERNEL_DIR:?}" "${MOTE_INITRD:?}"
RUNS=${MOTE_BENCH_RUNS:-10}
MEM=${MOTE_BENCH_MEM:-128M}
# The same for both monitors; noreplace-smp as in mote's default (mote.h).
CMDLINE="console=ttyS0 reboot=t panic=1 quiet noreplace-smp"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Both monitors read the kernel and initramfs from a copy in memory, as a host that
# boots VMs often has them in its page cache; under tools/kvm-run.sh the originals
# sit on a 9p share, which is read anew on every open. So does mote itself, as QEMU
# runs from the outer guest's own disk (from the share, a start took ~3 ms more).
# (In a directory of its own: the results go to $work/mote.)
mkdir "$work/bin"
cp "$MOTE_KERNEL_DIR/${MOTE_BENCH_KERNEL:-vmlinux}" "$MOTE_INITRD" "$work/"
cp "$MOTE_BIN" "$work/bin/mote"
KERNEL=$work/${MOTE_BENCH_KERNEL:-vmlinux}
INITRD=$work/$(basename "$MOTE_INITRD")
MOTE_BIN=$work/bin/mote

[ -c /dev/kvm ] || { echo "boot benchmark: /dev/kvm missing; use benchmarks/run-boot.sh" >&2; exit 1; }

# A run that hangs is a failure to report, not a reason to wait forever.
RUN_TIMEOUT=${MOTE_BENCH_TIMEOUT:-120}

run_mote() {
	"$MOTE_MEASURE_BIN" timeout -k 5 "$RUN_TIMEOUT" "$MOTE_BIN" run --kernel "$KERNEL" --initrd "$INITRD" \
		--mem "$MEM" --cpus 1 --cmdline "$CMDLINE" --exit-at-boot --quiet
}

# QEMU at its fastest settings for this kernel (design.md): microvm without legacy
# devices and ACPI, PVH entry of the ELF vmlinux.
run_qemu() {
	"$MOTE_MEASURE_BIN" timeout -k 5 "$RUN_TIMEOUT" qemu-system-x86_64 -M microvm,acpi=off,pit=off,pic=off,rtc=off \
		-accel kvm -cpu host -m "$MEM" -smp 1 -nodefaults -no-user-config -nographic \
		-serial stdio -no-reboot -kernel "$KERNEL" -initrd "$INITRD" \
		-append "$CMDLINE" -device isa-debug-exit,iobase=0xf4,iosize=4
}

# One untimed run of each warms the page cache for both alike.
run_mote >/dev/null
run_qemu >/dev/null

# Guest memory touched, from mote's own report at exit (the pages its memfd holds).
touched_kib=$(timeout -k 5 "$RUN_TIMEOUT" "$MOTE_BIN" run --kernel "$KERNEL" --initrd "$INITRD" --mem "$MEM" \
	--cpus 1 --cmdline "$CMDLINE" --exit-at-boot </dev/null 2>&1 >/dev/null |
	sed -n 's/.*guest memory touched: \([0-9]*\) KiB.*/\1/p')

for i in $(seq 1 "$RUNS"); do
	# Interleaved, alternating who goes first, so drift hits both equally.
	if [ $((i % 2)) -eq 1 ]; then
		run_mote >>"$work/mote"; run_qemu >>"$work/qemu"
	else
		run_qemu >>"$work/qemu"; run_mote >>"$work/mote"
	fi
	echo "run $i: mote $(tail -1 "$work/mote"), qemu $(tail -1 "$work/qemu") (us KiB status)" >&2
done

# QEMU's isa-debug-exit status for the boot byte 0x7b is (0x7b << 1) | 1 = 247.
check_status() { # file expected name
	awk -v want="$2" -v name="$3" '$3 != want { bad++ } END {
		if (bad) { printf "%s: %d run(s) ended with an unexpected status\n", name, bad; exit 1 } }' "$1"
}
check_status "$work/mote" 0 mote
check_status "$work/qemu" 247 qemu

# median / min / max of a column.
stats() { # file column divisor
	cut -d' ' -f"$2" "$1" | sort -n | awk -v d="$3" '{ v[NR] = $1 / d } END {
		m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "%.1f %.1f %.1f\n", m, v[1], v[NR] }'
}
read -r mote_ms mote_min mote_max <<<"$(stats "$work/mote" 1 1000)"
read -r qemu_ms qemu_min qemu_max <<<"$(stats "$work/qemu" 1 1000)"
read -r mote_rss mote_rss_min mote_rss_max <<<"$(stats "$work/mote" 2 1024)"
read -r qemu_rss qemu_rss_min qemu_rss_max <<<"$(stats "$work/qemu" 2 1024)"

echo
echo "Boot to guest-init, $RUNS interleaved runs each, $(basename "$KERNEL"), $MEM, 1 vCPU"
printf '%-14s %12s %21s %14s %21s\n' monitor "median ms" "min..max ms" "median RSS MiB" "min..max MiB"
printf '%-14s %12s %21s %14s %21s\n' mote "$mote_ms" "$mote_min..$mote_max" "$mote_rss" "$mote_rss_min..$mote_rss_max"
printf '%-14s %12s %21s %14s %21s\n' "qemu microvm" "$qemu_ms" "$qemu_min..$qemu_max" "$qemu_rss" "$qemu_rss_min..$qemu_rss_max"
echo
# Three decimals, rounded; the verdict compares the medians themselves (bc's scale cuts,
# so a ratio of 0.509 at scale 2 would have read as 0.50 and met).
ratio=$(awk -v m="$mote_ms" -v q="$qemu_ms" 'BEGIN { printf "%.3f", m / q }')
touched_mib=$(echo "scale=1; ${touched_kib:-0} / 1024" | bc)
budget=$(echo "scale=1; $touched_mib + 5" | bc)
verdict() { [ "$1" = 1 ] && echo met || echo MISSED; }
echo "target: mote median boot <= 0.5 x QEMU microvm: ratio $ratio -> $(verdict "$(echo "$mote_ms <= 0.5 * $qemu_ms" | bc)")"
echo "target: mote RSS <= guest memory touched ($touched_mib MiB) + 5 MiB = $budget MiB: $mote_rss MiB -> $(verdict "$(echo "$mote_rss <= $budget" | bc)")"
