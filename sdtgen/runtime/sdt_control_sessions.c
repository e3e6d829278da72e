/*
 * sdt_control_sessions.c - the control core's session commands (docs/sessions.md): a host opens a session of its
 * own beside the kernel's (session open), in memory the kernel budgets for it (sdt_control_ops.session_memory),
 * lists every open session with its counters (sessions), and closes its own (session close). `@NAME` before a
 * session-scoped command (sdt_control.c's command()) acts on a session by name.
 *
 * Part of the control core's unit: sdt_control.c includes it after the replies and words it uses, and before the
 * command table that names its commands.
 */

static char session_name[SDT_SESSION_NAME];	/* the name the command gave, NUL-terminated */
static struct sdt_session owned[SDT_MAX_SESSIONS];	/* the sessions this core opened, by id */

/* ``len`` bytes at ``s`` as session_name: 0 when they cannot be a session's name (the runtime checks the rest). */
static SDT_CODE int session_word(const char *s, unsigned long len)
{
	unsigned long i;

	if (!len || len >= SDT_SESSION_NAME)
		return 0;
	for (i = 0; i < len; i++)
		session_name[i] = s[i];
	session_name[len] = 0;
	return 1;
}

static SDT_CODE int session_refused(struct out *o, int r)
{
	return error(o, r, r == SDT_ERR_NAME ? "a session's name is 1..15 bytes of [A-Za-z0-9_-]" :
		     r == SDT_ERR_EXISTS ? "a session of that name is open" :
		     r == SDT_ERR_FULL ? "every session the runtime keeps is open (SDT_MAX_SESSIONS)" :
		     r == SDT_ERR_MEMORY ? "the session needs more memory than the kernel's budget for it" :
		     r == SDT_ERR_ARG ? "not a ring the runtime takes (BYTES and PACKET powers of two, two packets or "
					"more, a packet of SDT_MIN_PACKET bytes or more; POLICY 0 or 1; AGGBYTES 0 or 8-aligned "
					"and SDT_AGG_MIN_BYTES or more; SNAPSHOT_PACKETS at most SDT_SNAPSHOT_MAX)" :
		     r == SDT_ERR_SESSION ? "no session of that name that this control core opened is open" :
		     "the runtime refused it");
}

/* session open NAME BYTES PACKET POLICY [AGGBYTES [SNAPSHOT_PACKETS]]: every CPU's ring (and snapshot block) of the
 * new session in the kernel's memory for it, `ok session ID`; session close NAME: one this core opened, `ok session N` (N: the sites it disarmed). */
static SDT_CODE int cmd_session(struct out *o, struct words *w)
{
	struct sdt_session_config cfg;
	unsigned long vlen, len, budget = 0;
	const char *verb = word(w, &vlen), *name = word(w, &len);
	sdt_word bytes, packet, policy, aggbytes = 0, snapshot = 0;
	struct sdt_session *x;
	unsigned id;
	void *mem;
	int r;

	if (is(verb, vlen, SDT_CTL_CLOSE) && !*rest(w)) {
		x = session_word(name, len) ? sdt_session_find(session_name) : 0;
		if (!x || x != &owned[x->id & (SDT_MAX_SESSIONS - 1)])
			return session_refused(o, SDT_ERR_SESSION);
		r = sdt_session_close(x);
		return r < 0 ? session_refused(o, r) : ok(o, SDT_CTL_SESSION, (unsigned long)r);
	}
	if (!is(verb, vlen, SDT_CTL_OPEN) || !len || !number(w, &bytes) || !number(w, &packet) || !number(w, &policy) ||
	    (*rest(w) && !number(w, &aggbytes)) || (*rest(w) && !number(w, &snapshot)) || *rest(w))
		return error(o, SDT_ERR_USAGE, "usage: session open NAME BYTES PACKET POLICY [AGGBYTES [SNAPSHOT_PACKETS]] | "
			     "session close NAME");
	if (!session_word(name, len))
		return session_refused(o, SDT_ERR_NAME);
	if (!ops.session_memory)
		return error(o, SDT_ERR_UNSUPPORTED, "the kernel gives no memory for sessions (session_memory)");
	for (id = 1; id < SDT_MAX_SESSIONS && sdt_session_table.sessions[id]; id++)	/* the id it will take */
		;
	if (id == SDT_MAX_SESSIONS)
		return session_refused(o, SDT_ERR_FULL);
	cfg.ncpus = ops.ncpus;
	cfg.policy = (sdt_u32)policy;
	cfg.ring_bytes = bytes;
	cfg.packet_size = packet;
	cfg.agg_bytes = aggbytes;
	cfg.snapshot_packets = snapshot;
	if (policy > SDT_OVERWRITE || !sdt_session_bytes(&cfg))
		return session_refused(o, SDT_ERR_ARG);
	mem = ops.session_memory(id, &budget);
	if (!mem)
		return session_refused(o, SDT_ERR_MEMORY);
	r = sdt_session_open(&owned[id], session_name, &cfg, mem, budget);
	if (r >= 0 && (unsigned)r != id) {	/* the kernel opened one meanwhile: this memory is another id's */
		sdt_session_close(&owned[id]);
		return session_refused(o, SDT_ERR_FULL);
	}
	return r < 0 ? session_refused(o, r) : ok(o, SDT_CTL_SESSION, (unsigned long)r);
}

