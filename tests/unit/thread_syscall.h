/* Where another thread of a test is blocked, from /proc/self/task/TID/syscall (proc(5)):
 * the number of the system call it is in and its arguments in hex, or "running". A test
 * that checks something has not happened while a thread is held first waits until that
 * thread is blocked where it is held: otherwise the check passes just as well when the
 * thread has merely not got there yet (a loaded host). Shared by test_devices,
 * test_file_image and test_cli_control; static inline, as each uses only part. */
#ifndef MOTE_TESTS_THREAD_SYSCALL_H
#define MOTE_TESTS_THREAD_SYSCALL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

/* Generous (a loaded host, sanitizers): only a failing test waits this long. */
#define THREAD_WAIT_LIMIT_S 10

/* The calling thread's id, never 0: what a thread stores, right before the call the
 * test watches, for the test to find it by. */
static inline pid_t thread_own_id(void)
{
	return (pid_t)syscall(SYS_gettid);
}

/* Whether thread tid is blocked in system call nr with a first argument in
 * [arg0, arg0 + arg0_len), or any first argument when arg0_len is 0. seen receives the
 * line the kernel gave, without its newline. */
static inline bool thread_blocked_in(pid_t tid, long nr, uintptr_t arg0, size_t arg0_len,
				     char *seen, size_t seen_len)
{
	char path[64];
	long got;
	unsigned long first;

	snprintf(seen, seen_len, "no such thread");
	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	bool read = fgets(seen, (int)seen_len, f) != NULL;
	fclose(f);
	seen[strcspn(seen, "\n")] = '\0';
	if (!read || sscanf(seen, "%ld %lx", &got, &first) != 2 || got != nr)
		return false;
	return arg0_len == 0 || first - arg0 < arg0_len;
}

/* Waits until the thread whose id *tid holds (0 until the thread stores thread_own_id())
 * is blocked as thread_blocked_in() says. Fails the test, naming what it waited for and
 * where the thread was last seen, when that has not happened within
 * THREAD_WAIT_LIMIT_S. */
static inline void thread_wait_blocked_in(_Atomic pid_t *tid, long nr, uintptr_t arg0,
					  size_t arg0_len, const char *what)
{
	struct timespec start, now;
	char seen[256] = "";

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		pid_t id = atomic_load(tid);
		if (id && thread_blocked_in(id, nr, arg0, arg0_len, seen, sizeof(seen)))
			return;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec >= THREAD_WAIT_LIMIT_S)
			fail_msg("%s: not within %d s (the thread %s%s)", what, THREAD_WAIT_LIMIT_S,
				 id ? "was last seen in: " : "never stored its id", id ? seen : "");
		usleep(1000);
	}
}

#endif
