/* The one clock that deadlines and durations are measured on. */
#ifndef MOTE_CLOCK_H
#define MOTE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds: nobody sets it, so deadlines taken from it do not move
 * when the wall clock does. (Suspended time does not count; mote has no use for it.) */
static inline int64_t clock_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#define NS_PER_MS 1000000LL
#define NS_PER_S 1000000000LL

/* A deadline that never comes, or a bound on a wait that is none. */
#define CLOCK_FOREVER INT64_MAX

/* The deadline ns from now: CLOCK_FOREVER for a wait with no bound (ns CLOCK_FOREVER). */
static inline int64_t clock_deadline_in(int64_t ns)
{
	return ns == CLOCK_FOREVER ? CLOCK_FOREVER : clock_now_ns() + ns;
}

/* A CLOCK_MONOTONIC time as pthread_cond_timedwait() takes it (for a condition variable
 * set up with pthread_condattr_setclock(CLOCK_MONOTONIC)). */
static inline struct timespec clock_timespec(int64_t ns)
{
	return (struct timespec){.tv_sec = ns / NS_PER_S, .tv_nsec = ns % NS_PER_S};
}

#endif
