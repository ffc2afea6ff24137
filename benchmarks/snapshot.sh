#!/bin/bash
# Pause, snapshot, restore and fork: mote against QEMU's microvm machine, same kernel,
# initramfs, memory and guest, in one run. The guest fills FILL bytes of its RAM (a
# file in its initramfs) and idles; then, RUNS times each:
#   pause          mote: its own figure ("paused in N ms", request to every vCPU parked
#                  and devices quiet); QEMU: QMP `stop`, request to answer
#   full snapshot  mote: `mote snapshot` (its figure: state + sparse memory file written
#                  and fsynced); QEMU: QMP `migrate` to a file, request to completed
#   diff snapshot  mote only (QEMU has no diff snapshots): after the guest wrote 1 MiB
#   restore, VMM   process start to the VM running, as the monitor reports it (mote:
#                  its "restored VM running" line on stderr, and then GET / must say
#                  "Running"; QEMU, started with -incoming: QMP query-status says
#                  "running", after a `cont`, since the snapshot was taken stopped,
#                  polled every millisecond), timed by benchmarks/launch.py, which
#                  starts the monitor itself; and mote's own figure, main() to every
#                  vCPU thread started (no exec, no loader)
#   restore, e2e   mote only: process start to the in-guest agent's first answer
#                  (`mote exec -- true`); QEMU has no agent on our vsock protocol
# and fork: N copies restored from one snapshot at once by launch.py: time until all
# run, for mote also until all answer through the agent, and their memory: total PSS,
# and the private memory of one copy (mote maps the memory file copy-on-write and its
# private pages there are the ones the guest wrote; QEMU reads the file into each copy);
# then mote's fork in one process (`mote restore --copies N`): time until all run, mote's
# own figure for the last copy (also for copies without API sockets), time until all
# answer, and the process's PSS.
# Targets (issue 5): restore VMM-side <= 5 ms on hardware, fork of 32 in under a second
# nested, memory per forked copy <= pages it wrote + 2 MiB.
#
# Usage: benchmarks/run-snapshot.sh, or with KVM: MOTE_BIN=... MOTE_KERNEL_DIR=...
# MOTE_INITRD=... benchmarks/snapshot.sh
# Env: MOTE_BENCH_RUNS (20), MOTE_BENCH_SIZES ("128M 1G"), MOTE_BENCH_FORKS ("8 32"),
# MOTE_BENCH_QEMU_FORK_MAX (guest MiB up to which QEMU forks too: 128),
# MOTE_BENCH_PAUSES (20: pauses and resumes of each monitor beyond the runs' own, which
# are cheap, so that the pause's median is not one of a few requests that met one of
# the emulator's slow spells).
set -eu
# shellcheck source=benchmarks/lib.sh
. "$(dirname "$0")/lib.sh"

: "${MOTE_BIN:?}" "${MOTE_KERNEL_DIR:?}" "${MOTE_INITRD:?}"
RUNS=${MOTE_BENCH_RUNS:-20}
SIZES=${MOTE_BENCH_SIZES:-128M 1G}
FORKS=${MOTE_BENCH_FORKS:-8 32}
PAUSES=${MOTE_BENCH_PAUSES:-20}
QEMU_FORK_MAX=${MOTE_BENCH_QEMU_FORK_MAX:-128}
KERNEL=$MOTE_KERNEL_DIR/vmlinux
QMP="python3 $(cd "$(dirname "$0")" && pwd)/qmp.py"
LAUNCH="python3 $(cd "$(dirname "$0")" && pwd)/launch.py"
MOTE_API="python3 $(cd "$(dirname "$0")" && pwd)/mote_api.py"
CMDLINE="console=ttyS0 panic=1 quiet"

[ -c /dev/kvm ] || { echo "snapshot benchmark: /dev/kvm missing; use benchmarks/run-snapshot.sh" >&2; exit 1; }
work=$(mktemp -d "${MOTE_SCRATCH:-/var/tmp}/mote-snap.XXXXXX")
cleanup() {
	pkill -KILL -P $$ 2>/dev/null || :
	rm -rf "$work"
}
trap cleanup EXIT
# mote runs from a copy on the outer guest's own file system, as QEMU does: under
# tools/kvm-run.sh the build sits on a 9p share, read anew at every start (~3 ms).
mkdir "$work/bin"
cp "$MOTE_BIN" "$work/bin/mote"
MOTE_BIN=$work/bin/mote

