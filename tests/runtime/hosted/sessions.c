/*
 * sessions - several sessions at once on sdtgen's hosted platform (sdt_linux.h), built by fixtures/process/Makefile
 * with PROGRAM_SRCS empty, for tests/runtime/test_sessions.py:
 *
 *   sessions DIR PROGRAM AGGPROGRAM
 *
 * First the refusals (one JSON line each: what the call returned, and whether the registry and the session's
 * storage stayed as they were). Then NCPU threads, each a CPU, fire three probes in three phases, each thread
 * writing what it fired (its own oracle: DIR/oracle_K, a line per firing, `PHASE PROBE ARG0 ARG1`):
 *
 *   A  the default session enables sb:::, "flight" (overwrite) every probe, "net" (discard) sa::: with the
 *      predicate program in PROGRAM, "agg" sb::: with the aggregating program in AGGPROGRAM;
 *   B  the same while the main thread disables and enables "net" again and again (the others keep the sites);
 *   C  the same while the main thread closes "net" and fills its memory with a pattern at once.
 *
 * After B every thread flushes its CPU's packets of "net", and the main thread dumps net's rings; at the end every
 * thread flushes "flight" and "agg" is switched, and their rings and tables are dumped: DIR/SESSION_ring_K (the
 * ring's bytes as they stand), DIR/SESSION_area_K (its struct sdt_cpu), DIR/agg_tables_K (the struct sdt_agg and
 * its halves, at the address its last line says). The default session's streams are the platform's
 * (DIR/trace/stream_K). The last JSON line: the bytes of net's memory changed after its close returned, the
 * sessions' counters.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sdt.h>
#include <sdt_linux.h>

SDT_PROVIDER_DEFINE(sa);
SDT_PROVIDER_DEFINE(sb);
SDT_PROBE_DEFINE2(sa, net, rx, pkt, "long", "long");
SDT_PROBE_DEFINE1(sa, net, tx, pkt, "long");
SDT_PROBE_DEFINE2(sb, sched, run, tick, "long", "long");

#define NCPU 3
#define PER_PHASE 3000	/* firings of each probe by each thread in phase A; B and C run until told to stop */
#define LIMIT 20000	/* ... or this many, then wait for the stop: the rings hold the whole run */
#define RING (8ul << 20)
#define PACKET 4096
#define AGG (1ul << 16)
#define PATTERN 0x5a

__attribute__((noinline)) void rx(long i, long k)
{
	SDT_PROBE2(sa, net, rx, pkt, i, k);
}

__attribute__((noinline)) void tx(long i)
{
	SDT_PROBE1(sa, net, tx, pkt, i);
}

__attribute__((noinline)) void tick(long i, long k)
{
	SDT_PROBE2(sb, sched, run, tick, i, k);
}

static struct sdt_session flight, net, agg, few;	/* few: CPU 0 only, sb::: */
static void *flight_mem, *net_mem, *agg_mem;
static unsigned long net_bytes;
static volatile int stop;	/* C: leave the phase */
static int b_done;	/* B: the threads that fired all of theirs */
static long b_fired;	/* B: the rounds of rx, tx and tick the threads fired, all of them */
static pthread_barrier_t gate;

static void said(const char *what, long value, int unchanged)
{
	printf("{\"call\": \"%s\", \"returned\": %ld, \"unchanged\": %d}\n", what, value, unchanged);
}

#include "harness_io.h"

/* Session ``s``'s rings and areas as they stand, one file each, named ``name``_ring_K and ``name``_area_K. */
static void dump_session(const struct sdt_session *s, const char *name)
{
	const struct sdt_cpu *c = (const struct sdt_cpu *)(unsigned long)s->cpus;
	char what[64];
	unsigned k;

	for (k = 0; k < s->ncpus; k++) {
		snprintf(what, sizeof(what), "%s_ring", name);
		dump(what, k, (const void *)(unsigned long)c[k].ring, (unsigned long)(c[k].packets * c[k].packet_size));
		snprintf(what, sizeof(what), "%s_area", name);
		dump(what, k, &c[k], sizeof(c[k]));
	}
}

/* -- the refusals: nothing changes ------------------------------------------------------------------------- */

static int registry_is(const struct sdt_registry *before)
{
	return !memcmp(before, &sdt_session_table, sizeof(*before));
}

