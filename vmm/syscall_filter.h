/* The seccomp filter a monitor process runs under (syscall_filter_rules.c says what it
 * refuses and why); mote_restrict_syscalls() (mote.h) is its public face. */
#ifndef MOTE_SYSCALL_FILTER_H
#define MOTE_SYSCALL_FILTER_H

#include <stdbool.h>

/* Installs the filter on every thread of the calling process, and on every thread and
 * process it starts later; irreversible. keep_leak_checker leaves out the rules on new
 * processes, ptrace and signals to other processes, which a leak checker at the
 * process's end needs (syscall_filter_leak_checker_built_in). 0, or a negative errno:
 * -EINVAL or -ENOSYS from a kernel without seccomp filters, -ESRCH when a thread could
 * not take the filter (TSYNC), -ENOMEM. */
int syscall_filter_install(bool keep_leak_checker);

/* Whether this build has a leak checker that runs at the process's end (LeakSanitizer,
 * in AddressSanitizer builds). */
bool syscall_filter_leak_checker_built_in(void);

#endif
