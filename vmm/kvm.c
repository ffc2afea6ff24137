#include "kvm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* Capabilities mote uses, with why (Documentation/virt/kvm/api.rst). */
static const struct {
	int cap;
	const char *name;
} required_caps[] = {
    {KVM_CAP_USER_MEMORY, "KVM_CAP_USER_MEMORY (guest RAM from a memfd)"},
    {KVM_CAP_IRQCHIP, "KVM_CAP_IRQCHIP (in-kernel PIC, IOAPIC, LAPIC)"},
    {KVM_CAP_PIT2, "KVM_CAP_PIT2 (in-kernel i8254 timer)"},
    {KVM_CAP_SET_TSS_ADDR, "KVM_CAP_SET_TSS_ADDR"},
    {KVM_CAP_SET_IDENTITY_MAP_ADDR, "KVM_CAP_SET_IDENTITY_MAP_ADDR"},
    {KVM_CAP_EXT_CPUID, "KVM_CAP_EXT_CPUID (KVM_GET_SUPPORTED_CPUID)"},
    {KVM_CAP_IMMEDIATE_EXIT, "KVM_CAP_IMMEDIATE_EXIT (stopping vCPUs without races)"},
    {KVM_CAP_MP_STATE, "KVM_CAP_MP_STATE"},
    {KVM_CAP_IRQ_INJECT_STATUS, "KVM_CAP_IRQ_INJECT_STATUS (KVM_IRQ_LINE_STATUS)"},
    {KVM_CAP_IOEVENTFD, "KVM_CAP_IOEVENTFD (virtqueue notifications)"},
    {KVM_CAP_IRQFD, "KVM_CAP_IRQFD (device interrupts)"},
};

int kvm_open(struct kvm *kvm, const struct mote_log *log)
{
	int version;

	memset(kvm, 0, sizeof(*kvm));
	kvm->fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (kvm->fd < 0) {
		log_error(log, "cannot open /dev/kvm: %s%s", strerror(errno),
			  errno == ENOENT
			      ? " (no KVM on this machine; see README: tools/kvm-run.sh)"
			      : "");
		return -ENODEV;
	}
	version = ioctl(kvm->fd, KVM_GET_API_VERSION, 0);
	if (version != KVM_API_VERSION) {
		log_error(log, "KVM API version %d, mote needs %d", version, KVM_API_VERSION);
		kvm_close(kvm);
		return -ENOTSUP;
	}
	for (size_t i = 0; i < sizeof(required_caps) / sizeof(required_caps[0]); i++) {
		if (ioctl(kvm->fd, KVM_CHECK_EXTENSION, required_caps[i].cap) <= 0) {
			log_error(log, "KVM lacks %s", required_caps[i].name);
			kvm_close(kvm);
			return -ENOTSUP;
		}
	}
	int size = ioctl(kvm->fd, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (size < (int)sizeof(struct kvm_run)) {
		log_error(log, "KVM_GET_VCPU_MMAP_SIZE returned %d", size);
		kvm_close(kvm);
		return -ENOTSUP;
	}
	kvm->vcpu_mmap_size = (size_t)size;
	/* api.rst: KVM_CAP_MAX_VCPUS may be absent; KVM_CAP_NR_VCPUS is the recommended max. */
	kvm->max_vcpus = ioctl(kvm->fd, KVM_CHECK_EXTENSION, KVM_CAP_MAX_VCPUS);
	if (kvm->max_vcpus <= 0)
		kvm->max_vcpus = ioctl(kvm->fd, KVM_CHECK_EXTENSION, KVM_CAP_NR_VCPUS);
	if (kvm->max_vcpus <= 0)
		kvm->max_vcpus = 4;
	kvm->tsc_deadline_timer =
	    ioctl(kvm->fd, KVM_CHECK_EXTENSION, KVM_CAP_TSC_DEADLINE_TIMER) > 0;
	return 0;
}

void kvm_close(struct kvm *kvm)
{
	if (kvm->fd >= 0)
		close(kvm->fd);
	kvm->fd = -1;
	free(kvm->supported_cpuid);
	kvm->supported_cpuid = NULL;
}

const struct kvm_cpuid2 *kvm_supported_cpuid(struct kvm *kvm, const struct mote_log *log)
{
	if (kvm->supported_cpuid)
		return kvm->supported_cpuid;
	/* Grow until KVM stops answering E2BIG (api.rst, KVM_GET_SUPPORTED_CPUID). */
	for (unsigned nent = 64; nent <= 4096; nent *= 2) {
		struct kvm_cpuid2 *cpuid =
		    calloc(1, sizeof(*cpuid) + nent * sizeof(struct kvm_cpuid_entry2));
		if (!cpuid)
			return NULL;
		cpuid->nent = nent;
		if (ioctl(kvm->fd, KVM_GET_SUPPORTED_CPUID, cpuid) == 0)
			return kvm->supported_cpuid = cpuid;
		int err = errno;
		free(cpuid);
		if (err != E2BIG) {
			log_error(log, "KVM_GET_SUPPORTED_CPUID: %s", strerror(err));
			return NULL;
		}
	}
	log_error(log, "KVM_GET_SUPPORTED_CPUID: too many entries");
	return NULL;
}
