/*
 * sdt_snapshot.c - snapshots of a session's rings on a trigger, while recording goes on (transport layer;
 * docs/sessions.md, "Snapshots").
 *
 * A session opened with snapshot_packets N has a snapshot area: a block per CPU, a struct sdt_snapshot and room
 * for N + 1 packets. sdt_snapshot copies into each CPU's block the last N packets its writer closed, oldest first,
 * then the open packet's complete events, closed as a packet in the copy. The writers go on meanwhile (they may be
 * other CPUs, running), so every copy is checked after it is made against the writer's counters, as a seqlock
 * reader checks: a packet whose slot the writer opened again while it was copied may be torn, and is dropped and
 * counted (lapped), with every older one (what a snapshot keeps of a CPU is one run of packets, numbered one by
 * one). The caller may be a panicking or asserting CPU, which may hold any lock the kernel or the runtime has, and
 * may have stopped inside a snapshot: so nothing here waits. The session is found open by the registry (no lock),
 * and one snapshot at a time is had by a compare-and-swap of the session's snapshot word; a caller that cannot
 * have it is refused (SDT_ERR_BUSY) and counted (snapshot_busy).
 */

/* ``bytes`` (a multiple of 8) of a packet another CPU may be writing: each word read once, as it stands. */
static SDT_CODE void snapshot_copy(void *to, const void *from, sdt_word bytes)
{
	const volatile sdt_u64 *f = (const volatile sdt_u64 *)from;
	sdt_u64 *t = (sdt_u64 *)to;
	sdt_word i;

	for (i = 0; i < bytes / 8; i++)
		t[i] = f[i];
}

/* Whether packet ``seq`` of ``c``, copied before this call, may be torn: the writer has opened its slot again. */
static SDT_CODE int snapshot_lapped(const struct sdt_cpu *c, sdt_word seq)
{
	__atomic_thread_fence(__ATOMIC_ACQUIRE);	/* the copy's loads before the counter's */
	return sdt_seq_load(&c->write_seq) > seq + (sdt_word)c->packets;
}

/* The open packet of ``c`` (packet ``seq``), copied to ``to`` with its complete events and closed there as
 * close_packet closes one: the events kept (0: nothing kept, the copy is no packet); ``*cut``: the event a
 * recorder was writing, left out. */
static SDT_CODE sdt_word snapshot_open(const struct sdt_cpu *c, sdt_word seq, sdt_u8 *to, sdt_u64 *cut)
{
	struct sdt_packet *pk = (struct sdt_packet *)to;
	sdt_word size = (sdt_word)c->packet_size, at = sizeof(*pk), offset, nesting;
	sdt_word end = at, last = 0, before = 0, firings = 0, was = 0;	/* the last event, and the one before it */
	const struct sdt_event *e;

	/* The offset first, then nesting: an event inside the offset read is whole unless a recorder is still in it
	 * (a recorder sets nesting, stores the event's header, then moves the offset, and clears nesting after the
	 * event's last store: no header of the slot's last lap lies inside the offset). */
	offset = (sdt_word)__atomic_load_n((const sdt_word *)&c->offset, __ATOMIC_ACQUIRE);
	nesting = (sdt_word)__atomic_load_n((const sdt_word *)&c->nesting, __ATOMIC_ACQUIRE);
	if (offset <= sizeof(*pk) || offset > size || sdt_seq_load(&c->write_seq) != seq + 1)
		return 0;	/* nothing in it, none open, or another packet open by now */
	snapshot_copy(to, (const void *)(sdt_word)(c->ring + (seq & (c->packets - 1)) * size), (offset + 7) & ~7ul);
	if (snapshot_lapped(c, seq) || pk->magic != SDT_PACKET_MAGIC || pk->packet_seq_num != seq + 1)
		return 0;
	while (at + sizeof(*e) <= offset) {	/* each event at the next multiple of 8, as the writer put it */
		e = (const struct sdt_event *)(to + at);
		if (e->size < sizeof(*e) || at + e->size > offset)
			break;
		before = last;
		was = end;
		last = at;
		end = at + e->size;
		firings += e->id != SDT_TASK_KEY;
		at = (end + 7) & ~(sdt_word)7;
	}
	if (nesting && end == offset && last) {	/* the event in flight: its fields may be half stored */
		*cut = 1;
		firings -= ((const struct sdt_event *)(to + last))->id != SDT_TASK_KEY;
		last = before;
		end = was;
	}
	if (!firings)
		return 0;
	pk->timestamp_end = ((const struct sdt_event *)(to + last))->timestamp;
	pk->content_size = end * 8;
	pk->events = (sdt_u32)firings;
	pk->events_discarded = c->discarded;
	return firings;
}

