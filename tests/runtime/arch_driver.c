/*
 * A test image's driver: the runtime's per-architecture interface (sdt_arch.h), compiled by the
 * architecture's gcc and linked with arch/sdt_<arch>.c, called from the host in Unicorn. Each entry
 * point runs a table of cases the host wrote into sdt_test_cases and leaves the results beside them.
 */
#include "sdt_arch.h"

struct encode_case {	/* sdt_arch_encode */
	sdt_u64 site, stub, recorder;
	sdt_u32 form, size, state, keep;
	sdt_u32 ret, pad;
	sdt_u8 out[SDT_SITE_MAX];
};

struct verify_case {	/* sdt_arch_verify: the bytes at ``code``, as if they were at ``site`` */
	sdt_u64 code, site, stub;
	sdt_u32 form, length, ret, keep;
};

struct store_case {	/* sdt_arch_single_store */
	sdt_u64 site;
	sdt_u32 size, lo, hi, ret, at, width;
};

struct cond_case {	/* sdt_arch_cond_taken */
	sdt_u64 flags;
	sdt_u32 keep, ret;
};

unsigned char sdt_test_cases[1 << 20] __attribute__((aligned(64)));

void sdt_test_encode(struct encode_case *c, unsigned long n)
{
	for (; n--; c++)
		c->ret = sdt_arch_encode(c->out, c->form, c->size, c->state, (sdt_word)c->site, (sdt_word)c->stub,
					 (sdt_word)c->recorder, (sdt_u8)c->keep);
}

void sdt_test_verify(struct verify_case *c, unsigned long n)
{
	for (; n--; c++) {
		sdt_u8 keep = 0xee;

		c->ret = sdt_arch_verify((const sdt_u8 *)(sdt_word)c->code, (sdt_word)c->site, c->form, c->length,
					 (sdt_word)c->stub, &keep);
		c->keep = keep;
	}
}

void sdt_test_single_store(struct store_case *c, unsigned long n)
{
	for (; n--; c++) {
		unsigned at = 0xeeee, width = 0xeeee;

		c->ret = (sdt_u32)sdt_arch_single_store((sdt_word)c->site, c->size, c->lo, c->hi, &at, &width);
		c->at = at;
		c->width = width;
	}
}

void sdt_test_cond(struct cond_case *c, unsigned long n)
{
	static struct sdt_frame f;	/* zero but for the flags */

	for (; n--; c++) {
		f.flags = c->flags;
		c->ret = (sdt_u32)sdt_arch_cond_taken(&f, (sdt_u8)c->keep);
	}
}

int sdt_test_is_breakpoint(const sdt_u8 *code)
{
	return sdt_arch_is_breakpoint(code);
}

int sdt_test_off_is_fixed(unsigned form)
{
	return sdt_arch_off_is_fixed(form);
}
