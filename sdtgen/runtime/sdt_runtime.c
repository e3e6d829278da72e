/*
 * sdt_runtime.c - the runtime's architecture-independent part as one file to compile.
 *
 * A kernel builds two files with its own flags: this one and arch/sdt_<arch>.c
 * (`sdtgen runtime-dir` prints the directory; docs/runtime.md). Each part is
 * its own file, one layer of the design each, included here from the bottom
 * up: a file calls only the files included before it, never one after it
 * (tests/runtime/test_layers.py reads gcc's call graph against this order).
 * The architecture's port (sdt_arch.h) is beneath them all; the control core
 * (sdt_control.c, a unit of its own) above them all, through the entry points.
 */

#include "sdt_internal.h"

SDT_INLINE_ATOMICS_BEGIN	/* a kernel links no libgcc (sdt_internal.h) */

#include "sdt_state.c"	/* shared state: the tables, the hooks, the lock, the text ranges, who is in sdt_trap */
#include "sdt_report.c"	/* lines for the kernel's log */
#include "sdt_transport.c"	/* transport: per-CPU packet rings and their consumers */
#include "sdt_snapshot.c"	/* transport: snapshots of a session's rings, while recording goes on */
#include "sdt_patch.c"	/* management: the patch protocol, one batch of marked sites at a time */
#include "sdt_manage.c"	/* management: boot-time patching, arming by spec, sdt_trap */
#include "sdt_aggregate.c"	/* event definition: per-CPU aggregation tables */
#include "sdt_program.c"	/* event definition: predicates and aggregations, programs attached to probes */
#include "sdt_session.c"	/* management: sessions, each its own probes, programs, rings and tables */
#include "sdt_module.c"	/* management: loadable modules' tables added and taken away */

SDT_INLINE_ATOMICS_END
