/* The control API's request bodies (api_server.h) parsed into vm_commands. Each takes the
 * parsed JSON body and returns 0, or -EINVAL with a one-line fault (what is wrong with
 * which field). Strings in the command are borrowed from body. */
#ifndef MOTE_API_REQUESTS_H
#define MOTE_API_REQUESTS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "vm_command.h"

/* PUT (partial false: vcpu_count and mem_size_mib required, the rest back to defaults)
 * and PATCH (partial true: only what is given changes) /machine-config. */
int api_parse_machine_config(const cJSON *body, bool partial, struct vm_command *command,
			     char *fault, size_t fault_len);
int api_parse_boot_source(const cJSON *body, struct vm_command *command, char *fault,
			  size_t fault_len);
/* drive_id and iface_id come from the path; the body must repeat them. */
int api_parse_drive(const cJSON *body, const char *drive_id, struct vm_command *command,
		    char *fault, size_t fault_len);
/* PATCH /drives/{id} (Firecracker's PartialDrive): path_on_host required, since mote has
 * no rate limiters, the only other thing it changes. */
int api_parse_drive_update(const cJSON *body, const char *drive_id, struct vm_command *command,
			   char *fault, size_t fault_len);
int api_parse_network_interface(const cJSON *body, const char *iface_id, struct vm_command *command,
				char *fault, size_t fault_len);
int api_parse_vsock(const cJSON *body, struct vm_command *command, char *fault, size_t fault_len);
int api_parse_action(const cJSON *body, struct vm_command *command, char *fault, size_t fault_len);
int api_parse_vm_state(const cJSON *body, struct vm_command *command, char *fault,
		       size_t fault_len);
int api_parse_snapshot_create(const cJSON *body, struct vm_command *command, char *fault,
			      size_t fault_len);
int api_parse_snapshot_load(const cJSON *body, struct vm_command *command, char *fault,
			    size_t fault_len);

#endif
