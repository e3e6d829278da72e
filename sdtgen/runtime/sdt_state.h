/*
 * sdt_state.h - the runtime's shared state, which every layer of sdt_runtime.c reads (sdt_state.c owns it).
 *
 * The tables the runtime knows (the kernel's, then each loaded module's), the kernel's hooks, the lock every
 * change takes, the kernel's text ranges, and who is inside sdt_trap. Each layer file includes this header and
 * calls only the layers sdt_runtime.c includes before it (tests/runtime/test_layers.py checks gcc's call graph):
 * state, the log, transport, the patch protocol, management, event definition, modules.
 *
 * The runtime is one unit (sdt_runtime.c): what is declared here is static to it, and the variables are defined
 * here (sdt_state.c defines the functions).
 */
#ifndef SDTGEN_SDT_STATE_H
#define SDTGEN_SDT_STATE_H

#include "sdt_internal.h"

/* The kernel's table: first of the tables the runtime knows, the loaded modules' after it. The list is changed under
 * the lock and read without it (sdt_trap) with acquire loads. */
static struct sdt_module kernel;
static int ready;	/* sdt_init succeeded */

/* The lock every change of the tables and sites takes (one writer at a time; sdt_trap takes none). */
static void take(void);
static void give(void);

static inline struct sdt_module *next_table(const struct sdt_module *t)
{
	return __atomic_load_n(&t->next, __ATOMIC_ACQUIRE);
}

/* Every site of every table the runtime knows (under the lock, or in sdt_trap). */
#define for_each_site(t, s) \
	for (t = &kernel; t; t = next_table(t)) \
		for (s = t->sites; s < t->sites_end; s++)

/* Whether ``p`` is a descriptor of table ``t`` (and a valid one). */
static int probe_valid(const struct sdt_module *t, const struct sdt_probe *p);
/* The module sdt_module_load is verifying: sdt_probe_table finds its probes before it is on the list. */
static struct sdt_module *loading;

/* ``n`` bytes of text at ``from`` (the kernel's or a module's) into ``to``. */
static void read_text(sdt_u8 *to, sdt_word from, unsigned n);

/* Who is inside sdt_trap: two counters, as sleepable RCU keeps them. trap_wait returns once every CPU that entered
 * before the call has left. */
static unsigned trap_enter(void);
static void trap_leave(unsigned side);
static void trap_wait(void);

/* The code of the last SDT_MODULE_GONE modules unloaded (sdt_module_unload adds to it): a breakpoint found there
 * after the unload is resumed, not called foreign (sdt_trap). */
static struct gone {
	sdt_word start, size;
} gone[SDT_MODULE_GONE];
static unsigned gone_next;
static int in_gone(sdt_word a);

/* Sessions (docs/sessions.md): the default one is the runtime's own; the registry (sdt_session_table) lists the
 * open ones by id. session_id: the id of open session ``s``, or -1. */
static struct sdt_session default_session;
static int session_id(const struct sdt_session *s);
static void sessions_init(void);
/* Wait until no CPU is still inside a recorder's slow path it entered before the call (its area's visit). */
static void visits_wait(void);

#endif
