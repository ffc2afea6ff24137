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
#include "syscall_filter.h"
#include "vm_command.h"

struct cli_context {
	bool quiet;
	bool tty_raw;
	struct termios saved_tty;
	unsigned copy; /* with --copies, this VM's number (1 to N), else 0 */
};

/* "mote: ", or "mote: copy N: " when several VMs share stderr. */
static void cli_print(const struct cli_context *ctx, const char *kind, const char *message)
{
	if (ctx->copy)
		fprintf(stderr, "mote: copy %u: %s%s\n", ctx->copy, kind, message);
	else
		fprintf(stderr, "mote: %s%s\n", kind, message);
}

static void cli_log(void *opaque, enum mote_log_level level, const char *message)
{
	const struct cli_context *ctx = opaque;

	if (level >= MOTE_LOG_INFO && ctx->quiet)
		return;
	if (level == MOTE_LOG_DEBUG)
		return;
	cli_print(ctx, level == MOTE_LOG_ERROR ? "error: " : "", message);
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
	struct vm_controller **controllers; /* every VM of this process */
	unsigned count;
	pthread_t thread;
};

/* SIGINT/SIGTERM/SIGHUP are blocked in every thread and taken here, where calling
 * into the library is safe (a signal handler could not take its locks). */
static void *signal_thread(void *arg)
{
	struct signal_thread_args *args = arg;
	int sig;

	while (sigwait(&args->set, &sig) == 0) {
		if (sig == SIGUSR2)
			break; /* our own "VMs are over" wake-up */
		fprintf(stderr, "\nmote: %s received, stopping the VM%s\n", strsignal(sig),
			args->count > 1 ? "s" : "");
		for (unsigned i = 0; i < args->count; i++)
			vm_controller_stop(args->controllers[i]);
	}
	return NULL;
}

/* Block before any other thread exists, so every thread inherits the mask. */
static void signals_block(struct signal_thread_args *args)
{
	sigemptyset(&args->set);
	sigaddset(&args->set, SIGINT);
	sigaddset(&args->set, SIGTERM);
	sigaddset(&args->set, SIGHUP);
	sigaddset(&args->set, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &args->set, NULL);
}

static int signal_thread_start(struct signal_thread_args *args)
{
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	/* Small stack: see vm_thread_start() in the library for why. */
	pthread_attr_setstacksize(&attr, 256 * 1024);
	int err = pthread_create(&args->thread, &attr, signal_thread, args);
	pthread_attr_destroy(&attr);
	if (err)
		fprintf(stderr, "mote: error: cannot start the signal thread\n");
	return err;
}

static void signal_thread_stop(struct signal_thread_args *args)
{
	pthread_kill(args->thread, SIGUSR2);
	pthread_join(args->thread, NULL);
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
	case -ESTALE: /* a stale socket in a directory that cannot be locked */
	case -ENAMETOOLONG:
	case -EEXIST:
	case -EMEDIUMTYPE: /* a TAP name that is another kind of interface */
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
	case MOTE_EXIT_BOOT_COMPLETE:
		cli_log(ctx, MOTE_LOG_INFO, exit_info->message);
		return CLI_EXIT_GUEST_ENDED;
	case MOTE_EXIT_PANIC:
		cli_print(ctx, "error: ", exit_info->message);
		return CLI_EXIT_GUEST_PANIC;
	default:
		cli_print(ctx, "error: ", exit_info->message);
		return CLI_EXIT_VM_FAILED;
	}
}

/* Serves the API on api_sock (NULL: none) and runs first (NULL: none, the API will
 * configure the VM). 0, or the exit code for what failed (error_code maps first's
 * error), with the API stopped again. */
static int cli_vm_start(struct vm_controller *c, struct cli_context *ctx, const char *api_sock,
			const struct vm_command *first, int (*error_code)(int),
			struct api_server **server)
{
	*server = NULL;
	if (first)
		vm_controller_hold_first(c);
	if (api_sock) {
		struct mote_log log = {cli_log, ctx};
		int ret = api_server_start(c, api_sock, &log, server);
		if (ret)
			return cli_exit_code_for_create_error(ret);
	}
	if (first) {
		char fault[VM_CONTROLLER_MESSAGE_MAX + 64];
		unsigned errors = vm_controller_error_count(c);
		int ret = vm_controller_execute_first(c, first, fault, sizeof(fault));
		if (ret) {
			/* The library said why already, unless the controller refused. */
			if (vm_controller_error_count(c) == errors)
				cli_print(ctx, "error: ", fault);
			api_server_stop(*server);
			*server = NULL;
			return error_code(ret);
		}
	}
	return 0;
}

/* Runs the VM to its end, then stops the API server. The exit code. */
static int cli_vm_finish(struct vm_controller *c, struct cli_context *ctx,
			 struct api_server *server, bool stdio_console)
{
	struct mote_exit exit_info;

