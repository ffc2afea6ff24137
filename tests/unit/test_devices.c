/* Legacy devices as the guest sees them through their registers: the 8250 UART, the
 * i8042 reset line and the debug port. */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "thread_syscall.h"
#include "devices/debug_port.h"
#include "devices/i8042.h"
#include "devices/serial.h"

struct observer {
	int irq_changes;
	bool irq_level;
	int panic_starts, panic_ends;
	char last_line[SERIAL_LINE_MAX];
	int resets;
	int boots, power_offs;
};

static void observe_irq(void *opaque, bool level)
{
	struct observer *o = opaque;
	o->irq_changes++;
	o->irq_level = level;
}

static void observe_event(void *opaque, enum serial_event event, const char *line)
{
	struct observer *o = opaque;
	if (event == SERIAL_EVENT_PANIC_START)
		o->panic_starts++;
	else
		o->panic_ends++;
	strncpy(o->last_line, line, sizeof(o->last_line) - 1);
}

static const struct serial_ops observer_ops = {observe_irq, observe_event, NULL};

static uint8_t reg_read(struct serial *s, unsigned reg)
{
	uint8_t v = 0;
	serial_access(s, reg, &v, 1, false);
	return v;
}

static void reg_write(struct serial *s, unsigned reg, uint8_t v)
{
	serial_access(s, reg, &v, 1, true);
}

static void serial_loopback_mirrors_modem_lines_as_linux_probes(void **state)
{
	struct serial s;
	(void)state;
	serial_init(&s, -1, NULL, NULL);
	reg_write(&s, 4, 0x10 | 0x0a); /* MCR: loop, RTS, OUT2 */
	assert_int_equal(reg_read(&s, 6) & 0xf0, 0x90);
	reg_write(&s, 4, 0x10 | 0x0f);
	assert_int_equal(reg_read(&s, 6) & 0xf0, 0xf0);
	serial_destroy(&s);
}

static void serial_scratch_and_divisor_latch_hold_values(void **state)
{
	struct serial s;
	(void)state;
	serial_init(&s, -1, NULL, NULL);
	reg_write(&s, 7, 0xa5);
	assert_int_equal(reg_read(&s, 7), 0xa5);
	reg_write(&s, 3, 0x80); /* DLAB */
	reg_write(&s, 0, 0x01);
	reg_write(&s, 1, 0x02);
	assert_int_equal(reg_read(&s, 0), 0x01);
	assert_int_equal(reg_read(&s, 1), 0x02);
	reg_write(&s, 3, 0x03);
	assert_int_equal(reg_read(&s, 1), 0x00); /* IER again */
	serial_destroy(&s);
}

static void serial_transmitted_bytes_reach_the_output_fd(void **state)
{
	struct serial s;
	int fds[2];
	char buf[16] = {0};
	(void)state;
	assert_int_equal(pipe(fds), 0);
	serial_init(&s, fds[1], NULL, NULL);
	for (const char *p = "hi\n"; *p; p++)
		reg_write(&s, 0, (uint8_t)*p);
	assert_int_equal(read(fds[0], buf, sizeof(buf)), 3);
	assert_string_equal(buf, "hi\n");
	assert_int_equal(reg_read(&s, 5) & 0x60, 0x60); /* THRE | TEMT */
	close(fds[0]);
	close(fds[1]);
	serial_destroy(&s);
}

static void serial_thr_interrupt_raises_and_clears_on_iir_read(void **state)
{
	struct serial s;
	struct observer o = {0};
	(void)state;
	serial_init(&s, -1, &observer_ops, &o);
	reg_write(&s, 1, 0x02); /* IER: THRI */
	assert_true(o.irq_level);
	assert_int_equal(reg_read(&s, 2) & 0x0f, 0x02);
	assert_false(o.irq_level);
	assert_int_equal(reg_read(&s, 2) & 0x0f, 0x01);
	serial_destroy(&s);
}

