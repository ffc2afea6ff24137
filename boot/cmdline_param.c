/* The kernel command line's parameters (cmdline_param.h). */
#include "cmdline_param.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

bool cmdline_next(const char **p, struct cmdline_param *param)
{
	const char *s = *p;
	bool in_quote = false, quoted = false;
	size_t i, equals = 0;

	while (*s && isspace((unsigned char)*s))
		s++;
	if (!*s)
		return false;
	const char *word = s;
	if (*s == '"') {
		s++;
		in_quote = quoted = true;
	}
	for (i = 0; s[i] && (in_quote || !isspace((unsigned char)s[i])); i++) {
		if (!equals && s[i] == '=')
			equals = i;
		if (s[i] == '"')
			in_quote = !in_quote;
	}
	*p = s + i;
	size_t end = i;
	if ((quoted || (equals && s[equals + 1] == '"')) && end > 0 && s[end - 1] == '"')
		end--; /* the closing quote */
	*param = (struct cmdline_param){
	    .word = word, .name = s, .name_len = equals ? equals : end, .unclosed = in_quote};
	if (equals) {
		param->value = s + equals + 1;
		if (*param->value == '"' && param->value < s + end)
			param->value++;
		param->value_len = (size_t)(s + end - param->value);
	}
	return true;
}

char *cmdline_value(const char *cmdline, const char *key)
{
	struct cmdline_param param, found = {0};
	size_t key_len = strlen(key);
	bool any = false;

	for (const char *p = cmdline; cmdline_next(&p, &param);) {
		if (param.name_len == key_len && memcmp(param.name, key, key_len) == 0) {
			found = param;
			any = true;
		}
	}
	if (!any)
		return NULL;
	return found.value ? strndup(found.value, found.value_len) : strdup("");
}
