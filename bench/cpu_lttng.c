/*
 * LTTng-UST 2.13 in the real-CPU comparison (bench/run.py, cpu_rows): bench/cpu_loop.h's loop firing the
 * provider's tracepoint (bench/cpu_lttng_site.c) in a session the bench created, enabled and started with
 * `lttng` before this ran (liblttng-ust registers with the session daemon before main):
 *
 *   cpu-lttng N ROUNDS       one JSON line: ns an iteration, the best of ROUNDS loops of N
 */
#include <stdlib.h>

#include "cpu_loop.h"

double bench_loop_lttng(long n);

int main(int argc, char **argv)
{
	double best = 1e30;
	long n;
	int round, rounds;

	if (argc != 3)
		return 2;
	n = strtol(argv[1], 0, 0);
	rounds = (int)strtol(argv[2], 0, 0);
	if (n < 1 || rounds < 1)
		return 3;
	for (round = 0; round < rounds; round++) {
		best = bench_min(best, bench_loop_lttng(n));
	}
	printf("{\"event\": %.3f, \"fired\": %ld}\n", best, n * rounds);
	return 0;
}
