/*
 * A probe of six arguments whose site agg_fire fires, linked into the fixture kernel for the emulated boots of
 * tests/targets/emulator/test_aggregation_tables.py, for programs compiled for any argument types (the runtime reads
 * registers; the program says how). The programs' and tables' memory is the emulated platform's.
 */
#include <sdt.h>
#include <sdt_runtime.h>

SDT_PROVIDER_DEFINE(agg);
SDT_PROBE_DEFINE6(agg, test, fire, six, "long", "long", "long", "long", "long", "long");

__attribute__((noinline)) long agg_fire(long a0, long a1, long a2, long a3, long a4, long a5)
{
	SDT_PROBE6(agg, test, fire, six, a0, a1, a2, a3, a4, a5);
	return 0;
}
