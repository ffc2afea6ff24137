/* Pausing and resuming a running VM (mote.h: mote_vm_pause). A pause takes every vCPU to
 * its pause point (vcpu.c) and parks it, parks the event thread, lets the devices finish
 * what they have in flight, and stops the guest's clock; a resume undoes these in the
 * reverse order. pause_lock keeps pause, resume and snapshot from interleaving. */
#include <errno.h>
#include <string.h>
#include <sys/ioctl.h>

#include "clock.h"
#include "vm.h"

/* How long a pause waits for the vCPUs and the event thread to stop, and for a disk's
 * I/O in flight to make progress (each completion starts the wait anew), before it is
 * abandoned and the VM runs on: Linux's default timeout of a block request
 * (/sys/block/DEV/queue/io_timeout, 30 s), after which a disk's own I/O counts as lost.
 * Only a host file that stops answering (a hung network file system) takes that long:
 * its I/O in flight holds the devices, a vCPU resetting such a disk waits for it, and
 * the event thread copying an overlay's cluster up from such an image. */
#define VM_PAUSE_WAIT_MS 30000

bool vm_pause_requested(struct mote_vm *vm)
{
	pthread_mutex_lock(&vm->lock);
	bool requested = vm->pause_requested;
	pthread_mutex_unlock(&vm->lock);
	return requested;
}

void vm_park_vcpu(struct mote_vm *vm)
{
	pthread_mutex_lock(&vm->lock);
	vm->parked++;
	pthread_cond_broadcast(&vm->pause_cond);
	while (vm->pause_requested && !vm->ended)
		pthread_cond_wait(&vm->pause_cond, &vm->lock);
	vm->parked--;
	pthread_mutex_unlock(&vm->lock);
}

enum mote_vm_state mote_vm_get_state(struct mote_vm *vm)
{
	pthread_mutex_lock(&vm->lock);
	enum mote_vm_state state = vm->ended ? MOTE_VM_ENDED : vm->state;
	pthread_mutex_unlock(&vm->lock);
	return state;
}

enum vm_park_result {
	VM_PARK_DONE,
	VM_PARK_ENDED,	   /* the VM ended first */
	VM_PARK_TIMED_OUT, /* a vCPU was still running at the deadline */
};

/* Parks every vCPU by deadline_ns (CLOCK_MONOTONIC). */
static enum vm_park_result vm_park_all(struct mote_vm *vm, int64_t deadline_ns)
{
	pthread_mutex_lock(&vm->lock);
	vm->pause_requested = true;
	pthread_mutex_unlock(&vm->lock);
	pthread_mutex_lock(&vm->lock);
	while (vm->parked < vm->cpu_count && !vm->ended && clock_now_ns() < deadline_ns) {
		/* Kicked again every VCPU_REKICK_MS (vcpu.h); a vCPU already parked takes
		 * the extra kick as a spurious wakeup. */
		pthread_mutex_unlock(&vm->lock);
		for (unsigned i = 0; i < vm->cpu_count; i++)
			vcpu_kick(&vm->vcpus[i]);
		pthread_mutex_lock(&vm->lock);
		struct timespec until = vcpu_rekick_deadline();
		if (vm->parked < vm->cpu_count && !vm->ended)
			pthread_cond_timedwait(&vm->pause_cond, &vm->lock, &until);
	}
	enum vm_park_result result = vm->ended			  ? VM_PARK_ENDED
				     : vm->parked < vm->cpu_count ? VM_PARK_TIMED_OUT
								  : VM_PARK_DONE;
	pthread_mutex_unlock(&vm->lock);
	return result;
}

static void vm_unpark_all(struct mote_vm *vm, enum mote_vm_state state)
{
	pthread_mutex_lock(&vm->lock);
	vm->pause_requested = false;
	vm->state = state;
	pthread_cond_broadcast(&vm->pause_cond);
	pthread_mutex_unlock(&vm->lock);
}

/* A VM that mote_vm_run() has not started yet has no threads to stop or start: a pause
 * or a resume only chooses how it is to start, paused (state PAUSED) or running
 * (CREATED), decided under the lock mote_vm_run() reads the state with. True when the
 * VM was in that window and took state. */