static void serial_input_sets_data_ready_and_interrupts(void **state)
{
	struct serial s;
	struct observer o = {0};
	const uint8_t input[] = {'l', 's'};
	(void)state;
	serial_init(&s, -1, &observer_ops, &o);
	reg_write(&s, 1, 0x01); /* IER: RDI */
	assert_false(o.irq_level);
	assert_int_equal(serial_receive(&s, input, 2), 2);
	assert_true(o.irq_level);
	assert_int_equal(reg_read(&s, 5) & 0x01, 0x01);
	assert_int_equal(reg_read(&s, 2) & 0x0f, 0x04);
	assert_int_equal(reg_read(&s, 0), 'l');
	assert_int_equal(reg_read(&s, 0), 's');
	assert_int_equal(reg_read(&s, 5) & 0x01, 0x00);
	assert_false(o.irq_level);
	serial_destroy(&s);
}

static void serial_full_fifo_takes_only_what_fits(void **state)
{
	struct serial s;
	static uint8_t input[SERIAL_RX_FIFO + 10];
	(void)state;
	serial_init(&s, -1, NULL, NULL);
	assert_int_equal(serial_receive(&s, input, sizeof(input)), SERIAL_RX_FIFO);
	assert_int_equal(serial_receive(&s, input, 1), 0);
	serial_destroy(&s);
}

static void serial_reports_the_kernel_panic_banner(void **state)
{
	struct serial s;
	struct observer o = {0};
	const char *text = "[    1.0] Kernel panic - not syncing: VFS: Unable to mount root\r\n"
			   "[    1.1] ---[ end Kernel panic - not syncing: VFS ]---\r\n";
	(void)state;
	serial_init(&s, -1, &observer_ops, &o);
	for (const char *p = text; *p; p++)
		reg_write(&s, 0, (uint8_t)*p);
	assert_int_equal(o.panic_starts, 1);
	assert_int_equal(o.panic_ends, 1);
	serial_destroy(&s);
}

/* A panic line ends up in mote's own exit message: the guest's control bytes (an
 * escape sequence that would rewrite the user's terminal) do not go with it. */
static void serial_panic_line_carries_no_control_bytes(void **state)
{
	struct serial s;
	struct observer o = {0};
	const char *text = "Kernel panic - not syncing: \x1b[2K\x1b]52;c;eA==\a\x9b"
			   "1A done\r\n";
	(void)state;
	serial_init(&s, -1, &observer_ops, &o);
	for (const char *p = text; *p; p++)
		reg_write(&s, 0, (uint8_t)*p);
	assert_int_equal(o.panic_starts, 1);
	for (const char *p = o.last_line; *p; p++)
		if ((uint8_t)*p < 0x20 || (uint8_t)*p >= 0x7f)
			fail_msg("byte %#x reached the line", (uint8_t)*p);
	assert_non_null(strstr(o.last_line, "?[2K?]52;c;eA==??1A done"));
	serial_destroy(&s);
}

/* `mote run | head`: once the reader is gone the output goes nowhere, and the guest's
 * writes (and the line tracking) go on. SIGPIPE keeps its default action, which would
 * end this process: the library must not count on its embedder ignoring it. */
static void serial_output_to_a_closed_pipe_is_dropped(void **state)
{
	struct serial s;
	struct observer o = {0};
	int fds[2];
	const char *text = "lost\nKernel panic - not syncing: still seen\n";
	(void)state;
	signal(SIGPIPE, SIG_DFL);
	assert_int_equal(pipe(fds), 0);
	close(fds[0]);
	serial_init(&s, fds[1], &observer_ops, &o);
	for (const char *p = text; *p; p++)
		reg_write(&s, 0, (uint8_t)*p);
	assert_int_equal(o.panic_starts, 1);
	assert_int_equal(reg_read(&s, 5) & 0x60, 0x60);
	assert_true(s.out_fd < 0); /* no write per byte into a pipe nobody reads */
	close(fds[1]);
	serial_destroy(&s);
}

/* A console that fails a write (a full disk: /dev/full) loses those bytes only; the
 * output stays on for what comes later. Only a reader gone (EPIPE) turns it off. */
static void serial_write_errors_drop_bytes_but_keep_the_console(void **state)
{
	struct serial s;
	(void)state;
	int full = open("/dev/full", O_WRONLY);
	assert_true(full >= 0);
	serial_init(&s, full, NULL, NULL);
	for (const char *p = "abc"; *p; p++)
		reg_write(&s, 0, (uint8_t)*p);
	assert_int_equal(s.out_fd, full);
	assert_int_equal(s.out_dropped, 3);
	assert_int_equal(s.out_len, 0);
	close(full);
	serial_destroy(&s);
}

