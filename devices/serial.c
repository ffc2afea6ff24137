#include "serial.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../vmm/clock.h"
#include "../vmm/write_quiet.h"

/* Register offsets and bits: the 16550A data sheet, as Linux names them in
 * include/uapi/linux/serial_reg.h. */
enum {
	REG_RBR_THR_DLL = 0,
	REG_IER_DLM = 1,
	REG_IIR_FCR = 2,
	REG_LCR = 3,
	REG_MCR = 4,
	REG_LSR = 5,
	REG_MSR = 6,
	REG_SCR = 7,
};
#define IER_RDI 0x01
#define IER_THRI 0x02
#define IIR_NO_INT 0x01
#define IIR_THRI 0x02
#define IIR_RDI 0x04
#define IIR_FIFO_ENABLED 0xc0
#define FCR_ENABLE_FIFO 0x01
#define FCR_CLEAR_RCVR 0x02
#define LCR_DLAB 0x80
#define MCR_DTR 0x01
#define MCR_RTS 0x02
#define MCR_OUT1 0x04
#define MCR_OUT2 0x08
#define MCR_LOOP 0x10
#define LSR_DR 0x01
#define LSR_THRE 0x20
#define LSR_TEMT 0x40
#define MSR_CTS 0x10
#define MSR_DSR 0x20
#define MSR_RI 0x40
#define MSR_DCD 0x80

static const char panic_start[] = "Kernel panic - not syncing";
static const char panic_end[] = "---[ end Kernel panic";

void serial_init(struct serial *s, int out_fd, const struct serial_ops *ops, void *opaque)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->out_lock, NULL);
	s->out_fd = out_fd;
	struct stat st;
	s->out_may_sigpipe = out_fd >= 0 && (fstat(out_fd, &st) != 0 || S_ISFIFO(st.st_mode) ||
					     S_ISSOCK(st.st_mode));
	s->ops = ops;
	s->opaque = opaque;
	/* Power-on values: 8 data bits, DTR/RTS/OUT2 as the BIOS would leave them. */
	s->lcr = 0x03;
	s->mcr = MCR_OUT2;
	s->dll = 0x0c; /* 9600 baud at the 1.8432 MHz clock */
}

void serial_destroy(struct serial *s)
{
	pthread_mutex_destroy(&s->out_lock);
	pthread_mutex_destroy(&s->lock);
}

static uint8_t serial_iir(const struct serial *s)
{
	uint8_t fifo = (s->fcr & FCR_ENABLE_FIFO) ? IIR_FIFO_ENABLED : 0;

	if ((s->ier & IER_RDI) && s->rx_count)
		return fifo | IIR_RDI;
	if ((s->ier & IER_THRI) && s->thr_interrupt)
		return fifo | IIR_THRI;
	return fifo | IIR_NO_INT;
}

/* Called with the lock held. The line follows "an interrupt is pending", which the
 * IOAPIC sees as an edge when it rises. */
static void serial_update_irq(struct serial *s)
{
	bool level = !(serial_iir(s) & IIR_NO_INT);

	if (level != s->irq_level) {
		s->irq_level = level;
		if (s->ops && s->ops->set_irq)
			s->ops->set_irq(s->opaque, level);
	}
}

static void serial_track_line(struct serial *s, uint8_t byte)
{
	if (byte == '\n') {
		s->line[s->line_len] = '\0';
		if (s->ops && s->ops->event) {
			/* The end banner repeats the start text, so test it first. */
			if (strstr(s->line, panic_end))
				s->ops->event(s->opaque, SERIAL_EVENT_PANIC_END, s->line);
			else if (strstr(s->line, panic_start))
				s->ops->event(s->opaque, SERIAL_EVENT_PANIC_START, s->line);
		}
		s->line_len = 0;
	} else if (byte != '\r' && s->line_len < SERIAL_LINE_MAX - 1) {
		/* The line may end up in mote's own messages (a panic's): no escape sequence
		 * or other control byte of the guest's goes there. */
		s->line[s->line_len++] = byte >= 0x20 && byte < 0x7f ? (char)byte : '?';
	}
}

