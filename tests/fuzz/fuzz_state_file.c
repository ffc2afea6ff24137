/* libFuzzer target: a hostile snapshot state file, read as mote_vm_restore() reads it up
 * to where it needs KVM: the header (snap_reader_open: magic, version, length, CRC-32),
 * the setup (vm_setup_load), the memory identity (vm_memory_identity_load), then the
 * setup as a VM config (vm_setup_to_config, vm_check_config) and the lookups the
 * restore's overrides make (vm_setup_find_disk, vm_setup_find_net).
 *
 * The file is the input's bytes XORed onto one written as a snapshot writes it (a setup
 * with disks, overlays and their layers, NICs and a vsock device; a diff's identity), so
 * an input of zeros is a valid file and the fuzzer works near valid ones. The header's
 * length and CRC are recomputed after the XOR, or the fuzzer's every change would be
 * refused at the checksum, unless the input's first byte asks for the header as the XOR
 * left it. Whatever the bytes: a refusal says why, and what is accepted holds only values
 * a VM can be built from and saves back to the very bytes it was read from. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include "vmm/little_endian.h"
#include "vmm/vm.h"

/* The first input byte; the rest is the mask XORed onto the template file. */
#define FLAG_HEADER_AS_IS 0x01 /* keep the length and CRC-32 the XOR left */
#define FLAG_CUT 0x02	       /* the file ends where the mask does, short of the template too */
#define MAX_FILE (1u << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct harness {
	uint8_t *template;
	size_t template_len;
};

/* Counts what the code under test reports: a refusal must say why. */
struct log_record {
	unsigned messages;
};

static void fuzz_log(void *opaque, enum mote_log_level level, const char *message)
{
	struct log_record *record = opaque;

	(void)level;
	if (strlen(message) > 0)
		record->messages++;
}

/* A setup as vm_setup_from_config() records one, with frozen layers as snapshots add
 * them: three disks (a root with an id, an overlay and two layers; a read-only one; a
 * direct one with an overlay and no layer), two NICs, a vsock device. */
static int template_setup(struct vm_setup *setup)
{
	struct mote_config config;

	mote_config_init(&config);
	config.kernel_path = "vmlinux";
	config.cpus = 2;
	config.mem_bytes = 256ULL << 20;
	config.disk_count = 3;
	config.disks[0] = (struct mote_disk){
	    .path = "/images/root.ext4", .id = "rootfs", .root = true, .overlay = "/run/root.ovl"};
	config.disks[1] = (struct mote_disk){.path = "/images/data.img", .read_only = true};
	config.disks[2] = (struct mote_disk){
	    .path = "/images/scratch.img", .direct = true, .overlay = "/run/scratch.ovl"};
	config.net_count = 2;
	config.nets[0] = (struct mote_net){
	    .tap = "tap0", .id = "uplink", .mac = {0x52, 0x54, 0, 0, 0, 1}, .has_mac = true};
	config.nets[1] = (struct mote_net){.tap = "tap1", .mac = {0x52, 0x54, 0, 0, 0, 2}};
	config.vsock = (struct mote_vsock){.guest_cid = 3, .uds_path = "/run/v.sock"};
	int ret = vm_setup_from_config(setup, &config);
	if (!ret)
		ret = vm_setup_add_layer(setup, 0, "/snap/one.state.vda.layer");
	if (!ret)
		ret = vm_setup_add_layer(setup, 0, "/snap/two.state.vda.layer");
	return ret;
}

/* The template: the setup and a diff's memory identity, written to a file by the
 * writer a snapshot uses, and read back. */
