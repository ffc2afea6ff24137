# virtio-blk disks: root filesystem, data written by one side and verified by the
# other, read-only disks, several disks, durability across kill -9, bad images.
# Sourced by run.sh; boots from ROOT_IMG (with mote-pattern) and checks with
# MOTE_PATTERN on the host.
# shellcheck shell=bash

MIB=$((1024 * 1024))

# root_boot NAME DISK CMD [mote args...]: boots with DISK (a --disk value) as the root
# filesystem, without an initramfs, and runs CMD.
root_boot() {
	local name=$1 disk=$2 cmd=$3
	shift 3
	mote_run "$name" run --kernel "$VMLINUX" --mem 128M --disk "$disk,root" \
		--cmdline "$BASE_CMDLINE mote.run=\"$cmd\"" "$@"
}

# disk_boot NAME CMD [mote args...]: boots from the root image, read-only so that every
# test can share it.
disk_boot() {
	local name=$1 cmd=$2
	shift 2
	root_boot "$name" "path=$ROOT_IMG,ro" "$cmd" "$@"
}

# root_copy NAME: a copy of the root image of the test's own, for a boot that writes.
root_copy() {
	cp --sparse=always "$ROOT_IMG" "$WORK/rootfs-$1.img"
	echo "$WORK/rootfs-$1.img"
}

# await_text TEXT FILE PID: waits until FILE (a console) holds TEXT, PID ended, or TIMEOUT
# seconds passed; true when FILE holds TEXT.
await_text() {
	local text=$1 file=$2 pid=$3
	for _ in $(seq 1 "$TIMEOUT"); do
		grep -q -- "$text" "$file" 2>/dev/null && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep 1
	done
	grep -q -- "$text" "$file" 2>/dev/null
}

# api_call SOCKET METHOD PATH [BODY]: one request to a mote's control API; prints the
# answer, its status line first, carriage returns removed.
api_call() {
	local body=${4:-}
	printf '%s %s HTTP/1.1\r\nHost: mote\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
		"$2" "$3" "${#body}" "$body" | timeout 30 socat -t 10 - "UNIX-CONNECT:$1" | tr -d '\r'
}

# new_disk NAME MIB: a zero-filled raw image.
new_disk() {
	rm -f "$WORK/$1.img"
	truncate -s "$(($2 * MIB))" "$WORK/$1.img"
	echo "$WORK/$1.img"
}

test_root_filesystem_is_on_virtio_blk() {
	disk_boot b1 "grep ' / ' /proc/mounts; cat /sys/block/vda/ro"
	expect_status 0
	expect_in "$out" "mote-init: boot complete"
	expect_in "$out" "/dev/root / ext4 ro"
	has_line "$out" 1 || fail "/dev/vda is not read-only"
}

test_root_filesystem_is_writable_when_the_disk_is() {
	local root
	root=$(root_copy rw)
	root_boot b2 "path=$root" "echo kept >/root/note && sync"
	expect_status 0
	expect_guest_status 0
	root_boot b2b "path=$root,ro" "cat /root/note"
	expect_status 0
	has_line "$out" kept || fail "the file written on the first boot is gone"
}

# Ctrl-Alt-Del reaches a guest as SIGINT to PID 1 once mote-init has turned the
# kernel's immediate restart off: the test guest has no keyboard driver for mote's
# SendCtrlAltDel, so the signal is sent from inside. Nothing synced the file: only the
# reboot's own sync can have put it on the disk. Without mote-init handling the signal
# (PID 1 ignores a signal it has no handler for), the command ends after its sleep and
# the guest powers off instead of rebooting (no "guest reset"); with it, the reboot ends
# every process first, the sleep too.
test_ctrl_alt_del_signal_reboots_after_a_sync() {
	local root
	root=$(root_copy cad)
	root_boot b2c "path=$root" "echo unsynced >/root/cad && kill -INT 1 && sleep 30"
	expect_status 0
	expect_in "$err" "guest reset"
	root_boot b2d "path=$root,ro" "cat /root/cad"
	expect_status 0
	has_line "$out" unsynced || fail "the file written before Ctrl-Alt-Del is gone"
}

