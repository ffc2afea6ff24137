/* Command line assembly. A piece that does not fit is never cut: a truncated
 * "root=/dev/vd" would boot the wrong disk, so the line is marked overflowed and
 * cmdline_check() refuses it. */
#include "cmdline.h"

#include <errno.h>
#include <string.h>

#include "cmdline_param.h"

void cmdline_init(struct cmdline *cl, const char *base)
{
	size_t len = base ? strlen(base) : 0;

	cl->buf[0] = '\0';
	cl->len = 0;
	cl->overflow = 0;
	if (len >= sizeof(cl->buf)) {
		cl->overflow = 1;
		return;
	}
	if (len)
		memcpy(cl->buf, base, len);
	cl->buf[len] = '\0';
	cl->len = len;
}

void cmdline_append(struct cmdline *cl, const char *piece)
{
	size_t piece_len, space;

	if (cl->overflow || !piece || !*piece)
		return;
	piece_len = strlen(piece);
	space = cl->len && cl->buf[cl->len - 1] != ' ' ? 1 : 0;
	/* Room for the space, the piece and the NUL; cl->len < sizeof(cl->buf) always. */
	if (space + 1 > sizeof(cl->buf) - cl->len ||
	    piece_len > sizeof(cl->buf) - cl->len - space - 1) {
		cl->overflow = 1;
		return;
	}
	if (space)
		cl->buf[cl->len++] = ' ';
	memcpy(cl->buf + cl->len, piece, piece_len);
	cl->len += piece_len;
	cl->buf[cl->len] = '\0';
}

int cmdline_check(const struct cmdline *cl, size_t max_len)
{
	if (cl->overflow || cl->len > max_len)
		return -E2BIG;
	return 0;
}

int cmdline_kernel_part(const char *line, size_t *end)
{
	struct cmdline_param param;

	for (const char *p = line; cmdline_next(&p, &param);) {
		/* A quote left open is refused even if what it swallowed starts "--". */
		if (param.unclosed)
			return -EINVAL;
		/* next_arg() takes the quotes off a word quoted whole: "--" ends them too. */
		if (!param.value && param.name_len == 2 && memcmp(param.name, "--", 2) == 0) {
			*end = (size_t)(param.word - line);
			return 0;
		}
	}
	*end = strlen(line);
	return 0;
}