static int save_template(struct harness *h)
{
	struct snapshot_memory_identity identity = {.diff = true};
	struct vm_setup setup;
	struct snap_writer w;

	if (template_setup(&setup))
		return -1;
	for (unsigned i = 0; i < SNAPSHOT_ID_SIZE; i++) {
		identity.id[i] = (uint8_t)(0xa0 + i);
		identity.base_id[i] = (uint8_t)(0x10 + i);
	}
	snap_writer_init(&w);
	vm_setup_save(&setup, &w);
	vm_memory_identity_save(&identity, &w);
	vm_setup_free(&setup);
	int fd = memfd_create("fuzz-state", MFD_CLOEXEC);
	int ret = fd < 0 ? -1 : snap_writer_write(&w, fd);
	snap_writer_free(&w);
	off_t len = ret ? -1 : lseek(fd, 0, SEEK_END);
	if (len > 0 && (h->template = malloc((size_t)len)) != NULL &&
	    pread(fd, h->template, (size_t)len, 0) == len)
		h->template_len = (size_t)len;
	if (fd >= 0)
		close(fd);
	return h->template_len ? 0 : -1;
}

/* Created once: per-input setup would dominate the run. */
static struct harness *harness_get(void)
{
	static struct harness h;
	static int state; /* 0 new, 1 ready, -1 failed */

	if (state)
		return state > 0 ? &h : NULL;
	state = -1;
	if (save_template(&h))
		return NULL;
	state = 1;
	return &h;
}

/* What snap_reader_open() must make of a file, from snapshot_stream.h's layout. */
static int expected_header(const uint8_t *file, size_t len)
{
	if (len < SNAP_HEADER_SIZE || memcmp(file, SNAP_MAGIC, 8) != 0)
		return -EINVAL;
	if (le_load(file + 8, 4) != SNAP_VERSION)
		return -EPROTO;
	if (le_load(file + 12, 4) != 0 || le_load(file + 16, 8) != len - SNAP_HEADER_SIZE)
		return -EINVAL;
	uLong crc = crc32(0L, file + SNAP_HEADER_SIZE, (uInt)(len - SNAP_HEADER_SIZE));
	return le_load(file + 24, 4) == (uint32_t)crc ? 0 : -EINVAL;
}

/* A setup that loaded holds only what mote_vm_create() would take, and a full snapshot's
 * identity names no base. */
static void check_loaded(const struct vm_setup *setup,
			 const struct snapshot_memory_identity *identity)
{
	static const uint8_t no_base[SNAPSHOT_ID_SIZE];
	bool ok = (identity->diff || !memcmp(identity->base_id, no_base, SNAPSHOT_ID_SIZE)) &&
		  setup->from_snapshot && setup->cpus >= 1 && setup->cpus <= MOTE_MAX_CPUS &&
		  setup->mem_bytes >= GUEST_MEMORY_MIN && setup->mem_bytes <= GUEST_MEMORY_MAX &&
		  setup->mem_bytes % (2ULL << 20) == 0 && setup->disk_count <= MOTE_MAX_DISKS &&
		  setup->net_count <= MOTE_MAX_NETS;

	for (unsigned i = 0; ok && i < setup->disk_count; i++) {
		const struct vm_setup_disk *disk = &setup->disks[i];
		ok = disk->path && (!disk->id || strlen(disk->id) <= MOTE_DISK_ID_MAX) &&
		     disk->layer_count <= VM_SETUP_MAX_LAYERS &&
		     (!disk->layer_count || disk->overlay) && !(disk->overlay && disk->read_only);
		for (unsigned l = 0; ok && l < disk->layer_count; l++)
			ok = disk->layers[l] != NULL;
	}
	for (unsigned i = 0; ok && i < setup->net_count; i++)
		ok = setup->nets[i].tap != NULL;
	if (ok && setup->vsock_cid)
		ok = setup->vsock_cid >= 3 && setup->vsock_cid != UINT32_MAX &&
		     setup->vsock_uds_path;
	if (!ok)
		abort();
}

/* Every field is read back exactly as it is written (strings, 0/1 booleans, sections of
 * their fields' length): what loaded saves back to the bytes it was read from. */
