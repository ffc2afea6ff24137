/* The `mote` command: a thin front-end over libmote. Each command's exit codes are in
 * its header: `mote run` and `mote restore` in cli_run.h, `mote pause`, `resume`,
 * `snapshot` (and `restore` to a waiting mote) in cli_control.h, `mote exec` and
 * `mote cp` in cli_exec.h. `mote run` and `mote restore` (README):
 *   0  the guest powered off or rebooted
 *   1  the VM failed while running, or was stopped by a signal, or the seccomp
 *      filter could not be installed
 *   2  bad command line or config file
 *   3  KVM unavailable or missing a capability
 *   4  kernel, initrd, disk, console file, TAP, vsock socket, --api-sock path or
 *      snapshot file unusable (missing, empty, malformed, too big)
 *   5  the guest kernel panicked
 *   6  restore: a damaged, foreign or other-version state file, a memory file of the
 *      wrong size, an override naming a disk or NIC the snapshot lacks
 * `mote pause|resume|snapshot`, `mote restore` to a waiting mote: 0 done, 1 the mote
 * refused or failed the request (its fault_message printed), 2 bad command line, 7 no
 * mote answers on the API socket. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli_control.h"
#include "cli_exec.h"
#include "cli_merge.h"
#include "cli_options.h"
#include "cli_restore.h"
#include "cli_run.h"
#include "clock.h"
#include "mote.h"

static const char usage[] =
    "usage: mote run --kernel PATH [options]\n"
    "       mote run --api-sock PATH [options]   (configured or restored through the API)\n"
    "       mote restore --snapshot STATE --mem MEMFILE [restore options]\n"
    "       mote pause|resume --api-sock PATH\n"
    "       mote snapshot --api-sock PATH --state FILE --mem FILE [--diff] [--resume]\n"
    "       mote update-disk --api-sock PATH --disk ID --path FILE\n"
    "       mote merge-memory --mem FULL --mem-diff DIFF... --out FILE [--quiet]\n"
    "       mote exec --vsock PATH [exec options] [--] CMD [ARG...]\n"
    "       mote cp --vsock PATH [--port N] [--wait S] [--max-size SIZE] [--timeout S] SRC DST\n"
    "       mote --help | --version\n"
    "\n"
    "Boots a Linux microVM on KVM with a serial console.\n"
    "\n"
    "run options:\n"
    "  --kernel PATH        ELF vmlinux or bzImage (required, here or in --config)\n"
    "  --initrd PATH        initramfs (newc cpio, uncompressed or compressed)\n"
    "  --cmdline STR        guest kernel command line (default: " MOTE_DEFAULT_CMDLINE ")\n"
    "  --cpus N             vCPUs, 1 to 32 (default 1)\n"
    "  --mem SIZE           guest memory: 128M, 2G, plain number = MiB (default 128M)\n"
    "  --console KIND       stdio (default), none, or file:PATH\n"
    "  --console-max-size SIZE  a console file takes at most SIZE of a run's output\n"
    "                       (default 1G), then a note; the rest is dropped\n"
    "  --disk path=IMG[,overlay=FILE][,ro][,id=NAME][,root][,direct]\n"
    "                       virtio-blk disk on a raw image, repeatable: /dev/vda, vdb, ...\n"
    "                       in order; ro: read-only; id: serial the guest sees;\n"
    "                       root: boot from it (root=/dev/vdX on the kernel command line);\n"
    "                       direct: bypass the host page cache (O_DIRECT);\n"
    "                       overlay: copy-on-write, the guest's writes go to FILE (created\n"
    "                       when missing, kept across runs) and IMG is never changed;\n"
    "                       snapshots save the blocks written since the last one\n"
    "  --net tap=NAME[,mac=MAC][,id=NAME]\n"
    "                       virtio-net NIC on an existing TAP, repeatable: eth0, eth1, ...\n"
    "  --vsock cid=N,uds=PATH\n"
    "                       virtio-vsock: host programs connect to PATH and send\n"
    "                       \"CONNECT PORT\\n\"; the guest reaches CID 2 port P at PATH_P\n"
    "  --config FILE        JSON settings; flags given too override it\n"
    "  --track-dirty-pages  track written pages, for diff snapshots\n"
    "  --exit-at-boot       end the VM (exit code 0) when guest-init reports boot\n"
    "                       complete, as QEMU's isa-debug-exit: boot-time measurement\n"
    "  --api-sock PATH      serve the control API (HTTP/1.1, JSON, Firecracker's paths)\n"
    "                       on this Unix socket; without --kernel, wait for the VM's\n"
    "                       configuration and InstanceStart, or a snapshot, through it\n"
    "  --quiet              no progress messages on stderr\n"
    "  --no-seccomp         run without mote's seccomp filter, which otherwise refuses\n"
    "                       what a monitor never needs: exec, new processes, ptrace,\n"
    "                       signals to others, non-Unix sockets, mounts, modules, bpf...\n"
    "\n"
    "restore options (the VM runs in this process; with --api-sock naming a socket a\n"
    "waiting `mote run --api-sock` serves, the snapshot is loaded into that mote):\n"
    "  --snapshot STATE     the state file (required)\n"
    "  --mem MEMFILE        the full memory file (required)\n"
    "  --mem-diff FILE      a diff memory file laid over it, oldest first, repeatable\n"
    "  --disk NAME:path=IMG[,overlay=FILE]\n"
    "                       a disk's image and/or overlay replaced; NAME is its id or vda..\n"
    "  --net NAME=TAP       a NIC's TAP replaced; NAME is its id or eth0..\n"
    "  --vsock-uds PATH     the vsock device's Unix socket replaced\n"
    "  --paused             stay paused until resumed (needs --api-sock; mote resume)\n"
    "  --track-dirty-pages  track written pages, for diff snapshots of the restored VM\n"
    "  --verify-memory      read the memory files whole first and refuse one whose\n"
    "                       content does not match its checksum (damaged or changed)\n"
    "  --api-sock PATH, --console KIND, --console-max-size SIZE, --quiet, --no-seccomp\n"
    "                       as for run\n"
    "  --copies N           fork N copies (1-256) in this process, restored in parallel;\n"
    "                       {i} in a path or TAP name is each copy's number (1..N), and\n"
    "                       each API socket, vsock socket, console file, overlay and TAP\n"
    "                       given needs it; console none unless file:PATH; exit 0 when\n"
    "                       every copy's guest powered off\n"
    "\n"
    "run and restore exit codes: 0 guest powered off or rebooted, 1 VM failed, stopped\n"
    "            by a signal, or the seccomp filter refused by the kernel, 2 usage\n"
    "            error, 3 no usable KVM, 4 unusable kernel, initrd, disk, console file,\n"
    "            TAP, vsock or API socket, snapshot file,\n"
    "            5 guest panic, 6 snapshot damaged, of another version, or not matching\n"
    "            its memory file or the overrides\n"
    "\n"
    "pause, resume and snapshot talk to a running mote's --api-sock; snapshot pauses a\n"
    "running VM first and leaves it paused unless --resume; --diff writes only the pages\n"
    "written since the previous snapshot (needs --track-dirty-pages and an earlier\n"
    "snapshot of the VM, taken or restored from).\n"
    "update-disk points a running VM's disk (its id, or vda, vdb...) at another image,\n"
    "as PATCH /drives/ID does; the same path again tells the guest a new size.\n"
    "merge-memory writes FILE, a full memory file holding FULL with the diffs laid over\n"
    "it in order (each checked against its checksum, the chain against the files' ids);\n"
    "the state file of the last diff's snapshot then restores with --mem FILE alone.\n"
    "FILE may be FULL itself: it is replaced whole, and VMs running from it keep the old.\n"
    "            exit codes: 0 merged, 1 out of memory, 2 usage error, 4 a file that\n"
    "            cannot be read or written, 6 files that are not a full file and its diffs\n"
    "            in order or whose content does not match its checksum\n"
    "\n"
    "pause, resume, snapshot, update-disk (and restore to a waiting mote) exit codes:\n"
    "            0 done, 1 refused or failed (the reason printed), 2 usage error,\n"
    "            7 no mote answers on the API socket\n"
    "\n"
    "exec runs CMD in a running guest through its agent (mote.agent on the guest's\n"
    "kernel command line); output streamed, our stdin forwarded, ^C forwarded.\n"
    "cp copies a file into or out of the guest: exactly one of SRC and DST is\n"
    "guest:/PATH; - is stdin or stdout; a DST ending in / is a directory.\n"
    "exec and cp options:\n"
    "  --vsock PATH         the VM's vsock Unix socket (required)\n"
    "  --port N             the agent's vsock port (default 52)\n"
    "  --wait S             keep trying to reach the agent for S seconds (default 10)\n"
    "  --env NAME=VALUE     exec: add to the command's environment, repeatable\n"
    "  --cwd DIR            exec: working directory in the guest (default /)\n"
    "  --timeout S          exec: kill the command after S seconds; cp: give up a copy\n"
    "                       not done after S seconds\n"
    "  -t, --tty            exec: run it on a terminal in the guest (stderr merged into\n"
    "                       stdout), our terminal raw meanwhile, its size followed\n"
    "  --max-size SIZE      cp: refuse a download larger than SIZE (e.g. 512M); the\n"
    "                       guest decides what it sends, so bound it when in doubt\n"
    "  --no-seccomp         run without the seccomp filter (what the agent sends is\n"
    "                       read under it otherwise, as in run)\n"
    "exec exit codes: the command's status, 128+N if killed by signal N, 124 timed\n"
    "            out, 125 agent unreachable, connection failed or seccomp filter\n"
    "            refused, 127 could not start the command, 2 usage error\n"
    "cp exit codes: 0 copied, 1 not copied (or seccomp filter refused), 2 usage error,\n"
    "            125 agent unreachable\n";

/* A VM's descriptors: KVM's, an eventfd or two per queue, its files, and one per vsock
 * connection, up to 1023 each (a guest may open them all). The usual soft limit of 1024
 * would run out first, in the middle of an API accept or a snapshot's open, so the
 * commands that run VMs take the hard limit, as servers do; mote never uses select(). */