void serial_set_output_limit(struct serial *s, uint64_t limit)
{
	pthread_mutex_lock(&s->lock);
	s->out_limit = limit;
	s->out_accepted = 0;
	pthread_mutex_unlock(&s->lock);
}

/* For serial_flush_output(), which writes once the lock is released. Called with it. */
static void serial_queue_output(struct serial *s, uint8_t byte)
{
	static const char limit_note[] = "\n[mote: console output limit reached; the rest of the "
					 "guest's output is dropped]\n";

	if (s->out_fd < 0)
		return;
	if (s->out_limit && s->out_accepted >= s->out_limit) {
		s->out_dropped++;
		return;
	}
	if (s->out_len == SERIAL_OUT_PENDING) {
		s->out_dropped++;
		return;
	}
	s->out[s->out_len++] = byte;
	if (++s->out_accepted == s->out_limit &&
	    s->out_len + sizeof(limit_note) - 1 <= SERIAL_OUT_PENDING) {
		memcpy(s->out + s->out_len, limit_note, sizeof(limit_note) - 1);
		s->out_len += sizeof(limit_note) - 1;
	}
}

static void serial_transmit(struct serial *s, uint8_t byte)
{
	if (s->mcr & MCR_LOOP) {
		if (s->rx_count < SERIAL_RX_FIFO) {
			s->rx[(s->rx_head + s->rx_count) % SERIAL_RX_FIFO] = byte;
			s->rx_count++;
		}
	} else {
		serial_queue_output(s, byte);
		serial_track_line(s, byte);
	}
	s->thr_interrupt = true;
}

static uint8_t serial_msr(const struct serial *s)
{
	if (!(s->mcr & MCR_LOOP))
		return MSR_DCD | MSR_DSR | MSR_CTS;
	/* Loopback: the modem outputs drive the inputs; Linux's probe checks this. */
	return ((s->mcr & MCR_DTR) ? MSR_DSR : 0) | ((s->mcr & MCR_RTS) ? MSR_CTS : 0) |
	       ((s->mcr & MCR_OUT1) ? MSR_RI : 0) | ((s->mcr & MCR_OUT2) ? MSR_DCD : 0);
}

static uint8_t serial_read(struct serial *s, uint64_t reg)
{
	uint8_t value = 0;

	switch (reg) {
	case REG_RBR_THR_DLL:
		if (s->lcr & LCR_DLAB)
			return s->dll;
		if (s->rx_count) {
			value = s->rx[s->rx_head];
			s->rx_head = (s->rx_head + 1) % SERIAL_RX_FIFO;
			s->rx_count--;
		}
		return value;
	case REG_IER_DLM:
		return (s->lcr & LCR_DLAB) ? s->dlm : s->ier;
	case REG_IIR_FCR:
		value = serial_iir(s);
		/* Reading IIR while it reports THRI clears that interrupt (16550A). */
		if ((value & 0x0f) == IIR_THRI)
			s->thr_interrupt = false;
		return value;
	case REG_LCR:
		return s->lcr;
	case REG_MCR:
		return s->mcr;
	case REG_LSR:
		return LSR_THRE | LSR_TEMT | (s->rx_count ? LSR_DR : 0);
	case REG_MSR:
		return serial_msr(s);
	case REG_SCR:
		return s->scr;
	}
	return 0;
}

static void serial_write(struct serial *s, uint64_t reg, uint8_t value)
{
	switch (reg) {
	case REG_RBR_THR_DLL:
		if (s->lcr & LCR_DLAB)
			s->dll = value;
		else
			serial_transmit(s, value);
		break;
	case REG_IER_DLM:
		if (s->lcr & LCR_DLAB) {
			s->dlm = value;
		} else {
			/* Enabling THRI with an empty THR raises the interrupt at once. */
			if (!(s->ier & IER_THRI) && (value & IER_THRI))
				s->thr_interrupt = true;
			s->ier = value & 0x0f;
		}
		break;
	case REG_IIR_FCR:
		s->fcr = value & 0xc9;
		if (value & FCR_CLEAR_RCVR)
			s->rx_count = 0;
		break;
	case REG_LCR:
		s->lcr = value;
		break;
	case REG_MCR:
		s->mcr = value & 0x1f;
		break;
	case REG_SCR:
		s->scr = value;
		break;
	default: /* LSR and MSR are read-only */
		break;
	}
}

