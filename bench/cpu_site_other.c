/*
 * Another probe for the session rows (bench/sessions.c): its site in a function of its own, which the timed loops
 * never call. Another session keeps it armed while bench/cpu_site.c's probe, disarmed, is timed.
 */
#include <sdt.h>

SDT_PROVIDER_DEFINE(bench);
SDT_PROBE_DEFINE2(bench, cpu, other, fire, "long", "long");

extern volatile long bench_sink;

void bench_other(long a, long b);
__attribute__((noinline)) void bench_other(long a, long b)
{
	SDT_PROBE2(bench, cpu, other, fire, a, b);
	bench_sink = a + b;
}
