/*
 * sdt_runtime.c - the runtime's architecture-independent part as one file to compile.
 *
 * A kernel builds two files with its own flags: this one and arch/sdt_<arch>.c
 * (`sdtgen runtime-dir` prints the directory; docs/runtime.md). Each part is
 * its own file, one layer of the design each.
 */

/*
 * AArch64 compilers may turn atomics into calls to libgcc's __aarch64_*
 * helpers (-moutline-atomics: the default of Debian's gcc, and of clang for
 * Linux targets). A kernel links no libgcc, so the runtime's atomics are
 * always inline instructions, whatever flags the kernel gives.
 */
#if defined(__aarch64__) && defined(__clang__)
#pragma clang attribute push(__attribute__((target("no-outline-atomics"))), apply_to = function)
#elif defined(__aarch64__)
#pragma GCC target("no-outline-atomics")
#endif

#include "sdt_manage.c"	/* management: boot-time patching, arming by spec, sdt_trap */
#include "sdt_patch.c"	/* management: the patch protocol */
#include "sdt_transport.c"	/* transport: per-CPU packet rings and their consumers */
#include "sdt_report.c"	/* lines for the kernel's log */
#include "sdt_aggregate.c"	/* per-CPU aggregation tables */
#include "sdt_program.c"	/* predicates and aggregations: verifier, evaluator, programs attached to probes */

#if defined(__aarch64__) && defined(__clang__)
#pragma clang attribute pop
#endif
