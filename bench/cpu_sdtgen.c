/*
 * sdtgen's side of the real-CPU comparison (bench/run.py, cpu_rows): bench/cpu_site.c's probe in a Linux
 * process on the hosted platform (sdt_linux.h: sdt_init patches the site, a consumer thread writes each
 * closed packet to TRACE_DIR/stream_0 as it stands), fired in bench/cpu_loop.h's loop (defined
 * beside it):
 *
 *   cpu-sdtgen N N_OFF N_TRAP ROUNDS TRACE_DIR    one JSON line: ns an iteration, the best of ROUNDS rounds
 *
 * A round measures the function with its probe compiled out (cpu_site_out.c), the probe disabled and
 * the probe disabled in the asm goto form (cpu_site_goto.c), in turn PAIRS times (N_OFF iterations
 * each), then armed with a branch to gen's recorder (N), then armed with a breakpoint (N_TRAP: a
 * SIGTRAP each).
 * "fired" counts the events the armed loops fired, "read" those the consumer took from the ring and
 * "discarded" those the ring refused (full), for the bench to hold against the trace babeltrace2 reads.
 */
#include <stdlib.h>

#include <sdt_linux.h>

#include "cpu_loop.h"

#define PAIRS 8	/* loops of each disabled form a round */

double bench_loop(long n);
double bench_loop_out(long n);
double bench_loop_goto(long n);

int main(int argc, char **argv)
{
	static const char spec[] = "bench:cpu:loop:fire";
	double best[5] = {1e30, 1e30, 1e30, 1e30, 1e30}, t[5];
	struct sdt_linux_options options = {0};
	struct sdt_linux_stats stats;
	long n, n_off, n_trap, fired = 0;
	int round, rounds, k;

	if (argc != 6)
		return 2;
	n = strtol(argv[1], 0, 0);
	n_off = strtol(argv[2], 0, 0);
	n_trap = strtol(argv[3], 0, 0);
	rounds = (int)strtol(argv[4], 0, 0);
	options.ring_bytes = 64ul << 20;	/* a round's events fit, however late the consumer reads */
	options.policy = SDT_DISCARD;
	options.trace_dir = argv[5];
	if (n < 1 || n_off < 1 || n_trap < 1 || rounds < 1)
		return 2;
	if (sdt_linux_start(&options) < 1 || sdt_linux_attach(0) != 0)
		return 3;
	for (round = 0; round < rounds; round++) {
		t[0] = t[1] = t[4] = 1e30;
		for (k = 0; k < PAIRS; k++) {	/* short loops in turn, many: one of each meets a quiet machine */
			t[0] = bench_min(t[0], bench_loop_out(n_off));
			t[1] = bench_min(t[1], bench_loop(n_off));
			t[4] = bench_min(t[4], bench_loop_goto(n_off));
		}
		if (sdt_enable(spec, SDT_BRANCH) < 1)
			return 4;
		t[2] = bench_loop(n);
		if (sdt_disable(spec) < 1 || sdt_enable(spec, SDT_TRAP) < 1)
			return 4;
		t[3] = bench_loop(n_trap);
		if (sdt_disable(spec) < 1)
			return 4;
		fired += n + n_trap;
		for (k = 0; k < 5; k++)
			best[k] = bench_min(best[k], t[k]);
	}
	sdt_linux_stop();
	sdt_linux_stats(&stats);
	printf("{\"out\": %.3f, \"off\": %.3f, \"branch\": %.3f, \"trap\": %.3f, \"goto\": %.3f, \"fired\": %ld, "
	       "\"read\": %lu, \"discarded\": %llu}\n", best[0], best[1], best[2], best[3], best[4], fired, stats.events,
	       (unsigned long long)sdt_linux_cpu(0)->discarded);
	return 0;
}
