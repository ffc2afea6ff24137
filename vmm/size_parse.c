#include "size_parse.h"

#include <ctype.h>
#include <errno.h>
#include <strings.h>

static int parse_decimal(const char **text, uint64_t *value)
{
	const char *p = *text;
	uint64_t v = 0;

	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned digit = (unsigned)(*p - '0');
		if (v > (UINT64_MAX - digit) / 10)
			return -ERANGE;
		v = v * 10 + digit;
	}
	*text = p;
	*value = v;
	return 0;
}

int size_parse(const char *text, uint64_t *bytes)
{
	uint64_t value, shift = 20;
	int ret;

	if (!text)
		return -EINVAL;
	ret = parse_decimal(&text, &value);
	if (ret)
		return ret;
	switch (*text) {
	case '\0':
		break;
	case 'k':
	case 'K':
		shift = 10;
		text++;
		break;
	case 'm':
	case 'M':
		shift = 20;
		text++;
		break;
	case 'g':
	case 'G':
		shift = 30;
		text++;
		break;
	case 't':
	case 'T':
		shift = 40;
		text++;
		break;
	default:
		return -EINVAL;
	}
	if (*text && strcasecmp(text, "ib") != 0 && strcasecmp(text, "b") != 0)
		return -EINVAL;
	if (value > (UINT64_MAX >> shift))
		return -ERANGE;
	*bytes = value << shift;
	return 0;
}

int uint_parse(const char *text, unsigned min, unsigned max, unsigned *value)
{
	uint64_t v;

	if (!text)
		return -EINVAL;
	int ret = parse_decimal(&text, &v);
	if (ret)
		return ret;
	if (*text)
		return -EINVAL;
	if (v < min || v > max)
		return -ERANGE;
	*value = (unsigned)v;
	return 0;
}
