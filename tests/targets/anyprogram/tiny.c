/*
 * A program sdtgen's fixtures know nothing of: a queue and a checksum with probes, linked with the runtime,
 * the hosted platform and its main by this directory's Makefile (tests/targets/test_any_program.py).
 */
#include <sdt.h>

SDT_PROVIDER_DEFINE(tiny);
SDT_PROBE_DEFINE2(tiny, queue, push, item, "long", "const char *");
SDT_PROBE_DEFINE1(tiny, queue, pop, empty, "int");
SDT_PROBE_DEFINE3(tiny, sum, step, add, "unsigned long", "long", "int");

static const char *const names[] = {"zero", "one", "two", "three"};

/* Push n items (at most 64) on a queue of its own, each a firing with its value and a name; returns their sum. */
long tiny_push(long n)
{
	long queue[64], i, depth = 0, s = 0;

	for (i = 0; i < n && depth < 64; i++) {
		queue[depth++] = i * 7 - 3;
		SDT_PROBE2(tiny, queue, push, item, i * 7 - 3, names[i & 3]);
	}
	while (depth)
		s += queue[--depth];
	return s;
}

/* Take one item from a queue of n; an empty one says so. Returns what is left. */
long tiny_pop(long n)
{
	if (n <= 0) {
		SDT_PROBE1(tiny, queue, pop, empty, (int)n - 1);
		return 0;
	}
	return n - 1;
}

/* A checksum of 1..n, each step a firing. */
unsigned long tiny_sum(unsigned long n)
{
	unsigned long s = 0, k;

	for (k = 1; k <= n; k++) {
		s = s * 31 + k;
		SDT_PROBE3(tiny, sum, step, add, s, (long)k - 5, (int)(k & 1));
	}
	return s;
}