/* Drops the first n pending bytes (written, or not writable). Called with the lock. */
static void serial_consume(struct serial *s, unsigned n)
{
	memmove(s->out, s->out + n, s->out_len - n);
	s->out_len -= n;
}

/* Waits until fd takes output; -EINTR when a signal (a kick) came first. */
static int serial_wait_writable(int fd, int timeout_ms)
{
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	int ready = poll(&p, 1, timeout_ms);

	if (ready < 0 && errno == EINTR)
		return -EINTR;
	return ready > 0 ? 0 : -ETIMEDOUT;
}

/* One write of what is pending, made without the lock: a slow console stalls this
 * thread only. 1 when it made progress (or dropped what cannot be written), 0 when
 * nothing is left, -EINTR when the writer is to stop for now: the VM pauses or ends
 * (asked before the write, or a kick interrupted it). */
static int serial_write_pending(struct serial *s, unsigned max, bool may_yield)
{
	uint8_t chunk[4096];

	pthread_mutex_lock(&s->lock);
	int fd = s->out_fd;
	unsigned len = s->out_len < max ? s->out_len : max;
	memcpy(chunk, s->out, len);
	pthread_mutex_unlock(&s->lock);
	if (!len || fd < 0)
		return 0;
	if (may_yield && s->ops && s->ops->output_should_yield &&
	    s->ops->output_should_yield(s->opaque))
		return -EINTR;
	ssize_t n = s->out_may_sigpipe ? write_quiet(fd, chunk, len) : write(fd, chunk, len);
	if (n < 0 && errno == EINTR)
		return -EINTR;
	/* A console fd the embedder made non-blocking: wait as a blocking one would. */
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return serial_wait_writable(fd, -1) == -EINTR ? -EINTR : 1;
	pthread_mutex_lock(&s->lock);
	if (n < 0 && errno == EPIPE) {
		/* The reader went away (`mote run | head`): the output goes nowhere from
		 * now on, and the guest runs on. */
		s->out_fd = -1;
		s->out_len = 0;
	} else if (n < 0) {
		/* ENOSPC, EIO...: these bytes are lost, later ones are tried again. */
		s->out_dropped += len;
		serial_consume(s, len);
	} else {
		serial_consume(s, (unsigned)n);
	}
	pthread_mutex_unlock(&s->lock);
	return 1;
}

void serial_flush_output(struct serial *s)
{
	/* Unless another thread is writing: that one takes these bytes along, in order.
	 * The writer looks again after letting go, so a byte added meanwhile is not left
	 * behind; told to stop, it leaves the rest for the next flush. */
	for (;;) {
		if (pthread_mutex_trylock(&s->out_lock) != 0)
			return;
		int ret;
		while ((ret = serial_write_pending(s, 4096, true)) > 0)
			;
		pthread_mutex_unlock(&s->out_lock);
		if (ret == -EINTR)
			return;
		pthread_mutex_lock(&s->lock);
		bool more = s->out_len > 0 && s->out_fd >= 0;
		pthread_mutex_unlock(&s->lock);
		if (!more)
			return;
	}
}

void serial_drain_output(struct serial *s, int timeout_ms)
{
	int64_t deadline_ns = clock_now_ns() + (int64_t)timeout_ms * 1000000;

	pthread_mutex_lock(&s->out_lock);
	for (;;) {
		pthread_mutex_lock(&s->lock);
		int fd = s->out_len ? s->out_fd : -1;
		pthread_mutex_unlock(&s->lock);
		int64_t left = (deadline_ns - clock_now_ns()) / 1000000;
		if (fd < 0 || left <= 0 || serial_wait_writable(fd, (int)left) != 0)
			break;
		/* Small pieces: a console that polls writable may still have little room.
		 * The VM has ended: no yielding to it now. */
		serial_write_pending(s, 256, false);
	}
	pthread_mutex_unlock(&s->out_lock);
}

