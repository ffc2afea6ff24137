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

#endif
