#!/bin/bash
# Block I/O: mote against QEMU's microvm machine with the same kernel, memory, vCPUs,
# root disk and data disk, interleaved runs in one session; both bypass the host page
# cache (mote's `direct`, QEMU's cache=none). The guest boots from the
# ext4 root image (tools/build-rootfs.sh) and runs mote-blkbench on the raw data disk
# /dev/vdb (benchmarks/guest/blkbench.c: sequential 1 MiB and random 4 KiB reads and
# writes, queue depth 1 and 32, O_DIRECT). Each row is compared by its median over the
# runs; the target is mote >= QEMU on every row.
#
# Usage: benchmarks/run-blk.sh (builds everything and supplies KVM), or directly with
# KVM: MOTE_BIN=... MOTE_KERNEL_DIR=... MOTE_ROOTFS=... benchmarks/blk.sh
# Env: MOTE_BENCH_RUNS (3), MOTE_BENCH_MEM (256M), MOTE_BENCH_CPUS (2),
# MOTE_BENCH_AMOUNT (work per row: "5s", or bytes like "256M"; default 5s),
# MOTE_BENCH_DATA_SIZE (1G), MOTE_BENCH_TIMEOUT (seconds per VM run, 300),
# MOTE_BENCH_ONLY (mote or qemu: run one monitor only, no verdict),
# MOTE_BENCH_DIR (where the images go; default $MOTE_SCRATCH, else /var/tmp: a disk
# file system, since O_DIRECT fails on tmpfs and 9p is slow).
set -eu
# shellcheck source=benchmarks/lib.sh
. "$(dirname "$0")/lib.sh"

: "${MOTE_KERNEL_DIR:?}" "${MOTE_ROOTFS:?}"
ONLY=${MOTE_BENCH_ONLY:-}
case $ONLY in
"") monitors="mote qemu" ;;
mote | qemu) monitors=$ONLY ;;
*) echo "blk benchmark: MOTE_BENCH_ONLY must be mote or qemu, not '$ONLY'" >&2; exit 2 ;;
esac
case " $monitors " in *" mote "*) : "${MOTE_BIN:?}" ;; esac
RUNS=${MOTE_BENCH_RUNS:-3}
MEM=${MOTE_BENCH_MEM:-256M}
CPUS=${MOTE_BENCH_CPUS:-2}
AMOUNT=${MOTE_BENCH_AMOUNT:-5s}
DATA_SIZE=${MOTE_BENCH_DATA_SIZE:-1G}
RUN_TIMEOUT=${MOTE_BENCH_TIMEOUT:-300}
KERNEL=$MOTE_KERNEL_DIR/vmlinux
GUEST_COMMAND="mote-blkbench /dev/vdb $AMOUNT"
ROWS="seq-read-1m seq-write-1m rand-read-4k rand-write-4k"
DEPTHS="1 32"

[ -c /dev/kvm ] || { echo "blk benchmark: /dev/kvm missing; use benchmarks/run-blk.sh" >&2; exit 1; }
[ -f "$KERNEL" ] || { echo "blk benchmark: $KERNEL missing" >&2; exit 1; }
[ -f "$MOTE_ROOTFS" ] || { echo "blk benchmark: $MOTE_ROOTFS missing" >&2; exit 1; }

dir=${MOTE_BENCH_DIR:-${MOTE_SCRATCH:-/var/tmp}}
work=$(mktemp -d "$dir/mote-blk.XXXXXX")
trap 'rm -rf "$work"' EXIT
root_img=$work/root.img
data_img=$work/data.img

