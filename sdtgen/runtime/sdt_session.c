/*
 * sdt_session.c - sessions: several tracers at once, each with its own probes, programs, rings, tables and
 * counters (management layer; docs/sessions.md).
 *
 * The default session (id 0) is what sdt_enable and the rest act on: the areas the kernel attached. A kernel
 * opens sessions of its own (ids 1 .. SDT_MAX_SESSIONS-1) in memory it gives, which this file carves into the
 * session's per-CPU areas, rings and aggregation tables, and lists in the registry (sdt_session_table) a host
 * finds by symbol, on a running kernel or after a crash. Who takes a probe's firings is its slot's sessions,
 * which the layers below keep (sdt_manage.c's change and slot_*, sdt_program.c's programs): a site is armed while
 * any session takes its probe, and the recorder writes a firing once into each. Closing a session lets go of its
 * probes, takes it off the registry, and waits until no CPU is inside a recorder's slow path that may still write
 * into its memory (each CPU's visit, sdt_transport.c).
 */
#include "sdt_state.h"

/* -- names and memory ---------------------------------------------------------------------------------------- */

static SDT_CODE int session_name_valid(const char *name)
{
	unsigned n;

	for (n = 0; name[n]; n++) {
		char c = name[n];
		if (n + 1 >= SDT_SESSION_NAME || !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
						    (c >= '0' && c <= '9') || c == '_' || c == '-'))
			return 0;
	}
	return n > 0;
}

static SDT_CODE int session_named(const struct sdt_session *x, const char *name)
{
	unsigned n;

	for (n = 0; n < SDT_SESSION_NAME && x->name[n] == (sdt_u8)name[n]; n++)
		if (!name[n])
			return 1;
	return 0;
}

/* Where sdt_session_open puts each part in the memory it is given, as offsets from its start. */
struct session_carving {
	sdt_word cpus;	/* ncpus struct sdt_cpu */
	sdt_word aggs;	/* per CPU: its struct sdt_agg (rounded to 8), then agg_bytes (none without agg_bytes) */
	sdt_word agg_each;
	sdt_word rings;	/* per CPU: its ring, each aligned to 64 */
	sdt_word ring_each;
	sdt_word snapshot;	/* per CPU: its struct sdt_snapshot (SDT_SNAPSHOT_HEAD), then snapshot_packets + 1 packets */
	sdt_word snapshot_each;	/* 0: no snapshot area */
	sdt_word end;
};

/* Add ``n`` * ``each`` bytes to ``*at`` unless it leaves memory: 0 then. */
static SDT_CODE int session_grow(sdt_word *at, sdt_word n, sdt_word each)
{
	sdt_word limit = ~(sdt_word)0 - *at;

	if (each && n > limit / each)
		return 0;
	*at += n * each;
	return 1;
}

/* The carving of ``cfg``: 0, or SDT_ERR_ARG (a configuration no session takes), SDT_ERR_MEMORY (past memory). */
static SDT_CODE int session_carve(const struct sdt_session_config *cfg, struct session_carving *k)
{
	sdt_word n = cfg->ncpus, at = 0;
	sdt_u64 agg = cfg->agg_bytes;
	static sdt_u64 probe;	/* a ring's address only for ring_valid's checks of the geometry */

	if (!n || n > SDT_MAX_CPUS || cfg->ring_bytes != (sdt_word)cfg->ring_bytes ||
	    cfg->packet_size != (sdt_word)cfg->packet_size || agg != (sdt_word)agg ||
	    !ring_valid(&probe, (unsigned long)cfg->ring_bytes, (unsigned long)cfg->packet_size, (int)cfg->policy) ||
	    cfg->policy > SDT_OVERWRITE || (agg && (agg < SDT_AGG_MIN_BYTES || (agg & 7))) ||
	    cfg->snapshot_packets > SDT_SNAPSHOT_MAX)
		return SDT_ERR_ARG;
	k->cpus = at;
	if (!session_grow(&at, n, sizeof(struct sdt_cpu)))
		return SDT_ERR_MEMORY;
	k->aggs = at;
	k->agg_each = agg ? ((sizeof(struct sdt_agg) + 7) & ~(sdt_word)7) + (sdt_word)agg : 0;
	if (!session_grow(&at, n, k->agg_each) || !session_grow(&at, 1, 63))
		return SDT_ERR_MEMORY;
	at &= ~(sdt_word)63;
	k->rings = at;
	k->ring_each = ((sdt_word)cfg->ring_bytes + 63) & ~(sdt_word)63;
	if (!k->ring_each || !session_grow(&at, n, k->ring_each))
		return SDT_ERR_MEMORY;
	k->snapshot = at;	/* 64-aligned as the rings are: each block's packets too (SDT_SNAPSHOT_HEAD is) */
	k->snapshot_each = 0;
	if (cfg->snapshot_packets) {
		k->snapshot_each = SDT_SNAPSHOT_HEAD;
		if (!session_grow(&k->snapshot_each, (sdt_word)cfg->snapshot_packets + 1, (sdt_word)cfg->packet_size) ||
		    !session_grow(&at, n, k->snapshot_each))
			return SDT_ERR_MEMORY;
	}
	k->end = at;
	return 0;
}

