#!/bin/sh
# /init of the outer test guest that tools/kvm-run.sh boots under TCG when this machine
# has no usable /dev/kvm (design.md "Testing on real KVM when the machine has none").
# Runs on busybox. Loads KVM, 9p, virtio-blk and ext4, builds a root from the host's /
# (read-only 9p, with a RAM overlay so the chroot can create mount points and write
# caches), mounts the work tree read-write at its host path and the scratch disk at
# /scratch, runs the command from the run share, writes its status back there and
# powers off. Any failure of the machinery writes no status; kvm-run.sh reports it.
set -u

run=/run-share
new=/newroot
modules=/lib/mote-modules
p9="trans=virtio,version=9p2000.L,msize=262144"

say() { echo "outer-init: $*"; }
# No status file on the run share means the outer guest failed; this one says why.
fail() {
	say "$*"
	[ -d "$run" ] && echo "$*" >"$run/failure"
	sync
	poweroff -f
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev

# order: "NAME required|optional" in dependency order, computed by kvm-run.sh with
# depmod. A failing optional module (tun, vhost, vsock) only loses those tests.
# kvm's nx_huge_pages=never: the emulated CPU (AMD) is not affected by iTLB multihit, so
# the workaround is off anyway, but unless it is disabled for good KVM still starts a
# recovery thread for every VM (and stops it when the VM is destroyed): KVM_CREATE_VM
# took ~20 ms here instead of ~3, and closing a VM ~32 ms instead of ~23. This is the
# host tuning README recommends, and it spares QEMU the same cost.
params() { [ "$1" = kvm ] && echo nx_huge_pages=never; }
while read -r name need; do
	# shellcheck disable=SC2046 # no parameters or one word
	if ! err=$(insmod "$modules/$name.ko" $(params "$name") 2>&1); then
		case "$err" in *"File exists"*) continue ;; esac
		[ "$need" = required ] && say "insmod $name: $err"
	fi
done <"$modules/order"

mkdir -p "$run"
mount -t 9p -o "$p9" moterun "$run" || fail "cannot mount the run share (9p)"
# shellcheck source=/dev/null
. "$run/outer.env" || fail "no outer.env on the run share"

# A heartbeat on the run share: kvm-run.sh stops and reboots an outer guest whose
# heartbeat stops, because under TCG this guest sometimes stalls with no message at all.
(while :; do
	date +%s >"$run/heartbeat"
	sleep 15
done) &

# The kernel's symbols, for a kernel and module set that kvm-run.sh has none of yet:
# it names the instruction addresses in a stall dump with them. nokaslr on the command
# line keeps the addresses the same on every boot, so one copy serves them all.
if [ -e "$run/want-kallsyms" ]; then
	(cat /proc/kallsyms >"$run/kallsyms.part" && mv "$run/kallsyms.part" "$run/kallsyms") &
fi

if [ ! -c /dev/kvm ]; then
	fail "/dev/kvm did not appear in the outer guest: $(dmesg | grep -iE 'kvm|svm' | tail -3)"
fi

# Let shmem (mote's memfd guest RAM) use transparent huge pages where a VMM asks for
# them with MADV_HUGEPAGE, as anonymous memory (QEMU's) already may by default. This
# is the host tuning README recommends; without it each 4 KiB guest page is a nested
# fault, which cost ~0.8 s of every boot here.
echo advise >/sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null || :

# cache=loose: without it every read of a large binary goes to the host and each QEMU
# start in here is about a second slower (design.md). The overlay's upper layer is RAM.
mkdir -p /lower /upper "$new"
mount -t 9p -o "$p9,cache=loose,ro" hostroot /lower || fail "cannot mount the host root (9p)"
mount -t tmpfs -o mode=0755 tmpfs /upper
mkdir -p /upper/data /upper/work
mount -t overlay -o lowerdir=/lower,upperdir=/upper/data,workdir=/upper/work overlay "$new" ||
	fail "cannot mount the overlay root"

mount -t proc proc "$new/proc"
mount -t sysfs sysfs "$new/sys"
mount -t devtmpfs devtmpfs "$new/dev"
mkdir -p "$new/dev/pts" "$new/dev/shm"
mount -t devpts devpts "$new/dev/pts"
mount -t tmpfs -o mode=1777 tmpfs "$new/dev/shm"
mount -t tmpfs -o mode=1777 tmpfs "$new/tmp"
# The work tree at the same absolute path, so build paths inside match the host's.
# Mounted after the fresh /tmp and /dev/shm, so a work tree below them (a CI clone
# in /tmp) stays visible.
# cache=mmap: the default (no cache) refuses shared writable mappings.
mkdir -p "$new$MOTE_OUTER_WORK"
mount -t 9p -o "$p9,cache=mmap" motework "$new$MOTE_OUTER_WORK" ||
	fail "cannot mount the work tree $MOTE_OUTER_WORK (9p)"

# Images live here: Linux 6.1's tmpfs refuses O_DIRECT and 9p is slow (design.md).
mkdir -p "$new/scratch"
mount -t ext4 -o noinit_itable /dev/vda "$new/scratch" || fail "cannot mount the scratch disk"
chmod 1777 "$new/scratch"

# One idle VM for the whole run, whose only vCPU never runs and keeps its local APIC
# disabled. It holds KVM's apic_sw_disabled and apic_hw_disabled static keys (lapic.c)
# above zero, and KVM's per-CPU hardware enable on, so that the commands' VMs, started
# and ended by the hundred, no longer flip them: every flip patches this kernel's text
# with int3 and IPIs (text_poke_bp, on_each_cpu), and a stall dump of 2026-12-06 had
# the outer guest's CPUs in asm_exc_int3/exc_int3 for minutes.
chroot "$new" /usr/bin/env -i /usr/bin/python3 -c '
import fcntl, os, struct, time
kvm = os.open("/dev/kvm", os.O_RDWR)
vm = fcntl.ioctl(kvm, 0xAE01, 0)  # KVM_CREATE_VM
fcntl.ioctl(vm, 0xAE60, 0)  # KVM_CREATE_IRQCHIP
vcpu = fcntl.ioctl(vm, 0xAE41, 0)  # KVM_CREATE_VCPU
fcntl.ioctl(vcpu, 0x4008AE89, struct.pack("<IIIIQ", 1, 0, 0x1B, 0, 0))  # KVM_SET_MSRS: APIC base 0
time.sleep(1 << 30)
' </dev/null >/dev/null 2>&1 &

# The command runs with only the environment cmd.sh sets (PATH, HOME, MOTE_*).
stdin=/dev/console
[ "$MOTE_OUTER_STDIN_TTY" = 1 ] || stdin=/dev/null
chroot "$new" /usr/bin/env -i /bin/sh -c "$(cat "$run/cmd.sh")" <"$stdin"
status=$?
sync
umount "$new/scratch" 2>/dev/null
echo "$status" >"$run/status"
sync
poweroff -f