now_ns() { date +%s%N; }
ms_between() { echo "scale=3; ($2 - $1) / 1000000" | bc; }

# wait_for FILE TEXT: until FILE has TEXT (120 s at most).
wait_for() {
	for _ in $(seq 1 1200); do
		grep -qF "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "snapshot benchmark: '$2' never appeared in $1" >&2
	return 1
}

# figures LOG TEXT: every "TEXT... N ms" figure mote logged, one a line.
figures() { sed -n "s/.*$2.* \([0-9][0-9.]*\) ms.*/\1/p" "$1"; }

# stats: "median (min-max)" of the numbers on stdin.
stats() {
	local values count
	values=$(sort -n | grep .) || { echo "-"; return; }
	count=$(echo "$values" | wc -l)
	# The tables say "of RUNS runs": another count (a run left out, or a figure logged
	# at every pause) is given with its median.
	printf '%s (%.1f–%.1f)%s\n' "$(echo "$values" | bench_median '%.1f')" \
		"$(echo "$values" | head -1)" "$(echo "$values" | tail -1)" \
		"$([ "$count" -eq "$RUNS" ] || echo " [$count samples]")"
}

# pss_kib PID / private_kib PID / huge_kib PID: from /proc/PID/smaps_rollup, 0 for a
# process gone. huge_kib: anonymous memory in transparent huge pages, which the outer
# guest's kernel hands out on a first touch ("always"): one 2 MiB page in a heap shows
# as 2 MiB of a copy's private memory.
pss_kib() { awk '/^Pss:/ { print $2 }' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0; }
huge_kib() { awk '/^AnonHugePages:/ { print $2 }' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0; }
private_kib() {
	awk '/^Private_(Clean|Dirty):/ { s += $2 } END { print s + 0 }' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0
}
# mapping_private_kib PID FILE: the private memory of PID's mappings of FILE; for a
# restored mote, its guest RAM mapped from the memory file: the pages the guest wrote.
mapping_private_kib() {
	awk -v file="$2" '/^[0-9a-f]+-[0-9a-f]+ / { in_file = ($NF == file) }
		in_file && /^Private_(Clean|Dirty):/ { s += $2 } END { print s + 0 }' "/proc/$1/smaps" 2>/dev/null || echo 0
}

mib() { echo "scale=1; $1 / 1024" | bc; }

progress() { echo "snapshot benchmark: $*" >&2; }

# reap PID...: waits for each process, REAP_SECONDS (60) at most, then kills it; a
# process that had to be killed is reported, since a copy that does not power off is a
# failure.
reap() {
	local p limit=${REAP_SECONDS:-60}
	for p; do
		for _ in $(seq 1 $((limit * 10))); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$p" 2>/dev/null; then
			progress "process $p still running after $limit s; killed"
			kill -KILL "$p" 2>/dev/null || :
		fi
		wait "$p" 2>/dev/null || :
	done
}

# launch KIND N SOCKET LOG ARGS...: launch.py's N copies of ARGS; sets launch_ms (start
# to all running, "-" if some never ran), launch_t0 (ns) and launch_pids.
launch() {
	local kind=$1 n=$2 socket=$3 log=$4 out not_all=""
	shift 4
	out=$($LAUNCH "$kind" "$n" "$socket" "$log" -- "$@") || {
		progress "$kind: not every one of $n copies ran (log: $(tail -2 "$log" | tr '\n' '|'))"
		not_all=" (not all ran)"
	}
	launch_ms=$(echo "$out" | awk 'NR == 1 { print $1 }')$not_all
	launch_t0=$(echo "$out" | awk 'NR == 1 { print $2 }')
	launch_pids=$(echo "$out" | awk 'NR > 1' | tr '\n' ' ')
}

# fork_memory DIR N MEMFILE PID...: the copies' total PSS and the first copy's private
# memory, into DIR/fork-N-{pss,private}; with a MEMFILE (mote), the private memory is
# split into guest pages written (its private mappings of MEMFILE) and the rest, the
# monitor's own.
fork_memory() {
	local d=$1 n=$2 memfile=$3 pss=0 first=$4 p private written
	shift 3
	for p; do pss=$((pss + $(pss_kib "$p"))); done
	echo "$(mib $pss) MiB" >"$d/fork-$n-pss"
	private=$(private_kib "$first")
	if [ -n "$memfile" ]; then
		written=$(mapping_private_kib "$first" "$memfile")
		echo "$(mib "$private") MiB ($(mib "$written") guest-written + $(mib $((private - written))) monitor, $(mib "$(huge_kib "$first")") in huge pages)" >"$d/fork-$n-private"
	else
		echo "$(mib "$private") MiB" >"$d/fork-$n-private"
	fi
}

