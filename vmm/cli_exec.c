/* `mote exec` and `mote cp` (cli_exec.h): the command line over the agent client. */
#include "cli_exec.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include "agent_client.h"
#include "cli_options.h"
#include "cli_run.h"
#include "size_parse.h"

#define GUEST_PREFIX "guest:"

enum {
	OPT_VSOCK = 1000,
	OPT_PORT,
	OPT_WAIT,
	OPT_TIMEOUT,
	OPT_ENV,
	OPT_CWD,
	OPT_MAX_SIZE,
	OPT_NO_SECCOMP,
};

static const struct option agent_options[] = {
    {"vsock", required_argument, NULL, OPT_VSOCK},
    {"port", required_argument, NULL, OPT_PORT},
    {"wait", required_argument, NULL, OPT_WAIT},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"env", required_argument, NULL, OPT_ENV},
    {"cwd", required_argument, NULL, OPT_CWD},
    {"max-size", required_argument, NULL, OPT_MAX_SIZE},
    {"no-seccomp", no_argument, NULL, OPT_NO_SECCOMP},
    {"tty", no_argument, NULL, 't'},
    {NULL, 0, NULL, 0},
};

static int parse_error(char *error, size_t error_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int parse_error(char *error, size_t error_len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(error, error_len, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

void cli_agent_options_free(struct cli_agent_options *opts)
{
	free(opts->env);
	memset(opts, 0, sizeof(*opts));
}

/* Seconds, possibly fractional, from 0 to a day, in decimal digits ("1.5", not " 1",
 * "0x2" or "1e3", which strtod would take); stored in ms, and a time above 0 that
 * rounds to 0 ms is 1 ms, since 0 means no limit at all. */
static int seconds_parse(const char *text, int *ms)
{
	char *end;

	if (!text[0] || strspn(text, "0123456789.") != strlen(text))
		return -EINVAL;
	errno = 0;
	double s = strtod(text, &end);
	if (errno || end == text || *end || !isfinite(s) || s < 0 || s > 86400)
		return -EINVAL;
	*ms = (int)(s * 1000 + 0.5);
	if (*ms == 0 && s > 0)
		*ms = 1;
	return 0;
}

/* The options both subcommands share, up to the first operand. */
static int parse_agent_options(struct cli_agent_options *opts, const char *name, bool exec,
			       int argc, char **argv, char *error, size_t error_len)
{
	unsigned port;
	int option;

	memset(opts, 0, sizeof(*opts));
	opts->port = MOTE_AGENT_DEFAULT_PORT;
	opts->wait_ms = CLI_AGENT_DEFAULT_WAIT_S * 1000;
	cli_getopt_restart();
	/* "+": stop at the command, whose own options are not ours. */
	while ((option = getopt_long(argc, argv, "+t", agent_options, NULL)) != -1) {
		const char *arg = optarg;
		switch (option) {
		case 't':
			if (!exec)
				return parse_error(error, error_len, "%s: unknown option --tty",
						   name);
			opts->tty = true;
			break;
		case OPT_VSOCK:
			opts->vsock_path = arg;
			break;
		case OPT_PORT:
			if (uint_parse(arg, 1, UINT32_MAX - 1, &port))
				return parse_error(error, error_len,
						   "%s: --port %s: not a vsock port number", name,
						   arg);
			opts->port = port;
			break;
		case OPT_WAIT:
			if (seconds_parse(arg, &opts->wait_ms))
				return parse_error(error, error_len,
						   "%s: --wait %s: not a number of seconds", name,
						   arg);
			break;
		case OPT_TIMEOUT:
			if (seconds_parse(arg, &opts->timeout_ms))
				return parse_error(error, error_len,
						   "%s: --timeout %s: not a number of seconds",
						   name, arg);
			break;
		case OPT_MAX_SIZE:
			if (exec)
				return parse_error(error, error_len,
						   "%s: unknown option --max-size", name);
			if (size_parse(arg, &opts->max_size) || opts->max_size == 0)
				return parse_error(error, error_len,
						   "%s: --max-size %s: not a size such as 512M",
						   name, arg);
			break;
		case OPT_NO_SECCOMP:
			opts->no_seccomp = true;
			break;
		case OPT_ENV:
		case OPT_CWD:
			if (!exec)
				return parse_error(error, error_len, "%s: unknown option --%s",
						   name, option == OPT_ENV ? "env" : "cwd");
			if (option == OPT_CWD) {
				opts->cwd = arg;
				break;
			}
			if (arg[0] == '=' || !strchr(arg, '='))
				return parse_error(error, error_len,
						   "%s: --env %s: must be NAME=VALUE", name, arg);
			const char **env = realloc(opts->env, (opts->env_count + 2) * sizeof(*env));
			if (!env)
				return parse_error(error, error_len, "out of memory");
			opts->env = env;
			env[opts->env_count++] = arg;
			env[opts->env_count] = NULL;
			break;
		default: {
			char buf[3];
			return parse_error(error, error_len, "%s: unknown or incomplete option %s",
					   name, cli_refused_option(argv, buf));
		}
		}
	}
	if (!opts->vsock_path)
		return parse_error(error, error_len,
				   "%s: --vsock PATH (the VM's vsock Unix socket) is required",
				   name);
	return 0;
}

int cli_exec_parse(struct cli_agent_options *opts, int argc, char **argv, char *error,
		   size_t error_len)
{
	int ret = parse_agent_options(opts, "exec", true, argc, argv, error, error_len);

	if (ret)
		return ret;
	if (optind >= argc)
		return parse_error(error, error_len, "exec: no command given");
	opts->command = argv + optind;
	return 0;
}

static bool is_guest(const char *path)
{
	return strncmp(path, GUEST_PREFIX, strlen(GUEST_PREFIX)) == 0;
}

int cli_cp_parse(struct cli_agent_options *opts, int argc, char **argv, char *error,
		 size_t error_len)
{
	int ret = parse_agent_options(opts, "cp", false, argc, argv, error, error_len);

	if (ret)
		return ret;
	if (argc - optind != 2)
		return parse_error(error, error_len, "cp: expected SRC DST");
	opts->src = argv[optind];
	opts->dst = argv[optind + 1];
	if (is_guest(opts->src) == is_guest(opts->dst))
		return parse_error(error, error_len,
				   "cp: exactly one of SRC and DST must be guest:/PATH");
	const char *guest = is_guest(opts->src) ? opts->src : opts->dst;
	if (!guest[strlen(GUEST_PREFIX)])
		return parse_error(error, error_len, "cp: %s: no path in the guest", guest);
	if (!(is_guest(opts->src) ? opts->dst : opts->src)[0])
		return parse_error(error, error_len, "cp: an empty path on the host");
	return 0;
}

struct cli_log_context {
	const char *name;
	bool raw_terminal; /* exec --tty: our terminal is raw, and ends no line by itself */
};

static void cli_log(void *opaque, enum mote_log_level level, const char *message)
{
	const struct cli_log_context *ctx = opaque;

	if (level <= MOTE_LOG_WARN)
		fprintf(stderr, "mote %s: %s%s", ctx->name, message,
			ctx->raw_terminal ? "\r\n" : "\n");
}

/* Connects as the options say; on failure the library has said why. */
static struct mote_agent *connect_agent(const struct cli_agent_options *opts,
					struct cli_log_context *log)
{
	struct mote_agent_options options;
	struct mote_agent *agent;

	mote_agent_options_init(&options);
	options.uds_path = opts->vsock_path;
	options.port = opts->port;
	options.wait_ms = opts->wait_ms;
	options.max_download_bytes = opts->max_size;
	if (!opts->command) /* cp: the whole transfer; exec has its own */
		options.transfer_timeout_ms = opts->timeout_ms;
	options.log = cli_log;
	options.log_opaque = log;
	return mote_agent_connect(&options, &agent) ? NULL : agent;
}

static int write_all(int fd, const void *data, size_t len)
{
	const char *p = data;

	while (len > 0) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Where the command's output goes; a write error stops the command. */
struct output_context {
	int error; /* the first failed write's -errno */
};

static int output_to(struct output_context *ctx, int fd, const void *data, size_t len)
{
	int ret = write_all(fd, data, len);

	if (ret && !ctx->error)
		ctx->error = ret;
	return ret;
}

static int to_stdout(void *opaque, const void *data, size_t len)
{
	return output_to(opaque, STDOUT_FILENO, data, len);
}

static int to_stderr(void *opaque, const void *data, size_t len)
{
	return output_to(opaque, STDERR_FILENO, data, len);
}

static int exec_exit_code(const struct mote_agent_result *result, const char *program,
			  const struct cli_agent_options *opts)
{
	if (result->timed_out) {
		fprintf(stderr, "mote exec: %s: timed out after %g s; killed\n", program,
			opts->timeout_ms / 1000.0);
		return CLI_EXEC_TIMED_OUT;
	}
	switch (result->outcome) {
	case MOTE_AGENT_EXITED:
		return result->code;
	case MOTE_AGENT_SIGNALED:
		return 128 + result->code;
	case MOTE_AGENT_NOT_STARTED:
		fprintf(stderr, "mote exec: cannot run %s in the guest: %s\n", program,
			result->message);
		return CLI_EXEC_NOT_STARTED;
	}
	return CLI_EXEC_UNREACHABLE;
}

/* --tty: the command gets a terminal the size of ours. When our stdin is a terminal
 * it goes raw, as ssh -t does: every key, ^C included, goes to the guest's terminal,
 * which decides what it means. *saved is then what to restore. */
static bool terminal_setup(struct mote_agent_exec *exec, struct termios *saved)
{
	struct winsize size;
	int sized = isatty(STDIN_FILENO) ? STDIN_FILENO : STDOUT_FILENO;

	exec->tty = true;
	if (isatty(sized) && ioctl(sized, TIOCGWINSZ, &size) == 0) {
		exec->tty_rows = size.ws_row;
		exec->tty_cols = size.ws_col;
		exec->tty_size_fd = sized;
	}
	if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, saved) < 0)
		return false;
	struct termios raw = *saved;
	cfmakeraw(&raw);
	return tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
}

/* --tty: the command's environment with our TERM, as ssh passes it, so that programs
 * draw for the terminal we have; unless --env names a TERM. NULL when nothing is
 * added (or no memory: the options' environment then). */
static const char **with_term(const struct cli_agent_options *opts)
{
	static const char term_prefix[] = "TERM=";
	const char *term = getenv("TERM");
	char *entry = NULL;

	for (size_t i = 0; i < opts->env_count; i++)
		if (strncmp(opts->env[i], term_prefix, sizeof(term_prefix) - 1) == 0)
			return NULL;
	if (!term || !term[0] || asprintf(&entry, "%s%s", term_prefix, term) < 0)
		return NULL;
	const char **env = calloc(opts->env_count + 2, sizeof(*env));
	if (!env) {
		free(entry);
		return NULL;
	}
	for (size_t i = 0; i < opts->env_count; i++)
		env[i] = opts->env[i];
	env[opts->env_count] = entry;
	return env;
}

static void with_term_free(const char **env, size_t env_count)
{
	if (env)
		free((char *)env[env_count]);
	free(env);
}

static int run_exec(const struct cli_agent_options *opts, struct mote_agent *agent,
		    struct cli_log_context *log)
{
	struct mote_agent_result result;
	struct mote_agent_exec exec;
	sigset_t forwarded, old_mask;
	struct termios saved_tty;
	bool raw = false;

	mote_agent_exec_init(&exec);
	exec.argv = (const char *const *)opts->command;
	const char **env = opts->tty ? with_term(opts) : NULL;
	exec.env = env ? env : opts->env;
	exec.cwd = opts->cwd;
	exec.timeout_ms = opts->timeout_ms;
	exec.stdin_fd = STDIN_FILENO; /* never closed: see open_std_fds() */
	struct output_context output = {0};
	exec.on_stdout = to_stdout;
	exec.on_stderr = to_stderr;
	exec.opaque = &output;
	/* ^C, kill and a hang-up go to the command, which decides what they mean. */
	sigemptyset(&forwarded);
	sigaddset(&forwarded, SIGINT);
	sigaddset(&forwarded, SIGTERM);
	sigaddset(&forwarded, SIGHUP);
	sigaddset(&forwarded, SIGQUIT);
	if (opts->tty)
		sigaddset(&forwarded, SIGWINCH); /* resizes the guest's terminal */
	/* Blocked before the terminal goes raw, so that no signal ends us while it is. */
	sigprocmask(SIG_BLOCK, &forwarded, &old_mask);
	if (opts->tty)
		raw = terminal_setup(&exec, &saved_tty);
	log->raw_terminal = raw && isatty(STDERR_FILENO);
	exec.signal_fd = signalfd(-1, &forwarded, SFD_CLOEXEC | SFD_NONBLOCK);
	if (exec.signal_fd < 0) /* then not forwarded, but not blocked for good either */
		sigprocmask(SIG_SETMASK, &old_mask, NULL);
	/* A closed stdout is EPIPE from write, as for any program in a pipeline. */
	signal(SIGPIPE, SIG_IGN);

	int ret = mote_agent_exec(agent, &exec, &result);
	if (raw)
		tcsetattr(STDIN_FILENO, TCSANOW, &saved_tty);
	log->raw_terminal = false;
	with_term_free(env, opts->env_count);
	if (exec.signal_fd >= 0)
		close(exec.signal_fd);
	sigprocmask(SIG_SETMASK, &old_mask, NULL);
	if (ret && ret == output.error) {
		/* Like any program whose reader went away; other write errors are news. */
		if (ret == -EPIPE)
			return 128 + SIGPIPE;
		fprintf(stderr, "mote exec: writing the output of %s: %s\n", opts->command[0],
			strerror(-ret));
		return CLI_EXEC_UNREACHABLE;
	}
	if (ret == -E2BIG)
		return CLI_EXEC_USAGE;
	/* Killed for the timeout, even if the agent then went quiet. */
	if (ret && result.timed_out)
		return exec_exit_code(&result, opts->command[0], opts);
	/* The signal could not be passed on, and closing the connection ended the
	 * command: as if the signal had. */
	if (ret == -ECANCELED)
		return 128 + result.code;
	if (ret)
		return CLI_EXEC_UNREACHABLE;
	return exec_exit_code(&result, opts->command[0], opts);
}

/* A closed 0, 1 or 2 would be taken by the next open(), the agent's socket say, and
 * then read as stdin or written as output: give each closed one /dev/null, so a
 * closed stdin is plain end-of-file for the command. */
static void open_std_fds(void)
{
	for (int fd = 0; fd <= 2; fd++) {
		if (fcntl(fd, F_GETFD) >= 0)
			continue;
		int null_fd = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
		if (null_fd >= 0 && null_fd != fd) {
			dup2(null_fd, fd);
			close(null_fd);
		}
	}
}

int cli_exec_main(int argc, char **argv)
{
	struct cli_log_context log = {.name = "exec"};
	struct cli_agent_options opts;
	char error[256];
	int code;

	open_std_fds();
	if (cli_exec_parse(&opts, argc, argv, error, sizeof(error))) {
		fprintf(stderr, "mote %s\n", error);
		cli_agent_options_free(&opts);
		return CLI_EXEC_USAGE;
	}
	/* What the guest's agent sends is parsed here: under the filter, as in a VM's
	 * monitor. */
	if (cli_restrict_syscalls(opts.no_seccomp)) {
		cli_agent_options_free(&opts);
		return CLI_EXEC_UNREACHABLE;
	}
	struct mote_agent *agent = connect_agent(&opts, &log);
	code = agent ? run_exec(&opts, agent, &log) : CLI_EXEC_UNREACHABLE;
	mote_agent_close(agent);
	cli_agent_options_free(&opts);
	return code;
}

/* A transfer's failure: the agent's answer (said already) or a broken connection. */
static int cp_failure(struct mote_agent *agent)
{
	return mote_agent_broken(agent) ? CLI_EXEC_UNREACHABLE : CLI_CP_FAILED;
}

static int cp_upload(struct mote_agent *agent, const char *src, const char *guest_dst)
{
	char *target = NULL;
	struct stat st;
	int fd = strcmp(src, "-") == 0 ? STDIN_FILENO : open(src, O_RDONLY | O_CLOEXEC);
	int code = 0;

	if (fd < 0 || fstat(fd, &st) < 0 || S_ISDIR(st.st_mode)) {
		int err = fd >= 0 && S_ISDIR(st.st_mode) ? EISDIR : errno;
		fprintf(stderr, "mote cp: %s: %s\n", src, strerror(err));
		if (fd > STDIN_FILENO)
			close(fd);
		return CLI_CP_FAILED;
	}
	/* guest:/dir/ means /dir/<name of the source>. */
	size_t len = strlen(guest_dst);
	if (guest_dst[len - 1] == '/' && fd != STDIN_FILENO) {
		char *copy = strdup(src);
		if (!copy || asprintf(&target, "%s%s", guest_dst, basename(copy)) < 0)
			target = NULL;
		free(copy);
	} else {
		target = strdup(guest_dst);
	}
	uint32_t mode = fd == STDIN_FILENO ? 0644 : st.st_mode & 07777;
	if (!target)
		code = CLI_CP_FAILED;
	else if (mote_agent_upload(agent, fd, target, mode))
		code = cp_failure(agent);
	free(target);
	if (fd > STDIN_FILENO)
		close(fd);
	return code;
}

/* The local file to write: DST, or DST/<name> for a directory. */
static char *download_target(const char *guest_src, const char *dst)
{
	struct stat st;
	char *target = NULL;
	size_t len = strlen(dst);

	if ((stat(dst, &st) == 0 && S_ISDIR(st.st_mode)) || dst[len - 1] == '/') {
		char *copy = strdup(guest_src);
		if (copy && asprintf(&target, "%s%s%s", dst, dst[len - 1] == '/' ? "" : "/",
				     basename(copy)) < 0)
			target = NULL;
		free(copy);
		return target;
	}
	return strdup(dst);
}

/* The temporary file of the download in progress, for the handler below: the one piece
 * of process-wide state of `mote cp`, which is a process of its own. */
static const char *volatile cp_temp_path;

/* SIGINT, SIGTERM or SIGHUP during a download: the temporary file goes, then the signal
 * ends the process as it would have (unlink, sigaction and raise are async-signal-safe,
 * POSIX.1-2017 §2.4.3). */
static void cp_remove_temp_and_die(int sig)
{
	const char *path = cp_temp_path;
	struct sigaction dfl = {.sa_handler = SIG_DFL};

	if (path)
		unlink(path);
	sigaction(sig, &dfl, NULL);
	raise(sig);
}

/* The signals that end a download (and its temporary file). */
static const int cp_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define CP_SIGNAL_COUNT (sizeof(cp_signals) / sizeof(cp_signals[0]))

static sigset_t cp_signal_set(void)
{
	sigset_t set;

	sigemptyset(&set);
	for (size_t i = 0; i < CP_SIGNAL_COUNT; i++)
		sigaddset(&set, cp_signals[i]);
	return set;
}

/* Installs (path) or removes (NULL) the handler that cleans up after a signal. A
 * signal the process was started ignoring (a background job's SIGINT) stays ignored. */
static void cp_guard_temp(const char *path)
{
	struct sigaction act = {.sa_handler = path ? cp_remove_temp_and_die : SIG_DFL,
				.sa_mask = cp_signal_set()};

	cp_temp_path = path;
	for (size_t i = 0; i < CP_SIGNAL_COUNT; i++) {
		struct sigaction old;
		if (sigaction(cp_signals[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
			sigaction(cp_signals[i], &act, NULL);
	}
}

/* mkostemp() of the template tmp, guarded by the handler once it exists: the signals
 * wait meanwhile, so the handler never sees the template half rewritten. */
static int cp_create_temp(char *tmp)
{
	sigset_t signals = cp_signal_set(), old_mask;

	sigprocmask(SIG_BLOCK, &signals, &old_mask);
	int fd = mkostemp(tmp, O_CLOEXEC);
	if (fd >= 0)
		cp_guard_temp(tmp);
	sigprocmask(SIG_SETMASK, &old_mask, NULL);
	return fd;
}

static int cp_download(struct mote_agent *agent, const char *guest_src, const char *dst)
{
	uint32_t mode = 0;

	if (strcmp(dst, "-") == 0)
		return mote_agent_download(agent, guest_src, STDOUT_FILENO, NULL)
			   ? cp_failure(agent)
			   : 0;
	char *target = download_target(guest_src, dst);
	char *tmp = NULL;
	if (!target || asprintf(&tmp, "%s.mote-XXXXXX", target) < 0) {
		free(target);
		fprintf(stderr, "mote cp: out of memory\n");
		return CLI_CP_FAILED;
	}
	/* Into a temporary file next to the target, renamed once complete: a failed or
	 * interrupted copy leaves the old file (or none) in place, and nothing else. */
	int code = 0;
	int fd = cp_create_temp(tmp);
	if (fd < 0) {
		fprintf(stderr, "mote cp: %s: %s\n", target, strerror(errno));
		code = CLI_CP_FAILED;
	} else if (mote_agent_download(agent, guest_src, fd, &mode)) {
		code = cp_failure(agent);
	} else {
		mode_t mask = umask(0);
		umask(mask);
		if (fchmod(fd, mode & ~mask & 0777) < 0 || fsync(fd) < 0 ||
		    rename(tmp, target) < 0) {
			fprintf(stderr, "mote cp: %s: %s\n", target, strerror(errno));
			code = CLI_CP_FAILED;
		}
	}
	if (fd >= 0) {
		close(fd);
		if (code)
			unlink(tmp);
	}
	cp_guard_temp(NULL);
	free(tmp);
	free(target);
	return code;
}

int cli_cp_main(int argc, char **argv)
{
	struct cli_log_context log = {.name = "cp"};
	struct cli_agent_options opts;
	char error[256];

	open_std_fds();
	if (cli_cp_parse(&opts, argc, argv, error, sizeof(error))) {
		fprintf(stderr, "mote %s\n", error);
		cli_agent_options_free(&opts);
		return CLI_EXEC_USAGE;
	}
	if (cli_restrict_syscalls(opts.no_seccomp)) {
		cli_agent_options_free(&opts);
		return CLI_CP_FAILED;
	}
	struct mote_agent *agent = connect_agent(&opts, &log);
	int code = CLI_EXEC_UNREACHABLE;
	if (agent && is_guest(opts.src))
		code = cp_download(agent, opts.src + strlen(GUEST_PREFIX), opts.dst);
	else if (agent)
		code = cp_upload(agent, opts.src, opts.dst + strlen(GUEST_PREFIX));
	mote_agent_close(agent);
	cli_agent_options_free(&opts);
	return code;
}