# SendCtrlAltDel the whole way, on a kernel with the i8042 and AT keyboard drivers
# (MOTE_KEYBOARD_KERNEL_DIR: tools/build-kernel.sh --keyboard) booted with mote's default
# i8042 options: mote queues the keys' scancodes in its i8042 and raises IRQ 1, the
# guest's keyboard driver reads them, its keymap's Boot key has the kernel send SIGINT to
# PID 1, and mote-init reboots after a sync. Nothing synced the file. Without the keys
# reaching the guest, the command ends after its sleep and the guest powers off instead.
# The keys are sent once the keyboard's input device has the console's keyboard handler
# ("kbd" in /proc/bus/input/devices), which the kernel's serio thread attaches in the
# background, maybe after init started; keys before are dropped. The driver's link in
# sysfs is not enough: the driver core makes it before the driver's probe runs
# (really_probe(), drivers/base/dd.c). Twice in a loaded outer guest the guest powered
# off instead of rebooting; once this wait had ruled the driver's probe out, a race in
# mote was found and fixed: two IRQ 1 pulses overlapping, so that one was no edge
# (devices/i8042.c).
test_send_ctrl_alt_del_reboots_a_guest_with_a_keyboard_after_a_sync() {
	local root pid reply api=$WORK/b2e.api
	local body='{"action_type":"SendCtrlAltDel"}'
	[ -f "${MOTE_KEYBOARD_KERNEL_DIR:-}/vmlinux" ] || {
		fail "no kernel with the keyboard drivers: MOTE_KEYBOARD_KERNEL_DIR is '${MOTE_KEYBOARD_KERNEL_DIR:-}' (tools/build-kernel.sh --keyboard)"
		return
	}
	root=$(root_copy sendcad)
	mote_start b2e run --kernel "$MOTE_KEYBOARD_KERNEL_DIR/vmlinux" --mem 128M --api-sock "$api" \
		--disk "path=$root,root" --cmdline "$BASE_CMDLINE i8042.noaux i8042.nomux i8042.dumbkbd \
mote.run=\"echo unsynced >/root/cad && until grep -q 'Handlers=.*kbd' /proc/bus/input/devices; do sleep 0.1; done && echo written && sleep 30\""
	pid=$mote_pid
	await_text written "$out" "$pid" || fail "the guest never wrote its file and bound its keyboard"
	reply=$(api_call "$api" PUT /actions "$body" | head -1)
	finish "$pid"
	status=$?
	expect_status 0
	case "$reply" in
	"HTTP/1.1 204"*) ;;
	*) fail "PUT /actions SendCtrlAltDel answered '$reply'" ;;
	esac
	expect_in "$err" "guest reset"
	root_boot b2f "path=$root,ro" "cat /root/cad"
	expect_status 0
	has_line "$out" unsynced || fail "the file written before SendCtrlAltDel is gone"
}

