/* bench/cpu_site.c with its probe compiled out: the baseline of the disabled probe's row. */
#define SDT_COMPILED_OUT
#define BENCH_FIRE bench_fire_out
#define BENCH_LOOP bench_loop_out
#define BENCH_SINK bench_sink
#define BENCH_SINK_DECLARE extern volatile long bench_sink
#include "cpu_site.c"
