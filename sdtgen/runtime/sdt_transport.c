/*
 * sdt_transport.c - per-CPU rings of packets, and their consumers (transport layer).
 *
 * Each CPU writes only its own ring, so the writer takes no lock: a firing
 * inside a recorder (an interrupt that fires a probe) is discarded and
 * counted instead of interleaving with it. A ring is ``packets`` packets of
 * ``packet_size`` bytes; a packet is a CTF 1.8 packet as it stands (struct
 * sdt_packet, then events), so writing a trace file is a copy. A full
 * packet is closed (its end time, size and the CPU's discarded count
 * written, then commit_seq stored with release) and the notify hook told;
 * the next is opened unless the consumer has not read it yet: then
 * SDT_DISCARD discards events until it has, and SDT_OVERWRITE overwrites it
 * (counting its events in ``overwritten``). The oldest unread packet is
 * claimed by advancing read_seq with compare-and-swap, by the consumer when
 * it has copied it or by the writer when it overwrites it: a packet is read
 * or counted lost, never both, never neither.
 */
#include "sdt_internal.h"

/* The offset of a CPU with no packet open: past any packet, so every event takes the slow path. */
#define SDT_CLOSED(c) ((c)->packet_size + 8)

/* Whether a ring of ``ring_bytes`` cut in ``packet_size`` packets, at ``ring``, with ``policy``, is one the writer
 * takes. */
static SDT_CODE int ring_valid(const void *ring, unsigned long ring_bytes, unsigned long packet_size, int policy)
{
	unsigned long n = packet_size ? ring_bytes / packet_size : 0;

	return ring && packet_size >= SDT_MIN_PACKET && !(packet_size & (packet_size - 1)) && n >= 2 &&
	       !(n & (n - 1)) && n * packet_size == ring_bytes && !((sdt_word)ring & 7) &&
	       (policy == SDT_DISCARD || policy == SDT_OVERWRITE);
}

/* Area ``c`` of CPU ``cpu`` records for session ``session`` into ``ring`` (NULL: nothing, the area is only the
 * CPU's identity), as an empty ring. Its place on the default session's list (next_area, visit) is not touched. */
static SDT_CODE void area_reset(struct sdt_cpu *c, unsigned cpu, void *ring, unsigned long ring_bytes,
				unsigned long packet_size, int policy, unsigned session)
{
	c->self = (sdt_word)c;
	c->cpu = cpu;
	c->ring = (sdt_word)ring;
	c->packets = packet_size ? ring_bytes / packet_size : 0;
	c->packet_size = packet_size;
	c->policy = (sdt_u64)policy;
	c->write_seq = c->commit_seq = c->read_seq = 0;
	c->current = 0;	/* none open: the first event opens the first packet */
	c->offset = SDT_CLOSED(c);
	c->events = c->discarded = c->overwritten = c->nesting = c->clock_last = 0;
	c->agg = 0;	/* sdt_agg_attach, after this, gives it its program state */
	c->task = 0;
	c->task_context = SDT_CONTEXT_UNSAID;
	c->session = session;
}

SDT_CODE int sdt_cpu_attach(struct sdt_cpu *c, unsigned cpu, void *ring, unsigned long ring_bytes,
			    unsigned long packet_size, int policy)
{
	struct sdt_cpu *at;
	int identity = !ring && !ring_bytes && !packet_size && !policy;

	if (cpu >= SDT_MAX_CPUS)	/* the number its packets carry: no host takes one past the protocol's bound */
		return SDT_ERR_CPU;
	if (!c || (!identity && !ring_valid(ring, ring_bytes, packet_size, policy)))
		return SDT_ERR_ARG;
	area_reset(c, cpu, ring, ring_bytes, packet_size, policy, 0);
	/* On the default session's list once (the registry's: what a closing session waits on, and what a host reads
	 * after a crash); a second attach of the area keeps its place. The list only grows, so it is walked without a
	 * lock, and CPUs attaching their areas at once each push theirs with compare-and-swap. */
	for (at = (struct sdt_cpu *)sdt_seq_load(&sdt_session_table.areas); at && at != c;
	     at = (struct sdt_cpu *)(sdt_word)at->next_area)
		;
	if (!at) {
		sdt_word head = sdt_seq_load(&sdt_session_table.areas);
		c->visit = 0;
		do
			c->next_area = head;
		while (!__atomic_compare_exchange_n((sdt_word *)&sdt_session_table.areas, &head, (sdt_word)c, 0,
						    __ATOMIC_RELEASE, __ATOMIC_ACQUIRE));
	}
	return 0;
}

