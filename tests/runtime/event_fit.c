/*
 * The transport's writer as any caller of the public sdt_event_begin uses it: events of the sizes given (any
 * size, not only multiples of 8), each filled with its number, into a ring of 1024-byte packets; the packets
 * then written to stdout as they stand, for tests/runtime/test_event_fit.py: the closed ones, then the one left
 * open once flushed. stderr: the events discarded, and what sdt_consume_done said of the open packet before
 * the flush (1 when none was open).
 *
 *   event_fit SIZE...
 */
#include <stdio.h>
#include <stdlib.h>

#include <sdt_runtime.h>

struct sdt_hooks sdt_hooks;	/* sdt_state.c's, which this program does not link */
struct sdt_registry sdt_session_table;	/* sdt_state.c's too: sdt_cpu_attach puts the area on its list */

#define PACKET 1024
#define PACKETS 64

static struct sdt_cpu cpu;
static _Alignas(8) unsigned char ring[PACKETS * PACKET];
static sdt_u64 ticks;

static sdt_u64 clock_fn(void)
{
	return ++ticks;
}

static struct sdt_cpu *area(void)
{
	return &cpu;
}

int main(int argc, char **argv)
{
	const struct sdt_packet *pk;
	sdt_u64 seq;
	int i, open = 1;

	sdt_hooks.clock = clock_fn;
	sdt_hooks.cpu_area = area;
	if (sdt_cpu_attach(&cpu, 0, ring, sizeof(ring), PACKET, SDT_DISCARD))
		return 2;
	for (i = 1; i < argc; i++) {
		sdt_u32 size = (sdt_u32)strtoul(argv[i], 0, 0), k;
		struct sdt_cpu *c = sdt_hooks.cpu_area();
		struct sdt_event *e = sdt_event_begin(c, (sdt_u32)i, size);
		if (e) {
			for (k = sizeof(*e); k < size; k++)
				((unsigned char *)e)[k] = (unsigned char)i;
			sdt_event_end(c);
		}
		sdt_cpu_put(c);
	}
	for (i = 0; i < 2; i++) {	/* the packets closed; then the open one, flushed */
		while ((pk = sdt_consume(&cpu, &seq))) {
			if (fwrite(pk, 1, PACKET, stdout) != PACKET)
				return 3;
			if (sdt_consume_done(&cpu, seq) != 1)
				return 4;
		}
		/* the open packet, the oldest unread now, is not the consumer's: refused, and left to the writer */
		if (!i)
			open = cpu.current ? sdt_consume_done(&cpu, cpu.write_seq - 1) : 1;
		sdt_flush();
	}
	fprintf(stderr, "%llu %d\n", (unsigned long long)cpu.discarded, open);
	return 0;
}
