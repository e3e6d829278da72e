/*
 * sdt_program.c - predicates and aggregations: the verifier, the evaluator, and programs attached to probes
 * (docs/aggregations.md).
 *
 * A program (struct sdt_program; the host's compiler writes it, sdtgen/dscript/) is a header, instructions,
 * aggregation descriptors, 64-bit constants, the keys of the probes it is for, and strings. The verifier
 * (sdt_program_verify) refuses anything that is not one: every field in range, every jump forward and
 * inside the program, every path ending in EXIT, no register read before every path to it wrote it, every
 * constant, string, set and aggregation it names inside its tables. Jumps going forward only, a run takes at
 * most ninsns steps. The evaluator reads the firing's arguments, its CPU and its probe, the current task (the
 * kernel's sdt_hooks.task, asked once a run), and strings only through the kernel's readable ranges (the
 * recorders' own rule); a division by zero, a string it cannot read or a task of a kernel without the hook stops
 * the clause (CATCH) and is counted in the CPU's ``errors``, never a fault.
 *
 * A probe's program is found through its slot (struct sdt_slot), which gen defines beside its recorder: NULL (no
 * program) costs the recorder a compare and a branch. A program's guard, its predicate's first test, is copied
 * into the slot: the recorder makes it (sdt_guard, inline) before anything else, so a firing it turns away
 * costs no call. The recorder calls sdt_program_fire with this CPU's area;
 * the CPU's seq is odd while it runs a program, which is how sdt_disable_program knows when no CPU can still
 * be reading one it detached (and the consumer, when a half it switched away from is complete).
 */
#include "sdt_state.h"

#define PROG_INSNS(p) ((const struct sdt_insn *)((p) + 1))
#define PROG_AGGS(p) ((const struct sdt_agg_desc *)(PROG_INSNS(p) + (p)->ninsns))
#define PROG_CONSTS(p) ((const sdt_u64 *)(PROG_AGGS(p) + (p)->naggs))
#define PROG_PROBES(p) ((const sdt_u32 *)(PROG_CONSTS(p) + (p)->nconsts))
#define PROG_STRINGS(p) ((const char *)(PROG_PROBES(p) + (p)->nprobes))
#define REG(x) ((x) & (SDT_PROG_REGS - 1))
#define LQ_MAX_BOUND ((sdt_u64)1 << 62)	/* |low| and levels * step stay below it: the top bound fits an int64 */


/* -- the verifier ------------------------------------------------------------------------------------------ */

enum { ARG_NONE, ARG_REG, ARG_IMM };

static SDT_CODE int is_binary(unsigned op)
{
	return op >= SDT_OP_ADD && op <= SDT_OP_UGE;
}

/* The values an aggregating function keeps for an entry (0: not a function). */
static SDT_CODE unsigned agg_values(const struct sdt_agg_desc *d)
{
	switch (d->func) {
	case SDT_AGG_COUNT:
	case SDT_AGG_SUM:
	case SDT_AGG_MIN:
	case SDT_AGG_MAX:
		return 1;
	case SDT_AGG_AVG:
		return 2;
	case SDT_AGG_QUANTIZE:
		return SDT_AGG_QUANTIZE_BUCKETS;
	case SDT_AGG_LQUANTIZE:
		return d->levels + 2;
	}
	return 0;
}

static SDT_CODE int verify_agg(const struct sdt_agg_desc *d)
{
	unsigned nv = agg_values(d);
	sdt_u64 rem;

	if (!nv || d->nkeys > SDT_AGG_MAX_KEYS || d->nvals != nv || nv > SDT_AGG_MAX_VALS || d->pad)
		return SDT_ERR_PROG_AGG;
	if (d->func != SDT_AGG_LQUANTIZE)
		return d->low || d->step || d->levels ? SDT_ERR_PROG_AGG : 0;
	/* low + levels * step, the top bucket's bound, fits an int64 (the host prints it) */
	if (!d->levels || !d->step || d->step > udiv64(LQ_MAX_BOUND, d->levels, &rem) ||
	    d->low + LQ_MAX_BOUND > 2 * LQ_MAX_BOUND)
		return SDT_ERR_PROG_AGG;
	return 0;
}

