/* The `mote` command: a thin front-end over libmote. `mote exec` and `mote cp` have
 * exit codes of their own (cli_exec.h). Exit codes of `mote run` (README):
 *   0  the guest powered off or rebooted
 *   1  the VM failed while running, or was stopped by a signal
 *   2  bad command line or config file
 *   3  KVM unavailable or missing a capability
 *   4  kernel, initrd or console file unusable (missing, empty, malformed, too big)
 *   5  the guest kernel panicked */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli_exec.h"
#include "cli_options.h"
#include "mote.h"

enum {
	EXIT_GUEST_ENDED = 0,
	EXIT_VM_FAILED = 1,
	EXIT_USAGE = 2,
	EXIT_NO_KVM = 3,
	EXIT_BAD_IMAGE = 4,
	EXIT_GUEST_PANIC = 5,
};

static const char usage[] =
    "usage: mote run --kernel PATH [options]\n"
    "       mote exec --vsock PATH [exec options] [--] CMD [ARG...]\n"
    "       mote cp --vsock PATH [--port N] [--wait S] SRC DST\n"
    "       mote --help | --version\n"
    "\n"
    "Boots a Linux microVM on KVM with a serial console.\n"
    "\n"
    "run options:\n"
    "  --kernel PATH        ELF vmlinux or bzImage (required, here or in --config)\n"
    "  --initrd PATH        initramfs (cpio, optionally gzip-compressed)\n"
    "  --cmdline STR        guest kernel command line (default: " MOTE_DEFAULT_CMDLINE ")\n"
    "  --cpus N             vCPUs, 1 to 32 (default 1)\n"
    "  --mem SIZE           guest memory: 128M, 2G, plain number = MiB (default 128M)\n"
    "  --console KIND       stdio (default), none, or file:PATH\n"
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
    "  --quiet              no progress messages on stderr\n"
    "\n"
    "exit codes: 0 guest powered off or rebooted, 1 VM failed, 2 usage error,\n"
    "            3 no usable KVM, 4 unusable kernel/initrd/disk/console file, TAP or vsock\n"
    "            socket, 5 guest panic\n"
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
    "  --timeout S          exec: kill the command after S seconds\n"
    "exec exit codes: the command's status, 128+N if killed by signal N, 124 timed\n"
    "            out, 125 agent unreachable or connection failed, 127 could not start\n"
    "            the command, 2 usage error\n"
    "cp exit codes: 0 copied, 1 not copied, 2 usage error, 125 agent unreachable\n";

struct cli_context {
	bool quiet;
	bool tty_raw;
	struct termios saved_tty;
};

static void cli_log(void *opaque, enum mote_log_level level, const char *message)
{
	const struct cli_context *ctx = opaque;

	if (level >= MOTE_LOG_INFO && ctx->quiet)
		return;
	if (level == MOTE_LOG_DEBUG)
		return;
	fprintf(stderr, "mote: %s%s\n", level == MOTE_LOG_ERROR ? "error: " : "", message);
}

static int64_t monotonic_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Raw input, so that keys reach the guest one by one and Ctrl-C goes to the guest's
 * shell; output processing stays on so our own messages keep their line breaks. */
static void tty_enter_raw(struct cli_context *ctx)
{
	struct termios raw;

	if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &ctx->saved_tty) < 0)
		return;
	raw = ctx->saved_tty;
	raw.c_iflag &=
	    ~(tcflag_t)(IGNBRK | BRKINT | PARMRK | ISTRIP | INLCR | IGNCR | ICRNL | IXON);
	raw.c_lflag &= ~(tcflag_t)(ECHO | ECHONL | ICANON | ISIG | IEXTEN);
	raw.c_cflag |= CS8;
	raw.c_cc[VMIN] = 1;
	raw.c_cc[VTIME] = 0;
	if (tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0)
		ctx->tty_raw = true;
}

static void tty_restore(struct cli_context *ctx)
{
	if (ctx->tty_raw)
		tcsetattr(STDIN_FILENO, TCSANOW, &ctx->saved_tty);
	ctx->tty_raw = false;
}

struct signal_thread_args {
	sigset_t set;
	struct mote_vm *vm;
};

/* SIGINT/SIGTERM/SIGHUP are blocked in every thread and taken here, where calling
 * into the library is safe (a signal handler could not take its locks). */
static void *signal_thread(void *arg)
{
	struct signal_thread_args *args = arg;
	int sig;

	while (sigwait(&args->set, &sig) == 0) {
		if (sig == SIGUSR2)
			break; /* our own "VM is over" wake-up */
		fprintf(stderr, "\nmote: %s received, stopping the VM\n", strsignal(sig));
		mote_vm_stop(args->vm);
	}
	return NULL;
}

