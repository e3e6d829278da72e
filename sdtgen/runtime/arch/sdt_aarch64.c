/*
 * AArch64: bl/b sites, one aligned 32-bit word each.
 *
 * Every change is one word store, which the architecture lets other CPUs
 * fetch old or new while it happens (B, BL, NOP and BRK are among the
 * instructions the ARM ARM allows concurrent modification between; MOVZ
 * is what an is-enabled check becomes, and only ever replaces MOVZ or BL).
 *   disabled call nop; tail ret; is-enabled movz w0, #0 (armed #1); asm goto nop
 *   armed         brk #0x5d7 (sdtgen's immediate), or bl/b to the recorder (+-128 MiB); an asm
 *                 goto's nop becomes b to its out-of-line target
 */
#include "../sdt_arch.h"

const char sdt_arch_name[] = "aarch64";

#define NOP 0xd503201fu
#define RET 0xd65f03c0u
#define MOVZ_W0 0x52800000u
#define BRK (0xd4200000u | 0x5d7u << 5)
#define BL 0x94000000u
#define B 0x14000000u

const sdt_u8 sdt_arch_bp[] = {BRK & 0xff, (BRK >> 8) & 0xff, (BRK >> 16) & 0xff, BRK >> 24};
const unsigned sdt_arch_bp_len = 4;
const unsigned sdt_arch_tail_unit = 4;

static sdt_u32 rd(const sdt_u8 *p)
{
	return (sdt_u32)p[0] | (sdt_u32)p[1] << 8 | (sdt_u32)p[2] << 16 | (sdt_u32)p[3] << 24;
}

static void wr(sdt_u8 *p, sdt_u32 v)
{
	p[0] = (sdt_u8)v;
	p[1] = (sdt_u8)(v >> 8);
	p[2] = (sdt_u8)(v >> 16);
	p[3] = (sdt_u8)(v >> 24);
}

/* b/bl from ``at`` to ``to`` (+-128 MiB, word-aligned); 0 when it does not reach. */
static sdt_u32 branch(sdt_u32 op, sdt_word at, sdt_word to)
{
	long d = (long)(to - at);

	if ((d & 3) || d < -(1L << 27) || d >= (1L << 27))
		return 0;
	return op | (((sdt_u32)(d >> 2)) & 0x03ffffffu);
}

unsigned sdt_arch_verify(const sdt_u8 *code, sdt_word site, unsigned form, unsigned length, sdt_word stub,
			 sdt_u8 *keep)
{
	sdt_u32 want;

	*keep = 0;
	if (length != 4 || (site & 3) || form == SDT_FORM_COND)
		return 0;
	if (form == SDT_FORM_GOTO)	/* the asm goto's nop */
		return rd(code) == NOP ? 4 : 0;
	want = branch(form == SDT_FORM_TAIL ? B : BL, site, stub);
	return want && rd(code) == want ? 4 : 0;
}

unsigned sdt_arch_encode(sdt_u8 *out, unsigned form, unsigned size, unsigned state, sdt_word site, sdt_word stub,
			 sdt_word recorder, sdt_u8 keep)
{
	sdt_u32 w;

	(void)keep;
	if (size != 4)
		return 0;
	if (form == SDT_FORM_ISEN)
		w = MOVZ_W0 | (state == SDT_SITE_OFF ? 0 : 1u << 5);
	else if (state == SDT_SITE_TRAP)
		w = BRK;
	else if (state == SDT_SITE_BRANCH && form == SDT_FORM_GOTO)
		w = branch(B, site, stub);	/* b to the asm goto's out-of-line target */
	else if (state == SDT_SITE_BRANCH)
		w = branch(form == SDT_FORM_TAIL ? B : BL, site, recorder);
	else
		w = form == SDT_FORM_TAIL ? RET : NOP;
	if (!w)
		return 0;
	wr(out, w);
	return 4;
}

int sdt_arch_off_is_fixed(unsigned form)
{
	(void)form;
	return 1;	/* nop, ret or the result-0 move: no displacement */
}

int sdt_arch_single_store(sdt_word site, unsigned size, unsigned lo, unsigned hi, unsigned *at, unsigned *width)
{
	(void)lo;
	(void)hi;
	if (size != 4 || (site & 3))
		return 0;
	*at = 0;
	*width = 4;
	return 1;
}

int sdt_arch_is_breakpoint(const sdt_u8 *code)
{
	return rd(code) == BRK;
}

sdt_word sdt_arch_trap_address(const struct sdt_frame *f)
{
	return (sdt_word)f->pc;	/* brk leaves the pc on itself */
}

sdt_word sdt_arch_arg(const struct sdt_frame *f, unsigned k, unsigned form)
{
	(void)form;
	return (sdt_word)f->arg[k];
}

void sdt_arch_emulate_call(struct sdt_frame *f, sdt_word to, sdt_word ret)
{
	f->link = ret;
	f->pc = to;
}

void sdt_arch_emulate_return(struct sdt_frame *f)
{
	f->pc = f->link;
}

void sdt_arch_set_result(struct sdt_frame *f, sdt_word value)
{
	f->ret = (sdt_u32)value;	/* movz w0: x0's upper half becomes 0 */
}

int sdt_arch_cond_taken(const struct sdt_frame *f, sdt_u8 keep)
{
	(void)f;
	(void)keep;
	return 0;	/* no conditional sites on AArch64 */
}