/* Whether a NUL-terminated string of at most SDT_MAX_STRING bytes starts at ``off`` of the string table. */
static SDT_CODE int string_at(const struct sdt_program *p, sdt_u32 off)
{
	const char *s = PROG_STRINGS(p);
	sdt_u32 k;

	for (k = 0; off + k < p->strings && k <= SDT_MAX_STRING; k++)
		if (!s[off + k])
			return 1;
	return 0;
}

/* Whether constants [off, off + n) are inside the table and strictly ascending (a set PIN searches). */
static SDT_CODE int ascending_set(const struct sdt_program *p, sdt_u32 off, sdt_u32 n)
{
	const sdt_u64 *c = PROG_CONSTS(p);
	sdt_u32 k;

	if (off + n > p->nconsts)
		return 0;
	for (k = 1; k < n; k++)
		if (c[off + k - 1] >= c[off + k])
			return 0;
	return 1;
}

/*
 * One instruction's operands: what it reads (a bit per register), whether it writes dst, and whether its
 * fields are the ones its operation allows (every field it does not use is 0). 0 when it is refused.
 */
static SDT_CODE int operands(const struct sdt_program *p, const struct sdt_insn *in, unsigned pc, unsigned *reads,
			     int *writes)
{
	unsigned op = in->op & ~SDT_OP_IMM, n = p->ninsns, a = in->a, b = in->b, dst = in->dst;
	sdt_u32 imm = (sdt_u32)in->imm;
	int jump = 0;

	*reads = 0;
	*writes = 0;
	if ((in->op & SDT_OP_IMM) && !is_binary(op))
		return 0;
	if (a >= SDT_PROG_REGS || dst >= SDT_PROG_REGS)
		return 0;
	switch (op) {
	case SDT_OP_EXIT:
	case SDT_OP_REC:
	case SDT_OP_SNAPSHOT:
		return !dst && !a && !b && !imm;
	case SDT_OP_RECNZ:
		*reads = 1u << a;
		return !dst && !b && !imm;
	case SDT_OP_CATCH:
	case SDT_OP_JA:
		jump = 1;
		break;
	case SDT_OP_JZ:
	case SDT_OP_JNZ:
		*reads = 1u << a;
		jump = 1;
		break;
	case SDT_OP_LDI:
		*writes = 1;
		return !a && !b;
	case SDT_OP_LDC:
		*writes = 1;
		return !a && !b && imm < p->nconsts;
	case SDT_OP_LDARG:
		*writes = 1;
		return a < p->nargs && b <= SDT_EXT_U32 && !imm;
	case SDT_OP_LDCPU:
	case SDT_OP_LDPROBE:
		*writes = 1;
		return !a && !b && !imm;
	case SDT_OP_LDTASK:
		*writes = 1;
		return !a && (b == SDT_TASK_ID || b == SDT_TASK_CONTEXT) && !imm;
	case SDT_OP_TASKCMP:
		*writes = 1;
		return !a && !b && string_at(p, imm);
	case SDT_OP_MOV:
	case SDT_OP_NEG:
	case SDT_OP_NOT:
	case SDT_OP_LNOT:
		*writes = 1;
		*reads = 1u << a;
		return !b && !imm;
	case SDT_OP_STRCMP:
		*writes = 1;
		return a < p->nargs && !b && string_at(p, imm);
	case SDT_OP_PIN:
		*writes = 1;
		return !a && !b && ascending_set(p, imm & 0xffff, imm >> 16);
	case SDT_OP_AGG: {
		const struct sdt_agg_desc *d;
		if (b >= p->naggs || imm)
			return 0;
		d = &PROG_AGGS(p)[b];
		if (dst + d->nkeys > SDT_PROG_REGS)
			return 0;
		*reads = ((1u << d->nkeys) - 1) << dst;
		if (d->func == SDT_AGG_COUNT)
			return !a;
		*reads |= 1u << a;
		return 1;
	}
	default:
		if (!is_binary(op))
			return 0;
		*writes = 1;
		*reads = 1u << a;
		if (in->op & SDT_OP_IMM)
			return !b;
		*reads |= 1u << b;
		return b < SDT_PROG_REGS && !imm;
	}
	/* a jump: its target a later instruction, its unused fields 0 */
	if (jump && (dst || b || (op != SDT_OP_JZ && op != SDT_OP_JNZ && a) || imm <= pc || imm >= n))
		return 0;
	return 1;
}