# The guest: fill, say so, idle.
guest_command() { # FILL_BYTES
	echo "yes mote | head -c $1 >/tmp/fill && echo filled && while :; do sleep 1; done"
}

mote_agent() { # UDS ARGS... (its stderr into $MOTE_AGENT_ERR, else dropped)
	local uds=$1
	shift
	timeout 120 "$MOTE_BIN" exec --vsock "$uds" --wait 120 -- "$@" </dev/null >/dev/null \
		2>"${MOTE_AGENT_ERR:-/dev/null}"
}

# agents_answer PREFIX N T0_NS: a `mote exec -- true` through each of PREFIX1..PREFIXN
# at once; prints the ms from T0 until all are done, and how many answered if not all.
# A copy that does not answer is named on stderr with what its client said, so that the
# rare silent copy (README, "Status") shows whether its guest refused or never answered.
agents_answer() {
	local prefix=$1 n=$2 t0=$3 i w waits="" answered=0
	for i in $(seq 1 "$n"); do
		MOTE_AGENT_ERR=$prefix$i.agent.err mote_agent "$prefix$i" true &
		waits="$waits $i:$!"
	done
	for w in $waits; do
		if wait "${w#*:}"; then
			answered=$((answered + 1))
		else
			progress "copy ${w%%:*} did not answer: $(tail -2 "$prefix${w%%:*}.agent.err" | tr '\n' ' ')"
		fi
	done
	echo "$(ms_between "$t0" "$(now_ns)")$([ "$answered" = "$n" ] || echo " ($answered of $n answered)")"
}

# agents_poweroff PREFIX N: asks each guest to power off, in the background.
agents_poweroff() {
	local i
	for i in $(seq 1 "$2"); do mote_agent "$1$i" poweroff & done
}

