/* The rules of mote's seccomp filter (syscall_filter.h), given to libseccomp when mote
 * is built: syscall_filter_gen.c turns them into the BPF programs that
 * syscall_filter.c loads, so a process pays no filter compilation at its start
 * (libseccomp took 0.2 ms natively, 7-14 ms under the nested emulation). The guest is
 * untrusted (design.md); a flaw in a device model could run its code in the monitor,
 * with the process's rights, which on most hosts are root's and /dev/kvm's.
 *
 * It is a deny list, not Firecracker's per-thread allow lists: mote's threads open
 * files, map memory and make KVM, TAP and io_uring calls at run time (snapshots, disk
 * updates, restores through the API), so only what none of them needs is cut. Refused
 * calls fail with EPERM rather than killing the process: code that tries one by mistake
 * gets an error to report, and an attacker gets nothing more from a kill.
 *
 * io_uring is not filtered: its requests are not system calls (Linux's seccomp sees only
 * io_uring_enter), so a ring can still open files and sockets. */
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "syscall_filter_rules.h"

/* Nothing here is a monitor's business: starting programs, kernel state (modules,
 * kexec, mounts, namespaces, the clock, swap, keys, BPF, performance counters), and
 * reaching into other processes. Each number is the native (x86-64) one; other ABIs'
 * calls (int 0x80, x32) fail the filter's architecture check
 * (syscall_filter_rules_build). */
static const int denied_everywhere[] = {
    SCMP_SYS(execve),
    SCMP_SYS(execveat),
    SCMP_SYS(fork),
    SCMP_SYS(vfork),
    SCMP_SYS(process_vm_readv),
    SCMP_SYS(process_vm_writev),
    SCMP_SYS(pidfd_getfd),
    SCMP_SYS(pidfd_send_signal),
    SCMP_SYS(mount),
    SCMP_SYS(umount2),
    SCMP_SYS(pivot_root),
    SCMP_SYS(chroot),
    SCMP_SYS(move_mount),
    SCMP_SYS(open_tree),
    SCMP_SYS(fsopen),
    SCMP_SYS(fsconfig),
    SCMP_SYS(fsmount),
    SCMP_SYS(fspick),
    SCMP_SYS(mount_setattr),
    SCMP_SYS(unshare),
    SCMP_SYS(setns),
    SCMP_SYS(init_module),
    SCMP_SYS(finit_module),
    SCMP_SYS(delete_module),
    SCMP_SYS(kexec_load),
    SCMP_SYS(kexec_file_load),
    SCMP_SYS(bpf),
    SCMP_SYS(perf_event_open),
    SCMP_SYS(userfaultfd),
    SCMP_SYS(keyctl),
    SCMP_SYS(add_key),
    SCMP_SYS(request_key),
    SCMP_SYS(reboot),
    SCMP_SYS(swapon),
    SCMP_SYS(swapoff),
    SCMP_SYS(acct),
    SCMP_SYS(settimeofday),
    SCMP_SYS(clock_settime),
    SCMP_SYS(clock_adjtime),
    SCMP_SYS(adjtimex),
    SCMP_SYS(sethostname),
    SCMP_SYS(setdomainname),
    SCMP_SYS(iopl),
    SCMP_SYS(ioperm),
    SCMP_SYS(open_by_handle_at),
    SCMP_SYS(name_to_handle_at),
    SCMP_SYS(quotactl),
    SCMP_SYS(syslog),
    SCMP_SYS(vhangup),
    SCMP_SYS(fanotify_init),
};

/* One refused call: syscall fails with error, always, or when its argument meets cmp. */
struct refusal {
	int syscall;
	int error;
	bool conditional;
	struct scmp_arg_cmp cmp;
};

static int refuse(scmp_filter_ctx ctx, const struct refusal *r)
{
	return seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(r->error), r->syscall,
				      r->conditional ? 1 : 0, r->conditional ? &r->cmp : NULL);
}

static int refuse_all(scmp_filter_ctx ctx, const struct refusal *rules, size_t count)
{
	int err = 0;

	for (size_t i = 0; i < count && !err; i++)
		err = refuse(ctx, &rules[i]);
	return err;
}

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