SDT_CODE int sdt_program_verify(const void *program, unsigned long bytes)
{
	const struct sdt_program *p = (const struct sdt_program *)program;
	const struct sdt_insn *ins;
	sdt_u8 defined[SDT_PROG_MAX_INSNS], reached[SDT_PROG_MAX_INSNS];
	unsigned long size;
	unsigned i, k;

	if (!p || ((sdt_word)p & 7) || bytes < sizeof(*p) || bytes > SDT_PROG_MAX_BYTES)
		return SDT_ERR_PROG_FORM;
	if (p->magic != SDT_PROGRAM_MAGIC || p->version != SDT_PROGRAM_VERSION || p->size != bytes || p->flags ||
	    !p->ninsns || p->ninsns > SDT_PROG_MAX_INSNS || p->naggs > SDT_PROG_MAX_AGGS || p->nargs > SDT_MAX_ARGS)
		return SDT_ERR_PROG_FORM;
	size = sizeof(*p) + sizeof(struct sdt_insn) * (unsigned long)p->ninsns +
	       sizeof(struct sdt_agg_desc) * (unsigned long)p->naggs + 8ul * p->nconsts + 4ul * p->nprobes;
	if (size > bytes || bytes - size != p->strings)
		return SDT_ERR_PROG_FORM;
	if (p->guard_arg >= SDT_MAX_ARGS || (p->guard_span != ~(sdt_u64)0 && p->guard_arg >= p->nargs) ||
	    p->guard_shift > 63 || p->guard_flip > 1)
		return SDT_ERR_PROG_FORM;
	for (k = 0; k < sizeof(p->guard_pad); k++)
		if (p->guard_pad[k])
			return SDT_ERR_PROG_FORM;
	for (k = 1; k < p->nprobes; k++)
		if (PROG_PROBES(p)[k - 1] >= PROG_PROBES(p)[k])
			return SDT_ERR_PROG_FORM;
	for (k = 0; k < p->naggs; k++)
		if (verify_agg(&PROG_AGGS(p)[k]))
			return SDT_ERR_PROG_AGG;
	/*
	 * In order, every predecessor of an instruction is before it: a register is defined at an instruction when
	 * every path there wrote it (the AND over the edges into it; a CATCH's target also takes the registers
	 * defined at the CATCH, which every error edge after it has too).
	 */
	ins = PROG_INSNS(p);
	for (i = 0; i < p->ninsns; i++) {
		defined[i] = 0xff;
		reached[i] = i == 0;
	}
	defined[0] = 0;
	for (i = 0; i < p->ninsns; i++) {
		const struct sdt_insn *in = &ins[i];
		unsigned op = in->op & ~SDT_OP_IMM, reads;
		sdt_u8 out;
		int writes;

		if (!operands(p, in, i, &reads, &writes))
			return op == SDT_OP_JA || op == SDT_OP_JZ || op == SDT_OP_JNZ || op == SDT_OP_CATCH ?
				       SDT_ERR_PROG_FLOW : SDT_ERR_PROG_INSN;
		if (!reached[i])
			continue;	/* dead code: checked above, never run */
		if (reads & ~(unsigned)defined[i])
			return SDT_ERR_PROG_INSN;
		out = (sdt_u8)(defined[i] | (writes ? 1u << in->dst : 0));
		if (op == SDT_OP_JA || op == SDT_OP_JZ || op == SDT_OP_JNZ || op == SDT_OP_CATCH) {
			sdt_u32 t = (sdt_u32)in->imm;
			defined[t] &= out;
			reached[t] = 1;
		}
		if (op == SDT_OP_EXIT || op == SDT_OP_JA)
			continue;
		if (i + 1 == p->ninsns)
			return SDT_ERR_PROG_FLOW;	/* a path runs off the end */
		defined[i + 1] &= out;
		reached[i + 1] = 1;
	}
	return 0;
}