# Both monitors get the same files. The data image is allocated (fallocate) and then
# written once, so reads hit real blocks rather than unwritten extents that the host
# answers with zeros without any I/O, and writes never allocate.
cp --sparse=always "$MOTE_ROOTFS" "$root_img"
fallocate -l "$DATA_SIZE" "$data_img"
data_bytes=$(stat -c %s "$data_img")
echo "blk benchmark: writing the $DATA_SIZE data image in $dir" >&2
if ! dd if=/dev/zero of="$data_img" bs=1M count=$((data_bytes / 1048576)) conv=notrunc,fsync \
	oflag=direct status=none 2>"$work/dd.err"; then
	echo "blk benchmark: cannot write $data_img with O_DIRECT ($(cat "$work/dd.err"));" \
		"set MOTE_BENCH_DIR to a directory on a disk file system" >&2
	exit 1
fi

# The kernel quotes with double quotes and knows no escapes: the command has none.
run_mote() { # log
	timeout -k 5 "$RUN_TIMEOUT" "$MOTE_BIN" run --kernel "$KERNEL" --mem "$MEM" --cpus "$CPUS" \
		--disk "path=$root_img,root,direct" --disk "path=$data_img,direct" \
		--cmdline "console=ttyS0 reboot=k panic=1 quiet mote.run=\"$GUEST_COMMAND\"" \
		</dev/null >"$1" 2>&1
}

# QEMU at its fastest settings for this kernel (design.md), the disks on io_uring with
# O_DIRECT on the host (cache=none). No isa-debug-exit here: it would end QEMU at the
# boot byte; guest-init's power-off falls back to a reboot, which reboot=t (triple
# fault; microvm has no i8042) and -no-reboot turn into QEMU exiting.
run_qemu() { # log
	# shellcheck disable=SC2046 # one word per argument
	timeout -k 5 "$RUN_TIMEOUT" $(qemu_microvm "$KERNEL" "$MEM" "$CPUS") \
		-drive "id=root,file=$root_img,format=raw,if=none,aio=io_uring,cache=none" \
		-device virtio-blk-device,drive=root \
		-drive "id=data,file=$data_img,format=raw,if=none,aio=io_uring,cache=none" \
		-device virtio-blk-device,drive=data \
		-append "console=ttyS0 reboot=t panic=1 quiet root=/dev/vda rw mote.run=\"$GUEST_COMMAND\"" \
		</dev/null >"$1" 2>&1
}

failures=0 mote_failures=0
# One VM run: its rows go to $work/results as "MONITOR ROW qdN MiBps iops"; a run that
# hangs, fails or misses a row is reported with the end of its console and left out.
run_one() { # monitor run
	local log=$work/$1.$2.log status=0 start why=""
	start=$(date +%s)
	"run_$1" "$log" || status=$?
	tr -d '\r' <"$log" >"$log.txt"
	if [ $status -eq 124 ] || [ $status -eq 137 ]; then
		why="timed out after ${RUN_TIMEOUT}s (MOTE_BENCH_TIMEOUT)"
	elif [ $status -ne 0 ]; then
		why="$1 exited with status $status"
	elif ! grep -q '^mote-init: command exited with status 0$' "$log.txt"; then
		why="the guest command did not exit with status 0"
	elif ! grep -q "^blkbench: /dev/vdb, $data_bytes bytes" "$log.txt"; then
		why="/dev/vdb in the guest is not the $data_bytes-byte data image"
	elif [ "$(grep -c '^blkbench [a-z0-9-]* qd[0-9]* ' "$log.txt")" -ne 8 ]; then
		why="the guest did not print all 8 rows"
	fi
	if [ -n "$why" ]; then
		echo "run $2: $1 FAILED: $why; last console lines:" >&2
		tail -n 15 "$log.txt" | sed 's/^/    /' >&2
		failures=$((failures + 1))
		[ "$1" = qemu ] || mote_failures=$((mote_failures + 1))
		return 0
	fi
	sed -n 's/^blkbench \([a-z0-9-]*\) qd\([0-9]*\) MiBps=\([0-9.]*\) iops=\([0-9.]*\) .*/\1 \2 \3 \4/p' \
		"$log.txt" | sed "s/^/$1 /" >"$log.rows"
	cat "$log.rows" >>"$work/results"
	# The figures as they come, in table order, so a later hang loses nothing.
	echo "run $2: $1 done in $(($(date +%s) - start)) s:" \
		"$(awk '{ printf "%s ", ($2 ~ /-1m$/) ? $4 : $5 }' "$log.rows")(MiB/s, IOPS as in the table)" >&2
}

