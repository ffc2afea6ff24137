/* mote-init: the guest's PID 1. A static program with no dependencies on the guest's
 * userland beyond /bin/sh for `mote.run=`; the in-guest agent (agent.h) is compiled in. It runs as
 * /init of an initramfs (tools/build-initramfs.sh) or as /sbin/init of a root disk
 * (tools/build-rootfs.sh), which the kernel may have mounted read-write or read-only (`rw`/`ro`)
 * and on which it has already mounted devtmpfs at /dev (CONFIG_DEVTMPFS_MOUNT); neither needs a
 * case.
 *
 * Order: signal boot complete on the debug port (design.md "Boot timing"), mount the
 * pseudo file systems, start the agent on vsock if `mote.agent[=PORT]` asks for it,
 * run the command from the kernel command line (if any) while reaping orphans, then
 * power off. With the agent and no command, the guest stays up serving the agent
 * until a power-off request (the agent's POWER_OFF, or busybox `poweroff`). PID 1 must never exit:
 * the kernel panics if it does, so every error is reported on the console and the program carries
 * on or powers off. */
#define MOTE_GUEST_SIDE
#include "../devices/debug_port.h"
#include "agent.h"
#include "agent_protocol.h"
#include "../boot/cmdline_param.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define CMDLINE_MAX 4096
#define RUN_KEY "mote.run"
#define AGENT_KEY "mote.agent"
/* An agent that ran at least this long is restarted when it exits; one that dies
 * sooner (a crash loop) is not, nor one that could not listen at all
 * (AGENT_EXIT_CANNOT_LISTEN: no vsock transport). */
#define AGENT_RESTART_MIN_S 1

/* Whether ioperm() gave PID 1 the debug port. Without it (a kernel without
 * CONFIG_X86_IOPL_IOPERM, or in lockdown) an outb faults, and a fault kills PID 1, which
 * panics the kernel: every power-off would end as a panic. Set once, at the start, before
 * any other process exists. */
static bool debug_port_usable;

static void port_write(unsigned char value)
{
	if (debug_port_usable)
		__asm__ volatile("outb %0, %1"
				 :
				 : "a"(value), "Nd"((unsigned short)DEBUG_PORT_ADDR));
}

/* After kill(-1, SIGKILL): reaps every process as it dies (orphans are PID 1's), so
 * that none still has a file open for writing when the root is synced and remounted.
 * Bounded: a process stuck in the kernel (uninterruptible I/O) cannot hold the power-off
 * back for more than a second. */
#define REAP_ALL_LIMIT_MS 1000

static void reap_all(void)
{
	for (int waited_ms = 0; waited_ms < REAP_ALL_LIMIT_MS;) {
		pid_t pid = waitpid(-1, NULL, WNOHANG);
		if (pid > 0)
			continue;
		if (pid < 0 && errno == EINTR)
			continue;
		if (pid < 0)
			return; /* ECHILD: none left */
		usleep(5000);
		waited_ms += 5;
	}
}

/* One message per write(), so lines from PID 1 do not interleave with the child's. */
static void say(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0) {
		/* Nowhere else to report it. */
	}
}

/* EBUSY means this file system is already mounted there: the kernel mounts devtmpfs on
 * /dev of a root disk itself. The mount points exist on both kinds of root; mkdir only
 * matters for one that lacks them, and cannot help on a read-only one. */
static void mount_fs(const char *source, const char *target, const char *type)
{
	struct stat st;

	if (stat(target, &st) < 0 && mkdir(target, 0755) < 0)
		say("mote-init: mkdir %s: %s", target, strerror(errno));
	if (mount(source, target, type, MS_NOSUID, NULL) < 0 && errno != EBUSY)
		say("mote-init: mount %s on %s: %s", type, target, strerror(errno));
}

/* The kernel opens /dev/console for PID 1 only if the node exists in its initial root
 * (the initramfs, or the built-in one before it mounts a root disk); after devtmpfs is
 * mounted it does, so fill whichever of 0/1/2 are still closed. */
