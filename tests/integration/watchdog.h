/* A deadline for the step at work in an integration test program: a step that outlives
 * it ends the program with status 1, naming the step, rather than hang the test run
 * (another thread may be stuck inside libmote, where no join would return). */
#ifndef MOTE_TEST_WATCHDOG_H
#define MOTE_TEST_WATCHDOG_H

#include <pthread.h>
#include <stdint.h>

struct watchdog {
	const char *program; /* begins the failure's line */
	pthread_mutex_t lock;
	int64_t deadline_ms; /* 0: none */
	int seconds;
	char what[200];
	pthread_t thread;
};

/* Starts the thread that watches dog (disarmed); 0 or an error number. */
int watchdog_start(struct watchdog *dog, const char *program);

/* From now on, the step named by fmt has seconds to finish. */
void watchdog_arm(struct watchdog *dog, int seconds, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void watchdog_disarm(struct watchdog *dog);

#endif