bench_mote() { # SIZE FILL
	local size=$1 fill=$2 d=$work/mote-$1
	mkdir -p "$d"
	"$MOTE_BIN" run --kernel "$KERNEL" --initrd "$MOTE_INITRD" --mem "$size" --cpus 1 \
		--api-sock "$d/api" --vsock "cid=3,uds=$d/v0" --track-dirty-pages \
		--cmdline "$CMDLINE reboot=k mote.agent mote.run=\"$(guest_command "$fill")\"" \
		</dev/null >"$d/console" 2>"$d/log" &
	local vm=$!
	wait_for "$d/console" filled
	progress "$size mote: pause and snapshots"
	# Timed as a client sees them, request to answer, as qmp.py times QEMU's: one pause
	# and one full snapshot a run (QEMU's rows have as many), and one diff after the
	# guest wrote 1 MiB. mote's own figures (from its log) are kept beside them.
	: >"$d/pause.ms"
	: >"$d/full.ms"
	: >"$d/diff.ms"
	for _ in $(seq 1 "$RUNS"); do
		$MOTE_API "$d/api" pause >>"$d/pause.ms"
		$MOTE_API "$d/api" snapshot full "$d/full.state" "$d/full.mem" >>"$d/full.ms"
		$MOTE_API "$d/api" resume >/dev/null
		mote_agent "$d/v0" dd if=/dev/urandom of=/tmp/d bs=64k count=16
		$MOTE_API "$d/api" pause >/dev/null
		$MOTE_API "$d/api" snapshot diff "$d/diff.state" "$d/diff.mem" >>"$d/diff.ms"
		$MOTE_API "$d/api" resume >/dev/null
	done
	for _ in $(seq 1 "$PAUSES"); do
		$MOTE_API "$d/api" pause >>"$d/pause.ms"
		$MOTE_API "$d/api" resume >/dev/null
	done
	$MOTE_API "$d/api" pause >/dev/null
	$MOTE_API "$d/api" snapshot full "$d/full.state" "$d/full.mem" >/dev/null
	kill -KILL $vm
	wait $vm 2>/dev/null || :
	stats <"$d/pause.ms" >"$d/pause"
	stats <"$d/full.ms" >"$d/full"
	stats <"$d/diff.ms" >"$d/diff"
	figures "$d/log" "paused in" | stats >"$d/pause-own"
	figures "$d/log" "full snapshot written" | stats >"$d/full-own"
	echo "$(mib "$(du -k "$d/full.mem" | cut -f1)") MiB" >"$d/full-size"
	echo "$(mib "$(du -k "$d/diff.mem" | cut -f1)") MiB" >"$d/diff-size"

	progress "$size mote: restores"
	: >"$d/e2e"
	: >"$d/restore.log"
	: >"$d/running.ms"
	for r in $(seq 1 "$RUNS"); do
		rm -f "$d/v$r" "$d/a$r"
		launch mote 1 "$d/a$r" "$d/restore.log" "$MOTE_BIN" restore --snapshot "$d/full.state" \
			--mem "$d/full.mem" --vsock-uds "$d/v$r" --api-sock "$d/a$r" --console none
		echo "$launch_ms" >>"$d/running.ms"
		mote_agent "$d/v$r" poweroff || :
		# shellcheck disable=SC2086 # one PID a word
		reap $launch_pids
	done
	# End to end as an orchestrator sees it: `mote restore` started, and at once a
	# `mote exec` that waits for the socket. (It used to be timed after launch.py had
	# polled the API until "Running", which added the poller's own Python, run under
	# emulation, to the figure.)
	progress "$size mote: restore to the agent's answer"
	local t0 pid
	for r in $(seq 1 "$RUNS"); do
		rm -f "$d/w$r"
		t0=$(now_ns)
		"$MOTE_BIN" restore --snapshot "$d/full.state" --mem "$d/full.mem" --vsock-uds "$d/w$r" \
			--console none --quiet </dev/null >/dev/null 2>>"$d/restore.log" &
		pid=$!
		if mote_agent "$d/w$r" true; then
			ms_between "$t0" "$(now_ns)" >>"$d/e2e"
		else
			progress "$size restore $r: the agent never answered; its log:"
			tail -5 "$d/restore.log" >&2
		fi
		mote_agent "$d/w$r" poweroff || :
		reap "$pid"
	done
	figures "$d/restore.log" "restored VM running" | stats >"$d/restore-own"
	grep -v 'not' "$d/running.ms" | stats >"$d/restore"
	stats <"$d/e2e" >"$d/e2e.stats"

	for n in $FORKS; do
		progress "$size mote: fork $n"
		local i
		for i in $(seq 1 "$n"); do rm -f "$d/f$i" "$d/fa$i"; done
		launch mote "$n" "$d/fa{i}" "$d/fork.log" "$MOTE_BIN" restore --snapshot "$d/full.state" \
			--mem "$d/full.mem" --vsock-uds "$d/f{i}" --api-sock "$d/fa{i}" --console none
		echo "$launch_ms" >"$d/fork-$n-ms"
		agents_answer "$d/f" "$n" "$launch_t0" >"$d/fork-$n-answer"
		grep -q answered "$d/fork-$n-answer" && grep -E "connect|vsock|error" "$d/fork.log" |
			tail -5 | sed 's/^/    fork log: /' >&2
		# shellcheck disable=SC2086
		fork_memory "$d" "$n" "$d/full.mem" $launch_pids
		agents_poweroff "$d/f" "$n"
		# shellcheck disable=SC2086
		reap $launch_pids
		wait
		fork_one_process "$d" "$n"
	done
}

# fork_one_process DIR N: the same fork, by one `mote restore --copies N`.
fork_one_process() {
	local d=$1 n=$2 i
	progress "${d##*/mote-} mote: fork $n in one process"
	for i in $(seq 1 "$n"); do rm -f "$d/c$i" "$d/ca$i"; done
	: >"$d/copies.log"
	launch mote-copies "$n" "$d/ca{i}" "$d/copies.log" "$MOTE_BIN" restore --copies "$n" \
		--snapshot "$d/full.state" --mem "$d/full.mem" --vsock-uds "$d/c{i}" --api-sock "$d/ca{i}"
	echo "$launch_ms" >"$d/copies-$n-ms"
	# mote's own figure: the last copy's main() to vCPUs running.
	figures "$d/copies.log" "restored VM running" | sort -n | tail -1 >"$d/copies-$n-own"
	agents_answer "$d/c" "$n" "$launch_t0" >"$d/copies-$n-answer"
	local pid=${launch_pids%% *}
	echo "$(mib "$(pss_kib "$pid")") MiB" >"$d/copies-$n-pss"
	agents_poweroff "$d/c" "$n"
	# One process for all the copies: it ends when the last has powered off, and the
	# separate processes above each had 60 s of their own.
	REAP_SECONDS=$((60 + 5 * n)) reap "$pid"
	wait
	fork_one_process_without_api "$d" "$n"
}

