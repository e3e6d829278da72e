/*
 * What tinyk does that is worth tracing: a packet path and a scheduler tick, with probes. Plain C
 * with no kernel of its own, so the same file also builds as an ordinary program on the host: the
 * firings a trace of tinyk must show are those of that native run.
 */
#include <sdt.h>

SDT_PROVIDER_DEFINE(tk);
SDT_PROBE_DEFINE2(tk, net, rx, packet, "int", "const char *");
SDT_PROBE_DEFINE2(tk, net, rx, done, "int", "long");
SDT_PROBE_DEFINE3(tk, sched, tick, run, "int", "int", "long");
SDT_PROBE_DEFINE6(tk, sched, tick, six, "int", "int", "int", "long", "long", "unsigned long");

static const char *const kinds[] = {"arp", "ipv4", "ipv6", "lldp"};

static long checksum(const char *s)
{
	long sum = 0;

	while (*s)
		sum = sum * 31 + *s++;
	return sum;
}

/* Receive n packets, each of one of the kinds in turn; the sum of their checksums. */
long net_rx(int n)
{
	long sum = 0;
	int i;

	for (i = 0; i < n; i++) {
		const char *kind = kinds[i % 4];
		SDT_PROBE2(tk, net, rx, packet, i, kind);
		sum += checksum(kind);
	}
	SDT_PROBE2(tk, net, rx, done, n, sum);
	return sum;
}

/* Tick n times; the last tick's load. */
long sched_tick(int n)
{
	long load = 0;
	int i;

	for (i = 0; i < n; i++) {
		load = load * 3 + i;
		SDT_PROBE3(tk, sched, tick, run, i, n, load);
		if (i % 8 == 7)
			SDT_PROBE6(tk, sched, tick, six, i, -i, n, load, -load, (unsigned long)load * 2);
	}
	return load;
}

/* A packet's kind by name: the probes see the caller's string. */
long net_classify(const char *name)
{
	SDT_PROBE2(tk, net, rx, packet, -1, name);
	return checksum(name);
}