/* -- the evaluator -------------------------------------------------------------------------------------------- */

/* String argument ``s`` (as a recorder would copy it: at most SDT_MAX_STRING bytes, never past readable memory)
 * against constant ``c``, as strcmp orders them; 2 when ``s`` cannot be read. */
static SDT_CODE int compare_string(const char *s, const char *c)
{
	sdt_u32 room = s ? sdt_readable((sdt_word)s) : 0, k;

	if (!room)
		return 2;
	for (k = 0;; k++) {
		unsigned char x = k < room && k < SDT_MAX_STRING ? (unsigned char)s[k] : 0, y = (unsigned char)c[k];
		if (x != y)
			return x < y ? -1 : 1;
		if (!x)
			return 0;
	}
}

static SDT_CODE int in_set(const sdt_u64 *set, sdt_u32 n, sdt_u64 key)
{
	sdt_u32 lo = 0, hi = n;

	while (lo < hi) {
		sdt_u32 mid = lo + (hi - lo) / 2;
		if (set[mid] == key)
			return 1;
		if (set[mid] < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

static SDT_CODE sdt_u64 signed_div(sdt_u64 x, sdt_u64 y, int mod)
{
	sdt_u64 ax = (x & ((sdt_u64)1 << 63)) ? 0 - x : x, ay = (y & ((sdt_u64)1 << 63)) ? 0 - y : y, r;
	sdt_u64 q = udiv64(ax, ay, &r);
	int xneg = (long long)x < 0, yneg = (long long)y < 0;

	if (mod)
		return xneg ? 0 - r : r;	/* the remainder has the dividend's sign, as C's */
	return xneg != yneg ? 0 - q : q;	/* toward zero; INT64_MIN / -1 wraps to INT64_MIN */
}

/* An argument's register as LDARG reads it: extended as ``ext`` (SDT_EXT_*) says. */
static inline sdt_u64 extend(sdt_u64 q, unsigned ext)
{
	switch (ext) {
	case SDT_EXT_S8:
		return (sdt_u64)(long long)(signed char)q;
	case SDT_EXT_S16:
		return (sdt_u64)(long long)(short)q;
	case SDT_EXT_S32:
		return (sdt_u64)(long long)(int)q;
	case SDT_EXT_U8:
		return q & 0xff;
	case SDT_EXT_U16:
		return q & 0xffff;
	case SDT_EXT_U32:
		return q & 0xffffffffu;
	}
	return q;
}

/* The current task, asked of the kernel's hook at the first instruction of a run that reads it (its name only
 * for one that compares it: a hook may pay for a name, e.g. a system call in a process). */
struct task_now {
	int asked;	/* 0: not yet; 1: the id and context; 2: the name too */
	sdt_u32 context;
	sdt_u64 id;
	const char *name;
};

/* Ask the hook as the writer does: with the CPU held and ``nesting`` set on the area of the firing, so a probe
 * inside the hook is discarded there (and counted), never recursed into. 0: the kernel gives no hook. */
static SDT_CODE int ask_task(struct sdt_cpu *area, struct task_now *t, int name)
{
	sdt_word nesting;

	if (!sdt_hooks.task)
		return 0;
	if (t->asked > name)
		return 1;
	nesting = (sdt_word)area->nesting;
	area->nesting = 1;
	__asm__ __volatile__("" ::: "memory");
	t->name = 0;
	t->id = sdt_hooks.task(&t->context, name ? &t->name : 0);
	__asm__ __volatile__("" ::: "memory");
	area->nesting = nesting;
	t->asked = name ? 2 : 1;
	return 1;
}

/*
 * Run program ``p`` for a firing of probe ``key`` with arguments ``arg`` on the CPU of ``g`` (its half ``h``
 * takes the aggregations; ``area`` the one it fired on, for the task hook): 1 when the firing is to be recorded. Threaded: each operation's code goes straight
 * to the next one's (GNU C's labels as values, as Linux's BPF interpreter). A verified program's jumps go
 * forward and its last instruction is EXIT; the checks on pc keep every run within ninsns steps for any bytes.
 */
static SDT_CODE __attribute__((noinline)) int program_run(const struct sdt_program *p, struct sdt_cpu *area,
							  struct sdt_agg *g, unsigned h, sdt_u32 key, const sdt_u64 *arg)
{
#define OP(name) [SDT_OP_##name] = &&op_##name
#define BIN(name) [SDT_OP_##name] = &&op_##name, [SDT_OP_##name | SDT_OP_IMM] = &&op_##name
	static const void *const ops[256] = {
		OP(EXIT), OP(REC), OP(RECNZ), OP(CATCH), OP(JA), OP(JZ), OP(JNZ), OP(LDI), OP(LDC), OP(LDARG), OP(LDCPU),
		OP(LDPROBE), OP(MOV), OP(NEG), OP(NOT), OP(LNOT), OP(STRCMP), OP(PIN), OP(AGG), BIN(ADD), BIN(SUB),
		BIN(MUL), BIN(SDIV), BIN(UDIV), BIN(SMOD), BIN(UMOD), BIN(AND), BIN(OR), BIN(XOR), BIN(SHL), BIN(SHR),
		BIN(SAR), BIN(EQ), BIN(NE), BIN(SLT), BIN(SLE), BIN(SGT), BIN(SGE), BIN(ULT), BIN(ULE), BIN(UGT),
		BIN(UGE), OP(LDTASK), OP(TASKCMP), OP(SNAPSHOT),
	};
#undef OP
#undef BIN
	const struct sdt_insn *ins = PROG_INSNS(p), *in;
	struct task_now task;	/* no initializer: a compiler may make one a memcpy, which the runtime has not */
	sdt_u64 r[SDT_PROG_REGS], y, q;
	unsigned n = p->ninsns, pc = 0, resume = 0;
	int rec = 0;

#define NEXT() do { if (++pc >= n) return rec; in = &ins[pc]; goto *(ops[in->op] ? ops[in->op] : &&bad); } while (0)
#define D r[REG(in->dst)]
#define A r[REG(in->a)]
#define B (in->op & SDT_OP_IMM ? (sdt_u64)(long long)in->imm : r[REG(in->b)])
#define IMM ((sdt_u32)in->imm)
#define JUMP() do { if (IMM <= pc || IMM >= n) return rec; pc = IMM; in = &ins[pc]; \
		    goto *(ops[in->op] ? ops[in->op] : &&bad); } while (0)
	if (!n)
		return 0;
	task.asked = 0;
	in = &ins[0];
	goto *(ops[in->op] ? ops[in->op] : &&bad);
op_EXIT:
bad:
	return rec;
op_REC:
	rec |= 1;
	NEXT();
op_SNAPSHOT:
	rec |= 2;	/* taken once the program is done (sdt_program_fire) */
	NEXT();
op_RECNZ:
	rec |= A != 0;
	NEXT();
op_CATCH:
	resume = IMM;
	NEXT();
op_JZ:
	if (!A)
		JUMP();
	NEXT();
op_JNZ:
	if (A)
		JUMP();
	NEXT();
op_JA:
	JUMP();
op_LDI:
	D = (sdt_u64)(long long)in->imm;
	NEXT();
op_LDC:
	D = PROG_CONSTS(p)[IMM];
	NEXT();
op_LDARG:
	D = extend(arg[in->a & 7], in->b);
	NEXT();
op_LDCPU:
	D = g->cpu;
	NEXT();
op_LDPROBE:
	D = key;
	NEXT();
op_LDTASK:
	if (!ask_task(area, &task, 0))
		goto error;	/* a kernel without the hook: said as an error, never task 0 */
	D = in->b == SDT_TASK_CONTEXT ? task.context : task.id;
	NEXT();
op_TASKCMP: {
	int k;
	if (!ask_task(area, &task, 1))
		goto error;
	/* no name (an interrupt, a kernel thread without one) compares as "" */
	k = task.name ? compare_string(task.name, PROG_STRINGS(p) + IMM) : PROG_STRINGS(p)[IMM] ? -1 : 0;
	if (k == 2)
		goto error;
	D = (sdt_u64)(long long)k;
	NEXT();
}
op_MOV:
	D = A;
	NEXT();
op_NEG:
	D = 0 - A;
	NEXT();
op_NOT:
	D = ~A;
	NEXT();
op_LNOT:
	D = A == 0;
	NEXT();
op_STRCMP: {
	int c = compare_string((const char *)(sdt_word)arg[in->a & 7], PROG_STRINGS(p) + IMM);
	if (c == 2)
		goto error;
	D = (sdt_u64)(long long)c;
	NEXT();
}
op_PIN:
	D = in_set(PROG_CONSTS(p) + (IMM & 0xffff), IMM >> 16, key);
	NEXT();
op_AGG: {
	const struct sdt_agg_desc *desc = &PROG_AGGS(p)[in->b];
	sdt_u64 keys[SDT_AGG_MAX_KEYS];
	unsigned k, first = in->dst;
	for (k = 0; k < desc->nkeys && k < SDT_AGG_MAX_KEYS; k++)
		keys[k] = r[REG(first + k)];
	agg_update(g, h, desc, keys, desc->func == SDT_AGG_COUNT ? 0 : A);
	NEXT();
}
op_ADD:
	D = A + B;
	NEXT();
op_SUB:
	D = A - B;
	NEXT();
op_MUL:
	D = A * B;
	NEXT();
op_SDIV:
op_SMOD:
	y = B;
	if (!y)
		goto error;
	D = signed_div(A, y, (in->op & ~SDT_OP_IMM) == SDT_OP_SMOD);
	NEXT();
op_UDIV:
op_UMOD:
	y = B;
	if (!y)
		goto error;
	q = udiv64(A, y, &y);
	D = (in->op & ~SDT_OP_IMM) == SDT_OP_UDIV ? q : y;
	NEXT();
op_AND:
	D = A & B;
	NEXT();
op_OR:
	D = A | B;
	NEXT();
op_XOR:
	D = A ^ B;
	NEXT();
op_SHL:
	D = A << (B & 63);
	NEXT();
op_SHR:
	D = A >> (B & 63);
	NEXT();
op_SAR:
	D = (sdt_u64)((long long)A >> (B & 63));
	NEXT();
op_EQ:
	D = A == B;
	NEXT();
op_NE:
	D = A != B;
	NEXT();
op_SLT:
	D = (long long)A < (long long)B;
	NEXT();
op_SLE:
	D = (long long)A <= (long long)B;
	NEXT();
op_SGT:
	D = (long long)A > (long long)B;
	NEXT();
op_SGE:
	D = (long long)A >= (long long)B;
	NEXT();
op_ULT:
	D = A < B;
	NEXT();
op_ULE:
	D = A <= B;
	NEXT();
op_UGT:
	D = A > B;
	NEXT();
op_UGE:
	D = A >= B;
	NEXT();
error:
	g->errors++;
	if (resume <= pc)
		return rec;
	pc = resume;
	resume = 0;
	in = &ins[pc];
	goto *(ops[in->op] ? ops[in->op] : &&bad);
#undef NEXT
#undef D
#undef A
#undef B
#undef IMM
#undef JUMP
}

/* -- the firing path ------------------------------------------------------------------------------------------ */

/* SDT_OP_SNAPSHOT: the snapshot of the session whose area ``c`` is (in the recorder's visit, before the firing's
 * own event is written: a session closing waits for it, and it holds what was recorded before the firing). */
static SDT_CODE int program_snapshot(const struct sdt_cpu *c)
{
	struct sdt_session *x = c->session < SDT_MAX_SESSIONS ?
		(struct sdt_session *)sdt_seq_load(&sdt_session_table.sessions[c->session]) : 0;

	return x ? sdt_snapshot(x) : SDT_ERR_SESSION;
}

SDT_CODE int sdt_program_fire(struct sdt_cpu *c, const struct sdt_program *p, sdt_u32 key, sdt_word a0,
			      sdt_word a1, sdt_word a2, sdt_word a3, sdt_word a4, sdt_word a5)
{
	struct sdt_agg *g;
	sdt_u64 arg[8];
	sdt_word s;
	int rec = 1;

	if (__builtin_expect(!c, 0))
		return 0;
	if (!p)
		return 1;	/* no program: every firing is recorded */
	g = (struct sdt_agg *)(sdt_word)c->agg;
	if (__builtin_expect(!g, 0)) {	/* this CPU was given no program state: the firing cannot be judged */
		if (!c->nesting)
			c->discarded++;
		return 0;
	}
	s = (sdt_word)g->seq;
	if (__builtin_expect(s & 1, 0)) {	/* a firing inside this CPU's own program (an interrupt): counted */
		g->nested++;
		return 0;
	}
	__atomic_store_n((sdt_word *)&g->seq, s + 1, __ATOMIC_RELAXED);	/* before the half is read: see quiesce() */
	__asm__ __volatile__("" ::: "memory");
	arg[0] = a0, arg[1] = a1, arg[2] = a2, arg[3] = a3, arg[4] = a4, arg[5] = a5, arg[6] = arg[7] = 0;
	rec = program_run(p, c, g, (unsigned)(sdt_seq_load(&g->want) & 1), key, arg);
	sdt_seq_store(&g->seq, s + 2);	/* release: the half's entries are complete before seq moves */
	if (__builtin_expect(rec & 2, 0) && program_snapshot(c) == SDT_ERR_ARG)
		g->errors++;	/* a session with no snapshot area: the program asked for what cannot be */
	return rec & 1;
}

/* -- attaching programs to probes ------------------------------------------------------------------------------ */

/* Whether program ``prog`` is for probe ``p`` (among the probes a spec matched): its list, or all when empty. */
static SDT_CODE int program_for(const struct sdt_program *prog, const struct sdt_probe *p)
{
	const sdt_u32 *keys = PROG_PROBES(prog);
	sdt_u32 lo = 0, hi = prog->nprobes;

	if (!hi)
		return 1;
	while (lo < hi) {
		sdt_u32 mid = lo + (hi - lo) / 2;
		if (keys[mid] == p->key)
			return 1;
		if (keys[mid] < p->key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

/* Session ``x`` attaches verified program ``prog`` to every probe ``text`` matches (among its keys) and arms them. */
static SDT_CODE int program_enable(const struct sdt_session *x, const char *text, int mode, const void *program,
				  unsigned long bytes)
{
	const struct sdt_program *prog = (const struct sdt_program *)program;
	struct spec sp;
	struct sdt_module *t;
	struct sdt_site *s;
	const struct sdt_probe *last = 0;
	unsigned far = 0;
	int r, hit = 0, count = 0, pass, id;

	if (!text || !program)
		return SDT_ERR_ARG;
	if (!ready)
		return SDT_ERR_INIT;
	if (mode != SDT_TRAP && mode != SDT_BRANCH)
		return SDT_ERR_MODE;
	if (parse_spec(text, &sp))
		return SDT_ERR_SPEC;
	r = sdt_program_verify(program, bytes);
	if (r)
		return r;
	take();
	id = session_id(x);	/* under the lock: a session closing meanwhile is closed */
	if (id < 0) {
		give();
		return SDT_ERR_SESSION;
	}
	/* pass 0 checks every matched probe, so nothing changes unless all of them can take the program; pass 1
	 * attaches it and arms their sites */
	for (pass = 0; pass < 2; pass++) {
		last = 0;
		for_each_site(t, s) {
			const struct sdt_probe *p = sdt_site_probe(s);
			struct sdt_slot *slot;
			if (s->state != SDT_SITE_OFF && !is_armed(s->state))
				continue;
			if (p != last) {
				last = p;
				hit = matches(&sp, t, p) && program_for(prog, p);
			}
			if (!hit)
				continue;
			slot = probe_slot(p);
			if (pass == 0) {
				r = !slot ? SDT_ERR_PROG_SLOT : p->nargs < prog->nargs ? SDT_ERR_PROG_ARGS :
				    slot->program[id] && slot->program[id] != prog ? SDT_ERR_PROG_BUSY : 0;
				if (r) {
					give();
					return r;
				}
				continue;
			}
			if (slot->program[id] != prog || !(slot->sessions & 1u << id))
				slot_join(slot, id, prog);
			count += mark(t, s, mode == SDT_BRANCH ? SDT_SITE_BRANCH : SDT_SITE_TRAP, &far);
		}
	}
	run_marked();
	give();
	if (far)
		sdt_report("sites out of branch range of their recorder were armed with the breakpoint");
	return count;
}

/* Session ``x`` lets go of every probe ``text`` matches and detaches its programs from them: the sites no session
 * keeps are disarmed first, and the programs leave the slots once no recorder reads the session's bit. */
static SDT_CODE int program_disable(const struct sdt_session *x, const char *text)
{
	struct spec sp;
	struct sdt_module *t;
	struct sdt_site *s;
	const struct sdt_probe *last = 0;
	unsigned far = 0;
	int count = 0, hit = 0, id;

	if (!text)
		return SDT_ERR_ARG;
	if (!ready)
		return SDT_ERR_INIT;
	if (parse_spec(text, &sp))
		return SDT_ERR_SPEC;
	take();
	id = session_id(x);
	if (id < 0) {
		give();
		return SDT_ERR_SESSION;
	}
	for_each_site(t, s) {
		const struct sdt_probe *p = sdt_site_probe(s);
		struct sdt_slot *slot;
		if (s->state != SDT_SITE_OFF && !is_armed(s->state))
			continue;
		if (p != last) {
			last = p;
			hit = matches(&sp, t, p);
		}
		if (!hit)
			continue;
		slot = probe_slot(p);
		if (!slot && id)
			continue;	/* a probe with no slot is the default session's alone: another never took it */
		if (slot && (slot->sessions & 1u << id))
			slot_leave(slot, id);
		count += let_go(t, s, slot, &far);
	}
	run_marked();	/* disarmed first: no new firing reaches a program detached below */
	visits_wait();	/* no recorder still reads the session's bit it cleared */
	last = 0;
	for_each_site(t, s) {
		const struct sdt_probe *p = sdt_site_probe(s);
		struct sdt_slot *slot;
		if (s->state == SDT_SITE_REFUSED)	/* an entry sdt_init refused may name no probe: not read */
			continue;
		slot = probe_slot(p);
		if (p != last && slot && slot->program[id] && matches(&sp, t, p))
			slot_forget(slot, id);
		last = p;
	}
	give();
	return count;
}

SDT_CODE int sdt_enable_program(const char *text, int mode, const void *program, unsigned long bytes)
{
	return program_enable(&default_session, text, mode, program, bytes);
}

SDT_CODE int sdt_disable_program(const char *text)
{
	return program_disable(&default_session, text);
}
