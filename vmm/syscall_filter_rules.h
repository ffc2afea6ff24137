/* The rules of mote's seccomp filter, for libseccomp at build time
 * (syscall_filter_rules.c says what they refuse and why; syscall_filter_gen.c turns
 * them into BPF; syscall_filter.c loads that). */
#ifndef MOTE_SYSCALL_FILTER_RULES_H
#define MOTE_SYSCALL_FILTER_RULES_H

#include <seccomp.h>
#include <stdbool.h>

/* Stands for the pid of the process that loads the filter, in the rules on signals;
 * syscall_filter.c writes the real one over every instruction word that holds it, so
 * it must differ from every other word of the programs (syscall_filter_gen.c checks
 * where it sits): above any pid (pid_max is at most 2^22), syscall number, offset,
 * flag or ioctl the rules compare, and below the arch token and return actions. */
#define SYSCALL_FILTER_PID_MARKER 0x7eadbeefu

/* Adds the rules to ctx (made with seccomp_init(SCMP_ACT_ALLOW)): all of them, or with
 * keep_leak_checker all but those on new processes, ptrace and signals to other
 * processes, which a leak checker at the process's end needs. 0 or libseccomp's
 * negative errno. */
int syscall_filter_rules_build(scmp_filter_ctx ctx, bool keep_leak_checker);

#endif
