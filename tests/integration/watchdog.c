/* The watchdog of an integration test program (watchdog.h). */
#include "watchdog.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "test_time.h"

/* How often the deadline is looked at: a hang is reported this much late at most. */
#define WATCHDOG_PERIOD_US 20000

void watchdog_arm(struct watchdog *dog, int seconds, const char *fmt, ...)
{
	va_list args;

	pthread_mutex_lock(&dog->lock);
	va_start(args, fmt);
	vsnprintf(dog->what, sizeof(dog->what), fmt, args);
	va_end(args);
	dog->seconds = seconds;
	dog->deadline_ms = now_ms() + seconds * 1000;
	pthread_mutex_unlock(&dog->lock);
}

void watchdog_disarm(struct watchdog *dog)
{
	pthread_mutex_lock(&dog->lock);
	dog->deadline_ms = 0;
	pthread_mutex_unlock(&dog->lock);
}

static void *watchdog_thread(void *arg)
{
	struct watchdog *dog = arg;

	for (;;) {
		pthread_mutex_lock(&dog->lock);
		bool expired = dog->deadline_ms && now_ms() >= dog->deadline_ms;
		if (expired)
			fprintf(stderr, "%s: FAIL: %s: not within %d s\n", dog->program, dog->what,
				dog->seconds);
		pthread_mutex_unlock(&dog->lock);
		if (expired) {
			fflush(stdout);
			/* Not exit(): atexit handlers and stdio locks may be held by the
			 * threads that hang. */
			_exit(1);
		}
		sleep_us(WATCHDOG_PERIOD_US);
	}
	return NULL;
}

int watchdog_start(struct watchdog *dog, const char *program)
{
	dog->program = program;
	pthread_mutex_init(&dog->lock, NULL);
	dog->deadline_ms = 0;
	return pthread_create(&dog->thread, NULL, watchdog_thread, dog);
}