static void open_console_fds(void)
{
	int fd = -1;

	for (int i = 0; i <= 2; i++) {
		if (fcntl(i, F_GETFD) >= 0)
			continue;
		if (fd < 0) {
			fd = open("/dev/console", O_RDWR | O_NOCTTY);
			if (fd < 0)
				return;
		}
		if (fd != i)
			dup2(fd, i);
	}
	if (fd > 2)
		close(fd);
}

/* The kernel command line, read once; "" when it cannot be read. */
static const char *read_cmdline(void)
{
	static char buf[CMDLINE_MAX];
	ssize_t len;
	int fd;

	fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		say("mote-init: open /proc/cmdline: %s", strerror(errno));
		return "";
	}
	len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (len < 0) {
		say("mote-init: read /proc/cmdline: %s", strerror(errno));
		return "";
	}
	buf[len] = '\0';
	return buf;
}

/* `mote.agent` alone means the default port; returns 0 when the agent is not asked
 * for or its port is not a number from 1 to 2^32-2 (VMADDR_PORT_ANY is not one). */
static uint32_t cmdline_agent_port(const char *cmdline)
{
	char *value = cmdline_value(cmdline, AGENT_KEY);
	unsigned long long port = AGENT_DEFAULT_PORT;
	char *end;

	if (!value)
		return 0;
	if (*value) {
		errno = 0;
		port = strtoull(value, &end, 10);
		if (errno || *end || end == value || port == 0 || port >= UINT32_MAX) {
			say("mote-init: mote.agent=%s: not a vsock port number", value);
			port = 0;
		}
	}
	free(value);
	return (uint32_t)port;
}

/* /dev/console cannot become a controlling terminal, so an interactive shell there
 * has no job control and ^C does nothing. Open the real device behind it (the last
 * name in /sys/class/tty/console/active, e.g. ttyS0) and make that the child's tty. */