/* -- sessions: where a firing goes, and waiting for the recorders that may still write ------------------------ */

/* Session ``id``'s area of the CPU whose default area is ``c``, or NULL; ``firing``: a CPU past the session's
 * counts in its misplaced. */
static SDT_CODE struct sdt_cpu *session_area(struct sdt_cpu *c, unsigned id, int firing)
{
	struct sdt_session *x;

	if (!id)
		return c;
	x = id < SDT_MAX_SESSIONS ? (struct sdt_session *)sdt_seq_load(&sdt_session_table.sessions[id]) : 0;
	if (!x)
		return 0;	/* closed meanwhile: its bit is gone from the slot too */
	if (c->cpu >= x->ncpus) {
		if (firing)
			__atomic_add_fetch((sdt_word *)&x->misplaced, 1, __ATOMIC_RELAXED);
		return 0;
	}
	return (struct sdt_cpu *)(sdt_word)x->cpus + c->cpu;
}

SDT_CODE struct sdt_cpu *sdt_session_cpu(struct sdt_cpu *c, unsigned id)
{
	return session_area(c, id, 1);
}

static SDT_CODE struct sdt_packet *slot(const struct sdt_cpu *c, sdt_word seq)
{
	return (struct sdt_packet *)(sdt_word)(c->ring + (seq & (c->packets - 1)) * c->packet_size);
}

static SDT_CODE void close_packet(struct sdt_cpu *c)
{
	struct sdt_packet *pk = (struct sdt_packet *)(sdt_word)c->current;

	pk->timestamp_end = sdt_hooks.clock();
	pk->content_size = c->offset * 8;
	pk->events = (sdt_u32)c->events;
	pk->events_discarded = c->discarded;
	c->current = 0;
	c->offset = SDT_CLOSED(c);
	c->events = 0;
	sdt_seq_store(&c->commit_seq, (sdt_word)c->write_seq);
	if (sdt_hooks.notify)
		sdt_hooks.notify(c);
}

static SDT_CODE int open_packet(struct sdt_cpu *c)
{
	sdt_word next = (sdt_word)c->write_seq;
	struct sdt_packet *pk = slot(c, next);

	if (next - sdt_seq_load(&c->read_seq) >= c->packets) {	/* the slot holds a packet nobody read */
		if (c->policy == SDT_DISCARD)
			return 0;
		if (sdt_seq_claim(&c->read_seq, next - (sdt_word)c->packets))	/* unless the consumer just did */
			c->overwritten += pk->events;
	}
	sdt_seq_store(&c->write_seq, next + 1);
	/* before the slot's first store: a snapshot (sdt_snapshot.c) that sees a store into the slot after copying
	 * it sees write_seq moved too, and drops its copy, on a weakly ordered machine as on x86 (once a packet) */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	pk->magic = SDT_PACKET_MAGIC;
	pk->stream_id = (sdt_u32)c->session;
	pk->timestamp_begin = pk->timestamp_end = sdt_hooks.clock();
	pk->content_size = 0;
	pk->packet_size = c->packet_size * 8;
	pk->packet_seq_num = next + 1;	/* from 1: a consumer may open a stream with an empty packet 0 */
	pk->events_discarded = c->discarded;
	pk->cpu_id = (sdt_u32)c->cpu;
	pk->events = 0;
	c->current = (sdt_word)pk;
	c->offset = sizeof(*pk);
	/* its first event says its task (a kernel with the hook); without one, nothing sends the writer here */
	c->task_context = sdt_hooks.task ? SDT_CONTEXT_UNSAID : 0;
	return 1;
}

