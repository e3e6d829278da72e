/*
 * x86 (x86-64 and i386): call/jmp rel32 sites, CS-prefixed and GOT forms, jcc tail sites.
 *
 * Included by sdt_x86_64.c and sdt_i386.c, which say how arguments and the
 * stack are reached (SDT_X86_WORD, SDT_X86_GOT). Encodings, as sdtgen's
 * Python side has them (sdtgen/arch/x86_64.py) and as Linux writes them:
 *   disabled call   Intel's recommended NOP of the site's length (0f 1f 44 00 00)
 *   disabled tail   ret, then NOPs
 *   is-enabled      cs...cs xor eax,eax / cs...cs mov eax,1: one instruction
 *   armed (trap)    int3 over the first byte
 *   armed (branch)  call/jmp rel32 to the recorder, CS prefixes filling a 6-byte site
 *   conditional     the jcc as it was (taken, it reaches the empty stub); armed: int3 over
 *                   its first byte, or the jcc retargeted to the recorder
 *   asm goto        the 5-byte NOP (0f 1f 44 00 00); armed: jmp rel32 to its out-of-line target
 *                   (int3 over the NOP where that is out of reach)
 * Only the first byte of a site is ever changed by one store; anything more
 * goes through the breakpoint protocol (Intel's rule for cross-modifying code,
 * which Linux's text_poke_bp follows).
 */
#include "../sdt_arch.h"

static const sdt_u8 nops[7][6] = {
	{0},
	{0x90},
	{0x66, 0x90},
	{0x0f, 0x1f, 0x00},
	{0x0f, 0x1f, 0x40, 0x00},
	{0x0f, 0x1f, 0x44, 0x00, 0x00},
	{0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00},
};

const sdt_u8 sdt_arch_bp[] = {0xcc};
const unsigned sdt_arch_bp_len = 1;
const unsigned sdt_arch_tail_unit = 1;

static sdt_s32 rd32(const sdt_u8 *p)
{
	return (sdt_s32)((sdt_u32)p[0] | (sdt_u32)p[1] << 8 | (sdt_u32)p[2] << 16 | (sdt_u32)p[3] << 24);
}

static void wr32(sdt_u8 *p, sdt_u32 v)
{
	p[0] = (sdt_u8)v;
	p[1] = (sdt_u8)(v >> 8);
	p[2] = (sdt_u8)(v >> 16);
	p[3] = (sdt_u8)(v >> 24);
}

/* rel32 from the end of an instruction at ``end`` to ``to``; 0 when it does not reach (2 GiB). */
static int rel32(sdt_word end, sdt_word to, sdt_u32 *out)
{
	long long d = (long long)(signed long)(to - end);

#if SDT_X86_WORD == 8
	if (d < -(1LL << 31) || d >= (1LL << 31))
		return 0;
#endif
	*out = (sdt_u32)d;
	return 1;
}

static sdt_word target(sdt_word end, const sdt_u8 *field)
{
	return end + (sdt_word)(signed long)rd32(field);
}

unsigned sdt_arch_verify(const sdt_u8 *code, sdt_word site, unsigned form, unsigned length, sdt_word stub,
			 sdt_u8 *keep)
{
	unsigned want = form == SDT_FORM_TAIL ? 0xe9 : 0xe8;

	*keep = 0;
	if (form == SDT_FORM_GOTO) {	/* the one 5-byte NOP, which a jmp rel32 replaces whole */
		unsigned i;
		if (length != 5)
			return 0;
		for (i = 0; i < 5; i++)
			if (code[i] != nops[5][i])
				return 0;
		return 5;
	}
	if (form == SDT_FORM_COND)
		return length == 6 && code[0] == 0x0f && (code[1] & 0xf0) == 0x80 && target(site + 6, code + 2) == stub
			       ? (*keep = code[1], 6)
			       : 0;
	if (length == 5)
		return code[0] == want && target(site + 5, code + 1) == stub ? 5 : 0;
	if (length != 6)
		return 0;
	/* cs call/jmp (gcc -mindirect-branch-cs-prefix), addr32 call (the linkers' relaxed GOT call) */
	if ((code[0] == 0x2e || (code[0] == 0x67 && want == 0xe8)) && code[1] == want)
		return target(site + 6, code + 2) == stub ? 6 : 0;
#if SDT_X86_GOT
	/* call/jmp *GOT(%rip): the slot must hold the stub */
	if (code[0] == 0xff && code[1] == (want == 0xe8 ? 0x15 : 0x25)) {
		const sdt_word *slot = (const sdt_word *)target(site + 6, code + 2);
		return *slot == stub ? 6 : 0;
	}
#endif
	/* GNU ld relaxes jmp *GOT to jmp rel32 and a NOP: the site is the jmp, the NOP stays (it may be a
	 * branch target, so it is never written) */
	if (want == 0xe9 && code[0] == 0xe9 && code[5] == 0x90)
		return target(site + 5, code + 1) == stub ? 5 : 0;
	return 0;
}

