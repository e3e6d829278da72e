/*
 * snapshot - snapshots of a flight recorder while its CPUs record (sdt_snapshot, docs/sessions.md), on sdtgen's
 * hosted platform (sdt_linux.h), built by fixtures/process/Makefile (under AddressSanitizer by the test), for
 * tests/runtime/test_snapshot.py:
 *
 *   snapshot DIR PROGRAM
 *
 * One JSON line a call: what it returned, and whether what it must not touch stayed as it was. NCPU threads, each
 * a CPU, fire tick(i, cpu) for i = 0, 1, 2, ... in order (that loop is the native run's truth: a thread's i-th
 * firing has arg0 i), into "flight" (every probe, overwrite, a ring of RING_PACKETS packets, a snapshot of
 * SNAP_PACKETS of each CPU):
 *
 *   quiet  each thread fires QUIET times and waits; one snapshot (DIR/quiet_K: CPU K's block of the area); the
 *          threads fire AFTER more, and a second one (DIR/after_K): recording went on.
 *   run    the threads fire until told to stop, while the main thread snapshots again and again, until one
 *          snapshot dropped a packet the writer lapped while it was copied (or MAX_SNAPSHOTS): the first such
 *          snapshot's blocks (DIR/lapped_K) and an ordinary one (DIR/run_K).
 *   interrupted  a thread fires tick and wide (events of two sizes) in turn, i = 0, 1, ..., and snapshots its
 *          own CPU from inside the recorder, at its read of the clock (every 7th: the clock hook wrapped), as an
 *          interrupt or a panic there would, and then also from a signal handler the main thread sends: it checks
 *          the copy of its open packet: every event kept one it fired (arg0 one more than the one before, at most
 *          what it fired, no older than the packet), none of the slot's last lap (the ring laps many times)
 *   busy   a thread snapshots again and again while the main thread signals it; its signal handler snapshots too,
 *          as a panic path that stopped a snapshot on its own CPU would: refused, never waiting.
 *   trigger "flight" opened again with the program in PROGRAM (every firing recorded; CPU 0's firing with arg0
 *          1500 snapshots the session, D's snapshot()): DIR/trigger_K; and "bare", the same program without a
 *          snapshot area, whose snapshot() is a program error.
 *
 * Each block's file name says its snapshot; what each thread fired by then is in DIR/fired_K_PHASE.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sdt.h>
#include <sdt_linux.h>

SDT_PROVIDER_DEFINE(ss);
SDT_PROBE_DEFINE2(ss, snap, run, tick, "long", "long");
SDT_PROBE_DEFINE4(ss, snap, run, wide, "long", "long", "long", "long");

#define NCPU 3
#define PACKET 1024
#define RING_PACKETS 8
#define SNAP_PACKETS 4
#define QUIET 2000
#define AFTER 77
#define MAX_SNAPSHOTS 2000000

__attribute__((noinline)) void tick(long i, long k)
{
	SDT_PROBE2(ss, snap, run, tick, i, k);
}

__attribute__((noinline)) void wide(long i, long k)
{
	SDT_PROBE4(ss, snap, run, wide, i, k, i, k);
}

static struct sdt_session flight;
static pthread_barrier_t gate;
static volatile int stop;
static long fired[NCPU];

static void said(const char *what, long value, int unchanged)
{
	printf("{\"call\": \"%s\", \"returned\": %ld, \"unchanged\": %d}\n", what, value, unchanged);
	fflush(stdout);
}

#include "harness_io.h"

/* Every CPU's block of the snapshot area as it stands, and what each thread had fired: NAME_K, fired_NAME_K. */
static void blocks(const char *name)
{
	char what[64];
	unsigned k;

	for (k = 0; k < NCPU; k++) {
		dump(name, k, (const void *)(unsigned long)(flight.snapshot + k * flight.snapshot_bytes),
		     (unsigned long)flight.snapshot_bytes);
		snprintf(what, sizeof(what), "fired_%s", name);
		dump(what, k, &fired[k], sizeof(fired[k]));
	}
}

/* -- the refusals ------------------------------------------------------------------------------------------------ */

static int registry_is(const struct sdt_registry *before)
{
	return !memcmp(before, &sdt_session_table, sizeof(*before));
}