/* Reserve ``size`` bytes at the open packet's next event (there is room), stamped with ``key`` and the clock.
 * The caller counts it in ``events`` when it is a firing's (a task event is not one: the packet's count is
 * its firings). */
static SDT_CODE struct sdt_event *reserve(struct sdt_cpu *c, sdt_u32 key, sdt_u32 size)
{
	sdt_u64 at = (c->offset + 7) & ~7ull;
	struct sdt_event *e = (struct sdt_event *)(sdt_word)(c->current + at);

	e->timestamp = c->clock_last = sdt_hooks.clock();
	e->id = key;
	e->size = (sdt_u16)size;
	e->unreadable = 0;
	__asm__ __volatile__("" ::: "memory");	/* the header before the offset that claims it, as the writer does */
	c->offset = at + size;
	return e;
}

/* The task event: what the events after it in this packet ran for (there is room for SDT_TASK_EVENT_MAX). */
static SDT_CODE void say_task(struct sdt_cpu *c, sdt_u64 id, sdt_u32 context, const char *name)
{
	struct sdt_event *e = reserve(c, SDT_TASK_KEY, SDT_TASK_EVENT_MAX);
	sdt_word *a = (sdt_word *)(e + 1);
	char *to = (char *)(a + 2);

	a[0] = (sdt_word)id;
	a[1] = context;
	to += sdt_event_string(e, to, 2, name);
	c->offset -= e->size - (sdt_u32)(to - (char *)e);
	e->size = (sdt_u16)(to - (char *)e);
	c->task = id;
	c->task_context = context;
}

/*
 * The writer's slow path: a nested firing, an event that does not fit the open packet (or none is open), or a
 * task to say (the packet said none yet, or sdt_task_switch): the hook is asked (with nesting set, so a probe in
 * it is discarded, not recursed into) and the task said before the event. A kernel with the hook that never
 * calls sdt_task_switch has its task said at each packet's start only.
 */
SDT_CODE void *sdt_event_slow(struct sdt_cpu *c, sdt_u32 key, sdt_u32 size)
{
	sdt_u64 task = 0;
	sdt_u32 context = 0;
	const char *name = 0;
	sdt_u64 room = 0;

	if (!c || !c->ring)	/* no area, or only the CPU's identity (sdt_cpu_attach with no ring): not recorded */
		return 0;
	if (c->nesting) {
		c->discarded++;
		return 0;
	}
	c->nesting = 1;
	__asm__ __volatile__("" ::: "memory");
	if (sdt_hooks.task) {
		task = sdt_hooks.task(&context, 0);
		room = SDT_TASK_EVENT_MAX;
	}
	if (size < sizeof(struct sdt_event) || size > 0xffff || size + room > c->packet_size - sizeof(struct sdt_packet))
		goto discard;	/* its header would not fit it, its size field cannot say it, or no packet holds it */
	if (room && c->current && c->task == task && c->task_context == context)
		room = 0;	/* the open packet said this task last (and nothing since said it may have changed) */
	if (c->current && ((c->offset + 7) & ~7ull) + room + size > c->packet_size) {
		close_packet(c);
		if (sdt_hooks.task)
			room = SDT_TASK_EVENT_MAX;	/* a new packet says its task first */
	}
	if (!c->current && !open_packet(c))
		goto discard;
	if (room) {
		(void)sdt_hooks.task(&context, &name);	/* asked again, its name with it: the same task (this CPU's) */
		say_task(c, task, context, name);
	}
	c->events++;
	return reserve(c, key, size);
discard:
	c->discarded++;
	__asm__ __volatile__("" ::: "memory");
	c->nesting = 0;
	return 0;
}

/* Close the open packet of ``c`` (this CPU's area of some session) if it holds events. */
static SDT_CODE void flush_area(struct sdt_cpu *c)
{
	if (c && c->ring && !c->nesting) {
		c->nesting = 1;
		if (c->current && c->events)
			close_packet(c);
		__asm__ __volatile__("" ::: "memory");
		c->nesting = 0;
	}
}

/* This CPU's open packet of session ``id`` closed (the caller checked the id is open), inside a visit: a session
 * closing waits for it as for a recorder. */