void serial_access(void *opaque, uint64_t offset, uint8_t *data, uint32_t len, bool is_write)
{
	struct serial *s = opaque;

	/* The UART is byte-wide; a wider access touches only its first byte. */
	if (offset >= SERIAL_REG_COUNT || len == 0)
		return;
	pthread_mutex_lock(&s->lock);
	if (is_write) {
		serial_write(s, offset, data[0]);
	} else {
		memset(data, 0, len);
		data[0] = serial_read(s, offset);
	}
	serial_update_irq(s);
	pthread_mutex_unlock(&s->lock);
	if (is_write && offset == REG_RBR_THR_DLL)
		serial_flush_output(s);
}

unsigned serial_receive(struct serial *s, const uint8_t *bytes, unsigned count)
{
	unsigned taken = 0;

	pthread_mutex_lock(&s->lock);
	while (taken < count && s->rx_count < SERIAL_RX_FIFO) {
		s->rx[(s->rx_head + s->rx_count) % SERIAL_RX_FIFO] = bytes[taken++];
		s->rx_count++;
	}
	serial_update_irq(s);
	pthread_mutex_unlock(&s->lock);
	return taken;
}

void serial_save(struct serial *s, struct snap_writer *w)
{
	pthread_mutex_lock(&s->lock);
	snap_put_u8(w, s->ier);
	snap_put_u8(w, s->lcr);
	snap_put_u8(w, s->mcr);
	snap_put_u8(w, s->scr);
	snap_put_u8(w, s->dll);
	snap_put_u8(w, s->dlm);
	snap_put_u8(w, s->fcr);
	snap_put_bool(w, s->thr_interrupt);
	snap_put_u16(w, (uint16_t)s->rx_count);
	for (unsigned i = 0; i < s->rx_count; i++)
		snap_put_u8(w, s->rx[(s->rx_head + i) % SERIAL_RX_FIFO]);
	snap_put_u16(w, (uint16_t)s->line_len);
	snap_put_bytes(w, s->line, s->line_len);
	pthread_mutex_unlock(&s->lock);
}

int serial_load(struct serial *s, struct snap_reader *r)
{
	uint8_t ier = snap_get_u8(r), lcr = snap_get_u8(r), mcr = snap_get_u8(r);
	uint8_t scr = snap_get_u8(r), dll = snap_get_u8(r), dlm = snap_get_u8(r);
	uint8_t fcr = snap_get_u8(r);
	bool thr_interrupt = snap_get_bool(r);
	uint8_t rx[SERIAL_RX_FIFO];
	char line[SERIAL_LINE_MAX];

	uint16_t rx_count = snap_get_u16(r);
	if (!r->error && rx_count > SERIAL_RX_FIFO)
		return snap_fail(r, "serial: more received bytes than its FIFO holds");
	snap_get_bytes(r, rx, rx_count);
	uint16_t line_len = snap_get_u16(r);
	if (!r->error && line_len >= SERIAL_LINE_MAX)
		return snap_fail(r, "serial: an output line longer than the device keeps");
	snap_get_bytes(r, line, line_len);
	if (r->error)
		return -EINVAL;
	/* What serial_track_line() keeps: printable ASCII only, since the line may end up
	 * in mote's own messages. */
	for (uint16_t i = 0; i < line_len; i++)
		if ((unsigned char)line[i] < 0x20 || (unsigned char)line[i] >= 0x7f)
			return snap_fail(r, "serial: an output line holds a control byte");
	/* The bits serial_write() keeps. */
	if ((ier & ~0x0f) || (mcr & ~0x1f) || (fcr & ~0xc9))
		return snap_fail(r, "serial: a register holds bits the UART does not have");

	pthread_mutex_lock(&s->lock);
	s->ier = ier;
	s->lcr = lcr;
	s->mcr = mcr;
	s->scr = scr;
	s->dll = dll;
	s->dlm = dlm;
	s->fcr = fcr;
	s->thr_interrupt = thr_interrupt;
	memcpy(s->rx, rx, rx_count);
	s->rx_head = 0;
	s->rx_count = rx_count;
	memcpy(s->line, line, line_len);
	s->line_len = line_len;
	/* The interrupt controller's line starts low in a new VM. */
	s->irq_level = false;
	serial_update_irq(s);
	pthread_mutex_unlock(&s->lock);
	return 0;
}
