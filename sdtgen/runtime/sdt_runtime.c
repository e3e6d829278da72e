/*
 * sdt_runtime.c - the runtime's architecture-independent part as one file to compile.
 *
 * A kernel builds two files with its own flags: this one and arch/sdt_<arch>.c
 * (`sdtgen runtime-dir` prints the directory; docs/runtime.md). Each part is
 * its own file, one layer of the design each.
 */

#include "sdt_internal.h"

SDT_INLINE_ATOMICS_BEGIN	/* a kernel links no libgcc (sdt_internal.h) */

#include "sdt_manage.c"	/* management: boot-time patching, arming by spec, sdt_trap */
#include "sdt_patch.c"	/* management: the patch protocol */
#include "sdt_transport.c"	/* transport: per-CPU packet rings and their consumers */
#include "sdt_report.c"	/* lines for the kernel's log */
#include "sdt_aggregate.c"	/* per-CPU aggregation tables */
#include "sdt_program.c"	/* predicates and aggregations: verifier, evaluator, programs attached to probes */
#include "sdt_module.c"	/* management: loadable modules' tables added and taken away */

SDT_INLINE_ATOMICS_END
