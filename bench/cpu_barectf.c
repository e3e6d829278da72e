/*
 * barectf 3 in the real-CPU comparison (bench/run.py, cpu_rows): bench/cpu_loop.h's loop firing barectf's
 * event through its file platform (bench/cpu_barectf_site.c):
 *
 *   cpu-barectf N ROUNDS STREAM      one JSON line: ns an iteration, the best of ROUNDS loops of N
 *
 * STREAM is a data stream file of the trace whose metadata `barectf generate` wrote.
 */
#include <stdlib.h>

#include "cpu_barectf.h"
#include "cpu_loop.h"

int main(int argc, char **argv)
{
	double best = 1e30;
	long n;
	int round, rounds;

	if (argc != 4)
		return 2;
	n = strtol(argv[1], 0, 0);
	rounds = (int)strtol(argv[2], 0, 0);
	if (n < 1 || rounds < 1 || bench_barectf_open(argv[3]))
		return 3;
	for (round = 0; round < rounds; round++) {
		best = bench_min(best, bench_loop_barectf(n));
	}
	bench_barectf_close();
	printf("{\"event\": %.3f, \"fired\": %ld, \"discarded\": %lu}\n", best, n * rounds, bench_barectf_discarded());
	return 0;
}