static void refusals(void)
{
	struct sdt_session s, spare[SDT_MAX_SESSIONS], blank;
	struct sdt_registry before;
	struct sdt_session_config cfg = {.ncpus = NCPU, .policy = SDT_DISCARD, .ring_bytes = 2 * PACKET,
					 .packet_size = PACKET, .agg_bytes = 0, .snapshot_packets = 0};
	unsigned long need = sdt_session_bytes(&cfg);
	void *mem = memory(need);
	int k, r;

	memset(&s, 0, sizeof(s));
	memset(&blank, 0, sizeof(blank));
	memcpy(&before, &sdt_session_table, sizeof(before));
	printf("{\"call\": \"bytes\", \"returned\": %lu, \"unchanged\": 1}\n", need);
	r = sdt_session_open(&s, "short", &cfg, mem, need - 64);
	said("memory_short", r, registry_is(&before) && !memcmp(&s, &blank, sizeof(s)));
	r = sdt_session_open(&s, "", &cfg, mem, need);
	said("name_empty", r, registry_is(&before) && !memcmp(&s, &blank, sizeof(s)));
	r = sdt_session_open(&s, "has space", &cfg, mem, need);
	said("name_space", r, registry_is(&before) && !memcmp(&s, &blank, sizeof(s)));
	r = sdt_session_open(&s, "sixteen_bytes_xx", &cfg, mem, need);
	said("name_long", r, registry_is(&before) && !memcmp(&s, &blank, sizeof(s)));
	r = sdt_session_open(&s, "default", &cfg, mem, need);
	said("name_default", r, registry_is(&before) && !memcmp(&s, &blank, sizeof(s)));
	cfg.snapshot_packets = 4;
	r = sdt_session_open(&s, "snap", &cfg, mem, need);
	said("snapshot_short", r, registry_is(&before) && !memcmp(&s, &blank, sizeof(s)));
	cfg.snapshot_packets = 0;
	cfg.packet_size = 1000;
	r = sdt_session_open(&s, "geometry", &cfg, mem, need);
	said("geometry", r, registry_is(&before) && !memcmp(&s, &blank, sizeof(s)));
	cfg.packet_size = PACKET;
	r = sdt_session_open(&s, "one", &cfg, mem, need);
	said("open", r, 1);
	memcpy(&before, &sdt_session_table, sizeof(before));
	memset(&spare[0], 0, sizeof(spare[0]));
	r = sdt_session_open(&spare[0], "one", &cfg, memory(need), need);
	said("name_open", r, registry_is(&before) && !memcmp(&spare[0], &blank, sizeof(blank)));
	r = sdt_session_open(&s, "two", &cfg, memory(need), need);
	said("storage_open", r, registry_is(&before));
	for (k = 0; k < SDT_MAX_SESSIONS - 2; k++) {	/* ids 2 .. SDT_MAX_SESSIONS - 1 */
		char name[8] = {'m', (char)('0' + k), 0};
		memset(&spare[k], 0, sizeof(spare[k]));
		r = sdt_session_open(&spare[k], name, &cfg, memory(need), need);
		if (r != k + 2)
			said("fill", r, 0);
	}
	memcpy(&before, &sdt_session_table, sizeof(before));
	memset(&spare[k], 0, sizeof(spare[k]));
	r = sdt_session_open(&spare[k], "late", &cfg, memory(need), need);
	said("full", r, registry_is(&before) && !memcmp(&spare[k], &blank, sizeof(blank)));
	said("find", sdt_session_find("m3") == &spare[3], 1);
	said("find_default", sdt_session_find("default") && sdt_session_find("default")->id == 0, 1);
	said("close_default", sdt_session_close(sdt_session_find("default")), 1);
	for (k = 0; k < SDT_MAX_SESSIONS - 2; k++)
		if (sdt_session_close(&spare[k]) < 0)
			said("empty", -1, 0);
	said("close", sdt_session_close(&s), 1);
	said("close_again", sdt_session_close(&s), 1);
	said("enable_closed", sdt_session_enable(&s, ":::", SDT_BRANCH), 1);
	said("find_closed", sdt_session_find("one") != 0, 1);
	for (k = 1; k < SDT_MAX_SESSIONS; k++)
		if (sdt_session_table.sessions[k])
			said("left_open", k, 0);
}

/* -- the run ------------------------------------------------------------------------------------------------- */

