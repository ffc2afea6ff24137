/* Duplicate keys in parsed JSON. RFC 8259 §4 leaves an object whose names repeat to each
 * parser ("the behavior of software that receives such an object is unpredictable");
 * cJSON keeps every member, and code that walks them applies each in turn, so
 * {"vcpu_count": 2, "vcpu_count": 8} would quietly mean 8. mote refuses such objects,
 * in config files and API requests alike, as Firecracker's parser does. */
#ifndef MOTE_JSON_KEYS_H
#define MOTE_JSON_KEYS_H

#include <cjson/cJSON.h>

/* 0 when no object in the tree under root has a name twice; -EEXIST with *name set to
 * the first such name found (it points into the tree); -ENOMEM. Nesting is bounded by
 * cJSON's own limit (CJSON_NESTING_LIMIT), so the walk is too. */
int json_find_duplicate_key(const cJSON *root, const char **name);

#endif
