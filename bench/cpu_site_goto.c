/* bench/cpu_site.c's probe in FreeBSD 15's asm goto form (SDT_ASM_GOTO): the site is one NOP, its arguments
 * evaluated only out of line. The same probe as cpu_site.c's site, in one image with it. */
#define SDT_ASM_GOTO
#define BENCH_FIRE bench_fire_goto
#define BENCH_LOOP bench_loop_goto
#define BENCH_SINK bench_sink
#define BENCH_SINK_DECLARE extern volatile long bench_sink
#include "cpu_site.c"