# One untimed run of each warms the host's page cache for the binaries and the root
# image alike; its figures are dropped.
for m in $monitors; do
	"run_$m" "$work/warmup.log" || {
		echo "warm-up run: $m failed; last console lines:" >&2
		tr -d '\r' <"$work/warmup.log" | tail -n 15 | sed 's/^/    /' >&2
	}
done

: >"$work/results"
for i in $(seq 1 "$RUNS"); do
	# Interleaved, alternating who goes first, so drift hits both equally.
	order=$monitors
	# shellcheck disable=SC2086 # one word per monitor
	[ $((i % 2)) -eq 1 ] || order=$(bench_reverse $monitors)
	for m in $order; do
		run_one "$m" "$i"
	done
done

# Median of one monitor's metric for one row: MiB/s for 1 MiB rows, IOPS for 4 KiB.
median() { # monitor row depth
	awk -v m="$1" -v r="$2" -v d="$3" '$1 == m && $2 == r && $3 == d {
		print (r ~ /-1m$/) ? $4 : $5 }' "$work/results" |
		bench_median "$(case $2 in *-1m) echo %.1f ;; *) echo %.0f ;; esac)"
}

echo
echo "Block I/O on /dev/vdb ($DATA_SIZE raw image, O_DIRECT in the guest), medians of $RUNS" \
	"interleaved run(s) per monitor, $MEM, $CPUS vCPUs, $AMOUNT per row"
printf '%-20s %-6s %12s %12s %10s\n' row unit mote "qemu microvm" mote/qemu
met=0 missed="" rows_total=0
for row in $ROWS; do
	for depth in $DEPTHS; do
		rows_total=$((rows_total + 1))
		unit=IOPS
		case $row in *-1m) unit=MiB/s ;; esac
		mote=$(median mote "$row" "$depth")
		qemu=$(median qemu "$row" "$depth")
		ratio=-
		if [ "$mote" != - ] && [ "$qemu" != - ]; then
			ratio=$(awk -v a="$mote" -v b="$qemu" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')
			if awk -v a="$mote" -v b="$qemu" 'BEGIN { exit !(a >= b) }'; then
				met=$((met + 1))
			else
				missed="$missed $row-qd$depth($ratio)"
			fi
		fi
		printf '%-20s %-6s %12s %12s %10s\n' "$row qd$depth" "$unit" "$mote" "$qemu" "$ratio"
	done
done
used() { # monitor
	awk -v m="$1" '$1 == m { runs[$1 " " $2 " " $3]++ } END { n = 0
		for (k in runs) if (!n || runs[k] < n) n = runs[k]; print n }' "$work/results"
}
echo "runs used: $(for m in $monitors; do echo "$m $(used "$m") of $RUNS"; done | paste -sd, - | sed 's/,/, /g')"
echo
# A failed mote run is a miss; a failed QEMU run only leaves QEMU fewer runs.
if [ -n "$ONLY" ]; then
	echo "target: mote >= QEMU microvm on every row: not evaluated (MOTE_BENCH_ONLY=$ONLY)"
elif [ $met -eq $rows_total ] && [ $mote_failures -eq 0 ]; then
	echo "target: mote >= QEMU microvm on every row: $met of $rows_total -> met"
else
	echo "target: mote >= QEMU microvm on every row: $met of $rows_total -> MISSED${missed:+ (below:$missed)}"
fi
if [ $failures -ne 0 ]; then
	echo "blk benchmark: $failures run(s) failed (see above)" >&2
	exit 1
fi
