/* A VM's devices in a snapshot (vm_devices.h: vm_devices_save/load; vm_virtio.h:
 * vm_virtio_quiesce, vm_virtio_resumed): the serial port, the i8042 and every virtio
 * transport, each in a section of its own, load into a VM rebuilt with the same
 * devices; a VM whose devices differ in number or kind, and a payload cut short
 * anywhere, are refused. The VM is a bare struct mote_vm with fake virtio devices: no
 * KVM. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "vmm/vm.h"
#include "vmm/vm_devices.h"

#define MIB (1024ULL * 1024ULL)
#define DEVICES 2

struct fake_device {
	struct vdev dev;
	int quiesces;
	int64_t stall_ns;   /* the last quiesce's */
	int quiesce_result; /* what its quiesce answers */
	int resumes;
	uint64_t paused_ns; /* the last resume's */
};

static uint64_t fake_features(struct vdev *dev)
{
	(void)dev;
	return 0;
}

static void fake_config(struct vdev *dev, uint32_t offset, uint8_t *data, uint32_t len)
{
	(void)dev;
	(void)offset;
	memset(data, 0, len);
}

static void fake_config_write(struct vdev *dev, uint32_t offset, const uint8_t *data, uint32_t len)
{
	(void)dev;
	(void)offset;
	(void)data;
	(void)len;
}

static int fake_activate(struct vdev *dev)
{
	(void)dev;
	return 0;
}

static void fake_notify(struct vdev *dev, uint16_t q)
{
	(void)dev;
	(void)q;
}

static void fake_reset(struct vdev *dev)
{
	(void)dev;
}

static int fake_quiesce(struct vdev *dev, int64_t stall_ns)
{
	struct fake_device *fake = dev->impl;

	fake->quiesces++;
	fake->stall_ns = stall_ns;
	return fake->quiesce_result;
}

static void fake_resumed(struct vdev *dev, uint64_t paused_ns)
{
	struct fake_device *fake = dev->impl;

	fake->resumes++;
	fake->paused_ns = paused_ns;
}

/* No save or load: a device with no state of its own beyond its transport's. */
static const struct vdev_ops fake_ops = {
    .features = fake_features,
    .config_read = fake_config,
    .config_write = fake_config_write,
    .activate = fake_activate,
    .queue_notify = fake_notify,
    .reset = fake_reset,
    .quiesce = fake_quiesce,
    .resumed = fake_resumed,
};

struct test_vm {
	struct mote_vm *vm;
	struct fake_device fakes[DEVICES];
};

/* A VM with the legacy devices and count virtio devices of the given kinds. */
static struct test_vm *test_vm_new(unsigned count, const uint32_t *ids)
{
	struct test_vm *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	t->vm = calloc(1, sizeof(*t->vm));
	assert_non_null(t->vm);
	assert_int_equal(guest_memory_create(&t->vm->mem, 16 * MIB, NULL), 0);
	serial_init(&t->vm->serial, -1, NULL, NULL);
	i8042_init(&t->vm->i8042, NULL, NULL);
	for (unsigned i = 0; i < count; i++) {
		t->fakes[i].dev = (struct vdev){
		    .name = "fake",
		    .device_id = ids[i],
		    .queue_count = 1,
		    .queue_max_size = 64,
		    .ops = &fake_ops,
		    .impl = &t->fakes[i],
		    .mem = &t->vm->mem,
		};
		pthread_mutex_init(&t->fakes[i].dev.lock, NULL);
		assert_int_equal(virtio_mmio_init(&t->vm->virtio.transports[i], &t->fakes[i].dev,
						  0xd0000000 + i * 0x1000, 5 + i, NULL),
				 0);
		t->vm->virtio.count++;
	}
	return t;
}

static void test_vm_free(struct test_vm *t)
{
	for (unsigned i = 0; i < t->vm->virtio.count; i++) {
		virtio_mmio_destroy(&t->vm->virtio.transports[i]);
		pthread_mutex_destroy(&t->fakes[i].dev.lock);
	}
	serial_destroy(&t->vm->serial);
	guest_memory_destroy(&t->vm->mem);
	free(t->vm);
	free(t);
}

