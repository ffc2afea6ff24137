/* `mote run` and `mote restore` in this process (cli_run.h): the controller, its API
 * server, a signal thread and the console, in one order for both. */
#include "cli_run.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "api_server.h"
#include "cli_restore.h"
#include "vm_command.h"

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
	struct vm_controller *controller;
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
		vm_controller_stop(args->controller);
	}
	return NULL;
}

int cli_exit_code_for_create_error(int err)
{
	switch (err) {
	case -ENODEV:
	case -ENOTSUP:
		return CLI_EXIT_NO_KVM;
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
	case -EEXIST:
		return CLI_EXIT_BAD_FILE;
	case -EINVAL:
		return CLI_EXIT_USAGE;
	default:
		return CLI_EXIT_VM_FAILED;
	}
}

int cli_exit_code_for_restore_error(int err)
{
	/* mote_vm_restore(): -EPROTO a bad state file, -EINVAL a memory file of the wrong
	 * size or an override the snapshot has no place for. */
	if (err == -EPROTO || err == -EINVAL)
		return CLI_EXIT_BAD_SNAPSHOT;
	return cli_exit_code_for_create_error(err);
}

static int cli_exit_code_for_end(const struct mote_exit *exit_info, struct cli_context *ctx)
{
	switch (exit_info->reason) {
	case MOTE_EXIT_POWER_OFF:
	case MOTE_EXIT_REBOOT:
		cli_log(ctx, MOTE_LOG_INFO, exit_info->message);
		return CLI_EXIT_GUEST_ENDED;
	case MOTE_EXIT_PANIC:
		fprintf(stderr, "mote: error: %s\n", exit_info->message);
		return CLI_EXIT_GUEST_PANIC;
	default:
		fprintf(stderr, "mote: error: %s\n", exit_info->message);
		return CLI_EXIT_VM_FAILED;
	}
}

/* What run and restore share: serves the API, runs first (NULL: none, wait for the
 * API), then runs the VM to its end. error_code maps first's error to an exit code. */
static int cli_serve(struct vm_controller *c, struct cli_context *ctx, const char *api_sock,
		     const struct vm_command *first, int (*error_code)(int), bool stdio_console)
{
	struct signal_thread_args sig_args = {.controller = c};
	struct api_server *server = NULL;
	struct mote_exit exit_info;
	pthread_t sig_thread;

	/* Block before any other thread exists, so every thread inherits the mask. */
	sigemptyset(&sig_args.set);
	sigaddset(&sig_args.set, SIGINT);
	sigaddset(&sig_args.set, SIGTERM);
	sigaddset(&sig_args.set, SIGHUP);
	sigaddset(&sig_args.set, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &sig_args.set, NULL);

	if (api_sock) {
		struct mote_log log = {cli_log, ctx};
		int ret = api_server_start(c, api_sock, &log, &server);
		if (ret)
			return cli_exit_code_for_create_error(ret);
	}
	if (first) {
		char fault[VM_CONTROLLER_MESSAGE_MAX + 64];
		unsigned errors = vm_controller_error_count(c);
		int ret = vm_controller_execute(c, first, fault, sizeof(fault));
		if (ret) {
			/* The library said why already, unless the controller refused. */
			if (vm_controller_error_count(c) == errors)
				fprintf(stderr, "mote: error: %s\n", fault);
			api_server_stop(server);
			return error_code(ret);
		}
	}

	pthread_attr_t attr;
	pthread_attr_init(&attr);
	/* Small stack: see vm_thread_start() in the library for why. */
	pthread_attr_setstacksize(&attr, 256 * 1024);
	int err = pthread_create(&sig_thread, &attr, signal_thread, &sig_args);
	pthread_attr_destroy(&attr);
	if (err) {
		fprintf(stderr, "mote: error: cannot start the signal thread\n");
		api_server_stop(server);
		return CLI_EXIT_VM_FAILED;
	}
	if (stdio_console)
		tty_enter_raw(ctx);
	int ret = vm_controller_run(c, &exit_info);
	tty_restore(ctx);
	if (!ret && !ctx->quiet)
		fprintf(stderr, "mote: guest memory touched: %llu KiB\n",
			(unsigned long long)(exit_info.memory_touched_bytes >> 10));
	pthread_kill(sig_thread, SIGUSR2);
	pthread_join(sig_thread, NULL);
	api_server_stop(server);
	/* -EINTR: stopped by a signal before a VM was started. */
	return ret ? CLI_EXIT_VM_FAILED : cli_exit_code_for_end(&exit_info, ctx);
}

int cli_run_vm(struct cli_options *opts, int64_t start_ns)
{
	struct cli_context ctx = {.quiet = opts->quiet};
	struct vm_command start = {.kind = VM_COMMAND_INSTANCE_START};
	struct vm_controller c;
	bool has_kernel = opts->kernel != NULL;
	bool stdio = opts->console == MOTE_CONSOLE_FDS;
	char *api_sock = opts->api_sock;

	opts->api_sock = NULL; /* ours, not the controller's */
	vm_controller_init(&c, opts, start_ns, cli_log, &ctx);
	int code = cli_serve(&c, &ctx, api_sock, has_kernel ? &start : NULL,
			     cli_exit_code_for_create_error, stdio);
	vm_controller_destroy(&c);
	free(api_sock);
	return code;
}

int cli_restore_vm(const struct cli_restore_options *opts, int64_t start_ns)
{
	struct cli_context ctx = {.quiet = opts->quiet};
	struct vm_command load = {.kind = VM_COMMAND_SNAPSHOT_LOAD};
	struct cli_options pending;
	struct vm_controller c;

	/* Nothing configured but the console the restored VM uses. */
	cli_options_init(&pending);
	pending.console = opts->console;
	if (opts->console_path && !(pending.console_path = strdup(opts->console_path))) {
		fprintf(stderr, "mote: error: out of memory\n");
		return CLI_EXIT_VM_FAILED;
	}
	load.snapshot_load.restore = opts->restore;
	vm_controller_init(&c, &pending, start_ns, cli_log, &ctx);
	int code = cli_serve(&c, &ctx, opts->api_sock, &load, cli_exit_code_for_restore_error,
			     opts->console == MOTE_CONSOLE_FDS);
	vm_controller_destroy(&c);
	return code;
}