static void child_take_tty(void)
{
	char names[256], path[300];
	ssize_t len;
	int fd;

	fd = open("/sys/class/tty/console/active", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		goto fallback;
	len = read(fd, names, sizeof(names) - 1);
	close(fd);
	if (len <= 0)
		goto fallback;
	names[len] = '\0';
	names[strcspn(names, "\n")] = '\0';
	char *last = strrchr(names, ' ');
	snprintf(path, sizeof(path), "/dev/%s", last ? last + 1 : names);

	fd = open(path, O_RDWR);
	if (fd < 0)
		goto fallback;
	if (ioctl(fd, TIOCSCTTY, 1) < 0) {
		close(fd);
		goto fallback;
	}
	for (int i = 0; i <= 2; i++)
		dup2(fd, i);
	if (fd > 2)
		close(fd);
	return;
fallback:
	if (ioctl(STDIN_FILENO, TIOCSCTTY, 1) < 0) {
		/* No job control; the command still runs. */
	}
}

/* Waits until the console has sent what is queued for it (tcdrain), but gives up once
 * the queue has not shrunk for DRAIN_STALL_MS: a line that stopped moving (a lost
 * transmit interrupt, a console nobody reads) must not keep the guest from ending. */
#define DRAIN_STALL_MS 3000
#define DRAIN_POLL_MS 5
static void drain_console(int fd)
{
	int queued, last = -1, stalled_ms = 0;

	while (stalled_ms < DRAIN_STALL_MS) {
		if (ioctl(fd, TIOCOUTQ, &queued) < 0 || queued == 0)
			return;
		if (last < 0 || queued < last)
			stalled_ms = 0;
		else
			stalled_ms += DRAIN_POLL_MS;
		last = queued;
		struct timespec pause_for = {.tv_nsec = DRAIN_POLL_MS * 1000000L};
		nanosleep(&pause_for, NULL);
	}
}

/* Runs in the session leader: waits for the shell, lets the serial line drain, then
 * ends the way the shell ended. Draining matters: when a session leader exits, the
 * kernel hangs up its terminal and throws away output not yet sent (tty_vhangup), which
 * cut the tail off a command's output. */
static void session_leader_wait(pid_t shell)
{
	int status;

	/* ^C and ^\ are for the shell, not for this short-lived wrapper. */
	signal(SIGINT, SIG_IGN);
	signal(SIGQUIT, SIG_IGN);
	while (waitpid(shell, &status, 0) < 0) {
		if (errno != EINTR)
			_exit(127);
	}
	drain_console(STDOUT_FILENO);
	if (WIFEXITED(status))
		_exit(WEXITSTATUS(status));
	int sig = WTERMSIG(status);
	signal(sig, SIG_DFL);
	kill(getpid(), sig);
	_exit(128 + sig);
}

static pid_t spawn_command(const char *command, const sigset_t *old_mask)
{
	pid_t pid = fork();

	if (pid < 0) {
		say("mote-init: fork: %s", strerror(errno));
		return -1;
	}
	if (pid > 0)
		return pid;

	sigprocmask(SIG_SETMASK, old_mask, NULL);
	setsid();
	child_take_tty();
	pid_t shell = fork();
	if (shell < 0) {
		say("mote-init: fork: %s", strerror(errno));
		_exit(127);
	}
	if (shell > 0)
		session_leader_wait(shell);

	char *const argv[] = {"sh", "-c", (char *)command, NULL};
	char *const envp[] = {"PATH=/bin:/sbin:/usr/bin:/usr/sbin", "HOME=/", "TERM=linux", NULL};
	execve("/bin/sh", argv, envp);
	say("mote-init: exec /bin/sh: %s", strerror(errno));
	_exit(127);
}

/* sync, then the power-off byte (mote exits on it); under another VMM fall back to a
 * reboot, which `reboot=t -no-reboot` or `reboot=k` turn into the VMM exiting. */
static void power_off(bool write_port)
{
	/* Let the console send what is queued before the VM goes away. */
	drain_console(STDERR_FILENO);
	/* Every other process ends first (the agent, its commands, orphans), so none
	 * writes after the sync and the read-only remount finds no file open for writing. */
	kill(-1, SIGKILL);
	reap_all();
	sync();
	/* A root disk remounted read-only is left clean (no journal to replay at the next
	 * boot, nothing for fsck on the host). Best effort: it fails while a process still
	 * has a file open for writing, and the sync above has made the data durable. */
	if (mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY, NULL) < 0) {
		/* Nothing to report: the power-off goes ahead either way. */
	}
	if (write_port)
		port_write(DEBUG_PORT_POWER_OFF);
	reboot(RB_AUTOBOOT);
	say("mote-init: reboot: %s", strerror(errno));
	for (;;)
		pause();
}

struct agent_child {
	uint32_t port; /* 0: no agent */
	pid_t pid;     /* -1 while none runs */
	time_t started;
};

/* The agent's POWER_OFF: PID 1 powers off on SIGUSR2 like on busybox `poweroff`. */
static void agent_power_off(void *opaque)
{
	(void)opaque;
	kill(1, SIGUSR2);
}

static void agent_start(struct agent_child *agent, const sigset_t *old_mask)
{
	struct timespec now;
	pid_t pid = fork();

	if (pid < 0) {
		say("mote-init: fork: %s", strerror(errno));
		agent->pid = -1;
		return;
	}
	if (pid == 0) {
		struct agent_config config = {.power_off = agent_power_off};
		sigprocmask(SIG_SETMASK, old_mask, NULL);
		_exit(agent_main(agent->port, &config));
	}
	clock_gettime(CLOCK_MONOTONIC, &now);
	agent->pid = pid;
	agent->started = now.tv_sec;
}

/* Restarts an agent that ran for a while (it broke, it must come back); one that
 * failed at once would fail again. Returns false when the agent is gone for good. */
static bool agent_exited(struct agent_child *agent, int status, const sigset_t *old_mask)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	if (WIFEXITED(status))
		say("mote-init: agent exited with status %d", WEXITSTATUS(status));
	else
		say("mote-init: agent killed by signal %d", WTERMSIG(status));
	agent->pid = -1;
	/* It retries for seconds before it gives up listening, longer than the time that
	 * tells a crash loop from a break: its status says so. */
	if (WIFEXITED(status) && WEXITSTATUS(status) == AGENT_EXIT_CANNOT_LISTEN)
		return false;
	if (now.tv_sec - agent->started < AGENT_RESTART_MIN_S)
		return false;
	agent_start(agent, old_mask);
	return agent->pid > 0;
}