static const uint32_t kinds[DEVICES] = {VIRTIO_ID_BLOCK, VIRTIO_ID_VSOCK};

static uint32_t rd(struct test_vm *t, unsigned i, uint64_t offset)
{
	uint32_t value;

	virtio_mmio_access(&t->vm->virtio.transports[i], offset, (uint8_t *)&value, 4, false);
	return value;
}

static void wr(struct test_vm *t, unsigned i, uint64_t offset, uint32_t value)
{
	virtio_mmio_access(&t->vm->virtio.transports[i], offset, (uint8_t *)&value, 4, true);
}

static uint8_t serial_scratch(struct test_vm *t)
{
	uint8_t value;

	serial_access(&t->vm->serial, 7, &value, 1, false);
	return value;
}

/* A saved VM: its second device's driver got as far as DRIVER, the guest wrote the
 * UART's scratch register. */
static void save_vm(struct snap_writer *w)
{
	struct test_vm *t = test_vm_new(DEVICES, kinds);
	uint8_t scratch = 0x77;

	wr(t, 1, VIRTIO_MMIO_STATUS, VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER);
	serial_access(&t->vm->serial, 7, &scratch, 1, true);
	snap_writer_init(w);
	assert_int_equal(vm_devices_save(t->vm, w), 0);
	assert_int_equal(w->error, 0);
	test_vm_free(t);
}

static int load_vm(struct test_vm *t, const uint8_t *data, size_t len, struct snap_reader *r)
{
	*r = (struct snap_reader){.data = data, .len = len};
	int ret = vm_devices_load(t->vm, r);

	return ret ? ret : snap_reader_finish(r);
}

static void devices_load_into_a_vm_rebuilt_the_same(void **state)
{
	struct snap_writer w;
	struct snap_reader r;

	(void)state;
	save_vm(&w);
	struct test_vm *t = test_vm_new(DEVICES, kinds);
	assert_int_equal(load_vm(t, w.buf, w.len, &r), 0);
	assert_int_equal(rd(t, 0, VIRTIO_MMIO_STATUS), 0);
	assert_int_equal(rd(t, 1, VIRTIO_MMIO_STATUS),
			 VIRTIO_STATUS_ACKNOWLEDGE | VIRTIO_STATUS_DRIVER);
	assert_int_equal(serial_scratch(t), 0x77);
	test_vm_free(t);
	snap_writer_free(&w);
}

static void vm_with_another_number_of_devices_is_refused(void **state)
{
	struct snap_writer w;
	struct snap_reader r;

	(void)state;
	save_vm(&w);
	struct test_vm *t = test_vm_new(1, kinds);
	assert_int_equal(load_vm(t, w.buf, w.len, &r), -EINVAL);
	assert_non_null(strstr(r.failure, "number of virtio devices"));
	test_vm_free(t);
	snap_writer_free(&w);
}

static void vm_with_devices_of_other_kinds_is_refused(void **state)
{
	const uint32_t swapped[DEVICES] = {VIRTIO_ID_VSOCK, VIRTIO_ID_BLOCK};
	struct snap_writer w;
	struct snap_reader r;

	(void)state;
	save_vm(&w);
	struct test_vm *t = test_vm_new(DEVICES, swapped);
	assert_int_equal(load_vm(t, w.buf, w.len, &r), -EINVAL);
	assert_non_null(strstr(r.failure, "other kinds"));
	/* Nothing was loaded. */
	assert_int_equal(serial_scratch(t), 0);
	test_vm_free(t);
	snap_writer_free(&w);
}

static void every_truncation_of_the_devices_is_refused(void **state)
{
	struct snap_writer w;
	struct snap_reader r;

	(void)state;
	save_vm(&w);
	struct test_vm *t = test_vm_new(DEVICES, kinds);
	for (size_t len = 0; len < w.len; len++) {
		if (load_vm(t, w.buf, len, &r) != -EINVAL || !r.error)
			fail_msg("devices cut to %zu of %zu bytes were accepted", len, w.len);
	}
	test_vm_free(t);
	snap_writer_free(&w);
}

