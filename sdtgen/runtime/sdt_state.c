/*
 * sdt_state.c - the runtime's shared state (sdt_state.h): the tables it knows, the kernel's hooks, the lock,
 * the kernel's text ranges, and who is inside sdt_trap. It calls no other layer.
 */
#include "sdt_state.h"

struct sdt_hooks sdt_hooks;
volatile _Bool sdt_probes_enabled;
/* The sessions a host finds by symbol, running or after a crash (docs/sessions.md): filled by sdt_init, the
 * default session's areas linked by sdt_cpu_attach, the others' entries by sdt_session_open and close. */
__attribute__((used)) struct sdt_registry sdt_session_table;

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

/*
 * Wait until every CPU that was inside a recorder's slow path (serving a slot's sessions and programs) when the
 * caller last changed a slot or the registry has left it: its area's visit is even, or has moved. sync_cores
 * first (membarrier, or an IPI to every CPU): each CPU has then either made its odd visit visible or will read
 * the slots as the caller left them, so the recorder pays no fence for it.
 */
static SDT_CODE void visits_wait(void)
{
	struct sdt_cpu *c;

	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (sdt_hooks.sync_cores)
		sdt_hooks.sync_cores();
	for (c = (struct sdt_cpu *)sdt_seq_load(&sdt_session_table.areas); c;
	     c = (struct sdt_cpu *)(sdt_word)c->next_area) {
		sdt_word v = sdt_seq_load(&c->visit);
		if (v & 1)
			while (sdt_seq_load(&c->visit) == v)
				;
	}
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

/* -- sessions ------------------------------------------------------------------------------------------------- */

/* The id of open session ``s``, or -1 when ``s`` is not one (NULL, never opened, closed, closing). */
static SDT_CODE int session_id(const struct sdt_session *s)
{
	if (!s || s->magic != SDT_SESSION_MAGIC || s->id >= SDT_MAX_SESSIONS || s->state != SDT_SESSION_OPEN ||
	    sdt_session_table.sessions[s->id] != (sdt_word)s)
		return -1;
	return (int)s->id;
}

/* The registry as sdt_init leaves it: the default session (id 0, "default") open, no other. */
static SDT_CODE void sessions_init(void)
{
	static const char name[] = "default";
	unsigned k;

	default_session.id = 0;
	for (k = 0; k < SDT_SESSION_NAME; k++)
		default_session.name[k] = k < sizeof(name) ? (sdt_u8)name[k] : 0;
	default_session.state = SDT_SESSION_OPEN;
	default_session.magic = SDT_SESSION_MAGIC;
	sdt_session_table.version = SDT_REGISTRY_VERSION;
	sdt_session_table.max = SDT_MAX_SESSIONS;
	for (k = 1; k < SDT_MAX_SESSIONS; k++)
		sdt_session_table.sessions[k] = 0;
	sdt_seq_store(&sdt_session_table.sessions[0], (sdt_word)&default_session);
	__atomic_store_n(&sdt_session_table.magic, SDT_REGISTRY_MAGIC, __ATOMIC_RELEASE);
}
