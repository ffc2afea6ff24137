# virtio-vsock bridged to host Unix sockets (Firecracker's protocol): host to guest,
# guest to host, many connections at once, a port nobody listens on, a socket path
# already taken. Data is checked end to end with mote-pattern on both sides.
# Sourced by run.sh; boots from ROOT_IMG (mote-pattern, mote-pipe).
# shellcheck shell=bash

VSOCK_CID=3

# vsock_boot NAME UDS CMD [mote args...]
vsock_boot() {
	local name=$1 uds=$2 cmd=$3
	shift 3
	rm -f "$uds"
	mote_run "$name" run --kernel "$VMLINUX" --mem 256M --cpus 2 \
		--disk "path=$ROOT_IMG,ro,root" --vsock "cid=$VSOCK_CID,uds=$uds" \
		--cmdline "$BASE_CMDLINE mote.run=\"$cmd\"" "$@"
}

# host_send_to_guest UDS PORT SIZE SEED: connects through the device to the guest's
# PORT (retrying until the guest listens), waits for OK, then sends the pattern. The
# protocol side is a script of its own: socat's address syntax would mangle it inline.
host_send_to_guest() {
	local uds=$1 port=$2 size=$3 seed=$4 script=$WORK/vsock-send.sh
	cat >"$script" <<SCRIPT
#!/bin/sh
printf 'CONNECT %s\\n' "$port"
read -r ok rest
[ "\$ok" = OK ] || exit 1
"$MOTE_PATTERN" write - 0 $size $seed 2>/dev/null && : >"$script.sent"
SCRIPT
	chmod +x "$script"
	rm -f "$script.sent"
	# socat's own status does not say how the script ended: the marker file does.
	for _ in $(seq 1 600); do
		[ -S "$uds" ] && socat -t 120 "UNIX-CONNECT:$uds" EXEC:"$script" 2>/dev/null
		[ -e "$script.sent" ] && return 0
		sleep 0.5
	done
	return 1
}

test_host_to_guest_stream_over_vsock_arrives_intact() {
	local uds=$WORK/v1.sock size=16777216
	host_send_to_guest "$uds" 5000 $size 51 &
	local sender=$!
	vsock_boot v1 "$uds" "mote-pipe vsock-listen 5000 </dev/null | mote-pattern verify - 0 $size 51"
	settle $sender
	local sent=$?
	expect_status 0
	[ $sent -eq 0 ] || fail "the host could not connect through $uds"
	expect_in "$out" "pattern: verified $size bytes"
	expect_guest_status 0
	[ ! -e "$uds" ] || fail "mote left $uds behind"
}

test_guest_to_host_stream_over_vsock_arrives_intact() {
	local uds=$WORK/v2.sock size=16777216
	rm -f "${uds}_6000"
	(timeout 300 socat -u "UNIX-LISTEN:${uds}_6000" - |
		"$MOTE_PATTERN" verify - 0 $size 53 >"$WORK/v2.host-verify" 2>&1) &
	local receiver=$!
	vsock_boot v2 "$uds" "mote-pattern write - 0 $size 53 | mote-pipe vsock-connect 2 6000"
	settle $receiver
	expect_status 0
	expect_guest_status 0
	expect_in "$WORK/v2.host-verify" "pattern: verified $size bytes"
}

test_guest_connect_to_a_host_port_nobody_listens_on_is_refused() {
	local uds=$WORK/v3.sock
	rm -f "${uds}_6001"
	vsock_boot v3 "$uds" "mote-pipe vsock-connect 2 6001 </dev/null; echo connect-status=\$?"
	expect_status 0
	expect_in "$out" "connect-status=1"
	expect_in "$out" "pipe: connect"
}

test_twenty_concurrent_vsock_connections_each_echo_their_own_data() {
	local uds=$WORK/v4.sock
	rm -f "${uds}_6002"
	# An echo server on the host: one cat per connection, room for all 20 in its
	# backlog, listening before the guest boots. -t 120: once the guest's side ends,
	# socat waits only -t seconds (0.5 by default) for cat to echo the rest before it
	# closes; under nested emulation 20 echoes can take longer, which cut three of
	# them short in a CI pre-check (cat: Broken pipe).
	timeout 300 socat -t 120 "UNIX-LISTEN:${uds}_6002,fork,backlog=32" SYSTEM:cat &
	local server=$!
	local i
	for i in $(seq 1 100); do [ -S "${uds}_6002" ] && break; sleep 0.1; done
	local cmd="for i in \$(seq 1 20); do (mote-pattern write - 0 1M \$i 2>/dev/null | \
mote-pipe vsock-connect 2 6002 | mote-pattern verify - 0 1M \$i) & done; wait"
	vsock_boot v4 "$uds" "$cmd"
	end_tree $server
	wait $server 2>/dev/null
	expect_status 0
	local verified
	verified=$(grep -c "pattern: verified 1048576 bytes" "$out")
	if [ "$verified" -ne 20 ]; then
		fail "$verified of 20 connections echoed their data intact"
		grep -E "pattern:|pipe:" "$out" | grep -v "verified 1048576" | head -n 20 |
			sed 's/^/      guest: /'
	fi
}