/* New processes, other processes, and signals to them. Signals go only to this
 * process's own threads (vCPU kicks, raise()): its pid is not known when the filter is
 * built, so the marker stands for it until the load (syscall_filter.c). Arguments are
 * compared as the 64-bit registers glibc passes (an int sign-extended): one whose upper
 * half holds anything else is refused, though the kernel would read only the int. */
static int add_process_rules(scmp_filter_ctx ctx)
{
	const scmp_datum_t self = SYSCALL_FILTER_PID_MARKER;
	const struct refusal rules[] = {
	    /* glibc creates threads with clone3 and falls back to clone when the kernel
	     * has none (ENOSYS). clone3 takes its flags in memory, which a filter cannot
	     * read, so it is sent to clone, whose flags it can: a thread (CLONE_THREAD)
	     * is allowed, a process refused. */
	    {SCMP_SYS(clone3), ENOSYS, false, {0}},
	    {SCMP_SYS(clone), EPERM, true, SCMP_A0_64(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0)},
	    {SCMP_SYS(ptrace), EPERM, false, {0}},
	    /* tkill takes a thread id alone, which may be any process's. */
	    {SCMP_SYS(tkill), EPERM, false, {0}},
	    {SCMP_SYS(kill), EPERM, true, SCMP_A0_64(SCMP_CMP_NE, self, 0)},
	    {SCMP_SYS(tgkill), EPERM, true, SCMP_A0_64(SCMP_CMP_NE, self, 0)},
	    {SCMP_SYS(rt_sigqueueinfo), EPERM, true, SCMP_A0_64(SCMP_CMP_NE, self, 0)},
	    {SCMP_SYS(rt_tgsigqueueinfo), EPERM, true, SCMP_A0_64(SCMP_CMP_NE, self, 0)},
	};
	return refuse_all(ctx, rules, COUNT(rules));
}

/* Refused whatever the build: namespaces asked of clone (unshare and setns are refused
 * outright), sockets of any family but AF_UNIX (the API's and vsock's; a TAP is a file:
 * an IP or netlink socket would reach the network or configure the host), and the two
 * terminal ioctls that type into a terminal or a console as if from its keyboard
 * (the user's shell, with --console stdio). */
static int add_rules_for_everyone(scmp_filter_ctx ctx)
{
	static const scmp_datum_t new_namespaces[] = {
	    CLONE_NEWNS,   CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC,
	    CLONE_NEWUSER, CLONE_NEWPID,    CLONE_NEWNET,
	};
	const struct refusal rules[] = {
	    {SCMP_SYS(socket), EPERM, true, SCMP_A0_64(SCMP_CMP_NE, AF_UNIX, 0)},
	    {SCMP_SYS(socketpair), EPERM, true, SCMP_A0_64(SCMP_CMP_NE, AF_UNIX, 0)},
	    {SCMP_SYS(ioctl), EPERM, true, SCMP_A1_64(SCMP_CMP_EQ, TIOCSTI, 0)},
	    {SCMP_SYS(ioctl), EPERM, true, SCMP_A1_64(SCMP_CMP_EQ, TIOCLINUX, 0)},
	};
	int err = refuse_all(ctx, rules, COUNT(rules));

	/* One rule a flag: the rules of one call are alternatives. */
	for (size_t i = 0; i < COUNT(new_namespaces) && !err; i++) {
		const struct refusal clone_into_namespace = {
		    SCMP_SYS(clone), EPERM, true,
		    SCMP_A0_64(SCMP_CMP_MASKED_EQ, new_namespaces[i], new_namespaces[i])};
		err = refuse(ctx, &clone_into_namespace);
	}
	return err;
}

int syscall_filter_rules_build(scmp_filter_ctx ctx, bool keep_leak_checker)
{
	int err = 0;

	for (size_t i = 0; i < COUNT(denied_everywhere) && !err; i++)
		err = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), denied_everywhere[i], 0);
	if (!err)
		err = add_rules_for_everyone(ctx);
	if (!err && !keep_leak_checker)
		err = add_process_rules(ctx);
	/* A call of another ABI (int 0x80, x32) ends the process, not only its thread: a VM
	 * with a vCPU or its device thread gone would hang half alive. */
	if (!err)
		err = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	return err;
}