static void refusals(void)
{
	struct sdt_session s, blank;
	struct sdt_registry before;
	struct sdt_session_config cfg = {.ncpus = NCPU, .policy = SDT_OVERWRITE, .ring_bytes = 2 * PACKET,
					 .packet_size = PACKET, .agg_bytes = 0, .snapshot_packets = 0};
	unsigned long plain = sdt_session_bytes(&cfg), need;
	void *mem;

	cfg.snapshot_packets = 3;
	need = sdt_session_bytes(&cfg);
	printf("{\"call\": \"bytes\", \"returned\": %lu, \"unchanged\": %lu}\n", need, plain);
	mem = memory(need);
	memset(&s, 0, sizeof(s));
	memset(&blank, 0, sizeof(blank));
	memcpy(&before, &sdt_session_table, sizeof(before));
	said("memory_short", sdt_session_open(&s, "short", &cfg, mem, need - 64),
	     registry_is(&before) && !memcmp(&s, &blank, sizeof(s)));
	cfg.snapshot_packets = SDT_SNAPSHOT_MAX + 1;
	said("too_many", sdt_session_open(&s, "many", &cfg, mem, need),
	     registry_is(&before) && !memcmp(&s, &blank, sizeof(s)));
	cfg.snapshot_packets = ~0ull;
	said("wraps", sdt_session_open(&s, "wraps", &cfg, mem, need),
	     registry_is(&before) && !memcmp(&s, &blank, sizeof(s)));
	cfg.snapshot_packets = 0;
	said("open_plain", sdt_session_open(&s, "plain", &cfg, mem, plain), 1);
	said("no_area", sdt_snapshot(&s), s.snapshots == 0 && s.snapshot_busy == 0);
	said("default", sdt_snapshot(sdt_session_find("default")), 1);
	said("null", sdt_snapshot(0), 1);
	said("close_plain", sdt_session_close(&s), 1);
	said("closed", sdt_snapshot(&s), 1);
	free(mem);
}

/* -- the runs ---------------------------------------------------------------------------------------------------- */

static void *worker(void *arg)
{
	int cpu = sdt_linux_attach(-1);
	long i = 0;

	(void)arg;
	if (cpu < 0)
		abort();
	pthread_barrier_wait(&gate);	/* quiet */
	for (; i < QUIET; i++)
		tick(i, cpu);
	__atomic_store_n(&fired[cpu], i, __ATOMIC_RELEASE);
	pthread_barrier_wait(&gate);	/* the first snapshot */
	pthread_barrier_wait(&gate);
	for (; i < QUIET + AFTER; i++)
		tick(i, cpu);
	__atomic_store_n(&fired[cpu], i, __ATOMIC_RELEASE);
	pthread_barrier_wait(&gate);	/* the second */
	pthread_barrier_wait(&gate);	/* run */
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		tick(i, cpu);
		__atomic_store_n(&fired[cpu], ++i, __ATOMIC_RELEASE);
	}
	sdt_linux_detach();
	return 0;
}

static long lapped_in_blocks(void)
{
	long n = 0;
	unsigned k;

	for (k = 0; k < NCPU; k++)
		n += (long)((const struct sdt_snapshot *)(unsigned long)(flight.snapshot + k * flight.snapshot_bytes))->lapped;
	return n;
}