# PATCH /drives/{id}, Firecracker's update of a drive after boot, on a running guest
# reading its data disk with O_DIRECT (nothing from its page cache): the guest sees the
# second image's size at once (a config change) and its data, then the first image's
# again (swapped back with `mote update-disk` while the VM is paused, and seen once it
# is resumed). A missing image is refused and changes nothing; the image left is
# unlocked, the one taken locked; GET /vm/config and a snapshot taken then name the
# image in use. Restored from that snapshot, the guest has the second image, and takes
# the first once more from the restored VM's own PATCH.
test_a_running_guests_disk_is_pointed_at_another_image() {
	local api=$WORK/b20.api one two pid reply
	one=$(new_disk b20-one 4)
	two=$(new_disk b20-two 8)
	"$MOTE_PATTERN" write "$one" 0 $((4 * MIB)) 31 >/dev/null || fail "host write failed"
	"$MOTE_PATTERN" write "$two" 0 $((8 * MIB)) 32 >/dev/null || fail "host write failed"
	# Sizes in sectors: 4 MiB is 8192, 8 MiB 16384.
	mote_start b20 run --kernel "$VMLINUX" --mem 128M --api-sock "$api" \
		--disk "path=$ROOT_IMG,ro,root" --disk "path=$one,id=data" \
		--cmdline "$BASE_CMDLINE mote.run=\"mote-pattern -d verify /dev/vdb 0 4194304 31 && echo ready && \
until [ \$(cat /sys/block/vdb/size) = 16384 ]; do sleep 0.1; done && mote-pattern -d verify /dev/vdb 0 8388608 32 && echo swapped && \
until [ \$(cat /sys/block/vdb/size) = 8192 ]; do sleep 0.1; done && mote-pattern -d verify /dev/vdb 0 4194304 31\""
	pid=$mote_pid
	await_text ready "$out" "$pid" || fail "the guest never read the first image"
	reply=$(api_call "$api" PATCH /drives/data "{\"drive_id\":\"data\",\"path_on_host\":\"$WORK/b20-none.img\"}")
	case "$reply" in
	"HTTP/1.1 400"*b20-none.img*) ;;
	*) fail "PATCH to a missing image answered '$reply'" ;;
	esac
	reply=$(api_call "$api" PATCH /drives/data "{\"drive_id\":\"data\",\"path_on_host\":\"$two\"}" | head -1)
	case "$reply" in
	"HTTP/1.1 204"*) ;;
	*) fail "PATCH /drives/data answered '$reply'" ;;
	esac
	if await_text swapped "$out" "$pid"; then
		api_call "$api" GET /vm/config >"$WORK/b20.config"
		grep -qF "\"path_on_host\":\"$two\"" "$WORK/b20.config" ||
			fail "GET /vm/config does not name the second image: $(tail -1 "$WORK/b20.config")"
		flock -n -x "$one" true || fail "the first image is still locked"
		flock -n -s "$two" true && fail "the second image is not locked"
		# A snapshot taken now records the second image, not the first.
		"$MOTE_BIN" snapshot --api-sock "$api" --state "$WORK/b20.state" --mem "$WORK/b20.mem" \
			>"$WORK/b20-snap.out" 2>&1 || fail "snapshot: $(cat "$WORK/b20-snap.out")"
		grep -aqF "$two" "$WORK/b20.state" || fail "the snapshot does not name the second image"
		grep -aqF "$one" "$WORK/b20.state" && fail "the snapshot still names the first image"
	else
		fail "the guest never saw the second image"
	fi
	# Back, through the command line's client of the same request, while the VM is
	# paused (the snapshot left it so): the swap makes no pause of its own, and ends
	# none; the guest sees the change once resumed.
	"$MOTE_BIN" update-disk --api-sock "$api" --disk data --path "$one" >"$WORK/b20-back.out" 2>&1 ||
		fail "mote update-disk back to the first image: $(cat "$WORK/b20-back.out")"
	api_call "$api" GET / | grep -q '"state":"Paused"' || fail "the update resumed a paused VM"
	"$MOTE_BIN" resume --api-sock "$api" >"$WORK/b20-resume.out" 2>&1 ||
		fail "resume: $(cat "$WORK/b20-resume.out")"
	finish "$pid"
	status=$?
	expect_status 0
	expect_guest_status 0
	expect_in "$out" "pattern: verified 8388608 bytes"
	[ "$(grep -c "pattern: verified 4194304 bytes" "$out")" -eq 2 ] ||
		fail "the guest did not read the first image twice"

	# Restored, the guest waits for the first image again with the second one in place.
	mote_start b20-restored restore --snapshot "$WORK/b20.state" --mem "$WORK/b20.mem" \
		--api-sock "$WORK/b20r.api"
	pid=$mote_pid
	await_text "restored VM running" "$err" "$pid" || fail "the restore did not run: $(tail -3 "$err")"
	flock -n -s "$two" true && fail "the restored VM did not take the second image"
	reply=$(api_call "$WORK/b20r.api" PATCH /drives/data "{\"drive_id\":\"data\",\"path_on_host\":\"$one\"}" | head -1)
	case "$reply" in
	"HTTP/1.1 204"*) ;;
	*) fail "the restored VM's PATCH /drives/data answered '$reply'" ;;
	esac
	finish "$pid"
	status=$?
	rm -f "$WORK/b20.mem"
	expect_status 0
	expect_guest_status 0
	expect_in "$out" "pattern: verified 4194304 bytes"
}

test_guest_writes_reach_the_image() {
	local data
	data=$(new_disk b3 16)
	disk_boot b3 "mote-pattern write /dev/vdb 1048576 4194304 11" --disk "path=$data"
	expect_status 0
	expect_guest_status 0
	"$MOTE_PATTERN" verify "$data" 1048576 4194304 11 >"$WORK/b3.verify" 2>&1 ||
		fail "host: $(cat "$WORK/b3.verify")"
	# Nothing outside the written range changed.
	"$MOTE_PATTERN" verify "$data" 0 1048576 11 >/dev/null 2>&1 &&
		fail "the pattern is also where it was not written"
	cmp -s -n "$MIB" "$data" /dev/zero || fail "the first MiB is no longer zero"
	cmp -s -i $((5 * MIB)) -n $((11 * MIB)) "$data" /dev/zero ||
		fail "bytes after the written range (5 MiB to 16 MiB) are no longer zero"
}