/* A console file gets at most its limit of a run's output, then a note; the rest is
 * dropped, and the panic watch still sees every line. */
static void serial_output_past_the_limit_is_dropped_after_a_note(void **state)
{
	struct serial s;
	struct observer o = {0};
	char buf[256];
	int fds[2];
	(void)state;
	assert_int_equal(pipe(fds), 0);
	serial_init(&s, fds[1], &observer_ops, &o);
	serial_set_output_limit(&s, 5);
	for (const char *p = "12345678\nKernel panic - not syncing: x\n"; *p; p++)
		reg_write(&s, 0, (uint8_t)*p);
	ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
	assert_true(n > 5);
	buf[n] = '\0';
	static const char expect[] = "12345\n[mote: console output limit reached";
	assert_memory_equal(buf, expect, sizeof(expect) - 1);
	assert_null(strstr(buf, "678"));
	assert_null(strstr(buf, "Kernel panic"));
	assert_int_equal(o.panic_starts, 1);
	assert_int_equal(s.out_dropped, 4 + strlen("Kernel panic - not syncing: x\n"));
	close(fds[0]);
	close(fds[1]);
	serial_destroy(&s);
}

static void no_op_handler(int sig)
{
	(void)sig;
}

struct access_job {
	struct serial *s;
	unsigned reg;
	uint8_t value;
	bool write;
	_Atomic pid_t tid; /* the thread's, stored before the access */
};

static void *access_thread(void *arg)
{
	struct access_job *job = arg;

	atomic_store(&job->tid, thread_own_id());
	if (job->write)
		reg_write(job->s, job->reg, job->value);
	else
		job->value = reg_read(job->s, job->reg);
	return NULL;
}

/* CLOCK_REALTIME ms from now, for pthread_timedjoin_np(). */
static struct timespec realtime_after_ms(long ms)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	t.tv_sec += ms / 1000;
	t.tv_nsec += ms % 1000 * 1000000L;
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	return t;
}

/* Joins t, failing the test if it has not ended within 5 s. */
static void join_within(pthread_t t, const char *what)
{
	struct timespec deadline = realtime_after_ms(5000);

	if (pthread_timedjoin_np(t, NULL, &deadline) != 0)
		fail_msg("%s did not return within 5 s", what);
}

/* A console that stops reading (a pager held at its prompt) stalls the vCPU that writes
 * to it, not the device: another vCPU still reads the UART, and a kick (a pause, the
 * VM's end) gets the writer out. What it could not write goes out, in order, with the
 * next byte once the console reads again. */
static void serial_stalled_console_stalls_only_the_writer(void **state)
{
	struct serial s;
	struct sigaction action = {.sa_handler = no_op_handler}; /* no SA_RESTART */
	char buf[4096];
	int fds[2];
	pthread_t writer, reader;
	(void)state;

	sigaction(SIGUSR1, &action, NULL);
	assert_int_equal(pipe(fds), 0);
	fcntl(fds[1], F_SETFL, O_NONBLOCK);
	while (write(fds[1], buf, sizeof(buf)) > 0)
		;
	fcntl(fds[1], F_SETFL, 0);
	serial_init(&s, fds[1], NULL, NULL);

	struct access_job put = {.s = &s, .reg = 0, .value = 'x', .write = true};
	assert_int_equal(pthread_create(&writer, NULL, access_thread, &put), 0);
	thread_wait_blocked_in(&put.tid, SYS_write, (uintptr_t)fds[1], 1,
			       "the writer blocked in write() to the full console pipe");
	struct access_job lsr = {.s = &s, .reg = 5, .value = 0, .write = false};
	assert_int_equal(pthread_create(&reader, NULL, access_thread, &lsr), 0);
	join_within(reader, "a read of LSR while another vCPU's output is stalled");
	assert_int_equal(lsr.value & 0x60, 0x60);
	/* Kicked until it lets go, as the VM does: a kick just before the write() would
	 * not be felt by it. */
	for (int i = 0; i < 500; i++) {
		pthread_kill(writer, SIGUSR1);
		struct timespec soon = realtime_after_ms(10);
		if (pthread_timedjoin_np(writer, NULL, &soon) == 0) {
			writer = 0;
			break;
		}
	}
	if (writer)
		fail_msg("the stalled writer did not return once kicked");

	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	while (read(fds[0], buf, sizeof(buf)) > 0)
		;
	reg_write(&s, 0, 'y');
	assert_int_equal(read(fds[0], buf, sizeof(buf)), 2);
	assert_memory_equal(buf, "xy", 2);
	close(fds[0]);
	close(fds[1]);
	serial_destroy(&s);
}