static void runs(void)
{
	struct sdt_session_config cfg = {.ncpus = NCPU, .policy = SDT_OVERWRITE, .ring_bytes = RING_PACKETS * PACKET,
					 .packet_size = PACKET, .agg_bytes = 0, .snapshot_packets = SNAP_PACKETS};
	unsigned long bytes = sdt_session_bytes(&cfg), n, seen_lapped = 0;
	pthread_t t[NCPU];
	long r, kept = 0;
	unsigned k;

	said("open_flight", sdt_session_open(&flight, "flight", &cfg, memory(bytes), bytes), 1);
	said("enable_flight", sdt_session_enable(&flight, ":::", SDT_BRANCH), 1);
	pthread_barrier_init(&gate, 0, NCPU + 1);
	for (k = 0; k < NCPU; k++)
		if (pthread_create(&t[k], 0, worker, 0))
			abort();
	pthread_barrier_wait(&gate);
	pthread_barrier_wait(&gate);	/* each thread fired QUIET */
	said("quiet", sdt_snapshot(&flight), 1);
	blocks("quiet");
	pthread_barrier_wait(&gate);
	pthread_barrier_wait(&gate);	/* AFTER more */
	said("after", sdt_snapshot(&flight), 1);
	blocks("after");
	pthread_barrier_wait(&gate);	/* run */
	for (n = 0; n < MAX_SNAPSHOTS; n++) {
		r = sdt_snapshot(&flight);
		if (r < 0) {
			said("run_refused", r, 0);
			break;
		}
		kept += r;
		if (n == 1000)
			blocks("run");
		if (lapped_in_blocks() && !seen_lapped++)
			blocks("lapped");
		if (seen_lapped && n >= 1000)
			break;
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (k = 0; k < NCPU; k++)
		pthread_join(t[k], 0);
	said("run_snapshots", (long)n + 1, flight.snapshots == n + 3);
	said("run_lapped", (long)flight.snapshot_lapped, seen_lapped > 0);
	said("run_kept", kept, 1);
}

/* -- interrupted: a CPU's own snapshot, taken anywhere inside its recorders --------------------------------------- */

#define INTERRUPTED_FIRINGS 30000	/* a clock read each: some 4,000 snapshots from inside a recorder */

static volatile long checked, wrong, interrupted_fired;
static volatile int interrupted_done, interrupted_cpu = -1;

/* The open packet's copy in this CPU's block: each firing's event one the thread fired, in order. */
static void check_own_snapshot(void)
{
	const struct sdt_snapshot *h;
	const struct sdt_packet *pk;
	const unsigned char *p;
	unsigned long at, end, size = PACKET;
	long last = -1, fired_now = interrupted_fired;

	if (interrupted_cpu < 0 || sdt_snapshot(&flight) < 0)
		return;
	h = (const struct sdt_snapshot *)(unsigned long)(flight.snapshot + (unsigned)interrupted_cpu * flight.snapshot_bytes);
	if (!h->open || !h->packets)
		return;
	p = (const unsigned char *)h + SDT_SNAPSHOT_HEAD + (h->packets - 1) * size;
	pk = (const struct sdt_packet *)p;
	end = (unsigned long)(pk->content_size / 8);
	for (at = sizeof(*pk); at + sizeof(struct sdt_event) <= end;) {
		const struct sdt_event *e = (const struct sdt_event *)(p + at);
		long arg0 = *(const long *)(e + 1);
		if (e->size < sizeof(*e) || at + e->size > end)
			break;
		if (e->id != SDT_TASK_KEY) {
			if ((e->size != sizeof(*e) + 2 * sizeof(long) && e->size != sizeof(*e) + 4 * sizeof(long)) ||
			    (last >= 0 && arg0 != last + 1) || arg0 > fired_now || e->timestamp < pk->timestamp_begin)
				wrong++;
			last = arg0;
		}
		at = (at + e->size + 7) & ~7ul;
	}
	checked += last >= 0;
}

static void on_interrupt(int sig)
{
	(void)sig;
	check_own_snapshot();
}

static __thread int in_worker;
static unsigned long clock_calls;
static sdt_u64 (*platform_clock)(void);

/* The platform's clock, and every 7th read of the worker's a snapshot of its own CPU there: inside a recorder. */
static sdt_u64 clock_then_snapshot(void)
{
	sdt_u64 t = platform_clock();

	if (in_worker && ++clock_calls % 7 == 0)
		check_own_snapshot();
	return t;
}

static void *interrupted_worker(void *arg)
{
	int cpu = sdt_linux_attach(-1);
	long i = 0;

	(void)arg;
	if (cpu < 0)
		abort();
	sdt_session_flush(&flight);	/* the open packet another thread left on this CPU closed: the next is this one's */
	in_worker = 1;
	interrupted_cpu = cpu;
	while (i < INTERRUPTED_FIRINGS) {	/* a count, not a time: a busy machine checks as much as a quiet one */
		if (i % 3)
			tick(i, cpu);
		else
			wide(i, cpu);
		interrupted_fired = ++i;
	}
	interrupted_done = 1;
	sdt_linux_detach();
	return 0;
}

static void interrupted(void)
{
	pthread_t t;

	platform_clock = sdt_hooks.clock;
	sdt_hooks.clock = clock_then_snapshot;	/* the runtime's hooks: what the platform gave sdt_init */
	signal(SIGUSR2, on_interrupt);
	if (pthread_create(&t, 0, interrupted_worker, 0))
		abort();
	while (interrupted_cpu < 0)
		sched_yield();
	while (!interrupted_done) {	/* signals land anywhere in the worker's recorders while it runs */
		pthread_kill(t, SIGUSR2);
		sched_yield();
	}
	pthread_join(t, 0);
	sdt_hooks.clock = platform_clock;
	said("interrupted", checked, wrong == 0);
	printf("{\"call\": \"interrupted_wrong\", \"returned\": %ld, \"unchanged\": 1}\n", (long)wrong);
}

/* -- busy: a snapshot interrupted on its CPU by a signal whose handler snapshots ------------------------------- */

static volatile long handler_busy, handler_ok, handler_other;
static volatile int busy_stop;

static void on_signal(int sig)
{
	int r = sdt_snapshot(&flight);

	(void)sig;
	if (r == SDT_ERR_BUSY)
		handler_busy++;
	else if (r >= 0)
		handler_ok++;
	else
		handler_other++;
}

static void *snapshotter(void *arg)
{
	long *refused = arg;

	while (!busy_stop)
		if (sdt_snapshot(&flight) < 0)
			++*refused;
	return 0;
}

static void busy(void)
{
	unsigned long before = (unsigned long)flight.snapshot_busy, signals;
	long refused = 0;
	pthread_t t;

	signal(SIGUSR1, on_signal);
	if (pthread_create(&t, 0, snapshotter, &refused))
		abort();
	for (signals = 0; signals < 100000 && !handler_busy; signals++) {
		pthread_kill(t, SIGUSR1);
		sdt_linux_refresh();
	}
	busy_stop = 1;
	pthread_join(t, 0);
	said("busy_seen", handler_busy, (unsigned long)flight.snapshot_busy - before == (unsigned long)handler_busy);
	said("busy_other", handler_other + refused, 1);
	said("close_flight", sdt_session_close(&flight), 1);
	said("closed_flight", sdt_snapshot(&flight), 1);
}

/* -- trigger: a probe's firing snapshots its session (a program's snapshot()) ------------------------------------ */

#define TRIGGER_FIRINGS 3000

static void *trigger_worker(void *arg)
{
	int cpu = sdt_linux_attach(-1);
	long i;

	(void)arg;
	if (cpu < 0)
		abort();
	pthread_barrier_wait(&gate);
	for (i = 0; i < TRIGGER_FIRINGS; i++)
		tick(i, cpu);
	__atomic_store_n(&fired[cpu], i, __ATOMIC_RELEASE);
	sdt_linux_detach();
	return 0;
}

/* Session "flight" again, every firing recorded and the one the program's predicate picks snapshotting it; "bare",
 * the same program in a session with no snapshot area: the snapshot() it cannot take is a program error. */
static void trigger(const void *program, unsigned long bytes)
{
	struct sdt_session_config cfg = {.ncpus = NCPU, .policy = SDT_OVERWRITE, .ring_bytes = RING_PACKETS * PACKET,
					 .packet_size = PACKET, .agg_bytes = 1ul << 16, .snapshot_packets = SNAP_PACKETS};
	static struct sdt_session bare;
	unsigned long need = sdt_session_bytes(&cfg), errors = 0;
	const struct sdt_cpu *c;
	pthread_t t[NCPU];
	unsigned k;

	free((void *)(unsigned long)flight.memory);	/* closed by busy(): the kernel's again */
	said("trigger_open", sdt_session_open(&flight, "flight", &cfg, memory(need), need), 1);
	said("trigger_enable", sdt_session_enable_program(&flight, "ss:::", SDT_BRANCH, program, bytes), 1);
	cfg.snapshot_packets = 0;
	need = sdt_session_bytes(&cfg);
	said("bare_open", sdt_session_open(&bare, "bare", &cfg, memory(need), need), 1);
	said("bare_enable", sdt_session_enable_program(&bare, "ss:::", SDT_BRANCH, program, bytes), 1);
	pthread_barrier_init(&gate, 0, NCPU + 1);
	for (k = 0; k < NCPU; k++)
		if (pthread_create(&t[k], 0, trigger_worker, 0))
			abort();
	pthread_barrier_wait(&gate);
	for (k = 0; k < NCPU; k++)
		pthread_join(t[k], 0);
	blocks("trigger");
	said("trigger_snapshots", (long)flight.snapshots, flight.snapshot_busy == 0);
	c = (const struct sdt_cpu *)(unsigned long)bare.cpus;
	for (k = 0; k < NCPU; k++)
		errors += (unsigned long)((const struct sdt_agg *)(unsigned long)c[k].agg)->errors;
	said("bare_errors", (long)errors, bare.snapshots == 0);
}

int main(int argc, char **argv)
{
	struct sdt_linux_options o = {.ring_bytes = 1ul << 20, .packet_size = PACKET, .policy = SDT_DISCARD};
	unsigned long bytes;
	void *program;

	if (argc != 3)
		return 2;
	dir = argv[1];
	program = file(argv[2], &bytes);
	if (sdt_linux_start(&o) < 0)
		return 1;
	refusals();
	runs();
	interrupted();
	busy();
	memset(fired, 0, sizeof(fired));
	trigger(program, bytes);
	free(program);
	sdt_linux_stop();
	return 0;
}