static bool vm_choose_start(struct mote_vm *vm, enum mote_vm_state state)
{
	pthread_mutex_lock(&vm->lock);
	bool before_run = !vm->run_started && !vm->ended &&
			  (vm->state == MOTE_VM_CREATED || vm->state == MOTE_VM_PAUSED);
	if (before_run)
		vm->state = state;
	pthread_mutex_unlock(&vm->lock);
	return before_run;
}

void vm_wait_started(struct mote_vm *vm)
{
	pthread_mutex_lock(&vm->lock);
	while (vm->run_started && vm->state == MOTE_VM_CREATED && !vm->ended)
		pthread_cond_wait(&vm->pause_cond, &vm->lock);
	pthread_mutex_unlock(&vm->lock);
}

/* Tells the guest its vCPUs were stopped by the host, so that its watchdogs do not see
 * a soft lockup (api.rst 4.81). EINVAL: the guest has no kvm-clock yet. */
static void vm_tell_guest_it_was_stopped(struct mote_vm *vm)
{
	for (unsigned i = 0; i < vm->cpu_count; i++)
		(void)ioctl(vm->vcpus[i].fd, KVM_KVMCLOCK_CTRL, 0);
}

/* The devices were not served from vm->paused_at_ns (the event thread asked to park) until
 * now: a deadline they keep for their guest moves on by as much (vdev_ops.resumed).
 * Before the event thread starts again; the time is then counted again from now, so
 * that a resume that fails does not tell it twice. A thread held in a handler holds a
 * disk's lock, never one that a device with this hook takes. */
static void vm_devices_stood_still(struct mote_vm *vm)
{
	if (!vm->paused_at_ns)
		return;
	int64_t now_ns = clock_now_ns();
	vm_virtio_resumed(vm, (uint64_t)(now_ns - vm->paused_at_ns));
	vm->paused_at_ns = now_ns;
}

/* Undoes a pause that could not finish (what, for VM_PAUSE_WAIT_MS, because of why), in
 * a resume's order: the event thread, then the vCPUs. They are told they stood still (as
 * a resume tells them) only when every one was parked: the ioctl takes the vCPU's mutex,
 * which a vCPU still in KVM_RUN holds, maybe for good (a vCPU that missed the deadline).
 * The guest's clock ran on, as through any stall of the host. -ETIMEDOUT, or -EINTR when
 * the VM ended meanwhile: its end stops the threads, parked or not. */
static int vm_pause_abandon(struct mote_vm *vm, bool vcpus_parked, const char *what,
			    const char *why)
{
	if (vm_has_ended(vm)) {
		vm->paused_at_ns = 0;
		vm_unpark_all(vm, MOTE_VM_RUNNING);
		return -EINTR;
	}
	log_error(&vm->log, "pause abandoned: %s for %d s (%s); the VM runs on", what,
		  VM_PAUSE_WAIT_MS / 1000, why);
	vm_devices_stood_still(vm);
	vm->paused_at_ns = 0;
	int ret = event_loop_start(&vm->events);
	if (ret)
		log_error(&vm->log, "restarting the event thread: %s", strerror(-ret));
	if (vcpus_parked)
		vm_tell_guest_it_was_stopped(vm);
	vm_unpark_all(vm, MOTE_VM_RUNNING);
	return -ETIMEDOUT;
}

