/* A 16550A-compatible UART (the PC's COM1 at 0x3f8, IRQ 4): enough of the register
 * set for Linux's 8250 driver to probe it, print through it and read input.
 * Output goes to an fd; input is pushed in by the console thread. The device also
 * watches its output for the kernel's panic banner, so a panicking guest ends the VM
 * with a distinct exit. */
#ifndef MOTE_DEVICES_SERIAL_H
#define MOTE_DEVICES_SERIAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "../vmm/snapshot_stream.h"

#define SERIAL_COM1_ADDR 0x3f8
#define SERIAL_COM1_IRQ 4
#define SERIAL_REG_COUNT 8
#define SERIAL_RX_FIFO 1024
#define SERIAL_LINE_MAX 160
/* Output the console has not taken yet; more is dropped (serial.c). */
#define SERIAL_OUT_PENDING 65536

enum serial_event {
	SERIAL_EVENT_PANIC_START, /* "Kernel panic - not syncing" line complete */
	SERIAL_EVENT_PANIC_END,	  /* "---[ end Kernel panic" line complete */
};

struct serial_ops {
	void (*set_irq)(void *opaque, bool level);
	void (*event)(void *opaque, enum serial_event event, const char *line);
	/* Whether a vCPU writing output should stop for now (the VM pauses or ends):
	 * checked before each write; may be NULL. */
	bool (*output_should_yield)(void *opaque);
};

struct serial {
	pthread_mutex_t lock;
	/* Held by the one thread writing out[] to out_fd, without lock: a console that
	 * stops reading then stalls only that vCPU, never the device. */
	pthread_mutex_t out_lock;
	int out_fd; /* -1: output discarded */
	/* out_fd is a pipe or a socket, whose reader may leave: written with SIGPIPE held
	 * back (write_quiet.h). Files and terminals are written directly. */
	bool out_may_sigpipe;
	uint8_t out[SERIAL_OUT_PENDING];
	unsigned out_len;
	uint64_t out_dropped;  /* bytes the guest wrote while out[] was full, or past out_limit */
	uint64_t out_limit;    /* bytes of output taken at most; 0: no bound */
	uint64_t out_accepted; /* bytes of output taken so far */
	const struct serial_ops *ops;
	void *opaque;

	uint8_t ier, lcr, mcr, scr, dll, dlm, fcr;
	bool thr_interrupt; /* THR-empty interrupt pending until IIR is read or THR written */
	bool irq_level;

	uint8_t rx[SERIAL_RX_FIFO];
	unsigned rx_head, rx_count;

	char line[SERIAL_LINE_MAX];
	unsigned line_len;
};

void serial_init(struct serial *s, int out_fd, const struct serial_ops *ops, void *opaque);
void serial_destroy(struct serial *s);

/* Takes at most limit bytes of output from now on (0: no bound), then a note saying
 * so; the rest is dropped. */
void serial_set_output_limit(struct serial *s, uint64_t limit);

/* bus_access_fn for the eight registers. A byte the guest transmits is written to
 * out_fd by the writing vCPU's thread, outside the device's lock. A signal that
 * interrupts that write (a kick: the VM pauses or ends) leaves the rest pending, for
 * the next transmitted byte to take along. */
void serial_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len, bool is_write);

/* Writes the output still pending, as the next transmitted byte would (a vCPU that
 * comes back from a pause calls it, so nothing waits for the guest's next byte). */
void serial_flush_output(struct serial *s);

/* At the VM's end: writes what is pending for at most timeout_ms, only as far as the
 * console takes it without blocking; the rest is dropped. */
void serial_drain_output(struct serial *s, int timeout_ms);

/* Queues guest input; returns how many bytes fit (the rest must be retried). */
unsigned serial_receive(struct serial *s, const uint8_t *bytes, unsigned count);

/* Snapshots: every register the guest can read back (IER, LCR, MCR, SCR, FCR, the
 * divisor latch; IIR, LSR and MSR follow from these, the pending THR-empty interrupt
 * and the receive FIFO, which is saved with its bytes in order) and the line being
 * watched for a panic. Fields only, inside a section the caller opened. */
void serial_save(struct serial *s, struct snap_writer *w);

/* Loads what serial_save() wrote; a value the registers cannot hold marks r failed and
 * returns -EINVAL, leaving s as it was. On success the interrupt line is set again from
 * the loaded state (ops->set_irq), the interrupt controller having been restored
 * before: a pending interrupt is raised, at worst once more than needed. */
int serial_load(struct serial *s, struct snap_reader *r);

#endif
