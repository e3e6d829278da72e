/* sdt_report.c - lines for the kernel's log, through the report hook (no printf in a freestanding kernel). */
#include "sdt_state.h"

#define LINE 256

struct line {
	char buf[LINE];
	unsigned n;
};

static SDT_CODE void line_put(struct line *l, const char *s, unsigned max)
{
	while (*s && max-- && l->n < LINE - 1)
		l->buf[l->n++] = *s++;
}

static SDT_CODE void line_hex(struct line *l, sdt_u64 v, unsigned digits)
{
	static const char x[] = "0123456789abcdef";
	unsigned i;

	for (i = digits; i-- > 0;)
		if (l->n < LINE - 1)
			l->buf[l->n++] = x[(v >> (4 * i)) & 15];
}

SDT_CODE void sdt_report(const char *text)
{
	struct line l;

	l.n = 0;
	if (!sdt_hooks.report)
		return;
	line_put(&l, "sdt: ", 8);
	line_put(&l, text, LINE);
	l.buf[l.n] = 0;
	sdt_hooks.report(0, l.buf);
}

static SDT_CODE void line_bytes(struct line *l, const char *label, const sdt_u8 *b, unsigned n)
{
	unsigned i;

	line_put(l, label, 16);
	for (i = 0; i < n; i++) {
		line_put(l, " ", 1);
		line_hex(l, b[i], 2);
	}
}

/* "sdt: provider:module:function:name site at 0x...: what (found 0f 1f ...; expected e8 ...)" */
SDT_CODE void sdt_report_site(const struct sdt_site *s, const char *what, const sdt_u8 *found, unsigned n,
			      const sdt_u8 *expected)
{
	const struct sdt_probe *p = sdt_site_probe(s);
	const struct sdt_module *t = sdt_probe_table(p);
	struct line l;
	unsigned i;

	l.n = 0;
	if (!sdt_hooks.report)
		return;
	line_put(&l, "sdt: ", 8);
	if (t) {
		for (i = 0; i < 4; i++) {
			line_put(&l, sdt_probe_field(t, p, i), 64);
			line_put(&l, i < 3 ? ":" : "", 1);
		}
		line_put(&l, " ", 1);
	}
	line_put(&l, "site at 0x", 16);
	line_hex(&l, sdt_site_address(s), sizeof(sdt_word) * 2);
	line_put(&l, " ", 1);
	line_put(&l, what, LINE);
	if (n) {
		line_bytes(&l, " (found", found, n);
		if (expected)
			line_bytes(&l, "; expected", expected, n);
		line_put(&l, ")", 1);
	}
	l.buf[l.n] = 0;
	sdt_hooks.report(s, l.buf);
}
