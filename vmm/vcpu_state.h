/* A vCPU's architectural state in a snapshot (issue 5): everything KVM keeps for it that
 * the guest can observe, in the order api.rst and Firecracker's restore need it. Saved
 * from a parked vCPU (no KVM_RUN in progress, its last I/O exit completed), loaded into a
 * freshly created one before it first runs. */
#ifndef MOTE_VCPU_STATE_H
#define MOTE_VCPU_STATE_H

#include "log.h"
#include "snapshot_stream.h"
#include "vcpu.h"

#define SNAP_TAG_VCPU SNAP_TAG('V', 'C', 'P', 'U')

/* The MSRs KVM can save for a vCPU (KVM_GET_MSR_INDEX_LIST: the host's "msrs to save"
 * and the emulated ones, kvm-clock's among them). Read once per VM. */
struct vcpu_msr_list {
	uint32_t count;
	uint32_t *indices;
};

int vcpu_msr_list_read(int kvm_fd, struct vcpu_msr_list *list, const struct mote_log *log);
void vcpu_msr_list_free(struct vcpu_msr_list *list);

/* Appends one SNAP_TAG_VCPU section. 0, or a negative errno with a message on the VM's
 * log (a KVM ioctl failed). */
int vcpu_state_save(struct vcpu *vcpu, const struct vcpu_msr_list *msrs, struct snap_writer *w);

/* Reads the next SNAP_TAG_VCPU section into the vCPU. A malformed section fails r (snap
 * reader rules); state KVM refuses is -EINVAL with a message. */
int vcpu_state_load(struct vcpu *vcpu, struct snap_reader *r);

#endif