test_a_vsock_socket_path_already_taken_is_a_clear_error() {
	local uds=$WORK/v5.sock
	: >"$uds"
	mote_run v5 run --kernel "$VMLINUX" --initrd "$MOTE_INITRD" --vsock "cid=3,uds=$uds" \
		--cmdline "$BASE_CMDLINE"
	expect_status 4
	expect_in "$err" "$uds"
	[ -f "$uds" ] || fail "mote removed a file it did not create"
}

# The guest agent (guest-init, `mote.agent` on the command line) through the vsock
# device: `mote exec` and `mote cp` as a user runs them against a running VM.
# Started with a soft limit of 256 open files, which mote raises to the hard limit
# (mote_main.c): a guest may open 1023 vsock connections.
agent_vm_start() { # NAME UDS
	rm -f "$2"
	(
		ulimit -Sn 256
		exec "$MOTE_BIN" run --kernel "$VMLINUX" --initrd "$MOTE_INITRD" --mem 256M --cpus 2 \
			--vsock "cid=$VSOCK_CID,uds=$2" --cmdline "$BASE_CMDLINE mote.agent"
	) </dev/null >"$WORK/$1.out" 2>"$WORK/$1.err" 3>&- &
	agent_vm=$!
}

# agent_exec NAME ARGS...: mote exec with the VM's socket, bounded; status in $status.
agent_exec() {
	local name=$1
	shift
	timeout 300 "$MOTE_BIN" exec --vsock "$uds" --wait 120 -- "$@" \
		</dev/null >"$WORK/$name.stdout" 2>"$WORK/$name.stderr"
	status=$?
}

agent_vm_stop() { # NAME
	timeout 120 "$MOTE_BIN" exec --vsock "$uds" -- poweroff >/dev/null 2>&1
	finish "$agent_vm"
	status=$?
	out="$WORK/$1.out"
	err="$WORK/$1.err"
}

test_agent_exec_streams_stdout_and_stderr_apart_and_returns_the_status() {
	uds=$WORK/a1.sock
	agent_vm_start a1 "$uds"
	agent_exec a1-exec sh -c 'echo out; echo err >&2; exit 3'
	local exec_status=$status
	agent_exec a1-missing /no/such/program
	local missing_status=$status
	# On a terminal (-t): stdin, stdout and stderr are one pseudo-terminal, 24 x 80
	# without one here to take the size of; typed input is echoed; the end of stdin is
	# ^D. The input goes in once the command is ready, so the output's order is fixed.
	mkfifo "$WORK/a1-tty.in"
	timeout 300 "$MOTE_BIN" exec --vsock "$uds" -t -- \
		sh -c 'tty; stty size; echo ready; read line; echo "got $line" >&2; cat; exit 4' \
		<"$WORK/a1-tty.in" >"$WORK/a1-tty.stdout" 2>"$WORK/a1-tty.stderr" &
	local tty_pid=$! i
	exec 4>"$WORK/a1-tty.in"
	for i in $(seq 1 1200); do
		grep -q ready "$WORK/a1-tty.stdout" && break
		sleep 0.1
	done
	printf 'hello\n' >&4
	exec 4>&-
	finish $tty_pid
	local tty_status=$?
	# A signal reaches a command that leaves its stdin unread, however much stdin waits
	# for it (mote keeps within the agent's stdin window): the command traps it and ends
	# as it chooses. (Before the window the signal waited behind the stdin, and mote gave
	# up the connection after 5 s with 143.)
	"$MOTE_PATTERN" write "$WORK/a1.stdin" 0 8388608 5 >/dev/null || fail "cannot write the stdin file"
	"$MOTE_BIN" exec --vsock "$uds" -- sh -c 'trap "echo got TERM; kill \$!; exit 7" TERM; echo ready; sleep 100 & wait' \
		<"$WORK/a1.stdin" >"$WORK/a1-sig.stdout" 2>"$WORK/a1-sig.stderr" 3>&- &
	local sig_pid=$! i
	for i in $(seq 1 1200); do
		grep -q ready "$WORK/a1-sig.stdout" && break
		sleep 0.1
	done
	sleep 2 # the stdin piles up in the window meanwhile
	kill -TERM $sig_pid
	finish $sig_pid
	local sig_status=$?
	local files
	files=$(awk '/^Max open files/ { print $4, $5 }' "/proc/$agent_vm/limits")
	agent_vm_stop a1
	expect_status 0
	[ "$exec_status" -eq 3 ] || fail "mote exec returned $exec_status, expected 3: $(cat "$WORK/a1-exec.stderr")"
	[ "$(cat "$WORK/a1-exec.stdout")" = out ] || fail "stdout was '$(cat "$WORK/a1-exec.stdout")'"
	[ "$(cat "$WORK/a1-exec.stderr")" = err ] || fail "stderr was '$(cat "$WORK/a1-exec.stderr")'"
	[ "$missing_status" -eq 127 ] || fail "a missing program gave $missing_status, expected 127"
	[ "$tty_status" -eq 4 ] || fail "mote exec -t returned $tty_status, expected 4: $(cat "$WORK/a1-tty.stderr")"
	[ "$(sed 's|^/dev/pts/[0-9]*\r$|PTS\r|' "$WORK/a1-tty.stdout")" = \
		"$(printf 'PTS\r\n24 80\r\nready\r\nhello\r\ngot hello\r')" ] ||
		fail "mote exec -t printed '$(cat -A "$WORK/a1-tty.stdout")'"
	[ ! -s "$WORK/a1-tty.stderr" ] || fail "mote exec -t wrote to stderr: $(cat "$WORK/a1-tty.stderr")"
	[ "$sig_status" -eq 7 ] && grep -q "got TERM" "$WORK/a1-sig.stdout" ||
		fail "the signal behind unread stdin: exit $sig_status, output '$(cat "$WORK/a1-sig.stdout")', $(tail -2 "$WORK/a1-sig.stderr")"
	grep -q "/no/such/program" "$WORK/a1-missing.stderr" || fail "no message names the missing program"
	# shellcheck disable=SC2086 # two numbers
	set -- $files
	[ "$#" -eq 2 ] && [ "$1" = "$2" ] && [ "$1" != 256 ] ||
		fail "mote kept a soft limit of open files below the hard one (soft, hard: $files)"
}

