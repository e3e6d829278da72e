/*
 * sdt_control_programs.c - the control core's program and table commands (docs/aggregations.md): program memory
 * reserved and written (program, pbytes), programs enabled and disabled on probes (penable, pdisable), and every
 * CPU's aggregation tables attached, switched and taken (tables, switch, take).
 *
 * Part of the control core's unit: sdt_control.c includes it after the replies and words it uses, and before the
 * command table that names its commands.
 */

/* The kernel's program memory: [prog, prog + prog_size); reserved up to prog_used, and below prog_sealed given to
 * sdt_enable_program (the runtime trusts what it verified: no `pbytes` writes there again). */
static sdt_u8 *prog;
static sdt_word prog_size, prog_used, prog_sealed;
static int tables_ready;
static struct sdt_agg taken;	/* `take`: a CPU's struct sdt_agg as it stood, sent with its frozen half */

#define AGG_HEAD ((sizeof(struct sdt_agg) + 7) & ~(sdt_word)7)

/* CPU k's struct sdt_agg at the start of the memory the kernel gives it, *tables the bytes after it; NULL when it
 * gives none it can use. */
static SDT_CODE struct sdt_agg *agg_of(unsigned k, sdt_word *tables)
{
	unsigned long bytes = 0;
	void *mem = ops.agg_memory ? ops.agg_memory(k, &bytes) : 0;

	if (!mem || ((sdt_word)mem & 7) || bytes < AGG_HEAD + SDT_AGG_MIN_BYTES)
		return 0;
	*tables = (bytes - AGG_HEAD) & ~(sdt_word)7;
	return (struct sdt_agg *)mem;
}

/* tables: attach every CPU's (once), then say where each is. */
static SDT_CODE int cmd_tables(struct out *o, struct words *w)
{
	sdt_word bytes;
	unsigned k;

	(void)w;
	if (scope) {	/* a session's tables were carved when it opened: where they are */
		for (k = 0; k < scope->ncpus; k++) {
			sdt_u64 v[SDT_FIELDS_TABLES_TABLE];
			v[SDT_FIELD_TABLES_TABLE_CPU] = k;
			v[SDT_FIELD_TABLES_TABLE_AGG] = area_of(k)->agg;
			v[SDT_FIELD_TABLES_TABLE_BYTES] = scope->agg_bytes;
			if (!v[SDT_FIELD_TABLES_TABLE_AGG])
				return error(o, SDT_ERR_STATE, "the session has no tables (session open ... AGGBYTES)");
			say(o, SDT_REPLY_TABLES_TABLE, v);
		}
		return ok(o, SDT_CTL_TABLES, scope->ncpus);
	}
	if (!ops.agg_memory || !ops.area)
		return error(o, SDT_ERR_UNSUPPORTED, "the kernel gives no aggregation memory");
	for (k = 0; k < ops.ncpus; k++)
		if (!agg_of(k, &bytes) || !ops.area(k))
			return error(o, SDT_ERR_ARG, "a CPU has no area or no aggregation memory (8-byte aligned, "
				     "sizeof(struct sdt_agg) and SDT_AGG_MIN_BYTES at least)");
	for (k = 0; !tables_ready && k < ops.ncpus; k++) {
		struct sdt_agg *g = agg_of(k, &bytes);
		int r = sdt_agg_attach(ops.area(k), g, (sdt_u8 *)g + AGG_HEAD, bytes);
		if (r < 0)
			return error(o, r, "the runtime refused a CPU's aggregation tables");
	}
	tables_ready = 1;
	for (k = 0; k < ops.ncpus; k++) {
		sdt_u64 v[SDT_FIELDS_TABLES_TABLE];
		v[SDT_FIELD_TABLES_TABLE_CPU] = k;
		v[SDT_FIELD_TABLES_TABLE_AGG] = (sdt_word)agg_of(k, &bytes);
		v[SDT_FIELD_TABLES_TABLE_BYTES] = bytes;
		say(o, SDT_REPLY_TABLES_TABLE, v);
	}
	return ok(o, SDT_CTL_TABLES, ops.ncpus);
}

