/* `mote run` and `mote restore`: one VM in this process, driven through the controller
 * (vm_command.h), with the control API on --api-sock when asked.
 *
 * Exit codes of `mote run` and `mote restore` (README):
 *   0  the guest powered off or rebooted
 *   1  the VM failed while running, or was stopped by a signal (also before it started)
 *   2  bad command line or config file
 *   3  KVM unavailable or missing a capability
 *   4  a host file or resource unusable: kernel, initrd, disk image, console file, TAP,
 *      vsock socket, the --api-sock path, a snapshot's state, memory or diff file
 *      (missing, unreadable, empty, too big)
 *   5  the guest kernel panicked
 *   6  restore: the snapshot cannot be restored as asked: a state file that is damaged,
 *      not mote's or of another version; a memory file of the wrong size; an override
 *      naming a disk or NIC the snapshot does not have */
#ifndef MOTE_CLI_RUN_H
#define MOTE_CLI_RUN_H

#include <stdint.h>

#include "cli_options.h"

enum cli_exit {
	CLI_EXIT_GUEST_ENDED = 0,
	CLI_EXIT_VM_FAILED = 1,
	CLI_EXIT_USAGE = 2,
	CLI_EXIT_NO_KVM = 3,
	CLI_EXIT_BAD_FILE = 4,
	CLI_EXIT_GUEST_PANIC = 5,
	CLI_EXIT_BAD_SNAPSHOT = 6,
};

struct cli_restore_options;

/* Boots the VM opts describe (or, without a kernel, waits for the API to configure or
 * load one), serves the API on opts->api_sock if set, and runs it to its end. Takes
 * over opts' strings. Returns the exit code. */
int cli_run_vm(struct cli_options *opts, int64_t start_ns);

/* Restores the snapshot in this process (the API on opts->api_sock if set) and runs it
 * to its end. Returns the exit code. */
int cli_restore_vm(const struct cli_restore_options *opts, int64_t start_ns);

/* `mote restore --copies N`: restores opts->copies copies of the snapshot in this
 * process, each on its own threads with its resources ("{i}" replaced by its number,
 * cli_restore.h), in parallel; once every copy is restored they all run, each until its
 * own guest ends; none runs when one cannot be restored. Returns 0 when every guest
 * powered off, else the first failing copy's exit code. */
int cli_restore_copies(const struct cli_restore_options *opts, int64_t start_ns);

/* Puts the process under the seccomp filter (mote.h: mote_restrict_syscalls), unless
 * no_seccomp; in a build with a leak checker, the filter leaves it what it needs at the
 * end. 0, or a negative errno once said why on stderr. Every command that runs a VM or
 * reads what a guest sends (exec, cp) calls it before it starts. */
int cli_restrict_syscalls(bool no_seccomp);

/* The exit code for an error of mote_vm_create() / mote_vm_restore(). */
int cli_exit_code_for_create_error(int err);
int cli_exit_code_for_restore_error(int err);

#endif