# The vsock socket of a running VM is refused to a second one; a socket left behind by
# a mote killed with SIGKILL is replaced by the next, without removing it by hand.
test_a_vsock_socket_left_by_a_killed_mote_is_reused_and_a_served_one_refused() {
	uds=$WORK/a6.sock
	agent_vm_start a6 "$uds"
	local first=$agent_vm
	agent_exec a6-ready true
	[ "$status" -eq 0 ] || fail "the first VM's agent did not answer: $(cat "$WORK/a6-ready.stderr")"
	mote_run a6-second run --kernel "$VMLINUX" --initrd "$MOTE_INITRD" \
		--vsock "cid=$VSOCK_CID,uds=$uds" --cmdline "$BASE_CMDLINE"
	expect_status 4
	expect_in "$err" "another process serves it"
	agent_exec a6-still true
	[ "$status" -eq 0 ] || fail "the first VM stopped answering after the refused start"
	kill -9 "$first"
	wait "$first" 2>/dev/null
	[ -S "$uds" ] || fail "the killed mote's socket is not there to be reused"
	"$MOTE_BIN" run --kernel "$VMLINUX" --initrd "$MOTE_INITRD" --mem 256M \
		--vsock "cid=$VSOCK_CID,uds=$uds" --cmdline "$BASE_CMDLINE mote.agent" \
		</dev/null >"$WORK/a6-third.out" 2>"$WORK/a6-third.err" 3>&- &
	agent_vm=$!
	agent_exec a6-third-exec echo reused
	[ "$(cat "$WORK/a6-third-exec.stdout")" = reused ] ||
		fail "the VM on the reused socket did not answer: $(cat "$WORK/a6-third-exec.stderr")"
	agent_vm_stop a6-third
	expect_status 0
	[ ! -e "$uds" ] || fail "the socket was not removed at exit"
}

