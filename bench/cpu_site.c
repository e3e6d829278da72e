/*
 * The probe of the real-CPU comparison (bench/cpu_sdtgen.c): an event with two integer arguments, its
 * site in a function the loop calls (bench/cpu_loop.h), which stores the arguments' sum after it.
 * cpu_site_out.c is this file with the probe compiled out, cpu_site_goto.c in the asm goto form.
 */
#include <sdt.h>

#include "cpu_loop.h"

#ifndef BENCH_FIRE
#define BENCH_FIRE bench_fire
#define BENCH_LOOP bench_loop
#define BENCH_SINK bench_sink
#define BENCH_SINK_DECLARE volatile long bench_sink
SDT_PROVIDER_DEFINE(bench);
SDT_PROBE_DEFINE2(bench, cpu, loop, fire, "long", "long");
#endif

BENCH_SINK_DECLARE;

BENCH_FIRE_FUNCTION(BENCH_FIRE)
{
	SDT_PROBE2(bench, cpu, loop, fire, a, b);
	BENCH_SINK = a + b;	/* work after the site: not a tail call, and ``a`` and ``b`` outlive it */
}

BENCH_LOOP_FUNCTION(BENCH_LOOP, BENCH_FIRE)
