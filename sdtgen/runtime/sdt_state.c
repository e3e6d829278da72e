/*
 * sdt_state.c - the runtime's shared state (sdt_state.h): the tables it knows, the kernel's hooks, the lock,
 * the kernel's text ranges, and who is inside sdt_trap. It calls no other layer.
 */
#include "sdt_state.h"

struct sdt_hooks sdt_hooks;
volatile _Bool sdt_probes_enabled;

static int lock;

static SDT_CODE void take(void)
{
	while (__atomic_exchange_n(&lock, 1, __ATOMIC_ACQUIRE))
		while (__atomic_load_n(&lock, __ATOMIC_RELAXED))
			;
}

static SDT_CODE void give(void)
{
	__atomic_store_n(&lock, 0, __ATOMIC_RELEASE);
}

/* -- the tables ----------------------------------------------------------------------------- */

static SDT_CODE int probe_valid(const struct sdt_module *t, const struct sdt_probe *p)
{
	sdt_word a = (sdt_word)p, lo = sdt_bound(t->probes);

	return a >= lo && a < sdt_bound(t->probes_end) && (a - lo) % sizeof(*p) == 0 && p->nargs <= SDT_MAX_ARGS;
}

SDT_CODE const struct sdt_module *sdt_tables(void)
{
	return &kernel;
}

SDT_CODE const struct sdt_module *sdt_probe_table(const struct sdt_probe *p)
{
	const struct sdt_module *t;

	if (loading && probe_valid(loading, p))
		return loading;
	for (t = &kernel; t; t = next_table(t))
		if (t->probes && probe_valid(t, p))
			return t;
	return 0;
}

/* Field ``i`` of probe ``p`` (provider, module, function, name) of table ``t``: an empty module field is the
 * module's name, as DTrace's module is where the probe is. */
SDT_CODE const char *sdt_probe_field(const struct sdt_module *t, const struct sdt_probe *p, unsigned i)
{
	const sdt_s32 *names[4] = {&p->provider, &p->module, &p->function, &p->name};
	const char *v = (const char *)sdt_rel(names[i & 3]);

	return i == 1 && !*v && t->name ? t->name : v;
}

/* -- the kernel's text ------------------------------------------------------------------------ */

/* The kernel's text range that holds [a, a + n): its index, or -1; 0 for any address when it gave none. */
SDT_CODE int sdt_text_range(sdt_word a, unsigned n)
{
	unsigned i;

	if (!sdt_hooks.ntext)
		return 0;
	for (i = 0; i < sdt_hooks.ntext; i++) {
		sdt_u64 off = (sdt_u64)a - sdt_hooks.text[i].start;
		if (off < sdt_hooks.text[i].size && n <= sdt_hooks.text[i].size - off)
			return (int)i;
	}
	return -1;
}

static SDT_CODE void read_text(sdt_u8 *to, sdt_word from, unsigned n)
{
	unsigned i;

	for (i = 0; i < n; i++)
		to[i] = ((const volatile sdt_u8 *)from)[i];
}

/* -- who is inside sdt_trap: two counters, as sleepable RCU keeps them ------------------------------------- */

static unsigned trap_side;	/* the counter a CPU entering sdt_trap counts itself in */
static unsigned trap_inside[2];

static SDT_CODE unsigned trap_enter(void)
{
	unsigned side = __atomic_load_n(&trap_side, __ATOMIC_SEQ_CST) & 1;

	__atomic_add_fetch(&trap_inside[side], 1, __ATOMIC_SEQ_CST);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);	/* the tables are read after the count is seen */
	return side;
}

static SDT_CODE void trap_leave(unsigned side)
{
	__atomic_sub_fetch(&trap_inside[side], 1, __ATOMIC_RELEASE);
}

/* Wait until every CPU that entered sdt_trap before the call has left it: a CPU entering later counts itself in
 * the other counter, and finds the tables as the caller left them. */
static SDT_CODE void trap_wait(void)
{
	unsigned old;

	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	old = __atomic_fetch_xor(&trap_side, 1, __ATOMIC_SEQ_CST) & 1;
	while (__atomic_load_n(&trap_inside[old], __ATOMIC_ACQUIRE))
		;
}

/* Whether ``a`` lies in the code of one of the last modules unloaded. */
static SDT_CODE int in_gone(sdt_word a)
{
	unsigned i;

	for (i = 0; i < SDT_MODULE_GONE; i++)
		if (a - gone[i].start < gone[i].size && gone[i].size - (a - gone[i].start) >= sdt_arch_bp_len)
			return 1;
	return 0;
}