test_a_50_mib_file_round_trips_through_the_agent_and_an_interrupted_download_leaves_nothing() {
	uds=$WORK/a2.sock
	local size=52428800
	"$MOTE_PATTERN" write "$WORK/a2.up" 0 $size 61 >/dev/null || fail "cannot write the file"
	agent_vm_start a2 "$uds"
	timeout 300 "$MOTE_BIN" cp --vsock "$uds" --wait 120 "$WORK/a2.up" guest:/tmp/big \
		>"$WORK/a2.cp1" 2>&1
	local up=$?
	timeout 300 "$MOTE_BIN" cp --vsock "$uds" guest:/tmp/big "$WORK/a2.down" >"$WORK/a2.cp2" 2>&1
	local down=$?
	# A download ended by a signal leaves neither the target nor its temporary file
	# (SIGTERM: a background job ignores SIGINT). 8 GiB of a sparse guest file take far
	# longer than the wait for the first bytes.
	agent_exec a2-huge truncate -s 8G /tmp/huge
	"$MOTE_BIN" cp --vsock "$uds" guest:/tmp/huge "$WORK/a2.huge" >"$WORK/a2.cp3" 2>&1 &
	local cp_pid=$! partial="" i
	for i in $(seq 1 600); do
		partial=$(find "$WORK" -maxdepth 1 -name 'a2.huge.mote-*' -size +0)
		[ -n "$partial" ] && break
		sleep 0.1
	done
	kill -TERM $cp_pid
	finish $cp_pid
	local interrupted=$?
	agent_vm_stop a2
	expect_status 0
	[ $up -eq 0 ] || fail "upload failed: $(cat "$WORK/a2.cp1")"
	[ $down -eq 0 ] || fail "download failed: $(cat "$WORK/a2.cp2")"
	[ -n "$partial" ] || fail "the huge download never started: $(cat "$WORK/a2.cp3")"
	[ $interrupted -eq 143 ] || fail "the interrupted cp exited $interrupted, expected 143"
	[ -z "$(find "$WORK" -maxdepth 1 -name 'a2.huge*')" ] ||
		fail "the interrupted download left $(find "$WORK" -maxdepth 1 -name 'a2.huge*')"
	"$MOTE_PATTERN" verify "$WORK/a2.down" 0 $size 61 >"$WORK/a2.verify" 2>&1 ||
		fail "the file came back changed: $(cat "$WORK/a2.verify")"
	[ "$(stat -c %s "$WORK/a2.down")" -eq $size ] || fail "the file came back with another size"
}

test_ten_agent_commands_run_at_once_each_get_their_own_output() {
	uds=$WORK/a3.sock
	agent_vm_start a3 "$uds"
	# The first exec waits for the agent; the ten then run side by side: each marks
	# that it started and waits (60 s at most, then exit 99) until all ten have, which
	# commands run one after another never get to.
	agent_exec a3-ready true
	local pids=""
	for i in $(seq 1 10); do
		timeout 300 "$MOTE_BIN" exec --vsock "$uds" -- sh -c 'touch /tmp/a3-started-$1; n=0
			while [ "$(ls /tmp | grep -c "^a3-started-")" -lt 10 ]; do
				n=$((n + 1)); [ $n -le 600 ] || exit 99; sleep 0.1
			done
			echo job-$1; exit $1' sh "$i" </dev/null >"$WORK/a3-$i.stdout" 2>&1 &
		pids="$pids $!"
	done
	local i=0 bad=0
	for pid in $pids; do
		i=$((i + 1))
		wait "$pid"
		local st=$?
		[ $st -eq $i ] && [ "$(cat "$WORK/a3-$i.stdout")" = "job-$i" ] || bad=$((bad + 1))
	done
	agent_vm_stop a3
	expect_status 0
	[ $bad -eq 0 ] || fail "$bad of 10 concurrent commands returned the wrong output or status"
}

# What the guest's agent sends is read under the seccomp filter (README: "Host
# protection"), as in the VM's own monitor; --no-seccomp leaves it out. A command the
# client waits for shows the client's /proc status.
test_mote_exec_reads_the_agent_under_the_seccomp_filter_unless_told_otherwise() {
	uds=$WORK/a9.sock
	agent_vm_start a9 "$uds"
	local flag want seccomp pid i
	for flag in "" --no-seccomp; do
		want=2
		# Without the filter, whatever the tests themselves run under (none in CI).
		[ -n "$flag" ] && want=$(sed -n 's/^Seccomp:[[:space:]]*//p' /proc/self/status)
		# Not under timeout: $! must be mote's pid (finish bounds the wait).
		# shellcheck disable=SC2086 # no flag is no word
		"$MOTE_BIN" exec --vsock "$uds" --wait 120 $flag -- \
			sh -c 'echo started; sleep 3' \
			</dev/null >"$WORK/a9-exec.stdout" 2>"$WORK/a9-exec.stderr" &
		pid=$!
		for i in $(seq 1 1200); do
			grep -q started "$WORK/a9-exec.stdout" && break
			sleep 0.1
		done
		seccomp=$(sed -n 's/^Seccomp:[[:space:]]*//p' "/proc/$pid/status")
		finish "$pid"
		[ "$seccomp" = "$want" ] ||
			fail "mote exec ${flag:-without flags} ran with Seccomp: ${seccomp:-?}, expected $want"
	done
	agent_vm_stop a9
	expect_status 0
}
