/*
 * What a kernel gives its runtime's programs, linked into the fixture kernel for the emulated boots of
 * tests/boot/test_aggregate_boot.py: a struct sdt_agg and a table area per CPU, and room for the programs the
 * host writes there before it calls sdt_enable_program; and a probe of six arguments whose site agg_fire
 * fires, for programs compiled for any argument types (the runtime reads registers; the program says how).
 */
#include <sdt.h>
#include <sdt_runtime.h>

#define AGG_CPUS 4
#define AGG_BYTES (64 * 1024)

struct sdt_agg agg_tables[AGG_CPUS] __attribute__((aligned(64)));
unsigned char agg_memory[AGG_CPUS][AGG_BYTES] __attribute__((aligned(64)));
sdt_u64 agg_programs[SDT_PROG_MAX_BYTES / 8];

SDT_PROVIDER_DEFINE(agg);
SDT_PROBE_DEFINE6(agg, test, fire, six, "long", "long", "long", "long", "long", "long");

__attribute__((noinline)) long agg_fire(long a0, long a1, long a2, long a3, long a4, long a5)
{
	SDT_PROBE6(agg, test, fire, six, a0, a1, a2, a3, a4, a5);
	return 0;
}