static void quiesce_reaches_every_virtio_device(void **state)
{
	(void)state;
	struct test_vm *t = test_vm_new(DEVICES, kinds);

	assert_int_equal(vm_virtio_quiesce(t->vm, 12345), 0);
	for (unsigned i = 0; i < DEVICES; i++) {
		assert_int_equal(t->fakes[i].quiesces, 1);
		assert_int_equal(t->fakes[i].stall_ns, 12345);
	}
	test_vm_free(t);
}

/* A resume tells every device how long the pause stood the VM still. */
static void resume_tells_every_virtio_device_how_long_it_stood_still(void **state)
{
	(void)state;
	struct test_vm *t = test_vm_new(DEVICES, kinds);

	vm_virtio_resumed(t->vm, 67890);
	for (unsigned i = 0; i < DEVICES; i++) {
		assert_int_equal(t->fakes[i].resumes, 1);
		assert_int_equal(t->fakes[i].paused_ns, 67890);
	}
	test_vm_free(t);
}

/* A resume tells the devices, once, how long they stood still: from when the pause
 * stopped serving them to the resume. The VM is a paused one's state, with no vCPU. */
static void resume_tells_the_devices_once_how_long_the_pause_stood_them_still(void **state)
{
	(void)state;
	struct test_vm *t = test_vm_new(DEVICES, kinds);
	struct mote_vm *vm = t->vm;

	pthread_mutex_init(&vm->lock, NULL);
	pthread_mutex_init(&vm->pause_lock, NULL);
	pthread_cond_init(&vm->pause_cond, NULL);
	assert_int_equal(event_loop_init(&vm->events), 0);
	vm->run_started = true;
	vm->state = MOTE_VM_PAUSED;
	int64_t stood_ns = 5 * NS_PER_MS;
	vm->paused_at_ns = clock_now_ns() - stood_ns;
	assert_int_equal(mote_vm_resume(vm), 0);
	assert_int_equal(mote_vm_get_state(vm), MOTE_VM_RUNNING);
	for (unsigned i = 0; i < DEVICES; i++) {
		assert_int_equal(t->fakes[i].resumes, 1);
		assert_in_range(t->fakes[i].paused_ns, stood_ns, stood_ns + 10 * NS_PER_S);
	}
	/* Running: a resume changes nothing and tells nothing. */
	assert_int_equal(mote_vm_resume(vm), 0);
	assert_int_equal(t->fakes[0].resumes, 1);
	event_loop_destroy(&vm->events);
	pthread_cond_destroy(&vm->pause_cond);
	pthread_mutex_destroy(&vm->pause_lock);
	pthread_mutex_destroy(&vm->lock);
	test_vm_free(t);
}

/* A device whose I/O stalled fails the pause at once: the devices after it are not made
 * to wait too. */
static void quiesce_stops_at_a_device_whose_io_stalled(void **state)
{
	(void)state;
	struct test_vm *t = test_vm_new(DEVICES, kinds);

	t->fakes[0].quiesce_result = -ETIMEDOUT;
	assert_int_equal(vm_virtio_quiesce(t->vm, 12345), -ETIMEDOUT);
	assert_int_equal(t->fakes[0].quiesces, 1);
	assert_int_equal(t->fakes[1].quiesces, 0);
	test_vm_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(devices_load_into_a_vm_rebuilt_the_same),
	    cmocka_unit_test(vm_with_another_number_of_devices_is_refused),
	    cmocka_unit_test(vm_with_devices_of_other_kinds_is_refused),
	    cmocka_unit_test(every_truncation_of_the_devices_is_refused),
	    cmocka_unit_test(quiesce_reaches_every_virtio_device),
	    cmocka_unit_test(resume_tells_every_virtio_device_how_long_it_stood_still),
	    cmocka_unit_test(resume_tells_the_devices_once_how_long_the_pause_stood_them_still),
	    cmocka_unit_test(quiesce_stops_at_a_device_whose_io_stalled),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