static SDT_CODE void flush_session(unsigned id)
{
	struct sdt_cpu *c;
	sdt_word v;

	if (!sdt_hooks.cpu_area)	/* before sdt_init */
		return;
	c = sdt_hooks.cpu_area();	/* this CPU's until sdt_cpu_put: closing its packet is one event's work */
	if (c) {
		v = sdt_visit_begin(c);
		flush_area(session_area(c, id, 0));	/* not a firing: a CPU past the session's is not misplaced */
		sdt_visit_end(c, v);
	}
	sdt_cpu_put(c);
}

SDT_CODE void sdt_flush(void)
{
	flush_session(0);
}

/* This CPU's area of every open session marked: its next event says the task anew (a switch, or a rename: the
 * same id with another name). Only this CPU writes its areas and the caller holds it: an interrupt's own mark
 * while a writer says a task stands for the task it returns to, which that writer says in any case. */
SDT_CODE void sdt_task_switch(void)
{
	struct sdt_cpu *c, *x;
	unsigned id;

	if (!sdt_hooks.cpu_area || !sdt_hooks.task)
		return;
	c = sdt_hooks.cpu_area();
	if (c) {
		sdt_word v = sdt_visit_begin(c);	/* a session closing waits for this as for a recorder */
		for (id = 0; id < SDT_MAX_SESSIONS; id++) {
			x = session_area(c, id, 0);
			if (x && x->ring)
				x->task_context = SDT_CONTEXT_UNSAID;
		}
		sdt_visit_end(c, v);
	}
	sdt_cpu_put(c);
}

SDT_CODE const struct sdt_packet *sdt_consume(struct sdt_cpu *c, sdt_u64 *seq)
{
	sdt_word commit, r;

	if (!c || !seq)
		return 0;
	commit = sdt_seq_load(&c->commit_seq);
	r = sdt_seq_load(&c->read_seq);
	if (r >= commit)
		return 0;
	*seq = r;
	return slot(c, r);
}

SDT_CODE int sdt_consume_done(struct sdt_cpu *c, sdt_u64 seq)
{
	if (!c || (sdt_word)seq >= sdt_seq_load(&c->commit_seq))	/* not a packet the writer closed */
		return SDT_ERR_ARG;
	/* the writer claimed it first when it overwrote it (and counted its events): the copy is not whole */
	return sdt_seq_claim(&c->read_seq, (sdt_word)seq);
}

/* -- strings ----------------------------------------------------------------------------------- */

/* Bytes readable from ``p`` by the kernel's ranges (all of them when it gave none), at most SDT_MAX_STRING + 1. */
SDT_CODE sdt_u32 sdt_readable(sdt_word p)
{
	unsigned i;

	if (!sdt_hooks.nreadable)
		return SDT_MAX_STRING + 1;
	for (i = 0; i < sdt_hooks.nreadable; i++) {
		sdt_u64 off = (sdt_u64)p - sdt_hooks.readable[i].start;
		if (off < sdt_hooks.readable[i].size) {
			sdt_u64 room = sdt_hooks.readable[i].size - off;
			return room > SDT_MAX_STRING + 1 ? SDT_MAX_STRING + 1 : (sdt_u32)room;
		}
	}
	return 0;
}

/* One pass: a string that changes while it is copied still ends where its NUL is written. A NULL or unreadable
 * one is marked in the event's header and copied as "<unreadable>", so a reader that ignores the mark still
 * shows what happened (and babeltrace2 2.0.4 misreads an empty string as the one before it). */
SDT_CODE sdt_u32 sdt_event_string(struct sdt_event *e, char *to, unsigned k, const char *s)
{
	static const char unreadable[] = "<unreadable>";
	sdt_u32 room = s ? sdt_readable((sdt_word)s) : 0, i = 0;

	if (!room) {
		e->unreadable |= (sdt_u16)(k < 16 ? 1u << k : 0);
		s = unreadable;
		room = sizeof(unreadable);
	}
	while (i < SDT_MAX_STRING && i < room && s[i])
		to[i] = s[i], i++;
	to[i] = 0;
	return i + 1;
}