int vm_pause_locked(struct mote_vm *vm)
{
	int64_t start_ns = clock_now_ns();

	/* Before, during or after mote_vm_run()'s start, in that order: the state is read
	 * only once the start is behind it. */
	if (vm_choose_start(vm, MOTE_VM_PAUSED))
		return 0;
	vm_wait_started(vm);
	int64_t deadline_ns = clock_now_ns() + VM_PAUSE_WAIT_MS * NS_PER_MS;
	enum mote_vm_state state = mote_vm_get_state(vm);
	if (state == MOTE_VM_PAUSED)
		return 0;
	if (state != MOTE_VM_RUNNING)
		return -EINVAL;
	/* The event thread parks while the vCPUs are stopped, not after: each takes a few
	 * thread wakeups, and a pause is what a client waits for. A queue notified
	 * meanwhile waits in its ioeventfd for the resume, as it would after the pause.
	 * From here the devices are not served. */
	vm->paused_at_ns = clock_now_ns();
	event_loop_ask_park(&vm->events);
	enum vm_park_result parked = vm_park_all(vm, deadline_ns);
	if (parked == VM_PARK_ENDED) {
		vm->paused_at_ns = 0;
		vm_unpark_all(vm, MOTE_VM_RUNNING);
		/* The VM is ending; its end stops the thread, parked or not. */
		return -EINTR;
	}
	if (parked == VM_PARK_TIMED_OUT)
		return vm_pause_abandon(vm, false, "a vCPU did not stop",
					"it is held in a device, such as a disk reset waiting "
					"for an image that does not answer");
	/* No vCPU runs, so no register access reaches a device; with the event thread
	 * parked too, nothing but this thread touches them. */
	if (event_loop_wait_parked(&vm->events, deadline_ns))
		return vm_pause_abandon(vm, true, "the device thread did not stop",
					"it is held in a disk's overlay, copying from an image "
					"that does not answer");
	if (vm_virtio_quiesce(vm, VM_PAUSE_WAIT_MS * NS_PER_MS))
		return vm_pause_abandon(vm, true, "a disk's I/O made no progress",
					"its image does not answer");
	/* The guest's clock stops with it: resumed, it goes on from this value. */
	vm->clock_saved = ioctl(vm->vm_fd, KVM_GET_CLOCK, &vm->paused_clock) == 0;
	if (!vm->clock_saved)
		log_warn(&vm->log, "KVM_GET_CLOCK: %s: the guest's clock runs on while paused",
			 strerror(errno));
	/* A VM that ended meanwhile (a stop, a guest power-off) is not paused: mote_vm_run()
	 * finishes its end once this returns. */
	pthread_mutex_lock(&vm->lock);
	bool ended = vm->ended;
	if (!ended)
		vm->state = MOTE_VM_PAUSED;
	pthread_mutex_unlock(&vm->lock);
	if (ended)
		return -EINTR;
	log_info(&vm->log, "paused in " VM_MS_FMT " ms", VM_MS_ARGS(clock_now_ns() - start_ns));
	return 0;
}

int vm_resume_locked(struct mote_vm *vm)
{
	/* mote_vm_run() starts the event thread and vCPUs: starting them here would race
	 * it (a second event thread). */
	if (vm_choose_start(vm, MOTE_VM_CREATED))
		return 0;
	vm_wait_started(vm);
	enum mote_vm_state state = mote_vm_get_state(vm);
	if (state == MOTE_VM_RUNNING)
		return 0;
	if (state != MOTE_VM_PAUSED)
		return -EINVAL;
	vm_devices_stood_still(vm);
	/* Then what can fail (a VM restored paused has no event thread yet): a resume that
	 * fails leaves the VM paused, its clock too. */
	int ret = event_loop_start(&vm->events);
	if (ret) {
		log_error(&vm->log, "restarting the event thread: %s", strerror(-ret));
		return ret;
	}
	if (vm->clock_saved) {
		/* flags 0: the value as saved, not advanced by the host's real time passed
		 * (KVM_CLOCK_REALTIME, api.rst 4.98). */
		struct kvm_clock_data clock = {.clock = vm->paused_clock.clock};
		if (ioctl(vm->vm_fd, KVM_SET_CLOCK, &clock) < 0)
			log_warn(&vm->log, "KVM_SET_CLOCK: %s", strerror(errno));
		vm->clock_saved = false;
	}
	vm_tell_guest_it_was_stopped(vm);
	vm->paused_at_ns = 0;
	vm_unpark_all(vm, MOTE_VM_RUNNING);
	log_debug(&vm->log, "resumed");
	return 0;
}

int mote_vm_pause(struct mote_vm *vm)
{
	pthread_mutex_lock(&vm->pause_lock);
	int ret = vm_pause_locked(vm);
	pthread_mutex_unlock(&vm->pause_lock);
	return ret;
}

int mote_vm_resume(struct mote_vm *vm)
{
	pthread_mutex_lock(&vm->pause_lock);
	int ret = vm_resume_locked(vm);
	pthread_mutex_unlock(&vm->pause_lock);
	return ret;
}