static void serial_long_lines_are_bounded(void **state)
{
	struct serial s;
	struct observer o = {0};
	(void)state;
	serial_init(&s, -1, &observer_ops, &o);
	for (int i = 0; i < 10000; i++)
		reg_write(&s, 0, 'x');
	reg_write(&s, 0, '\n');
	assert_int_equal(o.panic_starts, 0);
	serial_destroy(&s);
}

static void count_reset(void *opaque)
{
	((struct observer *)opaque)->resets++;
}

static void i8042_pulse_reset_command_resets(void **state)
{
	struct i8042 dev;
	struct observer o = {0};
	uint8_t v;
	(void)state;
	i8042_init(&dev, count_reset, &o);
	i8042_command_access(&dev, 0, &v, 1, false);
	assert_int_equal(v & 0x02, 0); /* input buffer empty: reboot=k proceeds */
	v = 0xfe;
	i8042_command_access(&dev, 0, &v, 1, true);
	assert_int_equal(o.resets, 1);
}

static void i8042_control_byte_round_trips(void **state)
{
	struct i8042 dev;
	uint8_t v;
	(void)state;
	i8042_init(&dev, NULL, NULL);
	v = 0x60;
	i8042_command_access(&dev, 0, &v, 1, true);
	v = 0x45;
	i8042_data_access(&dev, 0, &v, 1, true);
	v = 0x20;
	i8042_command_access(&dev, 0, &v, 1, true);
	i8042_command_access(&dev, 0, &v, 1, false);
	assert_int_equal(v & 0x01, 0x01);
	i8042_data_access(&dev, 0, &v, 1, false);
	assert_int_equal(v, 0x45);
}

static void count_debug(void *opaque, enum debug_port_event event)
{
	struct observer *o = opaque;
	if (event == DEBUG_PORT_EVENT_BOOT_COMPLETE)
		o->boots++;
	else
		o->power_offs++;
}

static void debug_port_recognises_boot_and_power_off_only(void **state)
{
	struct debug_port port;
	struct observer o = {0};
	uint8_t v;
	(void)state;
	debug_port_init(&port, count_debug, &o);
	v = DEBUG_PORT_BOOT_COMPLETE;
	debug_port_access(&port, 0, &v, 1, true);
	v = 0x00;
	debug_port_access(&port, 0, &v, 1, true);
	v = DEBUG_PORT_POWER_OFF;
	debug_port_access(&port, 0, &v, 1, true);
	assert_int_equal(o.boots, 1);
	assert_int_equal(o.power_offs, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(serial_loopback_mirrors_modem_lines_as_linux_probes),
	    cmocka_unit_test(serial_scratch_and_divisor_latch_hold_values),
	    cmocka_unit_test(serial_transmitted_bytes_reach_the_output_fd),
	    cmocka_unit_test(serial_thr_interrupt_raises_and_clears_on_iir_read),
	    cmocka_unit_test(serial_input_sets_data_ready_and_interrupts),
	    cmocka_unit_test(serial_full_fifo_takes_only_what_fits),
	    cmocka_unit_test(serial_reports_the_kernel_panic_banner),
	    cmocka_unit_test(serial_panic_line_carries_no_control_bytes),
	    cmocka_unit_test(serial_output_to_a_closed_pipe_is_dropped),
	    cmocka_unit_test(serial_stalled_console_stalls_only_the_writer),
	    cmocka_unit_test(serial_write_errors_drop_bytes_but_keep_the_console),
	    cmocka_unit_test(serial_output_past_the_limit_is_dropped_after_a_note),
	    cmocka_unit_test(serial_long_lines_are_bounded),
	    cmocka_unit_test(i8042_pulse_reset_command_resets),
	    cmocka_unit_test(i8042_control_byte_round_trips),
	    cmocka_unit_test(debug_port_recognises_boot_and_power_off_only),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
