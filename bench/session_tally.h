/*
 * What the session rows (bench/sessions.c, bench/flight.c) read back of what they recorded: every closed packet of
 * a CPU's area of a session consumed (sdt_consume, as a host or the hosted platform's consumer takes them), its
 * events walked one by one and counted by probe key, the task events (SDT_TASK_KEY: the hosted platform says the
 * thread at each packet's start) apart. The bench then holds each case's counts against the firings it made.
 */
#ifndef BENCH_SESSION_TALLY_H
#define BENCH_SESSION_TALLY_H

#include <sdt_runtime.h>

#define TALLY_KEYS 128

struct tally {
	unsigned long keys[TALLY_KEYS];	/* the probe keys met, in order */
	unsigned long counts[TALLY_KEYS];	/* events of each */
	unsigned long nkeys;
	unsigned long events;	/* probe events, every key */
	unsigned long tasks;	/* task events */
	unsigned long packets;	/* packets read */
	unsigned long torn;	/* packets the writer overwrote while they were read, or that did not parse */
};

static void tally_add(struct tally *t, unsigned long key, unsigned long count)
{
	unsigned long k;

	for (k = 0; k < t->nkeys && t->keys[k] != key; k++)
		;
	if (k == t->nkeys) {
		if (k == TALLY_KEYS) {	/* more probes than a bench fires: said as torn, never dropped unsaid */
			t->torn += count;
			return;
		}
		t->keys[t->nkeys++] = key;
	}
	t->counts[k] += count;
	t->events += count;
}

/* Every closed packet of ``c`` consumed into ``t``; the packets read. */
static unsigned long tally_consume(struct sdt_cpu *c, struct tally *t)
{
	const struct sdt_packet *p;
	unsigned long read = 0;
	sdt_u64 seq;

	while ((p = sdt_consume(c, &seq)) != 0) {
		const unsigned char *base = (const unsigned char *)p;
		unsigned long off = sizeof(struct sdt_packet), end = (unsigned long)(p->content_size / 8), n = 0;
		struct tally here = {{0}, {0}, 0, 0, 0, 0, 0};

		while (off + sizeof(struct sdt_event) <= end) {
			const struct sdt_event *e = (const struct sdt_event *)(base + off);
			if (e->size < sizeof(struct sdt_event) || off + e->size > end)
				break;
			if (e->id == SDT_TASK_KEY) {
				here.tasks++;
			} else {
				tally_add(&here, e->id, 1);
				n++;	/* a packet counts its firings' events, not its task events */
			}
			off = (off + e->size + 7) & ~7ul;
		}
		if (sdt_consume_done(c, seq) != 1 || p->magic != SDT_PACKET_MAGIC || n != p->events) {
			t->torn++;
			continue;
		}
		for (unsigned long k = 0; k < here.nkeys; k++)
			tally_add(t, here.keys[k], here.counts[k]);
		t->tasks += here.tasks;
		t->packets++;
		read++;
	}
	return read;
}

/* A JSON object of ``t``'s counts on ``out``: {"events": N, "tasks": N, "packets": N, "torn": N, "keys": {...}}. */
static void tally_print(FILE *out, const struct tally *t)
{
	fprintf(out, "{\"events\": %lu, \"tasks\": %lu, \"packets\": %lu, \"torn\": %lu, \"keys\": {", t->events, t->tasks,
		t->packets, t->torn);
	for (unsigned long k = 0; k < t->nkeys; k++)
		fprintf(out, "%s\"%lu\": %lu", k ? ", " : "", t->keys[k], t->counts[k]);
	fprintf(out, "}}");
}

#endif
