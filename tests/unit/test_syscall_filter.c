/* The seccomp filter (mote.h: mote_restrict_syscalls; vmm/syscall_filter.c): what it
 * refuses fails with EPERM, what a monitor needs still works, on every thread. Each test
 * runs in a child process, since a filter cannot be taken off: the child reports the
 * first check that failed through a pipe and ends with _exit (no leak check at its end,
 * which the filter forbids). No KVM. */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/ioctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <seccomp.h>

#include "vmm/mote.h"
#include "vmm/syscall_filter.h"

#define FAILURE_MAX 200

/* In the child: the first failed check, written to the pipe. */
static int report_fd = -1;

static void __attribute__((format(printf, 1, 2))) failed(const char *fmt, ...)
{
	char text[FAILURE_MAX];
	va_list args;

	va_start(args, fmt);
	int len = vsnprintf(text, sizeof(text), fmt, args);
	va_end(args);
	if (write(report_fd, text, (size_t)len) < 0) {
		/* The parent sees the exit status anyway. */
	}
	_exit(1);
}

/* A call that must be refused with EPERM (ret is its -1 or a result). */
static void expect_refused(const char *what, long ret)
{
	if (ret != -1 || errno != EPERM)
		failed("%s: returned %ld (%s), expected EPERM", what, ret, strerror(errno));
}

static void expect_allowed(const char *what, long ret)
{
	if (ret < 0)
		failed("%s: refused: %s", what, strerror(errno));
}

