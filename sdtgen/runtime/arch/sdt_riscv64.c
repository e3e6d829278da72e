/*
 * RISC-V 64: auipc+jalr call sites (8 bytes) that linker relaxation may
 * have shortened to jal (4) or c.j (2). Instructions are 2-byte aligned.
 *   disabled call nop (+ nop); tail ret (+ nop), c.jr ra for c.j;
 *   is-enabled    li a0, 0 (armed 1) (+ nop)
 *   armed         ebreak (c.ebreak for a 2-byte site), or jal ra/zero to the recorder (+-1 MiB;
 *                 c.j +-2 KiB), always in the first word: an 8-byte site keeps its NOP
 *   asm goto      its 4-byte nop; armed, j (jal zero) to its out-of-line target (+-1 MiB)
 * A change inside one aligned halfword or word of the site is one store; a
 * 4-byte site at an address 2 mod 4 straddles two words and goes through
 * the breakpoint protocol with halfword stores (c.ebreak first), so no
 * store ever touches a byte outside the site.
 */
#include "../sdt_arch.h"

const char sdt_arch_name[] = "riscv64";

#define NOP 0x00000013u
#define RET 0x00008067u
#define EBREAK 0x00100073u
#define LI_A0 0x00000513u
#define C_RET 0x8082u
#define C_EBREAK 0x9002u
#define RA 1u
#define ZERO 0u

const sdt_u8 sdt_arch_bp[] = {C_EBREAK & 0xff, C_EBREAK >> 8};
const unsigned sdt_arch_bp_len = 2;
const unsigned sdt_arch_tail_unit = 2;

static sdt_u32 rd16(const sdt_u8 *p)
{
	return (sdt_u32)p[0] | (sdt_u32)p[1] << 8;
}

static sdt_u32 rd32(const sdt_u8 *p)
{
	return rd16(p) | rd16(p + 2) << 16;
}

static void wr16(sdt_u8 *p, sdt_u32 v)
{
	p[0] = (sdt_u8)v;
	p[1] = (sdt_u8)(v >> 8);
}

static void wr32(sdt_u8 *p, sdt_u32 v)
{
	wr16(p, v);
	wr16(p + 2, v >> 16);
}

static long sext(sdt_u32 v, unsigned bits)
{
	return (long)(v ^ (1u << (bits - 1))) - (long)(1u << (bits - 1));
}

static long c_j_offset(sdt_u32 h)
{
	sdt_u32 imm = ((h >> 12) & 1) << 11 | ((h >> 11) & 1) << 4 | ((h >> 9) & 3) << 8 | ((h >> 8) & 1) << 10 |
		      ((h >> 7) & 1) << 6 | ((h >> 6) & 1) << 7 | ((h >> 3) & 7) << 1 | ((h >> 2) & 1) << 5;
	return sext(imm, 12);
}

static sdt_u32 c_j(long d)
{
	sdt_u32 i = (sdt_u32)d;

	if ((d & 1) || d < -(1L << 11) || d >= (1L << 11))
		return 0;
	return 0xa001u | ((i >> 11) & 1) << 12 | ((i >> 4) & 1) << 11 | ((i >> 8) & 3) << 9 | ((i >> 10) & 1) << 8 |
	       ((i >> 6) & 1) << 7 | ((i >> 7) & 1) << 6 | ((i >> 1) & 7) << 3 | ((i >> 5) & 1) << 2;
}

static sdt_u32 jal(sdt_u32 rd, long d)
{
	sdt_u32 i = (sdt_u32)d;

	if ((d & 1) || d < -(1L << 20) || d >= (1L << 20))
		return 0;
	return ((i >> 20) & 1) << 31 | ((i >> 1) & 0x3ff) << 21 | ((i >> 11) & 1) << 20 | ((i >> 12) & 0xff) << 12 |
	       rd << 7 | 0x6f;
}

