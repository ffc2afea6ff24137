# shellcheck shell=sh
# Sourced by tools/build-initramfs.sh and tools/build-rootfs.sh: the parts of a guest's
# file tree that the initramfs and the ext4 root image share, so both carry the same
# busybox, the same applet links and the same mount points. POSIX sh, no side effects
# on sourcing. Each function prints its own error (prefixed with $guest_tree_name) and
# returns non-zero.

guest_tree_name=${guest_tree_name:-guest-tree}

guest_tree_error() {
	echo "$guest_tree_name: $*" >&2
	return 1
}

# True when FILE is an ELF executable with no program interpreter: it runs in a guest
# that has no libc. (A static-pie has no interpreter either.)
guest_tree_is_static_elf() {
	readelf -h "$1" >/dev/null 2>&1 || return 1
	! readelf -lW "$1" 2>/dev/null | grep -q 'Requesting program interpreter'
}

# Fails unless FILE exists, is executable and is statically linked.
guest_tree_check_static() { # FILE
	[ -e "$1" ] || guest_tree_error "$1: no such file" || return 1
	[ -f "$1" ] && [ -x "$1" ] || guest_tree_error "$1 is not an executable file" || return 1
	guest_tree_is_static_elf "$1" ||
		guest_tree_error "$1 is not a statically linked ELF executable (link it with -static)"
}

# A dynamically linked busybox would find no libc in the guest.
guest_tree_check_busybox() { # BUSYBOX
	if ! "$1" --list >/dev/null 2>&1 || ! guest_tree_is_static_elf "$1"; then
		guest_tree_error "$1 is not a static busybox; install busybox-static"
		return 1
	fi
}

# The directories every guest root has; guest-init mounts /proc, /sys, /dev and /tmp.
guest_tree_dirs() { # ROOT
	mkdir -p "$1/bin" "$1/sbin" "$1/proc" "$1/sys" "$1/dev" "$1/tmp" || return 1
	chmod 0755 "$1" && chmod 1777 "$1/tmp"
}

# /bin/busybox and one symlink per applet it has in /bin (`busybox --list`), so
# /bin/sh, /bin/mount and the rest resolve without a PATH.
guest_tree_busybox() { # ROOT BUSYBOX
	cp "$2" "$1/bin/busybox" && chmod 0755 "$1/bin/busybox" || return 1
	for applet in $("$2" --list); do
		[ "$applet" = busybox ] || ln -sf busybox "$1/bin/$applet" || return 1
	done
}

# Same mtime on every entry (SOURCE_DATE_EPOCH, else 0), so the same inputs give the
# same image bytes.
guest_tree_fix_times() { # ROOT
	find "$1" -exec touch -h -d "@${SOURCE_DATE_EPOCH:-0}" {} +
}