/* CPU ``c``'s block ``h`` of the snapshot area, written: the packets kept. */
static SDT_CODE sdt_word snapshot_cpu(const struct sdt_session *s, const struct sdt_cpu *c, struct sdt_snapshot *h)
{
	sdt_u8 *to = (sdt_u8 *)h + SDT_SNAPSHOT_HEAD;
	sdt_word size = (sdt_word)c->packet_size, w, commit, first, seq, kept = 0, lapped = 0;
	const sdt_word n = (sdt_word)s->snapshot_packets;

	sdt_seq_store(&h->seq, (sdt_word)h->seq | 1);	/* odd: being written (a host reading it now leaves it) */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	h->magic = SDT_SNAPSHOT_MAGIC;
	h->cpu = (sdt_u32)c->cpu;
	h->clock = sdt_hooks.clock ? sdt_hooks.clock() : 0;
	h->cut = 0;
	w = sdt_seq_load(&c->write_seq);
	commit = sdt_seq_load(&c->commit_seq);
	first = commit > n ? commit - n : 0;
	if (w > c->packets && first < w - (sdt_word)c->packets)
		first = w - (sdt_word)c->packets;	/* the ring holds its newest packets: the open one's slot too */
	h->first_seq = first;
	for (seq = first; seq < commit; seq++) {
		snapshot_copy(to + kept * size, (const void *)(sdt_word)(c->ring + (seq & (c->packets - 1)) * size), size);
		if (snapshot_lapped(c, seq)) {	/* torn maybe, and the older ones kept are no longer one run with the rest */
			lapped += kept + 1;
			kept = 0;
			h->first_seq = seq + 1;
			continue;
		}
		kept++;
	}
	h->open = 0;	/* the packets kept are one run, first_seq + kept == commit: the open packet follows them */
	if (w == commit + 1 && snapshot_open(c, commit, to + kept * size, &h->cut)) {
		h->open = 1;
		kept++;
	}
	h->packets = kept;
	h->lapped = lapped;
	h->discarded = c->discarded;
	h->overwritten = c->overwritten;
	sdt_seq_store(&h->seq, (sdt_word)h->seq + 1);	/* even: whole */
	__atomic_add_fetch((sdt_word *)&s->snapshot_lapped, lapped, __ATOMIC_RELAXED);
	return kept;
}

SDT_CODE int sdt_snapshot(struct sdt_session *s)
{
	sdt_word expect = 0, k, kept = 0;
	struct sdt_cpu *cpus;

	if (!s || s->magic != SDT_SESSION_MAGIC || s->id >= SDT_MAX_SESSIONS ||
	    sdt_seq_load(&sdt_session_table.sessions[s->id]) != (sdt_word)s)
		return SDT_ERR_SESSION;
	if (!s->snapshot)
		return SDT_ERR_ARG;
	if (!__atomic_compare_exchange_n((sdt_word *)&s->snapshot_lock, &expect, 1, 0, __ATOMIC_ACQUIRE,
					 __ATOMIC_RELAXED)) {
		__atomic_add_fetch((sdt_word *)&s->snapshot_busy, 1, __ATOMIC_RELAXED);
		return SDT_ERR_BUSY;
	}
	if (s->state != SDT_SESSION_OPEN) {	/* closing: its memory is about to be the kernel's again */
		__atomic_add_fetch((sdt_word *)&s->snapshot_busy, 1, __ATOMIC_RELAXED);
		__atomic_store_n((sdt_word *)&s->snapshot_lock, 0, __ATOMIC_RELEASE);
		return SDT_ERR_BUSY;
	}
	cpus = (struct sdt_cpu *)(sdt_word)s->cpus;
	for (k = 0; k < s->ncpus; k++)
		if (cpus[k].ring)
			kept += snapshot_cpu(s, &cpus[k],
					     (struct sdt_snapshot *)(sdt_word)(s->snapshot + k * s->snapshot_bytes));
	__atomic_add_fetch((sdt_word *)&s->snapshots, 1, __ATOMIC_RELAXED);
	__atomic_store_n((sdt_word *)&s->snapshot_lock, 0, __ATOMIC_RELEASE);
	return (int)kept;
}

/* Closing ``s``: wait for a snapshot under way, and refuse every later one (the word stays taken). */
static SDT_CODE void snapshot_hold(struct sdt_session *s)
{
	sdt_word expect;

	do
		expect = 0;
	while (!__atomic_compare_exchange_n((sdt_word *)&s->snapshot_lock, &expect, 1, 0, __ATOMIC_ACQUIRE,
					    __ATOMIC_RELAXED));
}
