/*
 * What a kernel gives its runtime's programs, linked into the fixture kernel for the emulated boots of
 * tests/boot/test_aggregate_boot.py and test_program_arch.py: a struct sdt_agg and a table area per CPU,
 * room for the programs the host writes there before it calls sdt_enable_program, and agg_fire: one firing
 * of a probe whose slot holds a program, through sdt_program_fire as a recorder calls it.
 */
#include <sdt_runtime.h>

#define AGG_CPUS 4
#define AGG_BYTES (64 * 1024)

struct sdt_agg agg_tables[AGG_CPUS] __attribute__((aligned(64)));
unsigned char agg_memory[AGG_CPUS][AGG_BYTES] __attribute__((aligned(64)));
sdt_u64 agg_programs[SDT_PROG_MAX_BYTES / 8];
sdt_word agg_args[6];

static const struct sdt_program *agg_slot;

int agg_fire(struct sdt_cpu *c, const struct sdt_program *program, unsigned key)
{
	agg_slot = program;
	return sdt_program_fire(c, &agg_slot, key, agg_args[0], agg_args[1], agg_args[2], agg_args[3], agg_args[4],
				agg_args[5]);
}