static void fill_nop(sdt_u8 *out, unsigned n)
{
	unsigned i;

	for (i = 0; i < n; i++)
		out[i] = nops[n][i];
}

unsigned sdt_arch_encode(sdt_u8 *out, unsigned form, unsigned size, unsigned state, sdt_word site, sdt_word stub,
			 sdt_word recorder, sdt_u8 keep)
{
	sdt_u32 rel;
	unsigned i;

	if (size < 5 || size > 6)
		return 0;
	if (form == SDT_FORM_GOTO) {	/* the NOP; armed, jmp rel32 to the target (``stub``), or int3 over the NOP */
		if (size != 5)
			return 0;
		if (state == SDT_SITE_BRANCH) {
			if (!rel32(site + 5, stub, &rel))
				return 0;
			out[0] = 0xe9;
			wr32(out + 1, rel);
			return 5;
		}
		fill_nop(out, 5);
		if (state == SDT_SITE_TRAP)
			out[0] = 0xcc;
		return 5;
	}
	if (form == SDT_FORM_ISEN) {	/* result 0 (off) or 1 (armed), one instruction padded with cs */
		unsigned body = state == SDT_SITE_OFF ? 2 : 5;
		for (i = 0; i < size - body; i++)
			out[i] = 0x2e;
		if (state == SDT_SITE_OFF) {
			out[i] = 0x31;
			out[i + 1] = 0xc0;
		} else {
			out[i] = 0xb8;
			wr32(out + i + 1, 1);
		}
		return size;
	}
	if (form == SDT_FORM_COND) {
		if (size != 6 || !rel32(site + 6, state == SDT_SITE_BRANCH ? recorder : stub, &rel))
			return 0;
		out[0] = state == SDT_SITE_TRAP ? 0xcc : 0x0f;
		out[1] = keep;
		wr32(out + 2, rel);
		return 6;
	}
	if (state == SDT_SITE_BRANCH) {
		if (!rel32(site + size, recorder, &rel))
			return 0;
		for (i = 0; i < size - 5; i++)
			out[i] = 0x2e;
		out[i] = form == SDT_FORM_TAIL ? 0xe9 : 0xe8;
		wr32(out + i + 1, rel);
		return size;
	}
	if (form == SDT_FORM_TAIL) {
		out[0] = 0xc3;
		fill_nop(out + 1, size - 1);
	} else {
		fill_nop(out, size);
	}
	if (state == SDT_SITE_TRAP)
		out[0] = 0xcc;
	return size;
}

int sdt_arch_off_is_fixed(unsigned form)
{
	return form != SDT_FORM_COND;	/* a disabled jcc keeps its condition and its displacement to the stub */
}

int sdt_arch_single_store(sdt_word site, unsigned size, unsigned lo, unsigned hi, unsigned *at, unsigned *width)
{
	(void)site;
	(void)size;
	if (lo != 0 || hi != 0)
		return 0;
	*at = 0;
	*width = 1;
	return 1;
}

int sdt_arch_is_breakpoint(const sdt_u8 *code)
{
	return code[0] == 0xcc;
}

sdt_word sdt_arch_trap_address(const struct sdt_frame *f)
{
	return (sdt_word)f->pc - 1;	/* int3 traps with the pc after it */
}

void sdt_arch_emulate_call(struct sdt_frame *f, sdt_word to, sdt_word ret)
{
	f->sp -= SDT_X86_WORD;
	*(sdt_word *)(sdt_word)f->sp = ret;
	f->pc = to;
}

void sdt_arch_emulate_return(struct sdt_frame *f)
{
	f->pc = *(const sdt_word *)(sdt_word)f->sp;
	f->sp += SDT_X86_WORD;
}

void sdt_arch_set_result(struct sdt_frame *f, sdt_word value)
{
	f->ret = (sdt_u32)value;	/* mov eax / xor eax: the upper half of rax becomes 0 */
}

int sdt_arch_cond_taken(const struct sdt_frame *f, sdt_u8 keep)
{
	sdt_u64 fl = f->flags;
	int cf = fl & 1, zf = (fl >> 6) & 1, sf = (fl >> 7) & 1, of = (fl >> 11) & 1, pf = (fl >> 2) & 1;
	int r;

	switch ((keep & 0xf) >> 1) {
	case 0: r = of; break;			/* jo */
	case 1: r = cf; break;			/* jb */
	case 2: r = zf; break;			/* je */
	case 3: r = cf | zf; break;		/* jbe */
	case 4: r = sf; break;			/* js */
	case 5: r = pf; break;			/* jp */
	case 6: r = sf != of; break;		/* jl */
	default: r = zf | (sf != of); break;	/* jle */
	}
	return keep & 1 ? !r : r;
}
