/* Duplicate keys in parsed JSON (json_keys.h). */
#include "json_keys.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int compare_names(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* One object's names, sorted, so that a repeat sits next to its twin: a config file or
 * a request of a megabyte holds many thousands of names, too many to compare pairwise. */
static int object_duplicate_key(const cJSON *object, const char **name)
{
	size_t count = 0, i = 0;
	const cJSON *item;

	cJSON_ArrayForEach(item, object) count++;
	if (count < 2)
		return 0;
	const char **names = malloc(count * sizeof(*names));
	if (!names)
		return -ENOMEM;
	cJSON_ArrayForEach(item, object) names[i++] = item->string;
	qsort(names, count, sizeof(*names), compare_names);
	int ret = 0;
	for (i = 1; i < count && !ret; i++)
		if (strcmp(names[i - 1], names[i]) == 0) {
			*name = names[i];
			ret = -EEXIST;
		}
	free(names);
	return ret;
}

int json_find_duplicate_key(const cJSON *root, const char **name)
{
	const cJSON *item;
	int ret = 0;

	if (cJSON_IsObject(root))
		ret = object_duplicate_key(root, name);
	if (cJSON_IsObject(root) || cJSON_IsArray(root))
		cJSON_ArrayForEach(item, root)
		{
			if (!ret)
				ret = json_find_duplicate_key(item, name);
		}
	return ret;
}
