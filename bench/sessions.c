/*
 * The session rows on this machine's CPU (bench/sessions.py): bench/cpu_site.c's probe (bench/cpu_loop.h's loop, an
 * event with two integer arguments, the clock included) in a Linux process on the hosted platform, recorded into
 * k sessions at once, and disarmed while another session keeps another probe's site armed.
 *
 *   cpu-sessions N N_OFF ROUNDS     one JSON line
 *
 * A round measures, in turn (each the best of INNER loops of N / k firings, every session's rings read after each):
 *   "k1"  the default session alone enables the probe (the recorder's fast path: what a firing cost before sessions)
 *   "one" one session other than the default alone (the slow path: the visit, the session mask, its area)
 *   "k2", "k4", "k8"  the default session and 1, 3, 7 others (SDT_MAX_SESSIONS is 8, the default one included)
 * then, PAIRS times each in turn, the probe disarmed (N_OFF iterations, the call form and the asm goto form):
 *   "off", "goto"              nothing armed anywhere
 *   "off_other", "goto_other"  session 1 keeps bench:cpu:other:fire's site armed (bench/cpu_site_other.c), and
 *                              fired once a round, so its ring shows the site was armed
 * It prints each case's ns an iteration of every round (the bench takes medians), and what every session read back
 * from its rings (bench/session_tally.h): the bench holds those against the firings each case made.
 */
#include <stdlib.h>
#include <string.h>

#include <sdt_linux.h>

#include "cpu_loop.h"
#include "session_tally.h"

#define INNER 8	/* loops of each armed case a round: short ones, many (one of them meets a quiet machine) */
#define PAIRS 8	/* loops of each disarmed case a round */
#define MAX_ROUNDS 64
#define RING (16ul << 20)	/* a loop's events fit: its rings are read after each */
#define NCASES 9

double bench_loop(long n);
double bench_loop_goto(long n);
void bench_other(long a, long b);

static const char spec[] = "bench:cpu:loop:fire", other[] = "bench:cpu:other:fire";
static const char *const names[NCASES] = {"k1", "one", "k2", "k4", "k8", "off", "goto", "off_other", "goto_other"};
static struct sdt_session sessions[SDT_MAX_SESSIONS];	/* [0] unused: the default session is the runtime's */
static struct sdt_session *by_id[SDT_MAX_SESSIONS];
static struct tally read_back[SDT_MAX_SESSIONS];
static unsigned long expected[SDT_MAX_SESSIONS], expected_other;
static double ns[NCASES][MAX_ROUNDS];

static void fail(const char *what, long got)
{
	fprintf(stderr, "cpu-sessions: %s (%ld)\n", what, got);
	exit(4);
}

/* Every session's packets on this CPU closed and read back into read_back. */
static void read_sessions(void)
{
	struct sdt_cpu *c0 = (struct sdt_cpu *)sdt_linux_cpu(0);

	for (int s = 0; s < SDT_MAX_SESSIONS; s++) {
		if (sdt_session_flush(by_id[s]) < 0)
			fail("flush", s);
		tally_consume(sdt_session_cpu(c0, (unsigned)s), &read_back[s]);
	}
}

/* The probe armed in sessions first .. first + k - 1 (0: the default session), INNER loops of N / k firings timed
 * (each loop as long as one session's: as likely to meet another process on its core), disarmed. */
static double recorded(int first, int k, long n)
{
	double best = 1e30;

	n /= k;

	for (int s = first; s < first + k; s++)
		if (sdt_session_enable(by_id[s], spec, SDT_BRANCH) < 1)
			fail("enable", s);
	for (int i = 0; i < INNER; i++) {
		best = bench_min(best, bench_loop(n));
		read_sessions();
		for (int s = first; s < first + k; s++)
			expected[s] += (unsigned long)n;
	}
	for (int s = first; s < first + k; s++)
		if (sdt_session_disable(by_id[s], spec) < 1)
			fail("disable", s);
	return best;
}

