#!/bin/bash
# Runs a command where KVM works. With a usable /dev/kvm it just execs the command.
# Otherwise it boots one outer QEMU guest under TCG, which emulates AMD SVM with nested
# paging, and runs the command there with /dev/kvm (design.md "Testing on real KVM when
# the machine has none"):
#   - the host's / read-only (9p, plus a RAM overlay), chrooted into;
#   - the work tree (git toplevel of $PWD, or $MOTE_SHARE_RW) read-write at the same path;
#   - a fresh ext4 scratch disk at /scratch, exported as MOTE_SCRATCH;
#   - the command's cwd, PATH, HOME and MOTE_* variables, MOTE_NESTED_TCG=1, and
#     MOTE_RESUME_DIR, a directory kept across boots of the outer guest.
# The command's output appears on stdout (the outer serial console, so stderr merges
# into it and lines end in CR LF); its exit status is ours. Its stdin is the console
# when ours is a terminal (no job control there: leave QEMU with Ctrl-A x), else
# /dev/null.
#
#   usage: tools/kvm-run.sh [--] CMD ARGS...
# Environment: MOTE_KVM_RUN=direct|outer forces a mode; MOTE_OUTER_MEM (MiB, 4096),
# MOTE_OUTER_TIMEOUT (seconds, 3600, for all boots of the outer guest together),
# MOTE_OUTER_ATTEMPTS (3: boots, counting those after an outer-guest stall),
# MOTE_OUTER_SILENCE (300: seconds without a heartbeat that count as a stall),
# MOTE_OUTER_CPU (max,-erms: QEMU's -cpu), MOTE_CACHE (/var/cache/mote), MOTE_SHARE_RW,
# MOTE_SCRATCH_SIZE (8G).
# Exit status: the command's; 124 when the outer guest timed out; 125 when the outer
# guest failed before reporting a status.
# pipefail: a pipe that writes a cached file (the outer initramfs) must fail when any
# part of it does, or a cut-short file would be trusted for good.
set -eu -o pipefail

# The whole script is one brace group, so bash parses it completely before running
# any of it: editing this file while a long run is in progress cannot change that run.
{
here=$(cd "$(dirname "$0")" && pwd)
[ "${1:-}" = -- ] && shift
[ $# -ge 1 ] || { echo "usage: $0 [--] CMD ARGS..." >&2; exit 2; }

die() { echo "kvm-run: $*" >&2; exit 125; }
# A step that fails under set -e (a download, a cpio, a mkfs) is the outer guest
# failing before it reported a status: 125, as documented, rather than that step's own
# status, which a caller would take for the command's. errtrace: in functions, and in
# subshells and command substitutions too; the watchers that run beside QEMU are not
# set-up steps and drop the trap (a kill of a QEMU already gone is no failure).
set -E
# shellcheck disable=SC2154 # status is set in the trap's own text
trap 'status=$?; echo "kvm-run: line $LINENO: a step failed (status $status)" >&2; exit 125' ERR

# Usable means openable and backed by hardware virtualisation. Some sandboxes expose a
# /dev/kvm without svm/vmx in the CPU flags whose guests die on the first XRSTOR.
kvm_usable() {
	[ -c /dev/kvm ] && { : <>/dev/kvm; } 2>/dev/null && grep -qwE 'svm|vmx' /proc/cpuinfo
}

case "${MOTE_KVM_RUN:-}" in
direct) exec "$@" ;;
outer) ;;
"") kvm_usable && exec "$@" ;;
*) die "MOTE_KVM_RUN must be direct or outer, not '$MOTE_KVM_RUN'" ;;
esac