/* The probes session ``id`` takes: those whose slot has its bit, in every table the runtime knows. */
static SDT_CODE unsigned long session_probes(unsigned id)
{
	const struct sdt_module *t;
	const struct sdt_probe *p;
	unsigned long n = 0;

	for (t = sdt_tables(); t; t = __atomic_load_n(&t->next, __ATOMIC_ACQUIRE))
		for (p = t->probes; p && p < t->probes_end; p++) {
			const struct sdt_slot *slot = p->program ? (const struct sdt_slot *)sdt_rel(&p->program) : 0;
			n += slot && (__atomic_load_n(&slot->sessions, __ATOMIC_ACQUIRE) & 1u << id);
		}
	return n;
}

/* sessions: `session ID NAME POLICY CPUS RING PACKET PACKETS DISCARDED OVERWRITTEN MISPLACED PROBES` per open session
 * (the default one first: its areas are the kernel's), then `ok sessions N`. */
static SDT_CODE int cmd_sessions(struct out *o, struct words *w)
{
	unsigned id, k, n = 0;

	(void)w;
	for (id = 0; id < SDT_MAX_SESSIONS; id++) {
		const struct sdt_session *x = (const struct sdt_session *)(sdt_word)
			__atomic_load_n((sdt_word *)&sdt_session_table.sessions[id], __ATOMIC_ACQUIRE);
		unsigned ncpus = !x ? 0 : id ? x->ncpus : ops.ncpus;
		const struct sdt_cpu *first = 0;
		sdt_u64 v[SDT_FIELDS_SESSIONS_SESSION];
		if (!x)
			continue;
		v[SDT_FIELD_SESSIONS_SESSION_ID] = id;
		v[SDT_FIELD_SESSIONS_SESSION_NAME] = SAID((const char *)x->name);
		v[SDT_FIELD_SESSIONS_SESSION_PACKETS] = 0;
		v[SDT_FIELD_SESSIONS_SESSION_DISCARDED] = 0;
		v[SDT_FIELD_SESSIONS_SESSION_OVERWRITTEN] = 0;
		for (k = 0; k < ncpus; k++) {
			const struct sdt_cpu *a = id ? (const struct sdt_cpu *)(sdt_word)x->cpus + k : ops.area ? ops.area(k) : 0;
			if (!a)
				continue;
			first = first ? first : a;
			v[SDT_FIELD_SESSIONS_SESSION_PACKETS] += a->write_seq;
			v[SDT_FIELD_SESSIONS_SESSION_DISCARDED] += a->discarded;
			v[SDT_FIELD_SESSIONS_SESSION_OVERWRITTEN] += a->overwritten;
		}
		v[SDT_FIELD_SESSIONS_SESSION_POLICY] = first ? first->policy : 0;
		v[SDT_FIELD_SESSIONS_SESSION_CPUS] = ncpus;
		v[SDT_FIELD_SESSIONS_SESSION_RING] = first ? first->packets * first->packet_size : 0;
		v[SDT_FIELD_SESSIONS_SESSION_PACKET] = first ? first->packet_size : 0;
		v[SDT_FIELD_SESSIONS_SESSION_MISPLACED] = x->misplaced;
		v[SDT_FIELD_SESSIONS_SESSION_PROBES] = session_probes(id);
		say(o, SDT_REPLY_SESSIONS_SESSION, v);
		n++;
	}
	return ok(o, SDT_CTL_SESSIONS, n);
}

/* snapshot NAME: session NAME's snapshot taken now (sdt_snapshot: the host's trigger), then `snapshot ID AREA BYTES
 * PACKETS TAKEN LAPPED BUSY` (where the host reads it: docs/sessions.md, "Snapshots") and `ok snapshot KEPT`. */
static SDT_CODE int cmd_snapshot(struct out *o, struct words *w)
{
	sdt_u64 v[SDT_FIELDS_SNAPSHOT];
	struct sdt_session *x;
	unsigned long len;
	const char *name = word(w, &len);
	int r;

	if (!len || *rest(w))
		return error(o, SDT_ERR_USAGE, "usage: snapshot NAME");
	x = session_word(name, len) ? sdt_session_find(session_name) : 0;
	if (!x)
		return session_refused(o, SDT_ERR_SESSION);
	r = sdt_snapshot(x);
	if (r < 0)
		return error(o, r, r == SDT_ERR_ARG ? "the session has no snapshot area (opened with SNAPSHOT_PACKETS 0)" :
			     r == SDT_ERR_BUSY ? "a snapshot of the session is under way (or it is closing): counted in its "
						 "busy" : "the runtime refused it");
	v[SDT_FIELD_SNAPSHOT_ID] = x->id;
	v[SDT_FIELD_SNAPSHOT_AREA] = x->snapshot;
	v[SDT_FIELD_SNAPSHOT_BYTES] = x->snapshot_bytes;
	v[SDT_FIELD_SNAPSHOT_PACKETS] = x->snapshot_packets;
	v[SDT_FIELD_SNAPSHOT_TAKEN] = x->snapshots;
	v[SDT_FIELD_SNAPSHOT_LAPPED] = x->snapshot_lapped;
	v[SDT_FIELD_SNAPSHOT_BUSY] = x->snapshot_busy;
	say(o, SDT_REPLY_SNAPSHOT, v);
	return ok(o, SDT_CTL_SNAPSHOT, (unsigned long)r);
}
