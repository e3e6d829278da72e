/*
 * LTTng-UST's side of the real-CPU comparison: the provider (bench/cpu_lttng_tp.h) built into the program,
 * its tracepoint fired through a function of its own in bench/cpu_loop.h's loop.
 */
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#define LTTNG_UST_TRACEPOINT_DEFINE
#include "cpu_lttng_tp.h"

#include "cpu_loop.h"

BENCH_FIRE_FUNCTION(bench_fire_lttng)
{
	lttng_ust_tracepoint(bench, fire, a, b);
}

BENCH_LOOP_FUNCTION(bench_loop_lttng, bench_fire_lttng)