cache_root=${MOTE_CACHE:-/var/cache/mote}
mem=${MOTE_OUTER_MEM:-4096}
# The emulated CPU: everything -cpu max offers (AMD SVM with nested paging), except
# ERMS. With ERMS, Linux clears pages and glibc copies large blocks with rep stosb and
# rep movsb, which TCG runs one byte per iteration: clearing the 2 MiB pages of a
# nested guest's memory took a fifth of a nested boot. Without it they use rep stosq
# and vector loops, in the outer guest and (through the CPUID KVM offers) in nested
# guests alike: a nested boot took ~1.9 s instead of ~3.3 s, QEMU's ~2.9 s instead of
# ~5 s. MOTE_OUTER_CPU overrides it.
outer_cpu=${MOTE_OUTER_CPU:-max,-erms}
timeout_s=${MOTE_OUTER_TIMEOUT:-3600}
work=${MOTE_SHARE_RW:-$(git rev-parse --show-toplevel 2>/dev/null || true)}
[ -n "$work" ] || die "not inside a git work tree; set MOTE_SHARE_RW to the directory to share"
work=$(cd "$work" && pwd -P)
for tool in qemu-system-x86_64 apt-get dpkg depmod cpio mkfs.ext4 flock busybox; do
	command -v "$tool" >/dev/null || die "$tool missing; run tools/setup.sh"
done

# Modules for the outer guest in the design's order; their dependencies are added from
# modules.dep. The second list is optional: only the tests using them need them.
required_modules="irqbypass ccp kvm kvm-amd
virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci
9pnet 9pnet_virtio netfs fscache 9p overlay
virtio_blk crc16 crc32c_generic mbcache jbd2 ext4"
optional_modules="tun tap vhost_iotlb vhost vhost_net vsock vmw_vsock_virtio_transport_common
vhost_vsock dm_mod dm_zero"

# Newest linux-image-6.1.0-N-amd64 apt knows; without apt lists, the newest cached one.
pick_kernel() {
	local pkg
	pkg=$(apt-cache pkgnames linux-image-6.1.0- 2>/dev/null |
		grep -E '^linux-image-6\.1\.0-[0-9]+-amd64$' | sort -V | tail -1 || true)
	if [ -z "$pkg" ]; then
		pkg=$(for d in "$cache_root"/outer-6.1.0-*-amd64/vmlinuz; do
			[ -f "$d" ] && basename "$(dirname "$d")"
		done | sed 's/^outer-/linux-image-/' | sort -V | tail -1 || true)
	fi
	[ -n "$pkg" ] || die "apt knows no linux-image-6.1.0-*-amd64; run apt-get update"
	echo "${pkg#linux-image-}"
}

norm() { echo "${1//-/_}"; }

# Which modules the outer guest loads: a cached kernel directory made from other lists
# is made again.
modules_key=$(printf '%s\n--\n%s\n' "$required_modules" "$optional_modules" | sha256sum | cut -c1-16)

