/*
 * sdt_module.c - loadable modules: a module's sites added to the runtime's tables while the kernel runs, and
 * taken away again (management layer).
 *
 * A module's table is its own (`sdtgen gen --module NAME` on its relocatable object: struct sdt_module_table
 * in the section sdt_module_table). The kernel's loader calls sdt_module_load once the module is relocated and
 * before any of its code runs: each site is verified like a kernel site at boot and written its disabled form,
 * with plain stores (no CPU runs the module yet), and then every spec enabled so far is applied to it in one
 * run of the patch protocol, as if the module had been there when it was enabled. sdt_module_unload disarms its
 * sites by the protocol, takes it off the list sdt_trap searches, and waits until every CPU that was inside
 * sdt_trap has left it: from then on nothing of the runtime's reads the module's memory. All the runtime keeps
 * for a module is the struct sdt_module the kernel gives it.
 */
#include "sdt_state.h"

/* -- the tables ------------------------------------------------------------------------------------------- */

static struct sdt_module taking;	/* the module sdt_module_load is taking, before it is given to the kernel's */

/* Whether [a0, a1) and [b0, b1) share a byte. */
static SDT_CODE int ranges_meet(sdt_word a0, sdt_word a1, sdt_word b0, sdt_word b1)
{
	return a0 < b1 && b0 < a1;
}

/* Whether a site of table ``t`` (the bytes the runtime verified, or the entry's length) meets [a, a + n). */
static SDT_CODE int table_meets(const struct sdt_module *t, sdt_word a, unsigned n)
{
	const struct sdt_site *sites = t->sites;
	unsigned long lo = 0, hi = (unsigned long)(t->sites_end - sites);

	while (lo < hi) {	/* the first site at or past a */
		unsigned long mid = lo + (hi - lo) / 2;
		if (sdt_site_address(&sites[mid]) < a)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < (unsigned long)(t->sites_end - sites) && sdt_site_address(&sites[lo]) - a < n)
		return 1;
	return table_contains(t, a);	/* one that starts before a and reaches it */
}

/*
 * What sdt_module_load refuses of module ``m`` (its fields filled, its table sorted, nothing written yet), before
 * it writes anything: 0 to take it; SDT_ERR_MODULE_TABLE when an entry is not a valid one, lies outside the
 * module's text, or overlaps another entry (folded entries excepted: one instruction, one probe, one form),
 * which no table gen wrote holds; SDT_ERR_MODULE_LOADED when an entry meets a site of a table the runtime has
 * (the kernel's, or a loaded module's): code that is armed, or may be, is another table's. The entry is reported.
 */
static SDT_CODE int refused_table(const struct sdt_module *m)
{
	sdt_word lo = (sdt_word)m->text, top = lo + (sdt_word)m->text_size, end = 0;
	const struct sdt_site *s, *prev = 0;
	const struct sdt_module *x;

	for (s = m->sites; s < m->sites_end; prev = s, s++) {
		sdt_word a = sdt_site_address(s);
		if (!entry_valid(m, s)) {
			sdt_report_site(s, "is not a valid table entry: the module is refused", 0, 0, 0);
			return SDT_ERR_MODULE_TABLE;
		}
		if (a < lo || a + s->length > top || a + s->length < a ||
		    (s->form == SDT_FORM_GOTO && sdt_site_stub(s) - lo >= top - lo)) {
			sdt_report_site(s, "is not in the module's text (or runs past its end): the module is refused",
					0, 0, 0);
			return SDT_ERR_MODULE_TABLE;
		}
		if (a < end && !(a == sdt_site_address(prev) && sdt_site_probe(prev) == sdt_site_probe(s) &&
				 prev->form == s->form)) {
			sdt_report_site(s, "overlaps another entry of the module's table: the module is refused", 0, 0, 0);
			return SDT_ERR_MODULE_TABLE;
		}
		if (a + s->length > end)
			end = a + s->length;
		for (x = &kernel; x; x = x->next)
			if (table_meets(x, a, s->length)) {
				sdt_report_site(s, "is a site of the kernel's or of a loaded module's: the module is refused",
						0, 0, 0);
				return SDT_ERR_MODULE_LOADED;
			}
	}
	return 0;
}