# fork_one_process_without_api DIR N: once more without API sockets (the copies are
# reached over vsock alone), timed by mote's own clock only: main() to the last copy's
# vCPUs running. The difference from the run above is what the copies' API servers
# cost.
fork_one_process_without_api() {
	local d=$1 n=$2 i
	progress "${d##*/mote-} mote: fork $n in one process, no API sockets"
	for i in $(seq 1 "$n"); do rm -f "$d/c$i"; done
	"$MOTE_BIN" restore --copies "$n" --snapshot "$d/full.state" --mem "$d/full.mem" \
		--vsock-uds "$d/c{i}" </dev/null >/dev/null 2>"$d/copies-noapi.log" &
	local pid=$!
	for _ in $(seq 1 3000); do
		[ "$(grep -c 'restored VM running' "$d/copies-noapi.log")" -lt "$n" ] || break
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	figures "$d/copies-noapi.log" "restored VM running" | sort -n | tail -1 >"$d/copies-$n-noapi-own"
	[ "$(grep -c 'restored VM running' "$d/copies-noapi.log")" -eq "$n" ] ||
		echo " (not all ran)" >>"$d/copies-$n-noapi-own"
	agents_poweroff "$d/c" "$n"
	REAP_SECONDS=$((60 + 5 * n)) reap "$pid"
	wait
}

qemu_cmd() { # SIZE FILL QMP_SOCKET
	# shellcheck disable=SC2046 # one word per argument
	echo $(qemu_microvm "$KERNEL" "$1" 1) -initrd "$MOTE_INITRD" -qmp "unix:$3,server=on,wait=off"
}

bench_qemu() { # SIZE FILL
	local size=$1 fill=$2 d=$work/qemu-$1 append
	mkdir -p "$d"
	append="$CMDLINE reboot=t mote.run=\"$(guest_command "$fill")\""
	# shellcheck disable=SC2046
	$(qemu_cmd "$size" "$fill" "$d/qmp") -append "$append" </dev/null >"$d/console" 2>&1 &
	local vm=$!
	wait_for "$d/console" filled
	progress "$size QEMU: stop and migrate"
	: >"$d/stop"
	: >"$d/migrate"
	for _ in $(seq 1 "$RUNS"); do
		$QMP "$d/qmp" stop >>"$d/stop"
		rm -f "$d/state"
		$QMP "$d/qmp" migrate "$d/state" >>"$d/migrate"
		$QMP "$d/qmp" cont >/dev/null
	done
	for _ in $(seq 1 "$PAUSES"); do
		$QMP "$d/qmp" stop >>"$d/stop"
		$QMP "$d/qmp" cont >/dev/null
	done
	$QMP "$d/qmp" stop >/dev/null
	$QMP "$d/qmp" migrate "$d/state" >/dev/null
	kill -KILL $vm
	wait $vm 2>/dev/null || :
	stats <"$d/stop" >"$d/pause"
	stats <"$d/migrate" >"$d/full"
	echo "$(mib "$(du -k "$d/state" | cut -f1)") MiB" >"$d/full-size"

	progress "$size QEMU: restores"
	: >"$d/restore.ms"
	for r in $(seq 1 "$RUNS"); do
		rm -f "$d/qmp$r"
		# shellcheck disable=SC2046 # one word per argument
		launch qemu 1 "$d/qmp$r" "$d/restore.log" $(qemu_cmd "$size" "$fill" "$d/qmp$r") \
			-append "$append" -incoming "exec:cat $d/state"
		echo "$launch_ms" >>"$d/restore.ms"
		$QMP "$d/qmp$r" quit >/dev/null 2>&1 || :
		# shellcheck disable=SC2086
		reap $launch_pids
	done
	grep -v 'not' "$d/restore.ms" | stats >"$d/restore"

	[ "${size%M}" != "$size" ] && [ "${size%M}" -le "$QEMU_FORK_MAX" ] || return 0
	for n in $FORKS; do
		progress "$size QEMU: fork $n"
		local i
		for i in $(seq 1 "$n"); do rm -f "$d/fq$i"; done
		# shellcheck disable=SC2046
		launch qemu "$n" "$d/fq{i}" "$d/fork.log" $(qemu_cmd "$size" "$fill" "$d/fq{i}") \
			-append "$append" -incoming "exec:cat $d/state"
		echo "$launch_ms" >"$d/fork-$n-ms"
		# shellcheck disable=SC2086
		fork_memory "$d" "$n" "" $launch_pids
		for i in $(seq 1 "$n"); do $QMP "$d/fq$i" quit >/dev/null 2>&1 || :; done
		# shellcheck disable=SC2086
		reap $launch_pids
	done
}