# Download and unpack the kernel package once; keep only vmlinuz, the modules we load
# (uncompressed), their load order and the key of the lists they came from.
prepare_kernel() {
	local abi=$1 dir=$2 tmp deb moddir line mod name
	[ -f "$dir/vmlinuz" ] && [ -f "$dir/modules/order" ] &&
		[ "$(cat "$dir/modules/key" 2>/dev/null)" = "$modules_key" ] && return 0
	echo "kvm-run: fetching linux-image-$abi for the outer guest (once)" >&2
	tmp=$(mktemp -d "$cache_root/outer-tmp.XXXXXX")
	# shellcheck disable=SC2064 # $tmp now: removed however this function fails
	trap "rm -rf '$tmp'" EXIT
	(cd "$tmp" && apt-get download -q "linux-image-$abi" >download.log 2>&1) ||
		{ cat "$tmp/download.log" >&2; rm -rf "$tmp"; die "apt-get download linux-image-$abi failed"; }
	deb=$(ls "$tmp"/*.deb)
	dpkg -x "$deb" "$tmp/root"
	moddir="$tmp/root/lib/modules/$abi"
	depmod -b "$tmp/root" "$abi"

	declare -A path=() depends=() builtin=() seen=()
	while IFS= read -r line; do
		mod=${line%%:*}
		name=$(norm "$(basename "${mod%%.ko*}")")
		path[$name]=$mod
		depends[$name]=${line#*:}
	done <"$moddir/modules.dep"
	while IFS= read -r mod; do
		builtin[$(norm "$(basename "${mod%%.ko*}")")]=1
	done <"$moddir/modules.builtin"

	mkdir -p "$tmp/out/modules"
	order=()
	visit() {
		local n=$1 need=$2 d
		[ -n "${seen[$n]:-}" ] && return 0
		seen[$n]=1
		# modules.dep lists each module's whole closure; visiting every entry first
		# gives a valid load order.
		for d in ${depends[$n]}; do
			visit "$(norm "$(basename "${d%%.ko*}")")" "$need"
		done
		order+=("$n $need")
	}
	for need in required optional; do
		[ $need = required ] && list=$required_modules || list=$optional_modules
		for name in $list; do
			name=$(norm "$name")
			if [ -n "${path[$name]:-}" ]; then
				visit "$name" $need
			elif [ -z "${builtin[$name]:-}" ] && [ $need = required ]; then
				rm -rf "$tmp"
				die "module $name is neither in linux-image-$abi nor built in"
			fi
		done
	done
	for line in "${order[@]}"; do
		name=${line%% *}
		mod="$moddir/${path[$name]}"
		case "$mod" in
		*.ko) cp "$mod" "$tmp/out/modules/$name.ko" ;;
		*.ko.xz) xz -dc "$mod" >"$tmp/out/modules/$name.ko" ;;
		*.ko.zst) zstd -qdc "$mod" >"$tmp/out/modules/$name.ko" ;;
		*) die "unexpected module file $mod" ;;
		esac
		echo "$line" >>"$tmp/out/modules/order"
	done
	echo "$modules_key" >"$tmp/out/modules/key"
	cp "$tmp/root/boot/vmlinuz-$abi" "$tmp/out/vmlinuz"
	rm -rf "$dir"
	mv "$tmp/out" "$dir"
	rm -rf "$tmp"
	trap - EXIT
}

# The outer initramfs: busybox and outer-init.sh from build-initramfs.sh, then a second
# archive with the modules (the kernel unpacks concatenated archives in turn).
prepare_initramfs() {
	local dir=$1 out=$2 tmp
	[ -f "$out" ] && return 0
	tmp=$(mktemp -d "$cache_root/outer-tmp.XXXXXX")
	# shellcheck disable=SC2064 # $tmp now: removed however this function fails
	trap "rm -rf '$tmp'" EXIT
	"$here/build-initramfs.sh" "$tmp/base.cpio.gz" "$here/outer-init.sh"
	mkdir -p "$tmp/root/lib/mote-modules"
	cp "$dir/modules/"* "$tmp/root/lib/mote-modules/"
	(cd "$tmp/root" && find . | LC_ALL=C sort |
		cpio --quiet -o -H newc -R 0:0 --reproducible) | gzip -n >"$tmp/modules.cpio.gz"
	cat "$tmp/base.cpio.gz" "$tmp/modules.cpio.gz" >"$tmp/outer.cpio.gz"
	mv "$tmp/outer.cpio.gz" "$out"
	rm -rf "$tmp"
	trap - EXIT
}

mkdir -p "$cache_root"
abi=$(pick_kernel)
if [ ! -f "$cache_root/outer-$abi/vmlinuz" ] && [ "$(id -u)" -eq 0 ]; then
	# A download is due, and apt's lists are as old as its last update: the package
	# they name newest may have left the archive since (a point release replaces it).
	echo "kvm-run: apt-get update before fetching the outer guest's kernel" >&2
	apt-get update -q >/dev/null 2>&1 ||
		echo "kvm-run: apt-get update failed; trying apt's lists as they are" >&2
	abi=$(pick_kernel)
fi
outer_dir="$cache_root/outer-$abi"
# One preparation at a time: parallel runs share the cache.
exec 9>"$cache_root/outer.lock"
flock 9
prepare_kernel "$abi" "$outer_dir"
# This script is in the key too: prepare_initramfs lays the archive out.
key=$(cat "$here/kvm-run.sh" "$here/outer-init.sh" "$here/build-initramfs.sh" \
	"$here/guest-tree.sh" "${MOTE_BUSYBOX:-/bin/busybox}" "$outer_dir/modules/order" |
	sha256sum | cut -c1-16)
initramfs="$outer_dir/initramfs-$key.cpio.gz"
# The outer kernel's symbols, sorted, once the outer guest has listed them (outer-init).
kallsyms="$outer_dir/kallsyms-$key"
prepare_initramfs "$outer_dir" "$initramfs"
flock -u 9
exec 9>&-

# Per-run state: the command script, the status the outer guest writes back, and the
# scratch disk (sparse; ext4 made here so the guest needs no mkfs).
run=$(mktemp -d "${TMPDIR:-/var/tmp}/mote-kvm-run.XXXXXX")
# A directory in the work tree (which the outer guest sees) that outlives one boot of the
# outer guest: a command booted again can resume where the last boot stopped
# (tests/integration/run.sh does), exported to it as MOTE_RESUME_DIR.
resume=$(mktemp -d "$work/.mote-kvm-run.XXXXXX")
trap 'rm -rf "$run" "$resume"' EXIT
mkdir "$run/share"

# Single quotes survive any content; the guest's /bin/sh (the host's) runs this.
q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
{
	echo "export PATH=$(q "$PATH") HOME=$(q "${HOME:-/root}") TERM=dumb"
	for var in $(compgen -e); do
		# MOTE_KVM_RUN=outer inside would nest TCG in TCG.
		case "$var" in MOTE_KVM_RUN) ;; MOTE_*) echo "export $var=$(q "${!var}")" ;; esac
	done
	echo "export MOTE_SCRATCH=/scratch"
	# Tells tests that KVM here is nested under TCG, whose emulated SVM has failures of
	# its own (tests/integration/boot_tests.sh).
	echo "export MOTE_NESTED_TCG=1"
	echo "export MOTE_RESUME_DIR=$(q "$resume")"
	echo "cd $(q "$PWD") || exit 125"
	printf 'exec'
	for arg in "$@"; do printf ' %s' "$(q "$arg")"; done
	echo
} >"$run/share/cmd.sh"
# A serial console never reports end of file: a command reading a non-terminal stdin
# would wait forever, so it gets /dev/null then.
stdin_tty=0
[ -t 0 ] && stdin_tty=1
{
	echo "MOTE_OUTER_WORK=$(q "$work")"
	echo "MOTE_OUTER_STDIN_TTY=$stdin_tty"
} >"$run/share/outer.env"

p9opts="security_model=none,multidevs=remap"
start=$(date +%s)
# QEMU runs as a background job so that a signal to us can stop it (timeout forwards
# it) instead of leaving a 4 GiB guest spinning. Without job control bash would give a
# background job /dev/null as stdin, so hand it ours explicitly: it feeds the console.
exec 3<&0

# The outer guest itself sometimes stalls under TCG: no task runs again for many
# minutes, whatever the command was doing. Sometimes its kernel first reports a soft
# lockup of the idle task (swapper) on every CPU, sometimes it prints nothing at all.
# Sometimes a CPU never comes back out of a nested guest, and the kernel reports a soft
# lockup of the monitor's process that only grows (seen at 480 s and more).
# That is the emulator, not the command: when the console shows such a lockup (of the
# idle task, or of anything for LOCKUP_STALL_S seconds), or the heartbeat outer-init
# writes to the run share every 15 s stops for MOTE_OUTER_SILENCE seconds, the outer
# guest is stopped and booted again, up to twice by default (MOTE_OUTER_ATTEMPTS: 3
# boots in all), with a message saying so.
stall_pattern='soft lockup - CPU#*stuck for*swapper/'
lockup_report='soft lockup - CPU#[0-9]+ stuck for ([0-9]+)s'
LOCKUP_STALL_S=120
# Its kernel has also panicked under TCG ("corrupted stack end detected inside
# scheduler" in a KVM thread after hundreds of nested boots), and reset with no message
# at all. A run that ends like that, without a status, is booted again the same way.
panic_pattern='Kernel panic - not syncing'
# A kernel log line on the console: "[  123.456789] ...".
kernel_message='^\[ *[0-9]+\.[0-9]+\] '
silence_s=${MOTE_OUTER_SILENCE:-300}
# Booting the outer guest up to its first heartbeat takes 10-130 s here.
first_heartbeat_s=$((silence_s * 2))

# Says on stderr what the emulator's CPUs and interrupt controllers were doing when the
# outer guest stalled, from QEMU's monitor: where each CPU is, its flags, the
# interrupts raised, and those each local APIC has pending or in service (MSIs too). One stall (2026-12-05) left both CPUs for minutes at the same
# instruction, just after the sti in finish_task_switch(), while their watchdog timers
# still fired: this tells an interrupt storm from a CPU the emulator no longer runs.
dump_outer_state() {
	[ -S "$run/monitor" ] || return 0
	echo "kvm-run: the outer guest's state at the stall (QEMU monitor):" >&2
	# Twice, 2 s apart: whether the CPUs move, and how fast the interrupt counts grow.
	{
		printf 'info registers -a\ninfo irq\n'
		sleep 2
		printf 'info registers -a\ninfo irq\ninfo pic\ncpu 0\ninfo lapic\ncpu 1\ninfo lapic\n'
	} | timeout 30 socat -t 5 - "UNIX-CONNECT:$run/monitor" 2>/dev/null | tr -d '\r' |
		grep -aE '^(CPU#|RIP=|IRQ statistics| *[0-9]+: |ioapic|pic|  pin|dumping|ISR|IRR)' \
			>"$run/dump" || :
	cat "$run/dump" >&2
	keep_kallsyms
	[ -s "$kallsyms" ] || return 0
	sed -n 's/^RIP=\([0-9a-f]\{16\}\).*/\1/p' "$run/dump" | sort -u | while read -r rip; do
		echo "kvm-run: RIP $rip is $(name_address "$rip")" >&2
	done
}

# keep_kallsyms: files the symbol list the outer guest wrote (outer-init.sh) in the cache.
keep_kallsyms() {
	[ -s "$run/share/kallsyms" ] && [ ! -s "$kallsyms" ] || return 0
	# mktemp: the watcher and the main shell share $$ and may both get here.
	local tmp
	tmp=$(mktemp "$kallsyms.XXXXXX") || return 0
	sort "$run/share/kallsyms" >"$tmp" && mv "$tmp" "$kallsyms" || rm -f "$tmp"
}

# name_address ADDR: the kernel symbol ADDR (16 hex digits) falls in, as symbol+offset.
# Addresses of one width compare as strings.
name_address() {
	local found
	found=$(awk -v a="$1" '$1 > a { exit } { best = $0 } END { print best }' "$kallsyms")
	# shellcheck disable=SC2086 # its words: address, type, name and maybe [module]
	set -- "$1" $found
	[ $# -ge 4 ] || { echo "unknown"; return; }
	printf '%s+0x%x%s\n' "$4" $((16#$1 - 16#$2)) "${5:+ $5}"
}

# Watches the heartbeat of the outer guest $1; marks the run stalled and stops QEMU
# when it stops. A console line from the command counts as a sign of life too (the
# reader below records its time), so a guest that is visibly running tests is never
# taken for a stalled one, whatever happened to its heartbeat writer. Kernel messages
# do not count: a wedged guest goes on reporting its soft lockups for ever.
watch_heartbeat() {
	local qemu=$1 booted last now limit said
	trap - ERR
	booted=$(date +%s)
	while kill -0 "$qemu" 2>/dev/null; do
		sleep 5
		# The console reader saw the stall first and is ending QEMU itself.
		[ ! -e "$run/stalled" ] || return 0
		now=$(date +%s)
		if [ -f "$run/share/heartbeat" ]; then
			last=$(stat -c %Y "$run/share/heartbeat") limit=$silence_s
		else
			last=$booted limit=$first_heartbeat_s
		fi
		said=$(cat "$run/console-alive" 2>/dev/null) || said=0
		[ "${said:-0}" -le "$last" ] || last=$said
		if [ $((now - last)) -gt "$limit" ]; then
			echo "kvm-run: no heartbeat from the outer guest for $((now - last)) s" >&2
			: >"$run/stalled"
			dump_outer_state
			kill -TERM "$qemu" 2>/dev/null
			return
		fi
	done
}

# boot_outer DEADLINE: one boot of the outer guest with a fresh scratch disk, stopped
# at DEADLINE (seconds since the epoch); sets qemu_status.
boot_outer() {
	# timeout(1) takes 0 as no limit at all, and refuses a negative one.
	if [ $(($1 - $(date +%s))) -le 0 ]; then
		echo "kvm-run: MOTE_OUTER_TIMEOUT=${timeout_s}s used up before the outer guest booted" >&2
		exit 124
	fi
	rm -f "$run/share/status" "$run/share/failure" "$run/share/heartbeat" "$run/stalled" \
		"$run/panicked" "$run/scratch.img" "$run/console-alive"
	keep_kallsyms
	[ -s "$kallsyms" ] || : >"$run/share/want-kallsyms"
	truncate -s "${MOTE_SCRATCH_SIZE:-8G}" "$run/scratch.img"
	mkfs.ext4 -q -F -E lazy_itable_init=1,lazy_journal_init=1 "$run/scratch.img"
	# Not on a terminal, QEMU's monitor gets a socket for dump_outer_state; on one, it
	# stays on the console (Ctrl-A c) with the serial port.
	local watch=$((1 - stdin_tty)) reader=""
	if [ $watch -eq 1 ]; then
		rm -f "$run/console"
		mkfifo "$run/console"
	fi
	# loglevel=5: the outer kernel's warnings reach the log too; a soft lockup or an RCU
	# stall prints its header as an error but its call trace at the default level
	# (warning), and without the trace an outer-guest stall cannot be told apart.
	# nokaslr: the same kernel addresses on every boot, so that one symbol list names
	# those of a stall dump (keep_kallsyms).
	# An array, so that a path with a space stays one argument.
	local monitor=() left=$(($1 - $(date +%s)))
	[ $watch -eq 1 ] && monitor=(-monitor "unix:$run/monitor,server=on,wait=off")
	# timeout 0 would mean no limit: at least a second, which then runs out as one.
	[ "$left" -ge 1 ] || left=1
	timeout --foreground -k 10 "$left" qemu-system-x86_64 \
		-accel tcg,thread=multi -cpu "$outer_cpu" -m "$mem" -smp 2 \
		-nographic -vga none -bios qboot.rom -no-reboot -nic none \
		-kernel "$outer_dir/vmlinuz" -initrd "$initramfs" \
		-append "console=ttyS0 quiet loglevel=5 panic=-1 mitigations=off nokaslr" \
		"${monitor[@]}" \
		-virtfs "local,path=/,mount_tag=hostroot,$p9opts,readonly=on" \
		-virtfs "local,path=$work,mount_tag=motework,$p9opts" \
		-virtfs "local,path=$run/share,mount_tag=moterun,$p9opts" \
		-drive "file=$run/scratch.img,if=virtio,format=raw,cache=unsafe" <&3 \
		>"$([ $watch -eq 1 ] && echo "$run/console" || echo /dev/stdout)" &
	qemu_pid=$!
	watch_heartbeat "$qemu_pid" &
	watcher=$!
	if [ $watch -eq 1 ]; then
		# shellcheck disable=SC2254 # the pattern is a glob on purpose
		(
			trap - ERR
			while IFS= read -r line; do
				printf '%s\n' "$line"
				[[ $line =~ $kernel_message ]] || echo "$EPOCHSECONDS" >"$run/console-alive"
				local stalled=0
				case "$line" in
				*$stall_pattern*) stalled=1 ;;
				*"$panic_pattern"*) : >"$run/panicked" ;;
				esac
				[[ $line =~ $lockup_report ]] &&
					[ "${BASH_REMATCH[1]}" -ge "$LOCKUP_STALL_S" ] && stalled=1
				if [ $stalled -eq 1 ] && [ ! -e "$run/stalled" ]; then
					: >"$run/stalled"
					dump_outer_state
					kill -TERM "$qemu_pid" 2>/dev/null || :
				fi
			done <"$run/console"
		) &
		reader=$!
	fi
	trap 'kill -TERM $qemu_pid $watcher 2>/dev/null || :; wait $qemu_pid || :; rm -rf "$run" "$resume"; exit 143' TERM INT HUP
	qemu_status=0
	wait $qemu_pid || qemu_status=$?
	kill "$watcher" 2>/dev/null || :
	wait "$watcher" 2>/dev/null || :
	[ -z "$reader" ] || wait "$reader" || :
	trap - TERM INT HUP
	# The rest is for a guest that ended on its own before reporting anything.
	if [ -f "$run/share/status" ] || [ -f "$run/share/failure" ] || [ -e "$run/stalled" ]; then
		return 0
	fi
	# A panic that ended the guest before it reported the command's status.
	if [ -e "$run/panicked" ]; then
		echo "kvm-run: the outer guest's kernel panicked" >&2
		: >"$run/stalled"
	# QEMU exits 0 when its guest resets (-no-reboot). outer-init never resets it, and
	# always leaves a status or a failure before its poweroff, so this is the outer
	# guest's CPU resetting under TCG, with no message (seen once in CI, just after a
	# nested guest's triple fault): booted again like a stall. Not on a terminal,
	# where Ctrl-A x (the user quitting QEMU) ends it the same way.
	elif [ "$qemu_status" -eq 0 ] && [ $watch -eq 1 ]; then
		echo "kvm-run: the outer guest reset itself before its command finished" >&2
		: >"$run/stalled"
	fi
}

# MOTE_OUTER_TIMEOUT bounds all boots together: a boot after a stall gets the time the
# earlier ones left, so that a command that resumes (MOTE_RESUME_DIR) can finish in it
# and a caller's own time limit (CI's) is kept whatever happens.
deadline=$((start + timeout_s))
attempt=1
while :; do
	boot_outer "$deadline"
	# A stall after the command's status was written (in the sync or poweroff that
	# follow it) does not undo the command: its status stands.
	[ -e "$run/stalled" ] && [ ! -f "$run/share/status" ] || break
	if [ "$attempt" -ge "${MOTE_OUTER_ATTEMPTS:-3}" ]; then
		echo "kvm-run: the outer guest stalled or crashed on every attempt" >&2
		exit 124
	fi
	if [ $((deadline - $(date +%s))) -lt 120 ]; then
		echo "kvm-run: the outer guest stalled or crashed; no time left for another boot" \
			"within MOTE_OUTER_TIMEOUT=${timeout_s}s" >&2
		exit 124
	fi
	attempt=$((attempt + 1))
	echo "kvm-run: the outer guest stalled or crashed; booting it again, attempt $attempt" >&2
done
exec 3<&-
keep_kallsyms

# A status written is the command's, whatever ended QEMU afterwards.
if [ -f "$run/share/status" ]; then
	echo "kvm-run: outer guest done in $(($(date +%s) - start)) s" >&2
	exit "$(cat "$run/share/status")"
fi
# 137: QEMU ignored the TERM and timeout -k killed it.
if [ "$qemu_status" -eq 124 ] || [ "$qemu_status" -eq 137 ]; then
	echo "kvm-run: outer guest killed: MOTE_OUTER_TIMEOUT=${timeout_s}s used up" >&2
	exit 124
fi
if [ -f "$run/share/failure" ]; then
	die "outer guest failed: $(cat "$run/share/failure")"
fi
die "outer guest ended without a status (QEMU exit $qemu_status; kernel panic or crash?)"
# shellcheck disable=SC2317 # every path above exits; this guards a trailing edit.
exit
}