test_host_data_reaches_the_guest() {
	local data
	data=$(new_disk b4 16)
	"$MOTE_PATTERN" write "$data" 0 8388608 23 >/dev/null || fail "host write failed"
	disk_boot b4 "mote-pattern verify /dev/vdb 0 8388608 23 && mote-pattern -d verify /dev/vdb 4096 65536 23" \
		--disk "path=$data"
	expect_status 0
	expect_guest_status 0
	expect_in "$out" "pattern: verified 8388608 bytes"
}

test_stale_data_is_detected_by_the_pattern_check() {
	# The check the other tests rely on fails when it should: seed 24 was never written.
	local data
	data=$(new_disk b5 4)
	"$MOTE_PATTERN" write "$data" 0 1048576 23 >/dev/null || fail "host write failed"
	disk_boot b5 "mote-pattern verify /dev/vdb 0 1048576 24" --disk "path=$data"
	expect_status 0
	expect_guest_status 1
	expect_in "$out" "MISMATCH"
}

test_read_only_disk_refuses_writes() {
	local data sum
	data=$(new_disk b6 4)
	"$MOTE_PATTERN" write "$data" 0 1048576 5 >/dev/null || fail "host write failed"
	sum=$(sha256sum <"$data")
	disk_boot b6 "cat /sys/block/vdb/ro; mote-pattern write /dev/vdb 0 65536 6" --disk "path=$data,ro"
	expect_status 0
	has_line "$out" 1 || fail "the guest does not see /dev/vdb read-only"
	# The guest's kernel refuses the write itself (block/fops.c: EPERM on a read-only
	# disk, which VIRTIO_BLK_F_RO made it), so no write request reaches mote here; mote's
	# own IOERR for one is in the unit tests (test_virtio_blk*.c).
	expect_guest_status 2
	expect_in "$out" "pattern: write /dev/vdb at offset 0: Operation not permitted"
	[ "$(sha256sum <"$data")" = "$sum" ] || fail "the read-only image changed"
}

test_two_data_disks_at_once_with_their_ids() {
	local a b
	a=$(new_disk b7a 8)
	b=$(new_disk b7b 8)
	# sysfs prints a serial without a newline.
	disk_boot b7 "for d in vdb vdc; do cat /sys/block/\$d/serial; echo; done; mote-pattern write /dev/vdb 0 2097152 1 && mote-pattern write /dev/vdc 0 2097152 2" \
		--disk "path=$a,id=first" --disk "path=$b,id=second"
	expect_status 0
	expect_guest_status 0
	has_line "$out" first || fail "vdb serial is not 'first'"
	has_line "$out" second || fail "vdc serial is not 'second'"
	"$MOTE_PATTERN" verify "$a" 0 2097152 1 >/dev/null || fail "disk a does not hold seed 1"
	"$MOTE_PATTERN" verify "$b" 0 2097152 2 >/dev/null || fail "disk b does not hold seed 2"
}

test_flushed_data_survives_kill_9_of_the_monitor() {
	local data pid
	data=$(new_disk b8 16)
	mote_start b8 run --kernel "$VMLINUX" --mem 128M --disk "path=$ROOT_IMG,ro,root" \
		--disk "path=$data" --cmdline "$BASE_CMDLINE mote.run=\"mote-pattern write /dev/vdb 0 6291456 77 && echo FLUSHED && sleep 1000\""
	pid=$mote_pid
	await_text FLUSHED "$out" "$pid" ||
		fail "the guest never reported its flush: $(tail -3 "$out" | tr '\n' '|')"
	kill -KILL "$pid"
	finish "$pid"
	# The next boot sees everything the guest flushed.
	disk_boot b8b "mote-pattern verify /dev/vdb 0 6291456 77" --disk "path=$data"
	expect_status 0
	expect_guest_status 0
}