static void *worker(void *arg)
{
	char path[4096];
	FILE *oracle;
	int cpu = sdt_linux_attach(-1);
	long i = 0;
	int p;

	(void)arg;
	snprintf(path, sizeof(path), "%s/oracle_%d", dir, cpu);
	oracle = fopen(path, "w");
	if (cpu < 0 || !oracle)
		abort();
	pthread_barrier_wait(&gate);
	for (p = 0; p < 3; p++) {	/* A, B, C */
		long n;
		for (n = 0; p == 0 ? n < PER_PHASE : p == 1 ? n < LIMIT : !__atomic_load_n(&stop, __ATOMIC_ACQUIRE) &&
		     n < LIMIT; n++, i++) {
			rx(i, cpu);
			fprintf(oracle, "%d rx %ld %d\n", p, i, cpu);
			tx(i * 7);
			fprintf(oracle, "%d tx %ld 0\n", p, i * 7);
			tick(i, cpu * 1000 + (i & 7));
			fprintf(oracle, "%d tick %ld %ld\n", p, i, cpu * 1000 + (i & 7));
			if (p == 1)
				__atomic_add_fetch(&b_fired, 1, __ATOMIC_RELEASE);
		}
		if (p == 1)
			__atomic_add_fetch(&b_done, 1, __ATOMIC_RELEASE);
		while (p == 2 && !__atomic_load_n(&stop, __ATOMIC_ACQUIRE))
			;
		if (p == 1)	/* net's open packet on this CPU closed before its rings are read */
			sdt_session_flush(&net);
		pthread_barrier_wait(&gate);	/* the phase ended */
		pthread_barrier_wait(&gate);	/* the next one begins */
	}
	sdt_session_flush(&flight);
	sdt_session_flush(&few);
	fclose(oracle);
	sdt_linux_detach();
	return 0;
}

/* A session opened in the id "net" left (no probe enabled) records nothing of the firings that follow: it inherits
 * nothing of net's. */
static void reuse(void)
{
	static struct sdt_session again;
	struct sdt_session_config cfg = {.ncpus = NCPU, .policy = SDT_DISCARD, .ring_bytes = 2 * PACKET,
					 .packet_size = PACKET, .agg_bytes = AGG, .snapshot_packets = 0};
	unsigned long bytes = sdt_session_bytes(&cfg), opened = 0, k;
	const struct sdt_cpu *c;
	int id = sdt_session_open(&again, "again", &cfg, memory(bytes), bytes);

	said("reopen", id, 1);
	sdt_disable("sb:::");	/* the default session's streams hold the threads' firings only */
	if (sdt_linux_attach(-1) < 0)
		abort();
	for (k = 0; k < 100; k++) {
		rx((long)k * 3, 0);
		tx((long)k * 3);
		tick((long)k, 0);
	}
	sdt_session_flush(&again);
	c = (const struct sdt_cpu *)(unsigned long)again.cpus;
	for (k = 0; k < NCPU; k++)
		opened += (unsigned long)(c[k].write_seq + c[k].discarded);
	said("reopened_recorded", (long)opened, 1);
	sdt_linux_detach();
}