static void check_saves_back(const struct vm_setup *setup,
			     const struct snapshot_memory_identity *identity,
			     const struct snap_reader *payload)
{
	struct snap_writer w;

	snap_writer_init(&w);
	vm_setup_save(setup, &w);
	vm_memory_identity_save(identity, &w);
	bool same = !w.error && w.len == payload->pos && memcmp(w.buf, payload->data, w.len) == 0;
	snap_writer_free(&w);
	if (!same)
		abort();
}

/* What mote_vm_restore() does with a setup before it needs KVM: the config it builds
 * the VM from, checked, and the lookups of its overrides (which then own new strings). */
static void restore_setup(struct vm_setup *setup)
{
	struct log_record record = {0};
	struct mote_config config;

	mote_config_init(&config);
	vm_setup_to_config(setup, &config);
	config.kernel_path = "(snapshot)";
	struct mote_log log = {fuzz_log, &record};
	if (vm_check_config(&config, &log) != 0 && record.messages == 0)
		abort();
	for (unsigned i = 0; i < MOTE_MAX_DISKS; i++) {
		char name[8];
		snprintf(name, sizeof(name), "vd%c", 'a' + i);
		int d = vm_setup_find_disk(setup, name);
		if (d >= (int)setup->disk_count || (i < setup->disk_count && d < 0))
			abort();
	}
	for (unsigned i = 0; i < setup->disk_count; i++) {
		const char *id = setup->disks[i].id;
		int d = id ? vm_setup_find_disk(setup, id) : -1;
		if (id && (d < 0 || strcmp(setup->disks[d].id, id) != 0))
			abort();
	}
	for (unsigned i = 0; i < MOTE_MAX_NETS; i++) {
		char name[8];
		snprintf(name, sizeof(name), "eth%u", i);
		int n = vm_setup_find_net(setup, name);
		if (n >= (int)setup->net_count || (i < setup->net_count && n < 0))
			abort();
	}
	int d = vm_setup_find_disk(setup, "vda");
	if (d >= 0 && vm_setup_set(&setup->disks[d].path, "/override.img") != 0)
		abort();
	int n = vm_setup_find_net(setup, "eth0");
	if (n >= 0 && vm_setup_set(&setup->nets[n].tap, "tap9") != 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct harness *h = harness_get();
	struct snapshot_memory_identity identity;
	struct snap_reader payload;
	struct vm_setup setup;
	const char *why = NULL;

	if (!h)
		abort(); /* the host, not the input: no run would mean anything */
	if (size < 1)
		return 0;
	uint8_t flags = data[0];
	const uint8_t *mask = data + 1;
	size_t mask_len = size - 1 < MAX_FILE ? size - 1 : MAX_FILE;
	size_t len = mask_len;
	if (!(flags & FLAG_CUT) && len < h->template_len)
		len = h->template_len;
	/* A buffer of exactly len bytes, so that ASan sees a read past the file. */
	uint8_t *file = malloc(len ? len : 1);
	if (!file)
		abort();
	for (size_t i = 0; i < len; i++)
		file[i] = (i < h->template_len ? h->template[i] : 0) ^ (i < mask_len ? mask[i] : 0);
	if (!(flags & FLAG_HEADER_AS_IS) && len >= SNAP_HEADER_SIZE) {
		size_t payload_len = len - SNAP_HEADER_SIZE;
		le_store(file + 16, payload_len, 8);
		le_store(file + 24, crc32(0L, file + SNAP_HEADER_SIZE, (uInt)payload_len), 4);
	}

	int ret = snap_reader_open(&payload, file, len, &why);
	if (ret != expected_header(file, len) || (ret && !why))
		abort();
	if (!ret) {
		vm_setup_load(&setup, &payload);
		vm_memory_identity_load(&identity, &payload);
		if (payload.error && !payload.failure)
			abort();
		if (!payload.error) {
			check_loaded(&setup, &identity);
			check_saves_back(&setup, &identity, &payload);
			restore_setup(&setup);
		}
		vm_setup_free(&setup);
	}
	free(file);
	return 0;
}