test_json_config_drives_boot_the_root_disk() {
	cat >"$WORK/b9.json" <<JSON
{"boot-source": {"kernel_image_path": "$VMLINUX",
                 "boot_args": "$BASE_CMDLINE mote.run=\\"grep -c vd /proc/partitions\\""},
 "drives": [{"drive_id": "rootfs", "path_on_host": "$ROOT_IMG",
             "is_root_device": true, "is_read_only": true}]}
JSON
	mote_run b9 run --config "$WORK/b9.json"
	expect_status 0
	expect_in "$out" "mote-init: boot complete"
	has_line "$out" 1 || fail "the guest does not see exactly one disk"
}

test_missing_disk_image_is_a_clear_error() {
	disk_boot b10 "true" --disk "path=$WORK/no-such.img"
	expect_status 4
	expect_in "$err" "no-such.img"
}

test_a_disk_in_use_by_another_vm_is_refused() {
	local data
	data=$(new_disk b11 4)
	# This shell holds the kind of lock a running mote holds on its images (flock(2)).
	exec 7<>"$data"
	flock -x 7
	disk_boot b11 "true" --disk "path=$data"
	exec 7>&-
	expect_status 4
	expect_in "$err" "locked"
}

test_a_directory_as_disk_image_is_a_clear_error() {
	disk_boot b12 "true" --disk "path=$WORK"
	expect_status 4
	expect_in "$err" "$WORK"
}

test_an_overlay_takes_the_writes_and_the_image_stays_as_it_was() {
	local base overlay sum
	base=$(new_disk b13 8)
	overlay=$WORK/b13.overlay
	rm -f "$overlay"
	"$MOTE_PATTERN" write "$base" 0 8388608 31 >/dev/null || fail "host write failed"
	sum=$(sha256sum <"$base")
	# 2 MiB from 1 MiB + 512: its first and last 4 KiB clusters are written partly.
	disk_boot b13 "mote-pattern write /dev/vdb 1049088 2097152 32 && mote-pattern verify /dev/vdb 0 1049088 31 && mote-pattern verify /dev/vdb 3146240 5242368 31" \
		--disk "path=$base,overlay=$overlay"
	expect_status 0
	expect_guest_status 0
	[ "$(sha256sum <"$base")" = "$sum" ] || fail "the image under the overlay changed"
	"$MOTE_PATTERN" verify "$overlay" 1049088 2097152 32 >/dev/null ||
		fail "the overlay does not hold the guest's writes where it wrote them"
	# The overlay is kept: the next boot reads the writes from it, the rest from the image.
	disk_boot b13b "mote-pattern verify /dev/vdb 1049088 2097152 32 && mote-pattern verify /dev/vdb 0 1049088 31" \
		--disk "path=$base,overlay=$overlay"
	expect_status 0
	expect_guest_status 0
}

test_an_overlay_on_a_read_only_disk_is_a_usage_error() {
	local base
	base=$(new_disk b14 4)
	disk_boot b14 "true" --disk "path=$base,ro,overlay=$WORK/b14.overlay"
	expect_status 2
	expect_in "$err" "read-only"
}

test_an_overlay_in_use_by_another_vm_is_refused() {
	local base overlay
	base=$(new_disk b15 4)
	overlay=$WORK/b15.overlay
	: >"$overlay"
	exec 7<>"$overlay"
	flock -x 7
	disk_boot b15 "true" --disk "path=$base,overlay=$overlay"
	exec 7>&-
	expect_status 4
	expect_in "$err" "locked"
}

# dmsetup without udev (the outer guest runs none): it makes the device nodes itself.
dm() { DM_DISABLE_UDEV=1 dmsetup "$@"; }

# hanging_disk_vm NAME DEV AFTER [mote args...]: a VM whose data disk is a
# device-mapper device DEV of zeros, made here, which the host can suspend once the
# guest is up: the guest's next read of it then waits in dm until the device is
# resumed. The guest says "ready", 5 s later "reading" and reads the 4 KiB at 32 MiB
# with O_DIRECT (not from the guest's cache; nothing read them before, the boot's
# partition scan reads the disk's start and end, so the host's cache cannot answer
# either), then says "read-done" and runs AFTER. Its pid is $mote_pid; it returns 1
# when dm cannot make the device (the test failed).
hanging_disk_vm() {
	local name=$1 dev=$2 after=$3
	shift 3
	command -v dmsetup >/dev/null || {
		fail "dmsetup missing: run tools/setup.sh"
		return 1
	}
	dm create "$dev" --table "0 131072 zero" || {
		fail "dmsetup create failed (is dm_mod loaded? tools/kvm-run.sh loads it)"
		return 1
	}
	mote_start "$name" run --kernel "$VMLINUX" --mem 128M --disk "path=$ROOT_IMG,ro,root" \
		--disk "path=/dev/mapper/$dev,ro" --cmdline "$BASE_CMDLINE \
mote.run=\"echo ready && sleep 5 && echo reading && dd if=/dev/vdb of=/dev/null bs=4096 count=1 skip=8192 iflag=direct && echo read-done && $after\"" "$@"
}