/* Verify every site of module ``m`` (its table taken by refused_table) and write its disabled form (no CPU runs
 * the module's code yet: plain stores, one sync at the end). A site already in the disabled form this runtime
 * writes for it (a module kept in memory and loaded again) is taken as it is; one that is not the expected
 * instruction is refused alone, reported, and never written. Returns the sites patched. */
static SDT_CODE int patch_module(struct sdt_module *m)
{
	sdt_word lo = (sdt_word)m->text, end = 0;
	sdt_u8 *alias = sdt_hooks.text_open ? (sdt_u8 *)sdt_hooks.text_open((void *)lo, m->text_size) : (sdt_u8 *)lo;
	struct sdt_site *s, *prev = 0;
	struct fixed_off fixed;	/* its bytes are read only once form and size say they were written */
	int patched = 0, refused = 0;

	fixed.form = fixed.size = 0;
	for (s = m->sites; s < m->sites_end; s++) {
		sdt_word a = sdt_site_address(s);
		const sdt_u8 *code = (const sdt_u8 *)a;
		sdt_u8 off[SDT_SITE_MAX], keep = s->keep;
		unsigned size, was = s->size, i;

		refused++;
		if (settle_entry(m, s, prev, end)) {
			refused -= s->state == SDT_SITE_FOLDED;
			continue;
		}
		size = sdt_arch_verify(code, a, s->form, s->length, sdt_site_stub(s), &s->keep);
		if (!size && was && was <= s->length) {	/* the disabled form sdt_module_unload left? */
			s->keep = keep;
			s->size = (sdt_u8)was;
			if (sdt_site_bytes(s, SDT_SITE_OFF, off) == was) {
				for (i = 0; i < was && code[i] == off[i]; i++)
					;
				size = i == was ? was : 0;
			}
			s->size = 0;
		}
		if (!size) {
			sdt_report_site(s, s->form == SDT_FORM_GOTO ? "is not the NOP of an asm goto"
								     : "is not the expected call or jump to its stub",
					code, s->length, 0);
			continue;
		}
		if (!write_off(s, size, alias, lo, &fixed))
			continue;
		prev = s;
		end = a + size;
		patched++;
		refused--;
	}
	if (sdt_hooks.text_close)
		sdt_hooks.text_close(alias, m->text_size);
	if (sdt_hooks.icache_flush)
		sdt_hooks.icache_flush((void *)lo, m->text_size);
	if (sdt_hooks.sync_cores)
		sdt_hooks.sync_cores();
	m->patched = (sdt_u32)patched;
	m->refused = (sdt_u32)refused;
	return patched;
}