SDT_CODE unsigned long sdt_session_bytes(const struct sdt_session_config *cfg)
{
	struct session_carving k;

	return cfg && !session_carve(cfg, &k) ? (unsigned long)k.end + 63 : 0;	/* + 63: the rings' alignment, any base */
}

/* -- open and close -------------------------------------------------------------------------------------------- */

SDT_CODE int sdt_session_open(struct sdt_session *s, const char *name, const struct sdt_session_config *cfg,
			      void *memory, unsigned long bytes)
{
	struct session_carving k;
	sdt_word base = (sdt_word)memory, skew, id, cpu;
	int r;

	if (!s || !name || !cfg || !memory || (base & 7))
		return SDT_ERR_ARG;
	if (!ready)
		return SDT_ERR_INIT;
	if (!session_name_valid(name))
		return SDT_ERR_NAME;
	r = session_carve(cfg, &k);
	if (r)
		return r;
	skew = ((base + k.rings + 63) & ~(sdt_word)63) - (base + k.rings);	/* the rings 64-aligned where they are */
	if (k.end + skew < k.end || k.end + skew > bytes)
		return SDT_ERR_MEMORY;
	take();
	r = 0;
	for (id = 0; id < SDT_MAX_SESSIONS && !r; id++) {
		const struct sdt_session *x = (const struct sdt_session *)(sdt_word)sdt_session_table.sessions[id];
		if (x && (x == s || session_named(x, name)))
			r = SDT_ERR_EXISTS;
	}
	for (id = 1; !r && id < SDT_MAX_SESSIONS && sdt_session_table.sessions[id]; id++)
		;
	if (!r && id == SDT_MAX_SESSIONS)
		r = SDT_ERR_FULL;
	if (r) {
		give();
		return r;
	}
	s->magic = 0;
	s->id = (sdt_u32)id;
	for (r = 0; r < SDT_SESSION_NAME; r++)
		s->name[r] = 0;
	for (r = 0; name[r]; r++)
		s->name[r] = (sdt_u8)name[r];
	s->ncpus = cfg->ncpus;
	s->policy = cfg->policy;
	s->pad = 0;
	s->cpus = base + k.cpus;
	s->ring_bytes = cfg->ring_bytes;
	s->packet_size = cfg->packet_size;
	s->agg_bytes = cfg->agg_bytes;
	s->memory = base;
	s->bytes = bytes;
	s->used = k.end + skew;
	s->misplaced = 0;
	s->snapshot = k.snapshot_each ? base + skew + k.snapshot : 0;
	s->snapshot_packets = cfg->snapshot_packets;
	s->snapshot_bytes = k.snapshot_each;
	s->snapshots = s->snapshot_busy = s->snapshot_lapped = s->snapshot_lock = 0;
	for (cpu = 0; s->snapshot && cpu < cfg->ncpus; cpu++)	/* no snapshot yet: a host reads none */
		((struct sdt_snapshot *)(base + skew + k.snapshot + cpu * k.snapshot_each))->magic = 0;
	for (cpu = 0; cpu < cfg->ncpus; cpu++) {
		struct sdt_cpu *c = (struct sdt_cpu *)(base + k.cpus) + cpu;
		area_reset(c, (unsigned)cpu, (void *)(base + skew + k.rings + cpu * k.ring_each),
			   (unsigned long)cfg->ring_bytes, (unsigned long)cfg->packet_size, (int)cfg->policy, (unsigned)id);
		c->next_area = 0;	/* on no list: the session's areas are its array */
		c->visit = 0;
		if (k.agg_each) {
			struct sdt_agg *g = (struct sdt_agg *)(base + k.aggs + cpu * k.agg_each);
			agg_init(c, g, (void *)((sdt_word)g + ((sizeof(*g) + 7) & ~(sdt_word)7)),
				 (unsigned long)cfg->agg_bytes);
			c->agg = (sdt_word)g;
		}
	}
	s->state = SDT_SESSION_OPEN;
	s->magic = SDT_SESSION_MAGIC;
	sdt_seq_store(&sdt_session_table.sessions[id], (sdt_word)s);	/* release: a recorder finds it whole */
	give();
	return (int)id;
}