int main(int argc, char **argv)
{
	struct sdt_linux_options options = {0};
	struct sdt_session_config cfg = {0};
	unsigned long bytes;
	long n, n_off;
	int rounds;

	if (argc != 4)
		return 2;
	n = strtol(argv[1], 0, 0);
	n_off = strtol(argv[2], 0, 0);
	rounds = (int)strtol(argv[3], 0, 0);
	if (n < 1 || n_off < 1 || rounds < 1 || rounds > MAX_ROUNDS)
		return 2;
	options.ring_bytes = RING;
	options.policy = SDT_DISCARD;
	options.no_consumer = 1;	/* the rings are read between loops, by this thread: nothing else runs */
	if (sdt_linux_start(&options) < 1 || sdt_linux_attach(0) != 0)
		return 3;
	by_id[0] = sdt_session_find("default");
	cfg.ncpus = 1;
	cfg.policy = SDT_DISCARD;
	cfg.ring_bytes = RING;
	cfg.packet_size = 4096;
	bytes = sdt_session_bytes(&cfg);
	for (int s = 1; s < SDT_MAX_SESSIONS; s++) {
		char name[8] = "bench-0";
		void *mem = aligned_alloc(64, bytes);
		name[6] = (char)('0' + s);
		if (!mem)
			return 3;
		memset(mem, 0, bytes);	/* its pages faulted in before anything is timed, as the default rings are */
		if (sdt_session_open(&sessions[s], name, &cfg, mem, bytes) != s)
			fail("session open", s);
		by_id[s] = &sessions[s];
	}
	for (int r = 0; r < rounds; r++) {
		ns[0][r] = recorded(0, 1, n);
		ns[1][r] = recorded(1, 1, n);
		ns[2][r] = recorded(0, 2, n);
		ns[3][r] = recorded(0, 4, n);
		ns[4][r] = recorded(0, 8, n);
		for (int c = 5; c < NCASES; c++)
			ns[c][r] = 1e30;
		for (int i = 0; i < PAIRS; i++) {	/* short loops in turn, many: one of each meets a quiet machine */
			ns[5][r] = bench_min(ns[5][r], bench_loop(n_off));
			ns[6][r] = bench_min(ns[6][r], bench_loop_goto(n_off));
			if (sdt_session_enable(by_id[1], other, SDT_BRANCH) != 1)
				fail("enable other", 1);
			ns[7][r] = bench_min(ns[7][r], bench_loop(n_off));
			ns[8][r] = bench_min(ns[8][r], bench_loop_goto(n_off));
			if (i == 0) {
				bench_other(r, i);
				expected_other++;
			}
			if (sdt_session_disable(by_id[1], other) != 1)
				fail("disable other", 1);
		}
		read_sessions();
	}
	printf("{\"ns\": {");
	for (int c = 0; c < NCASES; c++) {
		printf("%s\"%s\": [", c ? ", " : "", names[c]);
		for (int r = 0; r < rounds; r++)
			printf("%s%.3f", r ? ", " : "", ns[c][r]);
		printf("]");
	}
	printf("}, \"expected\": [");
	for (int s = 0; s < SDT_MAX_SESSIONS; s++)
		printf("%s%lu", s ? ", " : "", expected[s]);
	printf("], \"expected_other\": %lu, \"discarded\": [", expected_other);
	for (int s = 0; s < SDT_MAX_SESSIONS; s++)
		printf("%s%llu", s ? ", " : "",
		       (unsigned long long)sdt_session_cpu((struct sdt_cpu *)sdt_linux_cpu(0), (unsigned)s)->discarded);
	printf("], \"read\": [");
	for (int s = 0; s < SDT_MAX_SESSIONS; s++) {
		printf("%s", s ? ", " : "");
		tally_print(stdout, &read_back[s]);
	}
	printf("]}\n");
	for (int s = 1; s < SDT_MAX_SESSIONS; s++)
		if (sdt_session_close(&sessions[s]) < 0)
			fail("session close", s);
	sdt_linux_stop();
	return 0;
}