/* Whether a probe's slot holds a program in the core's program memory (sdt_disable_program cleared the slots of
 * those it detached, and no CPU reads them once it returned). */
static SDT_CODE int programs_in_use(void)
{
	const struct sdt_probe *p;

	for (p = __start_set_sdt_probes_set; (sdt_word)p < sdt_bound(__stop_set_sdt_probes_set); p++) {
		const struct sdt_slot *slot = p->program ? (const struct sdt_slot *)sdt_rel(&p->program) : 0;
		unsigned id;
		for (id = 0; slot && id < SDT_MAX_SESSIONS; id++) {	/* any session's */
			sdt_word at = (sdt_word)__atomic_load_n(&slot->program[id], __ATOMIC_ACQUIRE);
			if (at >= (sdt_word)prog && at < (sdt_word)prog + prog_used)
				return 1;
		}
	}
	return 0;
}

/* program BYTES: room for a program, 8-byte aligned, after those reserved before; from the start again once every
 * program reserved was given to penable and none is attached any more (a host that left detached its own). */
static SDT_CODE int cmd_program(struct out *o, struct words *w)
{
	sdt_word bytes;

	if (!number(w, &bytes) || !bytes || bytes > SDT_PROG_MAX_BYTES)
		return error(o, SDT_ERR_USAGE, "usage: program BYTES (1 to SDT_PROG_MAX_BYTES)");
	if (!ops.program_memory)
		return error(o, SDT_ERR_UNSUPPORTED, "the kernel gives no program memory");
	if (!prog) {
		unsigned long size = 0;
		sdt_u8 *mem = (sdt_u8 *)ops.program_memory(&size);
		if (!mem || ((sdt_word)mem & 7))
			return error(o, SDT_ERR_UNSUPPORTED, "the kernel's program memory is not 8-byte aligned");
		prog = mem;
		prog_size = size & ~(sdt_word)7;
	}
	bytes = (bytes + 7) & ~(sdt_word)7;
	if (prog_used && prog_used == prog_sealed && !programs_in_use())
		prog_used = prog_sealed = 0;
	if (bytes > prog_size - prog_used)
		return error(o, SDT_ERR_ARG, "the kernel's program memory is full");
	prog_used += bytes;
	return ok(o, SDT_CTL_PROGRAM, (sdt_word)prog + prog_used - bytes);
}

/* Whether [a, a + n) lies in the reserved program memory from ``from`` on. */
static SDT_CODE int reserved(sdt_word a, sdt_word n, sdt_word from)
{
	return prog && a >= (sdt_word)prog + from && a <= (sdt_word)prog + prog_used &&
	       n <= (sdt_word)prog + prog_used - a;
}

/* pbytes ADDR HEX: bytes into reserved program memory. */
static SDT_CODE int cmd_pbytes(struct out *o, struct words *w)
{
	sdt_word addr, i;
	unsigned long len;
	const char *hex;

	if (!number(w, &addr))
		return error(o, SDT_ERR_USAGE, "usage: pbytes ADDR HEX");
	hex = word(w, &len);
	if (!len || (len & 1))
		return error(o, SDT_ERR_USAGE, "usage: pbytes ADDR HEX (pairs of hexadecimal digits)");
	for (i = 0; i < len; i++)
		if (hex_digit(hex[i]) < 0)
			return error(o, SDT_ERR_USAGE, "usage: pbytes ADDR HEX (pairs of hexadecimal digits)");
	if (!reserved(addr, len / 2, prog_sealed))
		return error(o, SDT_ERR_ARG, "not reserved program memory, or a program enabled there");
	for (i = 0; i < len / 2; i++)
		prog[addr - (sdt_word)prog + i] = (sdt_u8)(hex_digit(hex[2 * i]) << 4 | hex_digit(hex[2 * i + 1]));
	return ok(o, SDT_CTL_PBYTES, len / 2);
}