	if (stdio_console)
		tty_enter_raw(ctx);
	int ret = vm_controller_run(c, &exit_info);
	tty_restore(ctx);
	if (!ret && !ctx->quiet) {
		char touched[64];
		snprintf(touched, sizeof(touched), "guest memory touched: %llu KiB",
			 (unsigned long long)(exit_info.memory_touched_bytes >> 10));
		cli_print(ctx, "", touched);
	}
	api_server_stop(server);
	/* -EINTR: stopped by a signal before a VM was started. */
	return ret ? CLI_EXIT_VM_FAILED : cli_exit_code_for_end(&exit_info, ctx);
}

/* What run and restore share: serves the API, runs first (NULL: none, wait for the
 * API), then runs the VM to its end. error_code maps first's error to an exit code. */
static int cli_serve(struct vm_controller *c, struct cli_context *ctx, const char *api_sock,
		     const struct vm_command *first, int (*error_code)(int), bool stdio_console)
{
	struct signal_thread_args signals = {.controllers = &c, .count = 1};
	struct api_server *server;

	signals_block(&signals);
	int code = cli_vm_start(c, ctx, api_sock, first, error_code, &server);
	if (code)
		return code;
	if (signal_thread_start(&signals)) {
		api_server_stop(server);
		return CLI_EXIT_VM_FAILED;
	}
	code = cli_vm_finish(c, ctx, server, stdio_console);
	signal_thread_stop(&signals);
	return code;
}

int cli_restrict_syscalls(bool no_seccomp)
{
	if (no_seccomp)
		return 0;
	int err = syscall_filter_install(syscall_filter_leak_checker_built_in());
	if (err)
		fprintf(stderr,
			"mote: error: cannot install the seccomp filter: %s (--no-seccomp runs "
			"without it)\n",
			strerror(-err));
	return err;
}

int cli_run_vm(struct cli_options *opts, int64_t start_ns)
{
	struct cli_context ctx = {.quiet = opts->quiet};
	struct vm_command start = {.kind = VM_COMMAND_INSTANCE_START};
	struct vm_controller c;
	bool has_kernel = opts->kernel != NULL;
	bool stdio = opts->console == MOTE_CONSOLE_FDS;
	char *api_sock = opts->api_sock;
	int code;

	if (cli_restrict_syscalls(opts->no_seccomp))
		return CLI_EXIT_VM_FAILED;
	opts->api_sock = NULL; /* ours, not the controller's */
	vm_controller_init(&c, opts, start_ns, cli_log, &ctx);
	code = cli_serve(&c, &ctx, api_sock, has_kernel ? &start : NULL,
			 cli_exit_code_for_create_error, stdio);
	vm_controller_destroy(&c);
	free(api_sock);
	return code;
}

/* A controller for restoring opts' snapshot: nothing configured but the console the
 * restored VM uses. 0, or -ENOMEM (said on stderr) with c untouched. */
static int cli_restore_controller_init(struct vm_controller *c,
				       const struct cli_restore_options *opts, int64_t start_ns,
				       struct cli_context *ctx)
{
	struct cli_options pending;

	cli_options_init(&pending);
	pending.console = opts->console;
	pending.console_max_bytes = opts->console_max_bytes;
	if (opts->console_path && !(pending.console_path = strdup(opts->console_path))) {
		fprintf(stderr, "mote: error: out of memory\n");
		return -ENOMEM;
	}
	return vm_controller_init(c, &pending, start_ns, cli_log, ctx);
}

int cli_restore_vm(const struct cli_restore_options *opts, int64_t start_ns)
{
	struct cli_context ctx = {.quiet = opts->quiet};
	struct vm_command load = {.kind = VM_COMMAND_SNAPSHOT_LOAD};
	struct vm_controller c;
	int code;

	if (cli_restrict_syscalls(opts->no_seccomp))
		return CLI_EXIT_VM_FAILED;
	if (cli_restore_controller_init(&c, opts, start_ns, &ctx))
		return CLI_EXIT_VM_FAILED;
	load.snapshot_load.restore = opts->restore;
	code = cli_serve(&c, &ctx, opts->api_sock, &load, cli_exit_code_for_restore_error,
			 opts->console == MOTE_CONSOLE_FDS);
	vm_controller_destroy(&c);
	return code;
}

/* One of the copies `mote restore --copies N` forks in this process. */
struct cli_copy {
	struct vm_controller controller;
	struct cli_context ctx;
	struct cli_restore_options opts; /* "{i}" replaced */
	struct cli_copies *all;
	pthread_t thread;
	int code;
};

/* Every copy is restored (or has failed) before any runs. */
struct cli_copies {
	pthread_mutex_t lock;
	pthread_cond_t changed;
	struct vm_controller **controllers; /* the copies', in order */
	unsigned restored;		    /* copies past their restore, failed or not */
	unsigned expected;		    /* copies whose thread started */
	bool failed;			    /* a copy could not be restored: none of them runs */
	bool decided;			    /* the overlays were committed, or failed is final */
	int commit_error;		    /* the commit's negative errno, which failed them all */
};