# A pause that a disk's I/O holds is abandoned after 30 s, and the VM runs on. The disk
# is suspended once the guest is up, before it reads (a read already under way would
# finish). The pause fails naming the disk's I/O, the VM still runs, the read lands
# once the device is resumed, and then (in the 10 s the guest waits on) a pause succeeds.
test_a_pause_held_by_a_disk_that_does_not_answer_is_abandoned_and_the_vm_runs_on() {
	local dev=mote-hang-$$ api=$WORK/b16.api ctl=$WORK/b16.ctl pid state
	hanging_disk_vm b16 "$dev" "sleep 10" --api-sock "$api" || return
	pid=$mote_pid
	if await_text ready "$out" "$pid"; then
		dm suspend "$dev"
		# The guest reads 5 s after its line; 2 s for its read to reach mote.
		await_text reading "$out" "$pid" && sleep 2
		# 90 s: the pause's 30 s and room; a pause with no bound would wait for good.
		if timeout 90 "$MOTE_BIN" pause --api-sock "$api" >"$ctl" 2>&1; then
			fail "the pause held by the disk succeeded"
			timeout 60 "$MOTE_BIN" resume --api-sock "$api" >/dev/null 2>&1
		fi
		expect_in "$ctl" "pause abandoned: a disk's I/O made no progress for 30 s"
		state=$(printf 'GET / HTTP/1.1\r\nHost: mote\r\nConnection: close\r\n\r\n' |
			timeout 30 socat -t 10 - "UNIX-CONNECT:$api" | tr -d '\r')
		echo "$state" | grep -Eq '"state": ?"Running"' ||
			fail "after the abandoned pause the VM is not running: $state"
		grep -q read-done "$out" && fail "the guest's read was not held"
		dm resume "$dev"
		await_text read-done "$out" "$pid" || fail "the held read never landed"
		timeout 300 "$MOTE_BIN" pause --api-sock "$api" >"$ctl" 2>&1 ||
			fail "a pause once the disk answered again failed: $(cat "$ctl")"
		timeout 300 "$MOTE_BIN" resume --api-sock "$api" >"$ctl" 2>&1 ||
			fail "the resume failed: $(cat "$ctl")"
	else
		fail "the guest never said it was ready: $(tail -3 "$out" | tr '\n' '|')"
	fi
	dm resume "$dev" 2>/dev/null
	finish "$pid"
	status=$?
	expect_status 0
	expect_guest_status 0
	dm remove --retry "$dev" || fail "dmsetup remove $dev failed"
}

# The end of a VM whose disk does not answer: stopped (SIGTERM) while the guest's read
# waits in the suspended device, mote gives the disk up rather than wait for the device
# (as it did before), and says so: after 30 s for the device thread, whose end the
# kernel holds until the read it submitted is done, and 30 s more for the disk itself.
# Resumed, the device lets the process end (a process ends once all its threads have).
test_the_end_of_a_vm_gives_up_a_disk_that_does_not_answer() {
	local dev=mote-hang-end-$$ pid
	hanging_disk_vm b17 "$dev" "sleep 1000" || return
	pid=$mote_pid
	if await_text ready "$out" "$pid"; then
		dm suspend "$dev"
		await_text reading "$out" "$pid" && sleep 2
		kill -TERM "$pid"
		await_text "gave up 1 requests" "$err" "$pid" ||
			fail "no disk given up at the VM's end: $(tail -3 "$err" | tr '\n' '|')"
		expect_in "$err" "no completion for 30000 ms: its image does not answer"
		grep -q read-done "$out" && fail "the guest's read was not held"
	else
		fail "the guest never said it was ready: $(tail -3 "$out" | tr '\n' '|')"
	fi
	dm resume "$dev" 2>/dev/null
	finish "$pid"
	status=$?
	expect_status 1
	expect_in "$err" "stopped"
	dm remove --retry "$dev" || fail "dmsetup remove $dev failed"
}