static void run(const void *program, unsigned long program_bytes, const void *aggprog, unsigned long aggprog_bytes)
{
	struct sdt_session_config cfg = {.ncpus = NCPU, .policy = SDT_OVERWRITE, .ring_bytes = RING,
					 .packet_size = PACKET, .agg_bytes = 0, .snapshot_packets = 0};
	unsigned long bytes, k, changed = 0, toggles = 0;
	pthread_t t[NCPU];
	const struct sdt_cpu *c;

	bytes = sdt_session_bytes(&cfg);
	flight_mem = memory(bytes);
	said("open_flight", sdt_session_open(&flight, "flight", &cfg, flight_mem, bytes), 1);
	cfg.policy = SDT_DISCARD;
	cfg.agg_bytes = AGG;	/* a program runs on its session's tables (its state), aggregating or not */
	net_bytes = bytes = sdt_session_bytes(&cfg);
	net_mem = memory(bytes);
	said("open_net", sdt_session_open(&net, "net", &cfg, net_mem, bytes), 1);
	cfg.ring_bytes = 2 * PACKET;
	bytes = sdt_session_bytes(&cfg);
	agg_mem = memory(bytes);
	said("open_agg", sdt_session_open(&agg, "agg", &cfg, agg_mem, bytes), 1);
	cfg.ncpus = 1;	/* the threads' CPUs past 0 fire into no area of it: counted as misplaced */
	cfg.agg_bytes = 0;
	cfg.ring_bytes = 4ul << 20;
	bytes = sdt_session_bytes(&cfg);
	said("open_few", sdt_session_open(&few, "few", &cfg, memory(bytes), bytes), 1);
	said("enable_few", sdt_session_enable(&few, "sb:::", SDT_BRANCH), 1);
	said("enable_default", sdt_enable("sb:::", SDT_BRANCH), 1);
	said("enable_flight", sdt_session_enable(&flight, ":::", SDT_BRANCH), 1);
	said("enable_net", sdt_session_enable_program(&net, "sa:::", SDT_BRANCH, program, program_bytes), 1);
	said("enable_agg", sdt_session_enable_program(&agg, "sb:::", SDT_BRANCH, aggprog, aggprog_bytes), 1);
	pthread_barrier_init(&gate, 0, NCPU + 1);
	for (k = 0; k < NCPU; k++)
		if (pthread_create(&t[k], 0, worker, 0))
			abort();
	pthread_barrier_wait(&gate);	/* A */
	pthread_barrier_wait(&gate);	/* A ended */
	pthread_barrier_wait(&gate);	/* B: net toggled while the others keep the sites */
	for (toggles = 0; __atomic_load_n(&b_done, __ATOMIC_ACQUIRE) < NCPU; toggles++) {	/* all of B */
		long from;
		if (sdt_session_disable(&net, "sa:::") < 0 || sdt_session_enable(&net, "sa:::", SDT_BRANCH) < 0)
			said("toggle", -1, 0);
		/* enabled for some rounds of the threads' each time, however the machine schedules them: B records some */
		from = __atomic_load_n(&b_fired, __ATOMIC_ACQUIRE);
		while (__atomic_load_n(&b_fired, __ATOMIC_ACQUIRE) < from + 3 * NCPU &&
		       __atomic_load_n(&b_done, __ATOMIC_ACQUIRE) < NCPU)
			;
	}
	pthread_barrier_wait(&gate);	/* B ended: each thread flushed net */
	dump_session(&net, "net");
	printf("{\"call\": \"toggles\", \"returned\": %lu, \"unchanged\": 1}\n", toggles);
	pthread_barrier_wait(&gate);	/* C: net closed while its CPUs record */
	said("close_net", sdt_session_close(&net), 1);
	memset(net_mem, PATTERN, net_bytes);	/* the kernel's again: nothing of the runtime writes there now */
	for (k = 0; k < 200; k++)	/* the threads go on firing a while */
		sdt_linux_refresh();
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	pthread_barrier_wait(&gate);	/* C ended */
	pthread_barrier_wait(&gate);	/* the threads flush flight and leave */
	for (k = 0; k < NCPU; k++)
		pthread_join(t[k], 0);
	for (k = 0; k < net_bytes; k++)
		changed += ((unsigned char *)net_mem)[k] != PATTERN;
	said("switch_agg", sdt_session_switch(&agg), 1);
	dump_session(&flight, "flight");
	dump_session(&few, "few");
	printf("{\"call\": \"few_misplaced\", \"returned\": %lu, \"unchanged\": 1}\n", (unsigned long)few.misplaced);
	c = (const struct sdt_cpu *)(unsigned long)agg.cpus;
	for (k = 0; k < NCPU; k++) {
		const struct sdt_agg *g = (const struct sdt_agg *)(unsigned long)c[k].agg;
		unsigned long n = (unsigned long)(g->arena[1] + g->arena_size - (unsigned long)g);
		dump("agg_tables", (unsigned)k, g, n);
		printf("{\"call\": \"agg_at\", \"returned\": %lu, \"unchanged\": %lu}\n", (unsigned long)g, AGG);
	}
	printf("{\"call\": \"net_written_after_close\", \"returned\": %lu, \"unchanged\": 1}\n", changed);
	printf("{\"call\": \"misplaced\", \"returned\": %lu, \"unchanged\": 1}\n",
	       (unsigned long)(flight.misplaced + agg.misplaced));
	reuse();
}

int main(int argc, char **argv)
{
	struct sdt_linux_options o = {.ring_bytes = 4ul << 20, .packet_size = PACKET, .policy = SDT_DISCARD};
	char trace[4096];
	unsigned long pn, an;
	void *program, *aggprog;

	if (argc != 4)
		return 2;
	dir = argv[1];
	program = file(argv[2], &pn);
	aggprog = file(argv[3], &an);
	snprintf(trace, sizeof(trace), "%s/trace", dir);
	o.trace_dir = trace;
	if (sdt_linux_start(&o) < 0)
		return 1;
	refusals();
	run(program, pn, aggprog, an);
	sdt_linux_stop();
	return 0;
}
