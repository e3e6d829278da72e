/*
 * The runtime built for the host, so Python can run programs through the kernel's own firing path: the
 * verifier, sdt_program_fire (the evaluator, the CPU's seq, the aggregation tables) exactly as a recorder
 * calls them, on a CPU area and aggregation memory of this process's.
 */
#include "sdt_runtime.c"	/* the runtime as a kernel compiles it: its statics visible here */

/* One entry in each linker set, so the linker defines their bounds. */
static struct sdt_site harness_site __attribute__((used, section("set_sdt_sites_set")));
static const struct sdt_probe harness_probe __attribute__((used, section("set_sdt_probes_set")));

static struct sdt_cpu area;
static struct sdt_agg agg;
static unsigned char memory[1 << 21] __attribute__((aligned(64)));
static struct sdt_slot harness_slot;

/* This process's CPU 0: an area and ``bytes`` of aggregation memory (0: none attached). */
int h_attach(unsigned long bytes, unsigned cpu)
{
	area.cpu = cpu;
	area.agg = 0;
	area.nesting = 0;
	area.discarded = 0;
	agg_list = 0;
	if (!bytes)
		return 0;
	if (bytes > sizeof(memory))
		return -1;
	return sdt_agg_attach(&area, &agg, memory, bytes);
}

unsigned long h_agg(void)
{
	return (unsigned long)&agg;
}

unsigned long h_discarded(void)
{
	return (unsigned long)area.discarded;
}

int h_verify(const void *program, unsigned long bytes)
{
	return sdt_program_verify(program, bytes);
}

/* A firing of probe ``key`` with ``args`` whose slot holds ``program``, as a recorder makes it (the slot's guard,
 * then sdt_program_fire): the verifier's refusal (negative), 2 when the guard turned it away, or what
 * sdt_program_fire says (1: record it). ``unchecked``: run it without verifying (for a program changed after it
 * was attached). */
int h_fire(const void *program, unsigned long bytes, unsigned key, const sdt_u64 *args, int unchecked)
{
	int r = unchecked ? 0 : sdt_program_verify(program, bytes);
	sdt_word a[6];
	unsigned k;

	if (r)
		return r;
	for (k = 0; k < 6; k++)
		a[k] = (sdt_word)args[k];
	harness_slot.route = 0;	/* as gen leaves it: nobody takes the probe */
	harness_slot.sessions = 0;
	harness_slot.program[0] = 0;
	slot_join(&harness_slot, 0, (const struct sdt_program *)program);	/* the default session's program */
	if (!sdt_guard(&harness_slot, a[0], a[1], a[2], a[3], a[4], a[5]))
		return 2;
	return sdt_program_fire(&area, harness_slot.program[0], key, a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* Strings are read only inside these ranges (n 0: anywhere), as a kernel's readable hook says. */
void h_readable(const struct sdt_range *ranges, unsigned n)
{
	sdt_hooks.readable = ranges;
	sdt_hooks.nreadable = n;
}

/* The consumer's switch (no other CPU: sync_cores is the kernel's, NULL here). */
int h_switch(void)
{
	return sdt_agg_switch();
}

/* The table as the C declaration of struct sdt_agg places it, for the tests of sdt_aggregate.c. */
unsigned long h_agg_size(void)
{
	return sizeof(agg);
}

unsigned long long h_want(void)
{
	return agg.want;
}

unsigned long long h_nindex(void)
{
	return agg.nindex;
}

unsigned long long h_index(unsigned h)
{
	return agg.index[h];
}

unsigned long long h_arena(unsigned h)
{
	return agg.arena[h];
}

unsigned long long h_entries(unsigned h)
{
	return agg.entries[h];
}

unsigned long long h_dropped(unsigned h)
{
	return agg.dropped[h];
}
