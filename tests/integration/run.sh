#!/bin/bash
# Integration tests on real KVM: each test boots the guest kernel with mote and checks
# what a user would see (console text, exit code, messages). Run through
# tools/kvm-run.sh (tools/test.sh does), which supplies /dev/kvm.
#
# Needs: MOTE_BIN (the mote binary), MOTE_KERNEL_DIR (vmlinux + bzImage),
# MOTE_INITRD (initramfs with guest-init), MOTE_ROOTFS (ext4 root image from
# tools/build-rootfs.sh, with mote-pattern and mote-pipe), MOTE_PATTERN
# (mote-pattern for the host), MOTE_KEYBOARD_KERNEL_DIR (a kernel with the keyboard
# drivers, from tools/build-kernel.sh --keyboard: the SendCtrlAltDel test fails without).
# Optional: MOTE_TEST_FILTER (regex on names).
set -u

: "${MOTE_BIN:?}" "${MOTE_KERNEL_DIR:?}" "${MOTE_INITRD:?}"
VMLINUX=$MOTE_KERNEL_DIR/vmlinux
BZIMAGE=$MOTE_KERNEL_DIR/bzImage
# quiet: every console character is a VM exit, and under nested emulation each costs.
# noreplace-smp: see MOTE_DEFAULT_CMDLINE in mote.h.
BASE_CMDLINE="console=ttyS0 reboot=k panic=1 quiet noreplace-smp"
WORK=$(mktemp -d "${MOTE_SCRATCH:-/tmp}/mote-it.XXXXXX")
# Only this shell cleans up: a subshell killed before it has reset its traps (finish's
# watcher, killed at once when its process had already ended) would run this trap too
# and remove the work directory under the tests still to come.
trap '[ "$BASHPID" = "$$" ] && rm -rf "$WORK"' EXIT
# Every boot reads the initramfs. Under tools/kvm-run.sh it sits on a 9p share that is
# read anew on each open, so the tests boot from a copy in the page cache.
cp "$MOTE_INITRD" "$WORK/initramfs.cpio" || exit 1
MOTE_INITRD=$WORK/initramfs.cpio
# Generous: under TCG-nested KVM a boot takes seconds, not milliseconds.
TIMEOUT=${MOTE_TEST_TIMEOUT:-120}

if [ ! -c /dev/kvm ]; then
	echo "integration: /dev/kvm missing; run through tools/kvm-run.sh" >&2
	exit 1
fi

failures=0
passed=0
current=""

# fail REASON: marks the test failed; the first failure also shows how mote ended.
fail() {
	echo "    FAIL: $*"
	if [ "$test_failed" -eq 0 ] && [ -n "${err:-}" ] && [ -s "$err" ]; then
		tail -n 3 "$err" | sed 's/^/      mote stderr: /'
	fi
	test_failed=1
}

# The test log, for messages from inside redirected commands.
exec 3>&1
mkfifo "$WORK/never"