static SDT_CODE int program_refused(struct out *o, int r)
{
	return r == SDT_ERR_PROG_FORM ? error(o, r, "not a program (its header, size or tables)") :
	       r == SDT_ERR_PROG_INSN ? error(o, r, "an instruction the verifier refuses") :
	       r == SDT_ERR_PROG_FLOW ? error(o, r, "a jump or path the verifier refuses") :
	       r == SDT_ERR_PROG_AGG ? error(o, r, "an aggregation descriptor the verifier refuses") :
	       r == SDT_ERR_PROG_ARGS ? error(o, r, "a matched probe has fewer arguments than the program reads") :
	       r == SDT_ERR_PROG_BUSY ? error(o, r, "a matched probe runs another program") :
	       r == SDT_ERR_PROG_SLOT ? error(o, r, "a matched probe has no program slot") : refused(o, r);
}

/* penable MODE ADDR BYTES SPEC: a program written with pbytes, enabled; from then on its memory is not written. */
static SDT_CODE int cmd_penable(struct out *o, struct words *w)
{
	sdt_word addr, bytes;
	int mode = mode_of(w, 0), r;

	if (!mode || !number(w, &addr) || !number(w, &bytes))
		return error(o, SDT_ERR_USAGE, "usage: penable trap|branch ADDR BYTES SPEC");
	if (!reserved(addr, bytes, 0) || (addr & 7))
		return error(o, SDT_ERR_ARG, "not a program in reserved program memory");
	if (addr + bytes - (sdt_word)prog > prog_sealed)	/* what the runtime verifies it trusts: sealed first */
		prog_sealed = addr + bytes - (sdt_word)prog;
	r = scope ? sdt_session_enable_program(scope, rest(w), mode, (const void *)addr, bytes) :
	    sdt_enable_program(rest(w), mode, (const void *)addr, bytes);
	return r < 0 ? program_refused(o, r) : ok(o, SDT_CTL_PENABLE, (unsigned long)r);
}

static SDT_CODE int cmd_pdisable(struct out *o, struct words *w)
{
	int r = scope ? sdt_session_disable_program(scope, rest(w)) : sdt_disable_program(rest(w));

	return r < 0 ? program_refused(o, r) : ok(o, SDT_CTL_PDISABLE, (unsigned long)r);
}

static SDT_CODE int cmd_switch(struct out *o, struct words *w)
{
	(void)w;
	if (scope) {
		int r = sdt_session_switch(scope);
		return r < 0 ? refused(o, r) : ok(o, SDT_CTL_SWITCH, (unsigned long)r);
	}
	if (!tables_ready)
		return error(o, SDT_ERR_STATE, "no tables are attached (tables)");
	return ok(o, SDT_CTL_SWITCH, (unsigned long)sdt_agg_switch());
}

/* take CPU: its frozen half, as it stands since the last switch, in one SDT_FRAME_TABLES frame. */
static SDT_CODE int cmd_take(struct out *o, struct words *w)
{
	sdt_word k, bytes, used;
	struct sdt_agg *g;
	unsigned h;

	if (!number(w, &k))
		return error(o, SDT_ERR_USAGE, "usage: take CPU");
	if (k >= ops.ncpus)
		return error(o, SDT_ERR_CPU, "no such CPU");
	g = scope ? (area_of((unsigned)k) ? (struct sdt_agg *)(sdt_word)area_of((unsigned)k)->agg : 0) :
	    tables_ready ? agg_of((unsigned)k, &bytes) : 0;
	if (!g)
		return error(o, SDT_ERR_STATE, scope ? "the session has no tables (session open ... AGGBYTES)" :
			     "no tables are attached (tables)");
	if (!ops.frame)
		return error(o, SDT_ERR_UNSUPPORTED, "the kernel cannot send a frame on this line");
	sdt_copy(&taken, g, sizeof(taken));	/* the writer changes its own half's fields meanwhile */
	h = (unsigned)(taken.want & 1) ^ 1;
	used = taken.used[h] <= taken.arena_size ? (sdt_word)taken.used[h] : 0;
	ops.frame(SDT_FRAME_TABLES, &taken, sizeof(taken), (const void *)(sdt_word)taken.arena[h], used);
	return ok(o, SDT_CTL_TAKE, used);
}