static int exit_code_for_create_error(int err)
{
	switch (err) {
	case -ENODEV:
	case -ENOTSUP:
		return EXIT_NO_KVM;
	case -ENOENT:
	case -EACCES:
	case -EISDIR:
	case -ENOEXEC:
	case -EFBIG:
	case -ENOSPC:
	case -E2BIG:
	case -EBUSY:
	case -EADDRINUSE:
	case -ENAMETOOLONG:
		return EXIT_BAD_IMAGE;
	case -EINVAL:
		return EXIT_USAGE;
	default:
		return EXIT_VM_FAILED;
	}
}

static int run_vm(const struct cli_options *opts, struct cli_context *ctx, int64_t start_ns)
{
	struct signal_thread_args sig_args;
	struct mote_config config;
	struct mote_exit exit_info;
	struct mote_vm *vm;
	pthread_t sig_thread;
	int ret, code;

	mote_config_init(&config);
	config.kernel_path = opts->kernel;
	config.initrd_path = opts->initrd;
	config.cmdline = opts->cmdline;
	config.cpus = opts->cpus;
	config.mem_bytes = opts->mem_bytes;
	config.console = opts->console;
	config.console_path = opts->console_path;
	config.disk_count = opts->disk_count;
	for (unsigned i = 0; i < opts->disk_count; i++) {
		config.disks[i] = (struct mote_disk){
		    .path = opts->disks[i].path,
		    .id = opts->disks[i].id,
		    .read_only = opts->disks[i].read_only,
		    .root = opts->disks[i].root,
		    .direct = opts->disks[i].direct,
		    .overlay = opts->disks[i].overlay,
		};
	}
	config.net_count = opts->net_count;
	for (unsigned i = 0; i < opts->net_count; i++) {
		config.nets[i] = (struct mote_net){
		    .tap = opts->nets[i].tap,
		    .id = opts->nets[i].id,
		    .has_mac = opts->nets[i].has_mac,
		};
		memcpy(config.nets[i].mac, opts->nets[i].mac, sizeof(config.nets[i].mac));
	}
	config.vsock =
	    (struct mote_vsock){.guest_cid = opts->vsock_cid, .uds_path = opts->vsock_uds};
	config.start_monotonic_ns = start_ns;
	config.log = cli_log;
	config.log_opaque = ctx;

	/* Block before any VM thread exists, so every thread inherits the mask. */
	sigemptyset(&sig_args.set);
	sigaddset(&sig_args.set, SIGINT);
	sigaddset(&sig_args.set, SIGTERM);
	sigaddset(&sig_args.set, SIGHUP);
	sigaddset(&sig_args.set, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &sig_args.set, NULL);

	ret = mote_vm_create(&config, &vm);
	if (ret)
		return exit_code_for_create_error(ret);

	sig_args.vm = vm;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	/* Small stack: see vm_thread_start() in the library for why. */
	pthread_attr_setstacksize(&attr, 256 * 1024);
	ret = pthread_create(&sig_thread, &attr, signal_thread, &sig_args);
	pthread_attr_destroy(&attr);
	if (ret) {
		fprintf(stderr, "mote: error: cannot start the signal thread\n");
		mote_vm_destroy(vm);
		return EXIT_VM_FAILED;
	}
	if (opts->console == MOTE_CONSOLE_FDS)
		tty_enter_raw(ctx);
	ret = mote_vm_run(vm, &exit_info);
	tty_restore(ctx);
	if (!ret && !ctx->quiet)
		fprintf(stderr, "mote: guest memory touched: %llu KiB\n",
			(unsigned long long)(exit_info.memory_touched_bytes >> 10));
	pthread_kill(sig_thread, SIGUSR2);
	pthread_join(sig_thread, NULL);
	mote_vm_destroy(vm);
	if (ret)
		return EXIT_VM_FAILED;

	switch (exit_info.reason) {
	case MOTE_EXIT_POWER_OFF:
	case MOTE_EXIT_REBOOT:
		cli_log(ctx, MOTE_LOG_INFO, exit_info.message);
		code = EXIT_GUEST_ENDED;
		break;
	case MOTE_EXIT_PANIC:
		fprintf(stderr, "mote: error: %s\n", exit_info.message);
		code = EXIT_GUEST_PANIC;
		break;
	default:
		fprintf(stderr, "mote: error: %s\n", exit_info.message);
		code = EXIT_VM_FAILED;
		break;
	}
	return code;
}

int main(int argc, char **argv)
{
	int64_t start_ns = monotonic_ns();
	struct cli_context ctx = {0};
	struct cli_options opts;
	char error[CLI_ERROR_MAX] = "";
	int code;

	if (argc >= 2 && strcmp(argv[1], "exec") == 0)
		return cli_exec_main(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "cp") == 0)
		return cli_cp_main(argc - 1, argv + 1);
	cli_options_init(&opts);
	if (cli_options_parse(&opts, argc, argv, error, sizeof(error))) {
		fprintf(stderr, "mote: %s\n", error);
		cli_options_free(&opts);
		return EXIT_USAGE;
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
		ctx.quiet = opts.quiet;
		code = run_vm(&opts, &ctx, start_ns);
		break;
	}
	cli_options_free(&opts);
	return code;
}