SDT_CODE int sdt_module_load(struct sdt_module *m, const struct sdt_module_table *table, const void *text,
			     unsigned long text_size)
{
	sdt_word s0, s1, p0, p1, lo = (sdt_word)text, top = lo + text_size;
	struct sdt_module *x;
	struct sdt_site *s;
	unsigned far = 0;
	int patched;

	if (!m || !table || !text || !text_size || top < lo)
		return SDT_ERR_ARG;
	if (!ready)
		return SDT_ERR_INIT;
	if (table->magic != SDT_MODULE_TABLE_MAGIC)
		return SDT_ERR_MODULE_TABLE;
	s0 = sdt_rel(&table->sites), s1 = sdt_rel(&table->sites_end);
	p0 = sdt_rel(&table->probes), p1 = sdt_rel(&table->probes_end);
	if (s1 < s0 || (s1 - s0) % sizeof(struct sdt_site) || p1 < p0 || (p1 - p0) % sizeof(struct sdt_probe) ||
	    (s1 > s0 && p1 == p0))
		return SDT_ERR_MODULE_TABLE;
	take();
	/* Its struct, its table's entries or descriptors, or its text in use by a table the runtime has (the
	 * kernel's, or a loaded module's): its memory is the runtime's, left as it is. */
	for (x = &kernel; x; x = x->next)
		if (x == m || (sdt_word)x->sites == s0 ||
		    ranges_meet(s0, s1, (sdt_word)x->sites, (sdt_word)x->sites_end) ||
		    ranges_meet(p0, p1, (sdt_word)x->probes, (sdt_word)x->probes_end) ||
		    ranges_meet((sdt_word)m, (sdt_word)(m + 1), (sdt_word)x->sites, (sdt_word)x->sites_end) ||
		    (x != &kernel && ranges_meet(lo, top, x->text, x->text + (sdt_word)x->text_size))) {
			give();
			return SDT_ERR_MODULE_LOADED;
		}
	/* filled here, and given to ``m`` only once the table is taken: a refused load leaves ``m`` as it was. Static
	 * (one load at a time holds the lock), not on this stack: ``loading`` points at it while a report on another
	 * CPU may read it without the lock, and a frame that returned would be memory no longer the load's. */
	taking.magic = SDT_MODULE_MAGIC;
	taking.state = 0;
	taking.sites = (struct sdt_site *)s0;
	taking.sites_end = (struct sdt_site *)s1;
	taking.probes = (const struct sdt_probe *)p0;
	taking.probes_end = (const struct sdt_probe *)p1;
	taking.name = (const char *)sdt_rel(&table->name);
	taking.next = 0;
	taking.mark_lo = taking.mark_hi = 0;
	taking.text = lo;
	taking.text_size = text_size;
	taking.patched = taking.refused = 0;
	loading = &taking;
	sort_sites(taking.sites, (unsigned long)(taking.sites_end - taking.sites));	/* the module's own memory */
	patched = refused_table(&taking);
	if (patched) {
		loading = 0;
		give();
		return patched;
	}
	sdt_copy(m, &taking, sizeof(taking));
	loading = m;
	patched = patch_module(m);
	loading = 0;
	m->state = SDT_MODULE_LOADED;
	for (x = &kernel; x->next; x = x->next)
		;
	__atomic_store_n(&x->next, m, __ATOMIC_RELEASE);	/* sdt_trap finds its sites written and sorted */
	/* every spec enabled so far, applied to it in one run (armed sites counted as sdt_enable counts them) */
	for (s = m->sites; s < m->sites_end; s++)
		if (s->state == SDT_SITE_OFF) {
			sdt_u32 taken, id;
			unsigned state = replayed_state(m, s, &taken);
			struct sdt_slot *slot = probe_slot(sdt_site_probe(s));
			if (state == SDT_SITE_OFF)
				continue;
			for (id = 0; slot && id < SDT_MAX_SESSIONS; id++)	/* each session's bit before the site */
				if ((taken & 1u << id) && !(slot->sessions & 1u << id))
					slot_join(slot, id, slot->program[id]);
			mark(m, s, state, &far);
		}
	run_marked();
	give();
	if (far)
		sdt_report("sites out of branch range of their recorder were armed with the breakpoint");
	return patched;
}

