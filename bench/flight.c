/*
 * The always-on flight recorder on this machine's CPU (bench/sessions.py): the fixture kernel (fixtures/kernel) as
 * a Linux process on the hosted platform, running bench/mix.c's realistic mix (path lookups with a string per
 * component, a six-argument switch, scheduler ticks), with and without a flight recorder of every probe.
 *
 *   flight-proc N ROUNDS     one JSON line
 *
 * The flight recorder is what a kernel opens itself at boot: a session of its own (not the default one) with
 * SDT_OVERWRITE rings, every probe enabled (":::", branch). A round measures, in turn, each the best of INNER
 * loops of bench_mix(N) (ns an iteration):
 *   "off"      nothing armed: the same kernel without it
 *   "flight"   the flight recorder on
 *   "default"  the default session alone recording every probe (the recorder's fast path), for the cost an event
 *   "lapped"   the flight recorder with 64 KiB rings, which the loop laps many times: overwrite at work
 * Every session's packets are read back after each loop (bench/session_tally.h: events counted by probe key) and
 * its overwritten and discarded counts said: the first three cases' rings hold a loop's events, so their counts by
 * probe are exact, and the bench holds them against the native run of the same mix; the lapped ring's events read
 * and overwritten together are every firing.
 */
#include <stdlib.h>
#include <string.h>

#include <sdt_linux.h>

#include "cpu_loop.h"
#include "session_tally.h"

#define INNER 8	/* loops of each case a round: short ones, many (one of them meets a quiet machine) */
#define MAX_ROUNDS 64
#define RING (32ul << 20)	/* a loop's events fit: the rings are read after each loop */
#define SMALL_RING (64ul << 10)	/* the geometry docs/sessions.md's flight recorder shows: lapped many times a loop */
#define NCASES 4

long bench_mix(int n);

static const char *const names[NCASES] = {"off", "flight", "default", "lapped"};
static double ns[NCASES][MAX_ROUNDS];
static struct tally read_back[NCASES];
static unsigned long loops[NCASES];
static struct sdt_session flight, lapped;
static unsigned long lost[NCASES];	/* events the ring overwrote unread (lapped) or discarded, each case */
static volatile long sink;

static void fail(const char *what, long got)
{
	fprintf(stderr, "flight-proc: %s (%ld)\n", what, got);
	exit(4);
}

static double mix(long n)
{
	double t = bench_now();

	sink += bench_mix((int)n);
	return (bench_now() - t) * 1e9 / (double)n;
}

/* Case ``k``: its session (NULL: none) records every probe over INNER loops of N iterations; the best ns. */
static double measure(int k, struct sdt_session *s, long n)
{
	struct sdt_cpu *c0 = (struct sdt_cpu *)sdt_linux_cpu(0);
	double best = 1e30;

	if (s && sdt_session_enable(s, ":::", SDT_BRANCH) < 1)
		fail("enable", k);
	for (int i = 0; i < INNER; i++) {
		best = bench_min(best, mix(n));
		loops[k]++;
		if (s) {
			if (sdt_session_flush(s) < 0)
				fail("flush", k);
			struct sdt_cpu *area = sdt_session_cpu(c0, s->id);
			tally_consume(area, &read_back[k]);
			lost[k] = area->overwritten + area->discarded;
		}
	}
	if (s && sdt_session_disable(s, ":::") < 1)
		fail("disable", k);
	return best;
}

int main(int argc, char **argv)
{
	struct sdt_linux_options options = {0};
	struct sdt_session_config cfg = {0};
	struct sdt_session *deflt;
	unsigned long bytes;
	void *mem;
	long n;
	int rounds;

	if (argc != 3)
		return 2;
	n = strtol(argv[1], 0, 0);
	rounds = (int)strtol(argv[2], 0, 0);
	if (n < 1 || rounds < 1 || rounds > MAX_ROUNDS)
		return 2;
	options.ring_bytes = RING;
	options.policy = SDT_OVERWRITE;
	options.no_consumer = 1;	/* the rings are read between loops, by this thread */
	if (sdt_linux_start(&options) < 1 || sdt_linux_attach(0) != 0)
		return 3;
	deflt = sdt_session_find("default");
	cfg.ncpus = 1;
	cfg.policy = SDT_OVERWRITE;
	cfg.ring_bytes = RING;
	cfg.packet_size = 4096;
	bytes = sdt_session_bytes(&cfg);
	mem = aligned_alloc(64, bytes);
	if (!mem)
		return 3;
	memset(mem, 0, bytes);	/* its pages faulted in before anything is timed */
	if (sdt_session_open(&flight, "flight", &cfg, mem, bytes) != 1)
		fail("session open", 0);
	cfg.ring_bytes = SMALL_RING;
	bytes = sdt_session_bytes(&cfg);
	mem = aligned_alloc(64, bytes);
	if (!mem)
		return 3;
	memset(mem, 0, bytes);
	if (sdt_session_open(&lapped, "lapped", &cfg, mem, bytes) != 2)
		fail("session open", 1);
	for (int r = 0; r < rounds; r++) {
		ns[0][r] = measure(0, 0, n);
		ns[1][r] = measure(1, &flight, n);
		ns[2][r] = measure(2, deflt, n);
		ns[3][r] = measure(3, &lapped, n);
	}
	printf("{\"iterations\": %ld, \"ns\": {", n);
	for (int c = 0; c < NCASES; c++) {
		printf("%s\"%s\": [", c ? ", " : "", names[c]);
		for (int r = 0; r < rounds; r++)
			printf("%s%.3f", r ? ", " : "", ns[c][r]);
		printf("]");
	}
	printf("}, \"loops\": {");
	for (int c = 0; c < NCASES; c++)
		printf("%s\"%s\": %lu", c ? ", " : "", names[c], loops[c]);
	printf("}, \"read\": {");
	for (int c = 1; c < NCASES; c++) {
		printf("%s\"%s\": ", c > 1 ? ", " : "", names[c]);
		tally_print(stdout, &read_back[c]);
		printf(", \"%s_lost\": %lu", names[c], lost[c]);
	}
	printf("}}\n");
	if (sdt_session_close(&flight) < 0 || sdt_session_close(&lapped) < 0)
		fail("session close", 0);
	sdt_linux_stop();
	return 0;
}