/* Once every copy is restored: all the copies' overlays take their names at once, or
 * none does (mote_vm_commit_disks), and then all the copies run, or none. Under
 * all->lock, by the first copy to get there. */
static void cli_copies_commit(struct cli_copies *all)
{
	all->decided = true;
	if (all->failed)
		return;
	all->commit_error = vm_controller_commit_disks(all->controllers, all->expected);
	if (all->commit_error)
		all->failed = true;
}

/* Restores one copy, waits until all are restored, and runs it to its end, so that
 * the copies start together, and none starts when one of them cannot. */
static void *cli_copy_thread(void *arg)
{
	struct cli_copy *copy = arg;
	struct cli_copies *all = copy->all;
	struct vm_command load = {.kind = VM_COMMAND_SNAPSHOT_LOAD};
	struct api_server *server;

	load.snapshot_load.restore = copy->opts.restore;
	/* A copy's overlays take their names only once every copy is restored. */
	load.snapshot_load.restore.defer_disk_commit = true;
	copy->code = cli_vm_start(&copy->controller, &copy->ctx, copy->opts.api_sock, &load,
				  cli_exit_code_for_restore_error, &server);
	pthread_mutex_lock(&all->lock);
	all->failed |= copy->code != 0;
	all->restored++;
	pthread_cond_broadcast(&all->changed);
	while (all->restored < all->expected)
		pthread_cond_wait(&all->changed, &all->lock);
	if (!all->decided)
		cli_copies_commit(all);
	bool failed = all->failed;
	pthread_mutex_unlock(&all->lock);
	if (copy->code)
		return NULL;
	if (failed) {
		api_server_stop(server); /* the controller destroys the VM that never ran */
		return NULL;
	}
	copy->code = cli_vm_finish(&copy->controller, &copy->ctx, server, false);
	return NULL;
}

int cli_restore_copies(const struct cli_restore_options *opts, int64_t start_ns)
{
	unsigned n = opts->copies;
	struct cli_copy *copies = calloc(n, sizeof(*copies));
	struct vm_controller **controllers = calloc(n, sizeof(*controllers));
	struct signal_thread_args signals = {.controllers = controllers, .count = n};
	struct cli_copies all = {.controllers = controllers, .expected = n};
	unsigned ready = 0, started = 0;
	int code = CLI_EXIT_VM_FAILED;

	if (!copies || !controllers) {
		fprintf(stderr, "mote: error: out of memory\n");
		goto out;
	}
	if (cli_restrict_syscalls(opts->no_seccomp))
		goto out;
	for (; ready < n; ready++) {
		struct cli_copy *copy = &copies[ready];

		if (cli_restore_options_for_copy(opts, ready + 1, &copy->opts)) {
			fprintf(stderr, "mote: error: out of memory\n");
			goto out;
		}
		copy->ctx = (struct cli_context){.quiet = opts->quiet, .copy = ready + 1};
		copy->all = &all;
		if (cli_restore_controller_init(&copy->controller, &copy->opts, start_ns,
						&copy->ctx)) {
			cli_restore_options_free(&copy->opts);
			goto out;
		}
		controllers[ready] = &copy->controller;
	}
	pthread_mutex_init(&all.lock, NULL);
	pthread_cond_init(&all.changed, NULL);
	signals_block(&signals);
	if (signal_thread_start(&signals) == 0) {
		/* A thread a copy, each on its own VM: the restores run in parallel. */
		for (; started < n; started++)
			if (pthread_create(&copies[started].thread, NULL, cli_copy_thread,
					   &copies[started]))
				break;
		if (started < n) {
			/* The copies that have a thread wait for no other, and do not run. */
			fprintf(stderr, "mote: error: cannot start a thread for copy %u\n",
				started + 1);
			pthread_mutex_lock(&all.lock);
			all.failed = true;
			all.expected = started;
			pthread_cond_broadcast(&all.changed);
			pthread_mutex_unlock(&all.lock);
		}
		code = CLI_EXIT_GUEST_ENDED;
		for (unsigned i = 0; i < started; i++) {
			pthread_join(copies[i].thread, NULL);
			if (code == CLI_EXIT_GUEST_ENDED)
				code = copies[i].code;
		}
		if (started < n)
			code = CLI_EXIT_VM_FAILED;
		else if (all.commit_error)
			code = cli_exit_code_for_restore_error(all.commit_error);
		signal_thread_stop(&signals);
	}
	pthread_cond_destroy(&all.changed);
	pthread_mutex_destroy(&all.lock);
out:
	for (unsigned i = 0; i < ready; i++) {
		vm_controller_destroy(&copies[i].controller);
		cli_restore_options_free(&copies[i].opts);
	}
	free(controllers);
	free(copies);
	return code;
}