/* Waits for SIGCHLD and the shutdown signals with them blocked (sigwaitinfo), so no
 * signal can slip in between a check and a wait. Reaps every child (PID 1 inherits
 * orphans) and restarts the agent when it breaks; returns when `target` exits (with
 * no target: when the agent is gone for good), or powers off on request. */
static void supervise(pid_t target, struct agent_child *agent, const sigset_t *mask,
		      const sigset_t *old_mask)
{
	for (;;) {
		int status;
		pid_t pid;

		while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
			if (agent->pid > 0 && pid == agent->pid) {
				if (!agent_exited(agent, status, old_mask) && target < 0)
					return;
				continue;
			}
			if (pid != target)
				continue;
			if (WIFEXITED(status))
				say("mote-init: command exited with status %d",
				    WEXITSTATUS(status));
			else
				say("mote-init: command killed by signal %d", WTERMSIG(status));
			return;
		}

		int sig = sigwaitinfo(mask, NULL);
		if (sig < 0) {
			if (errno != EINTR)
				say("mote-init: sigwaitinfo: %s", strerror(errno));
			continue;
		}
		/* busybox: `poweroff` sends SIGUSR2, `halt` SIGUSR1, `reboot` SIGTERM. The
		 * kernel sends SIGINT for Ctrl-Alt-Del (reboot(2), LINUX_REBOOT_CMD_CAD_OFF,
		 * set in main): a reboot, as sysvinit's ctrlaltdel entry and systemd's
		 * ctrl-alt-del.target make it. */
		if (sig == SIGUSR1 || sig == SIGUSR2)
			power_off(true);
		if (sig == SIGTERM || sig == SIGINT)
			power_off(false);
	}
}

int main(void)
{
	sigset_t mask, old_mask;

	int ioperm_errno = 0;

	debug_port_usable = syscall(SYS_ioperm, DEBUG_PORT_ADDR, 1, 1) == 0;
	if (debug_port_usable)
		port_write(DEBUG_PORT_BOOT_COMPLETE);
	else
		ioperm_errno = errno;

	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGUSR1);
	sigaddset(&mask, SIGUSR2);
	sigaddset(&mask, SIGINT);
	sigprocmask(SIG_BLOCK, &mask, &old_mask);
	/* Ctrl-Alt-Del (a keyboard's, or the VMM's SendCtrlAltDel) comes to PID 1 as SIGINT
	 * instead of restarting the kernel at once, which would lose what the page cache
	 * holds: the reboot that follows syncs first (power_off). Only as the guest's
	 * PID 1: the setting is the whole kernel's. It fails only where PID 1 could not
	 * reboot anyway (no CAP_SYS_BOOT, or a PID namespace of a container). */
	if (getpid() == 1)
		(void)reboot(RB_DISABLE_CAD);

	mount_fs("proc", "/proc", "proc");
	mount_fs("sysfs", "/sys", "sysfs");
	mount_fs("devtmpfs", "/dev", "devtmpfs");
	/* Pseudo-terminals (pts(4)), for commands the agent runs on one. */
	mount_fs("devpts", "/dev/pts", "devpts");
	mount_fs("tmpfs", "/tmp", "tmpfs");
	open_console_fds();
	/* Reported only now that the console is certainly open. */
	if (ioperm_errno)
		say("mote-init: ioperm 0x%x: %s", DEBUG_PORT_ADDR, strerror(ioperm_errno));
	say("mote-init: boot complete");

	const char *cmdline = read_cmdline();
	struct agent_child agent = {.port = cmdline_agent_port(cmdline), .pid = -1};
	if (agent.port)
		agent_start(&agent, &old_mask);
	char *command = cmdline_value(cmdline, RUN_KEY);
	if (command && *command) {
		pid_t pid = spawn_command(command, &old_mask);
		if (pid > 0)
			supervise(pid, &agent, &mask, &old_mask);
	} else if (agent.pid > 0) {
		supervise(-1, &agent, &mask, &old_mask);
	}
	free(command);
	power_off(true);
}