SDT_CODE int sdt_module_unload(struct sdt_module *m)
{
	struct sdt_module *x;
	struct sdt_site *s;
	const struct sdt_probe *p;
	unsigned far = 0;
	int count = 0, programs = 0;

	if (!m)
		return SDT_ERR_ARG;
	if (!ready)
		return SDT_ERR_INIT;
	take();
	for (x = &kernel; x->next && x->next != m; x = x->next)
		;
	if (x->next != m) {
		give();
		return m->magic == SDT_MODULE_MAGIC && m->state == SDT_MODULE_UNLOADED ? SDT_ERR_MODULE_UNLOADED
										   : SDT_ERR_MODULE_UNKNOWN;
	}
	for (s = m->sites; s < m->sites_end; s++)
		if (is_armed(s->state))
			count += mark(m, s, SDT_SITE_OFF, &far);
	run_marked();	/* disarmed, by the protocol: no CPU enters a recorder or sdt_trap from its sites anew */
	gone[gone_next].start = m->text;
	gone[gone_next].size = (sdt_word)m->text_size;
	gone_next = (gone_next + 1) % SDT_MODULE_GONE;
	/* off the list (m->next kept: a CPU walking the list through m goes on to the rest), then every CPU that
	 * might have found it in sdt_trap has left */
	__atomic_store_n(&x->next, m->next, __ATOMIC_RELEASE);
	trap_wait();
	for (p = m->probes; p < m->probes_end; p++) {	/* no session takes its probes now */
		struct sdt_slot *slot = probe_slot(p);
		unsigned id;
		if (!slot)
			continue;
		if (slot->sessions) {
			__atomic_store_n(&slot->sessions, 0u, __ATOMIC_RELEASE);
			slot_settle(slot);
		}
		for (id = 0; id < SDT_MAX_SESSIONS; id++)
			programs |= slot->program[id] != 0;
	}
	if (programs)
		visits_wait();	/* no recorder still runs a program of its probes (the programs' memory is the host's) */
	for (p = m->probes; p < m->probes_end; p++) {
		struct sdt_slot *slot = probe_slot(p);
		unsigned id;
		for (id = 0; slot && id < SDT_MAX_SESSIONS; id++)
			slot_forget(slot, id);
	}
	m->state = SDT_MODULE_UNLOADED;
	m->next = 0;
	give();
	return count;
}

/* -- the relocation-time hook: a loader that knows no module tables ---------------------------------------- */

/*
 * A kernel's own loader, relocating a module built without `gen --module`, calls this for each call or jump
 * relocation against a probe stub (a symbol starting __dtrace_sdt_, or __dtrace_isenabled_ for ``isenabled``)
 * once the relocation is applied and before the module runs, as FreeBSD's 2015 relocator and illumos's krtld
 * do: ``site`` is where the instruction starts, ``length`` its length as the compiler emitted it, ``stub``
 * the address the loader resolved the symbol to. The instruction is verified (the expected call or jump to
 * ``stub``) and written its disabled form (an is-enabled check: result 0). The site is not in any table: it
 * costs nothing and cannot be armed (build the module with `gen --module` for that). Returns the bytes
 * written over; SDT_ERR_ARG when it is not the expected instruction (left as it is, reported).
 */
SDT_CODE int sdt_reloc_nop(void *site, unsigned length, sdt_word stub, int isenabled)
{
	static const unsigned forms[2] = {SDT_FORM_CALL, SDT_FORM_TAIL};
	sdt_word a = (sdt_word)site;
	sdt_u8 off[SDT_SITE_MAX], keep = 0, *alias;
	unsigned size = 0, form = SDT_FORM_ISEN, k, i;

	if (!site || !length || length > SDT_SITE_MAX || a + length < a)
		return SDT_ERR_ARG;
	if (!ready)
		return SDT_ERR_INIT;
	for (k = 0; k < 2 && !size; k++) {
		form = isenabled ? SDT_FORM_ISEN : forms[k];
		size = sdt_arch_verify((const sdt_u8 *)a, a, form, length, stub, &keep);
	}
	if (!size || sdt_arch_encode(off, form, size, SDT_SITE_OFF, a, stub, 0, keep) != size) {
		if (sdt_hooks.report)
			sdt_report("a probe stub's relocation is not at the expected call or jump: left as it is");
		return SDT_ERR_ARG;
	}
	take();	/* the alias hooks are the kernel's: one user at a time */
	alias = sdt_hooks.text_open ? (sdt_u8 *)sdt_hooks.text_open(site, size) : (sdt_u8 *)site;
	for (i = 0; i < size; i++)	/* the module does not run yet: plain stores */
		alias[i] = off[i];
	if (sdt_hooks.text_close)
		sdt_hooks.text_close(alias, size);
	if (sdt_hooks.icache_flush)
		sdt_hooks.icache_flush(site, size);
	give();
	return (int)size;
}