/* (the form's link register, the length, the target) of the call or tail jump ``code`` starts with */
static unsigned decode(const sdt_u8 *code, unsigned avail, sdt_word at, sdt_u32 *link, sdt_word *to)
{
	sdt_u32 w, j, rd, rs1, jrd, imm;

	if ((code[0] & 3) != 3) {	/* compressed: only c.j (c.jal is RV32's) */
		w = rd16(code);
		if ((w & 0xe003u) != 0xa001u)
			return 0;
		*link = ZERO;
		*to = at + (sdt_word)c_j_offset(w);
		return 2;
	}
	if (avail < 4)
		return 0;
	w = rd32(code);
	rd = (w >> 7) & 31;
	if ((w & 0x7f) == 0x6f && (rd == RA || rd == ZERO)) {	/* jal */
		imm = ((w >> 31) & 1) << 20 | ((w >> 12) & 0xff) << 12 | ((w >> 20) & 1) << 11 | ((w >> 21) & 0x3ff) << 1;
		*link = rd;
		*to = at + (sdt_word)sext(imm, 21);
		return 4;
	}
	if ((w & 0x7f) != 0x17 || avail < 8)	/* auipc rd, hi; jalr jrd, lo(rd) */
		return 0;
	j = rd32(code + 4);
	jrd = (j >> 7) & 31;
	rs1 = (j >> 15) & 31;
	if ((j & 0x707f) != 0x67 || rs1 != rd || (jrd != RA && jrd != ZERO))
		return 0;
	*link = jrd;
	*to = at + (sdt_word)(long)(int)(w & 0xfffff000u) + (sdt_word)sext(j >> 20, 12);
	return 8;
}

unsigned sdt_arch_verify(const sdt_u8 *code, sdt_word site, unsigned form, unsigned length, sdt_word stub,
			 sdt_u8 *keep)
{
	sdt_u32 link;
	sdt_word to;
	unsigned n;

	*keep = 0;
	if (form == SDT_FORM_COND || (site & 1) || length > 8)
		return 0;
	if (form == SDT_FORM_GOTO)	/* the asm goto's 4-byte nop (never c.nop: a jal must fit) */
		return length == 4 && rd32(code) == NOP ? 4 : 0;
	n = decode(code, length, site, &link, &to);
	if (!n || n > length || to != stub || link != (form == SDT_FORM_TAIL ? ZERO : RA))
		return 0;
	return n;
}

unsigned sdt_arch_encode(sdt_u8 *out, unsigned form, unsigned size, unsigned state, sdt_word site, sdt_word stub,
			 sdt_word recorder, sdt_u8 keep)
{
	sdt_u32 w;

	(void)keep;
	if (size == 2) {	/* c.j, a tail site */
		if (form != SDT_FORM_TAIL)
			return 0;
		w = state == SDT_SITE_TRAP ? C_EBREAK : state == SDT_SITE_BRANCH ? c_j((long)(recorder - site)) : C_RET;
		if (!w)
			return 0;
		wr16(out, w);
		return 2;
	}
	if (size != 4 && size != 8)
		return 0;
	if (form == SDT_FORM_ISEN)
		w = LI_A0 | (state == SDT_SITE_OFF ? 0 : 1u << 20);
	else if (state == SDT_SITE_TRAP)
		w = EBREAK;
	else if (state == SDT_SITE_BRANCH && form == SDT_FORM_GOTO)
		w = jal(ZERO, (long)(stub - site));	/* j to the asm goto's out-of-line target */
	else if (state == SDT_SITE_BRANCH)
		w = jal(form == SDT_FORM_TAIL ? ZERO : RA, (long)(recorder - site));
	else
		w = form == SDT_FORM_TAIL ? RET : NOP;
	if (!w)
		return 0;
	wr32(out, w);
	if (size == 8)
		wr32(out + 4, NOP);
	return size;
}

int sdt_arch_off_is_fixed(unsigned form)
{
	(void)form;
	return 1;	/* nop, ret or the result-0 move: no displacement */
}

int sdt_arch_single_store(sdt_word site, unsigned size, unsigned lo, unsigned hi, unsigned *at, unsigned *width)
{
	sdt_word a = site + lo, b = site + hi, w;

	if ((a & ~(sdt_word)1) == (b & ~(sdt_word)1)) {
		*at = (unsigned)((a & ~(sdt_word)1) - site);
		*width = 2;
		return 1;
	}
	w = a & ~(sdt_word)3;
	if (w == (b & ~(sdt_word)3) && w >= site && w + 4 <= site + size) {
		*at = (unsigned)(w - site);
		*width = 4;
		return 1;
	}
	return 0;
}

int sdt_arch_is_breakpoint(const sdt_u8 *code)
{
	return rd16(code) == C_EBREAK || rd32(code) == EBREAK;
}

sdt_word sdt_arch_trap_address(const struct sdt_frame *f)
{
	return (sdt_word)f->pc;	/* ebreak leaves the pc on itself */
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
	f->ret = value;
}

int sdt_arch_cond_taken(const struct sdt_frame *f, sdt_u8 keep)
{
	(void)f;
	(void)keep;
	return 0;	/* no conditional sites on RISC-V */
}