# describe_stuck PID: what a process that outlived its time is doing, so that a hang
# leaves evidence: each thread's state and kernel stack, the load, the kernel log.
describe_stuck() {
	local pid=$1 task
	echo "    HANG: pid $pid still running after ${TIMEOUT} s:"
	for task in /proc/"$pid"/task/*; do
		echo "      thread $(basename "$task") $(cat "$task/comm" 2>/dev/null)" \
			"$(grep '^State' "$task/status" 2>/dev/null) wchan=$(cat "$task/wchan" 2>/dev/null)"
		sed 's/^/        /' "$task/stack" 2>/dev/null
	done
	echo "      loadavg: $(cat /proc/loadavg)"
	dmesg 2>/dev/null | tail -n 20 | sed 's/^/      dmesg: /'
}

# finish PID: waits for PID, like `timeout -k 10 $TIMEOUT` would: TERM after TIMEOUT
# seconds, KILL 10 s later, describing the process first. The watcher sleeps with the
# read builtin (on a FIFO nobody writes), so killing it leaves no stray sleep behind.
# Returns PID's exit status, or 124 (as timeout does) when it had to be stopped: that
# fails the test, since the status it then gave is the watcher's doing (mote answers
# a TERM with 1, which a test of a signal would otherwise take for its own).
finish() {
	local pid=$1 rc
	rm -f "$WORK/.stopped.$pid"
	(
		read -r -t "$TIMEOUT" <>"$WORK/never"
		: >"$WORK/.stopped.$pid"
		describe_stuck "$pid" >&3
		kill -TERM "$pid" 2>/dev/null
		read -r -t 10 <>"$WORK/never"
		kill -KILL "$pid" 2>/dev/null
	) >/dev/null 2>&1 &
	local watcher=$!
	wait "$pid"
	rc=$?
	kill "$watcher" 2>/dev/null
	wait "$watcher" 2>/dev/null
	if [ -e "$WORK/.stopped.$pid" ]; then
		rm -f "$WORK/.stopped.$pid"
		fail "pid $pid did not end within ${TIMEOUT} s (stopped unless it ended meanwhile; status $rc)"
		return 124
	fi
	return $rc
}

# end_tree PID: ends PID and every process below it, children first.
end_tree() {
	local child
	for child in $(pgrep -P "$1"); do
		end_tree "$child"
	done
	kill -TERM "$1" 2>/dev/null
}

# settle PID: for a host-side helper (a sender, a receiver, a server) once the VM it
# talks to has ended. The helper has 10 s to finish what it has; then it and its
# children are ended, since nothing is left to wait for: a sender that retries its
# connect until the guest listens would otherwise go on retrying for many minutes after
# a guest that died. Returns the helper's exit status (143 when it had to be ended).
settle() {
	local pid=$1 i
	for i in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	end_tree "$pid"
	wait "$pid"
}

# mote_run NAME ARGS...: runs mote under finish; output in $WORK/NAME.out/.err, exit
# code in $status.
# mote_start NAME ARGS...: `mote ARGS` in the background, stdin empty, stdout and stderr
# in $out and $err ($WORK/NAME.out and .err), its pid in $mote_pid for finish().
mote_start() {
	local name=$1
	shift
	# out and err first: a finish() that fails shows this command's stderr.
	out="$WORK/$name.out"
	err="$WORK/$name.err"
	"$MOTE_BIN" "$@" >"$out" 2>"$err" </dev/null 3>&- &
	mote_pid=$!
}

# mote_run NAME ARGS...: mote_start, then its exit status in $status.
mote_run() {
	mote_start "$@"
	finish "$mote_pid"
	status=$?
}

expect_status() {
	[ "$status" -eq "$1" ] || fail "exit status $status, expected $1; stderr: $(tail -3 "$err" | tr '\n' '|')"
}

# has_line FILE TEXT: some line is exactly TEXT (the guest's tty ends lines with CR LF).
has_line() {
	tr -d '\r' <"$1" | grep -qxF -- "$2"
}

expect_in() {
	grep -qF -- "$2" "$1" || fail "'$2' not in $(basename "$1"): $(tail -5 "$1" | tr '\n' '|')"
}

boot() { # boot NAME KERNEL CPUS MEM CMD [extra mote args...]
	local name=$1 kernel=$2 cpus=$3 mem=$4 cmd=$5
	shift 5
	mote_run "$name" run --kernel "$kernel" --initrd "$MOTE_INITRD" --cpus "$cpus" --mem "$mem" \
		--cmdline "$BASE_CMDLINE${cmd:+ mote.run=\"$cmd\"}" "$@"
}

expect_guest_status() {
	expect_in "$out" "mote-init: command exited with status $1"
}

# The guest root image (tools/build-rootfs.sh, with mote-pattern and mote-pipe),
# copied to the scratch disk: images are read there, not through the outer guest's 9p.
# MOTE_PATTERN is the same pattern tool built for the host.
: "${MOTE_ROOTFS:?}" "${MOTE_PATTERN:?}"
ROOT_IMG=$WORK/rootfs.img
cp --sparse=always "$MOTE_ROOTFS" "$ROOT_IMG"

# The tests, one file per area; each defines test_* functions.
here=$(cd "$(dirname "$0")" && pwd)
for tests in "$here"/*_tests.sh; do
	# shellcheck source=/dev/null
	. "$tests"
done

# Under TCG-nested KVM (kvm-run.sh exports MOTE_NESTED_TCG=1) the emulated SVM now and
# then triple-faults a guest CPU during SMP bring-up; QEMU microvm fails the same way
# there (README, "How the tests get KVM"). A test that failed with a guest triple fault
# the test did not ask for, or with the outer KVM's livelock (nested_mishap_since
# below), runs once more, saying so, up to three times a suite: more than that is not
# the emulator. A test runs again once at most: a mishap twice in a row in one test
# is more likely the test's own (mote's) than the emulator's. On real KVM a test runs
# once.
nested_retries_left=3
rerun_tests=""

# When kvm-run.sh boots a stalled outer guest again it runs this script again, with the
# same MOTE_RESUME_DIR: the tests that ended on an earlier boot are not run again, and
# their results and reruns count.
progress=${MOTE_RESUME_DIR:+$MOTE_RESUME_DIR/integration.progress}
declare -A earlier_result
if [ -n "$progress" ] && [ -f "$progress" ]; then
	while read -r name result; do
		if [ "$name" = rerun ]; then
			nested_retries_left=$((nested_retries_left - 1))
			rerun_tests="$rerun_tests $result"
		else
			earlier_result[$name]=$result
		fi
	done <"$progress"
	echo "integration: resuming after ${#earlier_result[@]} tests run on an earlier boot"
fi
# record LINE: appends a line to the progress file, when there is one.
record() {
	[ -z "$progress" ] || echo "$1" >>"$progress"
}

# triple_faulted_since MARK: some mote stderr written since MARK reports a triple fault.
triple_faulted_since() {
	# Not xargs -r: it succeeds when there is no file at all.
	find "$WORK" -maxdepth 1 -name '*.err' -newer "$1" -exec grep -l "triple fault" {} + \
		2>/dev/null | grep -q .
}

# The outer KVM also livelocks with a guest now and then under nested emulation: it
# emulates one of the guest's instructions, its own walk of the guest's page tables
# fails, it injects a page fault, and the guest's handler returns to the same
# instruction, tens of thousands of times a second, while mote sees no exit at all
# (README, "How the tests get KVM"). With nested paging KVM injects a page fault only
# for an instruction it emulates, so its pf_guest count (debugfs, summed over the
# outer kernel's live VMs) stayed 0 through healthy tests. A watcher keeps the highest
# count seen during each test; a failed test that saw more than LIVELOCK_FAULTS runs
# once more, like one with a triple fault.
kvm_stats=/sys/kernel/debug/kvm
LIVELOCK_FAULTS=10000
if [ -n "${MOTE_NESTED_TCG:-}" ] && [ ! -r "$kvm_stats/pf_guest" ]; then
	mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null || :
fi

# watch_injected_faults: until killed, writes the highest pf_guest seen to
# $WORK/.faults-injected, sampling every 2 s (read on a FIFO nobody writes, so that
# killing it leaves no stray sleep).
watch_injected_faults() {
	local highest=0 now
	while now=$(cat "$kvm_stats/pf_guest" 2>/dev/null); do
		[ "$now" -le "$highest" ] || { highest=$now; echo "$highest" >"$WORK/.faults-injected"; }
		read -r -t 2 <>"$WORK/never"
	done
}

# nested_mishap_since MARK: why a test that failed since MARK may be the emulator's
# doing, or nothing: a guest triple fault, or the outer KVM's livelock.
nested_mishap_since() {
	local faults
	if triple_faulted_since "$1"; then
		echo "a guest triple-faulted under nested emulation"
		return
	fi
	faults=$(cat "$WORK/.faults-injected" 2>/dev/null) || faults=0
	if [ "$faults" -gt "$LIVELOCK_FAULTS" ]; then
		echo "the outer KVM injected $faults page faults into guests (its livelock" \
			"with a guest under nested emulation)"
	fi
}

# guest_traces_since MARK: the kernel traces (oops, BUG, panic) on the guest consoles
# written since MARK, from the first one on, so that a failure a guest kernel caused
# shows where it happened.
guest_traces_since() {
	local trace='Oops|BUG:|general protection|Kernel panic' out
	find "$WORK" -maxdepth 1 -name '*.out' -newer "$1" -print0 |
		while IFS= read -r -d '' out; do
			grep -qE "$trace" "$out" || continue
			echo "    guest console $(basename "$out"), from its first kernel trace:"
			tr -d '\r' <"$out" | awk -v re="$trace" '$0 ~ re { on = 1 } on' | head -n 60 |
				sed 's/^/      /'
		done
}

for t in $(declare -F | awk '{print $3}' | grep '^test_'); do
	if [ -n "${MOTE_TEST_FILTER:-}" ] && ! [[ $t =~ $MOTE_TEST_FILTER ]]; then
		continue
	fi
	if [ -n "${earlier_result[$t]:-}" ]; then
		printf -- '--- %s\n    %s on an earlier boot\n' "$t" "${earlier_result[$t]}"
		if [ "${earlier_result[$t]}" = ok ]; then
			passed=$((passed + 1))
		else
			failures=$((failures + 1))
		fi
		continue
	fi
	start=$(date +%s.%N)
	echo "--- $t"
	reran=0
	while :; do
		test_failed=0
		err=""
		: >"$WORK/.test-start"
		echo 0 >"$WORK/.faults-injected"
		fault_watcher=""
		if [ -n "${MOTE_NESTED_TCG:-}" ] && [ -r "$kvm_stats/pf_guest" ]; then
			watch_injected_faults &
			fault_watcher=$!
		fi
		$t
		[ -d "$WORK" ] || { echo "integration: $t removed the work directory $WORK" >&2; exit 1; }
		if [ -n "$fault_watcher" ]; then
			kill "$fault_watcher" 2>/dev/null
			wait "$fault_watcher" 2>/dev/null
		fi
		mishap=""
		[ "$test_failed" -ne 0 ] && [ -n "${MOTE_NESTED_TCG:-}" ] && [ $reran -eq 0 ] &&
			[ "$nested_retries_left" -gt 0 ] && mishap=$(nested_mishap_since "$WORK/.test-start")
		[ -n "$mishap" ] || break
		nested_retries_left=$((nested_retries_left - 1))
		reran=1
		record "rerun $t"
		rerun_tests="$rerun_tests $t"
		echo "    $mishap; running the test again"
	done
	secs=$(echo "$(date +%s.%N) - $start" | bc)
	if [ "$test_failed" -eq 0 ]; then
		passed=$((passed + 1))
		record "$t ok"
		printf '    ok (%.1f s)\n' "$secs"
	else
		record "$t failed"
		failures=$((failures + 1))
		printf '    failed after %.1f s\n' "$secs"
		guest_traces_since "$WORK/.test-start"
		# A process the kernel killed for memory leaves no message of its own.
		dmesg 2>/dev/null | grep -E 'Out of memory|oom-kill|Killed process' | tail -n 3 |
			sed 's/^/    dmesg: /'
	fi
done
echo "integration: $passed passed, $failures failed"
# A rerun is the emulator's mishap only as far as nested_mishap_since can tell: named,
# so that a test that needs one often is looked at.
[ -z "$rerun_tests" ] || echo "integration: run again after a nested mishap:$rerun_tests"
[ $((passed + failures)) -gt 0 ] || { echo "integration: no test matched MOTE_TEST_FILTER" >&2; exit 1; }
[ "$failures" -eq 0 ]