/* Runs checks(arg) in a child and fails the test with the child's report. */
static void in_child(void (*checks)(void))
{
	int report[2];

	assert_int_equal(pipe(report), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(report[0]);
		report_fd = report[1];
		checks();
		_exit(0);
	}
	close(report[1]);
	char text[FAILURE_MAX + 1] = "";
	ssize_t len = read(report[0], text, FAILURE_MAX);
	close(report[0]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (len > 0)
		fail_msg("%s", text);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static bool seccomp_filtered(void)
{
	char line[128];
	bool found = false;
	FILE *status = fopen("/proc/self/status", "r");

	if (!status)
		failed("/proc/self/status: %s", strerror(errno));
	while (fgets(line, sizeof(line), status))
		found |= strcmp(line, "Seccomp:\t2\n") == 0;
	fclose(status);
	return found;
}

/* A thread started before the filter: it waits for the go, then opens an IP socket. */
struct early_thread {
	int go[2];
	int socket_errno;
};

static void *early_thread_main(void *arg)
{
	struct early_thread *t = arg;
	char byte;

	if (read(t->go[0], &byte, 1) != 1)
		return NULL;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	t->socket_errno = fd < 0 ? errno : 0;
	if (fd >= 0)
		close(fd);
	return NULL;
}

static void *late_thread_main(void *arg)
{
	return arg;
}

static void refused_calls_fail_with_eperm_and_the_rest_works_on_every_thread_checks(void)
{
	struct early_thread early = {.socket_errno = -1};

	if (pipe(early.go) != 0)
		failed("pipe: %s", strerror(errno));
	pthread_t early_id;
	if (pthread_create(&early_id, NULL, early_thread_main, &early) != 0)
		failed("the thread before the filter could not start");

	int err = mote_restrict_syscalls();
	if (err)
		failed("mote_restrict_syscalls: %s", strerror(-err));
	if (!seccomp_filtered())
		failed("/proc/self/status does not say Seccomp: 2");

	/* Refused. */
	char *const argv[] = {"/bin/true", NULL};
	expect_refused("execve", execve("/bin/true", argv, NULL));
	expect_refused("fork", fork());
	expect_refused("ptrace(PTRACE_TRACEME)", ptrace(PTRACE_TRACEME, 0, NULL, NULL));
	expect_refused("socket(AF_INET)", socket(AF_INET, SOCK_STREAM, 0));
	expect_refused("socket(AF_NETLINK)", socket(AF_NETLINK, SOCK_RAW, 0));
	int pair[2];
	expect_refused("socketpair(AF_INET)", socketpair(AF_INET, SOCK_STREAM, 0, pair));
	expect_refused("kill(parent)", kill(getppid(), 0));
	expect_refused("kill(-1)", kill(-1, 0));
	expect_refused("tgkill(parent)", syscall(SYS_tgkill, getppid(), getppid(), 0));
	expect_refused("unshare(CLONE_NEWUSER)", unshare(CLONE_NEWUSER));
	expect_refused("mount", mount("none", "/tmp", "tmpfs", 0, NULL));
	expect_refused("bpf", syscall(SYS_bpf, 0, NULL, 0));
	expect_refused("perf_event_open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
	expect_refused("userfaultfd", syscall(SYS_userfaultfd, 0));
	expect_refused("init_module", syscall(SYS_init_module, NULL, 0, ""));
	int null_fd = open("/dev/null", O_RDWR);
	expect_refused("ioctl(TIOCSTI)", ioctl(null_fd, TIOCSTI, "x"));
	close(null_fd);

	/* What a monitor does goes on. */
	expect_allowed("kill(self)", kill(getpid(), 0));
	expect_allowed("tgkill(own thread)", syscall(SYS_tgkill, getpid(), gettid(), 0));
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	expect_allowed("socket(AF_UNIX)", fd);
	close(fd);
	expect_allowed("socketpair(AF_UNIX)", socketpair(AF_UNIX, SOCK_STREAM, 0, pair));
	close(pair[0]);
	close(pair[1]);
	fd = open("/proc/self/stat", O_RDONLY);
	expect_allowed("open", fd);
	char buf[16];
	expect_allowed("read", read(fd, buf, sizeof(buf)));
	close(fd);
	fd = memfd_create("guest", MFD_CLOEXEC);
	expect_allowed("memfd_create", fd);
	expect_allowed("ftruncate", ftruncate(fd, 1 << 20));
	void *map = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		failed("mmap: %s", strerror(errno));
	munmap(map, 1 << 20);
	close(fd);
	struct io_uring ring;
	err = io_uring_queue_init(4, &ring, 0);
	if (err)
		failed("io_uring_queue_init: %s", strerror(-err));
	io_uring_queue_exit(&ring);
	pthread_t late_id;
	void *result = NULL;
	if (pthread_create(&late_id, NULL, late_thread_main, &early) != 0)
		failed("a thread could not start under the filter");
	pthread_join(late_id, &result);
	if (result != &early)
		failed("the thread started under the filter did not run");

	/* The thread started before took the filter too. */
	if (write(early.go[1], "", 1) != 1)
		failed("write: %s", strerror(errno));
	pthread_join(early_id, NULL);
	if (early.socket_errno != EPERM)
		failed("the thread started before the filter opened an IP socket (%s)",
		       strerror(early.socket_errno));
}

static void refused_calls_fail_with_eperm_and_the_rest_works_on_every_thread(void **state)
{
	(void)state;
	in_child(refused_calls_fail_with_eperm_and_the_rest_works_on_every_thread_checks);
}

/* For a build with a leak checker: new processes, ptrace and signals stay allowed, the
 * rest is refused as before (namespaces too). */
static void leak_checker_filter_keeps_processes_only_checks(void)
{
	int err = syscall_filter_install(true);
	if (err)
		failed("syscall_filter_install: %s", strerror(-err));
	pid_t pid = fork();
	if (pid == 0)
		_exit(0);
	expect_allowed("fork", pid);
	int status;
	expect_allowed("waitpid", waitpid(pid, &status, 0));
	expect_allowed("kill(parent)", kill(getppid(), 0));
	/* A process, allowed, but not in a namespace of its own. */
	long ns_pid = syscall(SYS_clone, SIGCHLD | CLONE_NEWNET, NULL, NULL, NULL, 0);
	if (ns_pid == 0)
		_exit(0);
	if (ns_pid > 0)
		waitpid((pid_t)ns_pid, &status, 0);
	expect_refused("clone(CLONE_NEWNET)", ns_pid);
	char *const argv[] = {"/bin/true", NULL};
	expect_refused("execve", execve("/bin/true", argv, NULL));
	expect_refused("socket(AF_INET)", socket(AF_INET, SOCK_STREAM, 0));
	expect_refused("mount", mount("none", "/tmp", "tmpfs", 0, NULL));
}

static void leak_checker_filter_keeps_processes_only(void **state)
{
	(void)state;
	in_child(leak_checker_filter_keeps_processes_only_checks);
}

/* A thread with a filter of its own, which the process's filter would not extend: it
 * loads it, says so on ready and waits, alive, until told to end on done. */
struct own_filter_thread {
	int ready[2], done[2];
	int result;
};

static void *own_filter_thread_main(void *arg)
{
	struct own_filter_thread *t = arg;
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	char byte;

	t->result = ctx ? seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(acct), 0) : -ENOMEM;
	if (!t->result)
		t->result = seccomp_load(ctx);
	seccomp_release(ctx);
	if (write(t->ready[1], "", 1) != 1 || read(t->done[0], &byte, 1) != 1)
		t->result = -EIO;
	return NULL;
}

/* The install fails, and says why in the kernel's words, when a thread cannot take
 * the filter: here one that has a filter of its own (TSYNC needs every thread's to be
 * the caller's or an ancestor of it). */
static void a_thread_that_cannot_take_the_filter_fails_the_install_checks(void)
{
	struct own_filter_thread t = {.result = -1};
	pthread_t thread;
	char byte;

	if (pipe(t.ready) != 0 || pipe(t.done) != 0)
		failed("pipe: %s", strerror(errno));
	if (pthread_create(&thread, NULL, own_filter_thread_main, &t) != 0)
		failed("the thread could not start");
	if (read(t.ready[0], &byte, 1) != 1 || t.result != 0)
		failed("the thread's own filter: %s", strerror(-t.result));
	int err = mote_restrict_syscalls();
	if (write(t.done[1], "", 1) != 1)
		failed("write: %s", strerror(errno));
	pthread_join(thread, NULL);
	if (err != -ESRCH)
		failed("mote_restrict_syscalls: %d (%s), expected -ESRCH", err, strerror(-err));
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		failed("the failed install refused an IP socket all the same: %s", strerror(errno));
	close(fd);
}

static void a_thread_that_cannot_take_the_filter_fails_the_install(void **state)
{
	(void)state;
	in_child(a_thread_that_cannot_take_the_filter_fails_the_install_checks);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(refused_calls_fail_with_eperm_and_the_rest_works_on_every_thread),
	    cmocka_unit_test(leak_checker_filter_keeps_processes_only),
	    cmocka_unit_test(a_thread_that_cannot_take_the_filter_fails_the_install),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