SDT_CODE int sdt_session_close(struct sdt_session *s)
{
	struct sdt_module *t;
	struct sdt_site *site;
	unsigned far = 0;
	int id, count = 0;

	if (!ready)
		return SDT_ERR_INIT;
	take();
	id = session_id(s);
	if (id <= 0) {	/* not open, or the default session, which is the runtime's */
		give();
		return SDT_ERR_SESSION;
	}
	s->state = SDT_SESSION_CLOSING;
	for_each_site(t, site) {	/* its bit off every slot; the sites no other session keeps disarmed */
		struct sdt_slot *slot;
		if (site->state != SDT_SITE_OFF && !is_armed(site->state))
			continue;
		slot = probe_slot(sdt_site_probe(site));
		if (!slot)
			continue;
		if (slot->sessions & 1u << id)
			slot_leave(slot, id);
		if (!slot->sessions && is_armed(site->state))
			count += mark(t, site, SDT_SITE_OFF, &far);
	}
	run_marked();
	forget(id, 0);
	sdt_seq_store(&sdt_session_table.sessions[id], 0);
	visits_wait();	/* no CPU still writes into its areas, or runs its programs */
	snapshot_hold(s);	/* nor copies them into its snapshot area (sdt_snapshot refuses from here on) */
	for_each_site(t, site)
		if (site->state != SDT_SITE_REFUSED && probe_slot(sdt_site_probe(site)))
			slot_forget(probe_slot(sdt_site_probe(site)), id);
	s->state = SDT_SESSION_CLOSED;
	s->magic = 0;
	give();
	return count;
}

SDT_CODE struct sdt_session *sdt_session_find(const char *name)
{
	struct sdt_session *found = 0;
	unsigned id;

	if (!name || !ready)
		return 0;
	take();
	for (id = 0; id < SDT_MAX_SESSIONS && !found; id++) {
		struct sdt_session *x = (struct sdt_session *)(sdt_word)sdt_session_table.sessions[id];
		if (x && session_named(x, name))
			found = x;
	}
	give();
	return found;
}

/* -- what a session does: the default session's entry points, on a session ------------------------------------- */

SDT_CODE int sdt_session_enable(struct sdt_session *s, const char *spec, int mode)
{
	return change(s, spec, 1, mode);
}

SDT_CODE int sdt_session_disable(struct sdt_session *s, const char *spec)
{
	return change(s, spec, 0, 0);
}

SDT_CODE int sdt_session_enable_program(struct sdt_session *s, const char *spec, int mode, const void *program,
				       unsigned long bytes)
{
	return program_enable(s, spec, mode, program, bytes);
}

SDT_CODE int sdt_session_disable_program(struct sdt_session *s, const char *spec)
{
	return program_disable(s, spec);
}

SDT_CODE int sdt_session_switch(struct sdt_session *s)
{
	struct sdt_cpu *cpus;
	unsigned k;
	int id, n = 0;

	if (!ready)
		return SDT_ERR_INIT;
	if (s == &default_session)
		return sdt_agg_switch();
	take();
	id = session_id(s);
	if (id < 0) {
		give();
		return SDT_ERR_SESSION;
	}
	cpus = (struct sdt_cpu *)(sdt_word)s->cpus;
	for (k = 0; k < s->ncpus; k++)
		if (cpus[k].agg) {
			agg_flip((struct sdt_agg *)(sdt_word)cpus[k].agg);
			n++;
		}
	if (sdt_hooks.sync_cores)
		sdt_hooks.sync_cores();
	for (k = 0; k < s->ncpus; k++)	/* every CPU adds to its new half from here on: the old one is the consumer's */
		if (cpus[k].agg)
			agg_settled((struct sdt_agg *)(sdt_word)cpus[k].agg);
	give();
	return n;
}

SDT_CODE int sdt_session_flush(struct sdt_session *s)
{
	int id;

	if (!ready)
		return SDT_ERR_INIT;
	id = session_id(s);
	if (id < 0)
		return SDT_ERR_SESSION;
	flush_session((unsigned)id);	/* a session closed meanwhile is not found in the visit */
	return 0;
}
