/* libFuzzer target: a hostile guest's register accesses, in any order, width and
 * offset, not a driver's orderly bring-up: a virtio-blk disk's virtio-mmio window
 * (every register and its config space, with queue addresses the input chooses) and the
 * port I/O bus with the serial port, the i8042 and the debug port, as the VM registers
 * them. The input is a sequence of accesses, then bytes for guest RAM where rings and
 * buffers may lie. Whatever the accesses, the devices must answer or refuse without
 * touching host memory outside guest RAM (ASan watches) and without hanging. */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devices/debug_port.h"
#include "fuzz_port_devices.h"
#include "fuzz_blk_disk.h"
#include "vmm/bus.h"

#define RAM_SIZE (16 << 20) /* guest memory's smallest size */
#define RAM_FILL_BASE 0x10000ULL
#define RAM_FILL_SIZE 0x40000ULL
#define IMAGE_SIZE (256 << 10)
#define MMIO_WINDOW 0x200 /* the transport's registers, config space and beyond */
#define MAX_OPS 256

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct harness {
	struct guest_memory mem;
	struct event_loop loop;
	struct virtio_blk *blk;
	struct virtio_mmio mmio;
	struct bus pio;
	struct serial serial;
	struct i8042 i8042;
	struct debug_port debug_port;
};

static void no_notify(void *opaque, enum debug_port_event event)
{
	(void)opaque;
	(void)event;
}

/* The port ranges as vm.c registers them. */
static int register_ports(struct harness *h)
{
	bus_init(&h->pio, "pio");
	return bus_register(&h->pio, SERIAL_COM1_ADDR, SERIAL_REG_COUNT, serial_access, &h->serial,
			    "serial", NULL) ||
	       bus_register(&h->pio, I8042_DATA_PORT, 1, i8042_data_access, &h->i8042, "i8042",
			    NULL) ||
	       bus_register(&h->pio, I8042_COMMAND_PORT, 1, i8042_command_access, &h->i8042,
			    "i8042", NULL) ||
	       bus_register(&h->pio, DEBUG_PORT_ADDR, DEBUG_PORT_LEN, debug_port_access,
			    &h->debug_port, "debug port", NULL);
}

/* Created once: per-input setup would dominate the run. */
static struct harness *harness_get(void)
{
	static struct harness h;
	static int state; /* 0 new, 1 ready, -1 failed */

	if (state)
		return state > 0 ? &h : NULL;
	state = -1;
	if (guest_memory_create(&h.mem, RAM_SIZE, NULL) || event_loop_init(&h.loop) ||
	    fuzz_blk_disk_create(&h.mem, &h.loop, IMAGE_SIZE, false, &h.blk, &h.mmio))
		return NULL;
	fuzz_port_devices_init(&h.serial, &h.i8042);
	debug_port_init(&h.debug_port, no_notify, NULL);
	if (register_ports(&h))
		return NULL;
	state = 1;
	return &h;
}

/* One access: where, how wide, which way, what value; then whether to let the event
 * thread's work run (a queue notify's, an I/O completion's). */
struct fuzz_op {
	uint8_t kind;	/* bit 0: port I/O (else MMIO); bit 1: write; bit 2: run the loop */
	uint8_t width;	/* 1, 2, 4 or 8 bytes, from the low two bits */
	uint16_t where; /* MMIO offset in the window, or the port (folded onto the devices') */
	uint64_t value;
} __attribute__((packed));

static const uint16_t ports[] = {SERIAL_COM1_ADDR, I8042_DATA_PORT, I8042_COMMAND_PORT,
				 DEBUG_PORT_ADDR};

static void run_op(struct harness *h, const struct fuzz_op *op)
{
	uint32_t len = 1u << (op->width & 3);
	uint8_t buf[8];
	bool is_write = op->kind & 2;

	memcpy(buf, &op->value, sizeof(buf));
	if (op->kind & 1) {
		/* Mostly onto a device's ports (serial's eight registers), sometimes
		 * anywhere: an unclaimed port must read as all ones. */
		uint16_t port = op->where & 0x8000
				    ? op->where
				    : (uint16_t)(ports[op->where % 4] + (op->where >> 2) % 8);
		bus_dispatch(&h->pio, port, buf, len, is_write);
	} else {
		virtio_mmio_access(&h->mmio, op->where % MMIO_WINDOW, buf, len, is_write);
	}
	if (op->kind & 4) {
		for (int i = 0; i < 8 && event_loop_run_once(&h->loop, 0) > 0; i++) {
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct harness *h = harness_get();
	uint8_t count;

	if (!h)
		abort(); /* the host, not the input: no run would mean anything */
	if (size < 1)
		return 0;
	count = data[0] % MAX_OPS;
	data++;
	size--;
	size_t ops_bytes = (size_t)count * sizeof(struct fuzz_op);
	if (ops_bytes > size)
		ops_bytes = size - size % sizeof(struct fuzz_op);
	/* Guest RAM starts all zeros for every input (the last one's device writes may
	 * have landed anywhere): punching out the memfd's pages costs what was touched. */
	if (fallocate(h->mem.memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, RAM_SIZE) < 0)
		abort();
	/* What follows the accesses is guest RAM where the input's queue addresses may
	 * point. */
	uint8_t *ram = guest_memory_ptr(&h->mem, RAM_FILL_BASE, RAM_FILL_SIZE);
	size_t fill = size - ops_bytes < RAM_FILL_SIZE ? size - ops_bytes : RAM_FILL_SIZE;
	memcpy(ram, data + ops_bytes, fill);

	for (size_t off = 0; off < ops_bytes; off += sizeof(struct fuzz_op)) {
		struct fuzz_op op;
		memcpy(&op, data + off, sizeof(op));
		run_op(h, &op);
	}
	/* The next input starts from power-on: the disk reset (its I/O drained), the
	 * serial port's and the i8042's output read away. */
	fuzz_mmio_write(&h->mmio, VIRTIO_MMIO_STATUS, 0);
	for (int i = 0; i < 64; i++) {
		uint8_t byte;
		bus_dispatch(&h->pio, SERIAL_COM1_ADDR, &byte, 1, false);
		bus_dispatch(&h->pio, I8042_DATA_PORT, &byte, 1, false);
	}
	return 0;
}
