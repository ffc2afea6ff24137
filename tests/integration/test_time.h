/* The clock and the sleep of the integration test programs: milliseconds of
 * CLOCK_MONOTONIC, which no change of the host's time moves. */
#ifndef MOTE_TEST_TIME_H
#define MOTE_TEST_TIME_H

#include <stdint.h>
#include <time.h>

static inline int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void sleep_us(long us)
{
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
	nanosleep(&ts, NULL);
}

#endif