# cell FILE: a table cell, the file's lines on one line.
cell() { [ -s "$1" ] && tr '\n' ' ' <"$1" | sed 's/ *$//' || echo "-"; }

# The tables of every figure measured so far.
report() {
	local size m q n
	echo
	echo "Snapshot and restore, ms: median (min–max) of $RUNS runs; nested KVM under TCG"
	echo
	echo "| guest | operation | mote | QEMU microvm |"
	echo "|---|---|---|---|"
	for size in $SIZES; do
		m=$work/mote-$size q=$work/qemu-$size
		echo "| $size | pause, request to answer | $(cell "$m/pause") | $(cell "$q/pause") |"
		echo "| $size | pause (mote's own figure, every pause) | $(cell "$m/pause-own") | - |"
		echo "| $size | full snapshot, request to answer | $(cell "$m/full") | $(cell "$q/full") |"
		echo "| $size | full snapshot (mote's own figure, with the last one) | $(cell "$m/full-own") | - |"
		echo "| $size | full snapshot file | $(cell "$m/full-size") | $(cell "$q/full-size") |"
		echo "| $size | diff snapshot (1 MiB written) | $(cell "$m/diff") | - |"
		echo "| $size | diff snapshot file | $(cell "$m/diff-size") | - |"
		echo "| $size | restore, process start to running | $(cell "$m/restore") | $(cell "$q/restore") |"
		echo "| $size | restore, main() to vCPUs running (mote's figure) | $(cell "$m/restore-own") | - |"
		echo "| $size | restore to agent answer | $(cell "$m/e2e.stats") | - |"
	done
	echo
	echo "| guest | copies | mote: all running, ms | mote: all answering, ms | mote: total PSS | mote: one copy's private | QEMU: all running, ms | QEMU: total PSS | QEMU: one copy's private |"
	echo "|---|---|---|---|---|---|---|---|---|"
	for size in $SIZES; do
		m=$work/mote-$size q=$work/qemu-$size
		for n in $FORKS; do
			echo "| $size | $n | $(cell "$m/fork-$n-ms") | $(cell "$m/fork-$n-answer") | $(cell "$m/fork-$n-pss") | $(cell "$m/fork-$n-private") | $(cell "$q/fork-$n-ms") | $(cell "$q/fork-$n-pss") | $(cell "$q/fork-$n-private") |"
		done
	done
	echo
	echo "| guest | copies, one \`mote restore --copies\` | all running, ms | last copy's main() to vCPUs running (mote's figure) | the same without API sockets | all answering, ms | total PSS |"
	echo "|---|---|---|---|---|---|---|"
	for size in $SIZES; do
		m=$work/mote-$size
		for n in $FORKS; do
			echo "| $size | $n | $(cell "$m/copies-$n-ms") | $(cell "$m/copies-$n-own") | $(cell "$m/copies-$n-noapi-own") | $(cell "$m/copies-$n-answer") | $(cell "$m/copies-$n-pss") |"
		done
	done
}

for size in $SIZES; do
	mib_size=$(echo "$size" | sed 's/G$/*1024/; s/M$//' | bc)
	fill=$((mib_size / 4 * 1048576)) # a quarter of the guest's RAM holds data
	echo "snapshot benchmark: $size guest, $((fill / 1048576)) MiB filled, $RUNS runs" >&2
	bench_mote "$size" "$fill"
	# The figures so far, in case the emulated host stalls before the end.
	report >&2
	bench_qemu "$size" "$fill"
done

report
