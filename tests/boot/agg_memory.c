/*
 * The memory a kernel gives its runtime's programs and aggregation tables, linked into the fixture kernel for
 * the emulated boots of tests/boot/test_aggregate_boot.py: a struct sdt_agg and a table area per CPU, and room
 * for the programs the host writes there before it calls sdt_enable_program.
 */
#include <sdt_runtime.h>

#define AGG_CPUS 4
#define AGG_BYTES (64 * 1024)

struct sdt_agg agg_tables[AGG_CPUS] __attribute__((aligned(64)));
unsigned char agg_memory[AGG_CPUS][AGG_BYTES] __attribute__((aligned(64)));
sdt_u64 agg_programs[SDT_PROG_MAX_BYTES / 8];