static void raise_file_limit(void)
{
	struct rlimit limit;

	if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
		limit.rlim_cur = limit.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &limit);
	}
}

int main(int argc, char **argv)
{
	int64_t start_ns = clock_now_ns();

	/* A console, API or agent peer that goes away is an error to handle (EPIPE), not a
	 * reason to die with the terminal left raw and sockets left behind. */
	signal(SIGPIPE, SIG_IGN);
	struct cli_options opts;
	char error[CLI_ERROR_MAX] = "";
	int code;

	if (argc >= 2 && strcmp(argv[1], "exec") == 0)
		return cli_exec_main(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "cp") == 0)
		return cli_cp_main(argc - 1, argv + 1);
	if (argc >= 2 && (strcmp(argv[1], "pause") == 0 || strcmp(argv[1], "resume") == 0 ||
			  strcmp(argv[1], "snapshot") == 0 || strcmp(argv[1], "update-disk") == 0))
		return cli_control_main(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "merge-memory") == 0)
		return cli_merge_main(argc - 1, argv + 1);
	raise_file_limit();
	if (argc >= 2 && strcmp(argv[1], "restore") == 0)
		return cli_restore_main(argc - 1, argv + 1, start_ns);
	cli_options_init(&opts);
	if (cli_options_parse(&opts, argc, argv, error, sizeof(error))) {
		fprintf(stderr, "mote: %s\n", error);
		cli_options_free(&opts);
		return CLI_EXIT_USAGE;
	}
	switch (opts.command) {
	case CLI_COMMAND_HELP:
		fputs(usage, stdout);
		code = 0;
		break;
	case CLI_COMMAND_VERSION:
		printf("mote %s\n", mote_version());
		code = 0;
		break;
	default:
		code = cli_run_vm(&opts, start_ns);
		break;
	}
	cli_options_free(&opts);
	return code;
}
