/* Loading mote's seccomp filter (syscall_filter.h). The filter's rules, and why each,
 * are in syscall_filter_rules.c; libseccomp makes them into BPF when mote is built
 * (syscall_filter_gen.c), so that a process start only copies the program, writes its
 * pid where the rules on signals want it, and hands it to the kernel (seccomp(2)). */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mote.h"
#include "syscall_filter.h"
#include "syscall_filter_bpf.h"

/* A leak checker (LeakSanitizer, in AddressSanitizer builds) looks for leaks at the
 * process's end from a task it clones as a process, not a thread, which stops every
 * thread with ptrace and is signalled by its parent. */
#if defined(__SANITIZE_ADDRESS__)
#define SYSCALL_FILTER_LEAK_CHECKER true
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SYSCALL_FILTER_LEAK_CHECKER true
#endif
#endif
#ifndef SYSCALL_FILTER_LEAK_CHECKER
#define SYSCALL_FILTER_LEAK_CHECKER false
#endif

bool syscall_filter_leak_checker_built_in(void)
{
	return SYSCALL_FILTER_LEAK_CHECKER;
}

/* Loads a copy of program with this process's pid in place of every marker (the
 * generator checked that each is the value of a pid comparison). */
static int load(const struct sock_filter *program, size_t count)
{
	struct sock_filter *copy = malloc(count * sizeof(*copy));
	int err = 0;

	if (!copy)
		return -ENOMEM;
	memcpy(copy, program, count * sizeof(*copy));
	for (size_t i = 0; i < count; i++)
		if (copy[i].k == SYSCALL_FILTER_PID_MARKER)
			copy[i].k = (uint32_t)getpid();
	/* An unprivileged process may load a filter only with no_new_privs. */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
		err = -errno;
	if (!err) {
		struct sock_fprog fprog = {.len = (unsigned short)count, .filter = copy};
		/* TSYNC: every thread of the process takes it, or none does; one that cannot
		 * (a filter of its own that this one does not extend) is named by its id. */
		long ret = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC,
				   &fprog);
		err = ret == 0 ? 0 : ret > 0 ? -ESRCH : -errno;
	}
	free(copy);
	return err;
}

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

int syscall_filter_install(bool keep_leak_checker)
{
	if (keep_leak_checker)
		return load(syscall_filter_for_leak_checker,
			    COUNT(syscall_filter_for_leak_checker));
	return load(syscall_filter_strict, COUNT(syscall_filter_strict));
}

int mote_restrict_syscalls(void)
{
	return syscall_filter_install(false);
}
