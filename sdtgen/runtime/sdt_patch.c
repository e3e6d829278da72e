/*
 * sdt_patch.c - the one way the runtime writes code other CPUs may be running (management layer).
 *
 * One call of sdt_enable, sdt_disable or sdt_set_mode is one run of the protocol, however many sites it
 * changes, in the kernel's table and every module's: the caller marks each site in the table itself (sdt_site.next: the state it goes to), so the
 * runtime needs no room of its own for them. The sites switch together, at one commit:
 *
 *   1. the breakpoint over the first bytes of each slow site (a change that is not one store the
 *      architecture lets instruction fetch see whole); sync every CPU
 *   2. the bytes behind it (no CPU executes them now); sync
 *   3. commit: every marked site's state becomes its new one
 *   4. every single-store change, and each slow site's new first bytes; sync
 *   5. the stores of step 4 made once more, with the same bytes; sync
 *
 * A CPU that traps on a transient breakpoint is resolved by sdt_trap as the site's state, which is the
 * old one until the commit: before it, every site of the call behaves as it was (its old bytes, or the
 * breakpoint emulating them); after the sync of step 4, every site is new. Sites switch only between
 * the commit and that sync. What one store may change is sdt_arch_single_store's (x86 the first byte
 * only, AArch64 a word, RISC-V an aligned halfword or word of the site). Every store is followed by
 * the icache hook for its bytes, and goes through a writable alias the kernel opens over one text
 * range's sites at a time (never over memory between two of its text ranges).
 *
 * Step 5 changes no byte: it is for QEMU's TCG (seen on 7.2, every architecture's), which keeps code it
 * translated and drops a translation only when a store hits its bytes. A vCPU that began to translate a site
 * just before step 4's store reads the old instruction, and links its translation after the store looked for
 * the translations to drop: nothing drops it, and that vCPU runs the old instruction however many fences and
 * syncs follow (QEMU's fence.i and isb drop nothing), until the next store to the site. A translation running
 * at step 4 has ended by the time its vCPU answers step 4's sync (a vCPU takes an interrupt between two
 * blocks), so step 5's store finds it and drops it, and a translation begun after step 4 reads the new bytes.
 * On hardware the step costs a store and a sync per call and changes nothing (docs/runtime.md, "QEMU keeps a
 * translation a store raced").
 * Like Linux's text_poke_bp_batch, it takes its batch (the marked sites) and calls none of its clients: only the
 * shared state (sdt_state.c) and the architecture's port (tests/runtime/test_layers.py).
 *
 * Built with -DSDT_NAIVE_PROTOCOL the runtime instead stores the differing bytes one at a time, in
 * place: the states in between are neither instruction, which is what `sdtgen torture` shows a
 * protocol is for.
 */
#include "sdt_state.h"

enum { PH_BREAKPOINT, PH_TAIL, PH_FINAL, PH_AGAIN, PH_NAIVE };
#ifdef SDT_NAIVE_PROTOCOL
#define LAST_PHASE PH_NAIVE
#else
#define LAST_PHASE PH_FINAL
#endif

static int committed;	/* the run has committed: a marked site's state is its new one, and next its old one */

#ifdef SDT_NAIVE_PROTOCOL
const char sdt_protocol[] = "naive";
#else
const char sdt_protocol[] = "safe";
#endif

SDT_CODE void sdt_text_store(sdt_u8 *p, const sdt_u8 *b, unsigned width)
{
	if (width == 1)
		*(volatile sdt_u8 *)p = b[0];
	else if (width == 2)
		*(volatile sdt_u16 *)p = (sdt_u16)(b[0] | b[1] << 8);
	else
		*(volatile sdt_u32 *)p = (sdt_u32)b[0] | (sdt_u32)b[1] << 8 | (sdt_u32)b[2] << 16 | (sdt_u32)b[3] << 24;
}

static SDT_CODE void poke_sync(void)
{
	if (sdt_hooks.sync_cores)
		sdt_hooks.sync_cores();
}

static SDT_CODE int poke_same(const sdt_u8 *a, const sdt_u8 *b, unsigned n)
{
	unsigned i;

	for (i = 0; i < n; i++)
		if (a[i] != b[i])
			return 0;
	return 1;
}

/* Marked site ``s``'s change: its old and new bytes, and the store that makes it; 0 when no byte differs. */
static SDT_CODE int poke_plan(const struct sdt_site *s, struct sdt_poke *p)
{
	unsigned from = committed ? s->next : s->state, to = committed ? s->state : s->next;
	unsigned first = s->size, last = 0, k;

	sdt_site_bytes(s, from, p->old);
	sdt_site_bytes(s, to, p->new);
	for (k = 0; k < s->size; k++)
		if (p->old[k] != p->new[k]) {
			first = first < k ? first : k;
			last = k;
		}
	if (first == s->size)
		return 0;
	p->slow = !sdt_arch_single_store(sdt_site_address(s), s->size, first, last, &p->at, &p->width);
	return 1;
}

/* Store ``width`` of ``bytes`` at offset ``at`` of site ``s`` through ``alias`` (the span from ``lo``). */
static SDT_CODE void poke_store(const struct sdt_site *s, sdt_u8 *alias, sdt_word lo, unsigned at,
				const sdt_u8 *bytes, unsigned width)
{
	sdt_word a = sdt_site_address(s);

	sdt_text_store(alias + (a - lo) + at, bytes + at, width);
	if (sdt_hooks.icache_flush)
		sdt_hooks.icache_flush((void *)(a + at), width);
}

/* What phase ``ph`` stores to marked site ``s``; whether it stored anything. */
static SDT_CODE int poke_site(const struct sdt_site *s, int ph, sdt_u8 *alias, sdt_word lo)
{
	unsigned bp = sdt_arch_bp_len, unit = sdt_arch_tail_unit, k;
	struct sdt_poke p;
	int stored = 0;

	if (!poke_plan(s, &p))
		return 0;
	switch (ph) {
	case PH_BREAKPOINT:
		if (!p.slow || poke_same(p.old, sdt_arch_bp, bp))
			return 0;
		poke_store(s, alias, lo, 0, sdt_arch_bp, bp);
		return 1;
	case PH_TAIL:
		for (k = bp; p.slow && k < s->size; k += unit)
			if (!poke_same(p.old + k, p.new + k, unit)) {
				poke_store(s, alias, lo, k, p.new, unit);
				stored = 1;
			}
		return stored;
	case PH_FINAL:
	case PH_AGAIN:	/* the same store, the same bytes: a translation QEMU linked after the first is dropped */
		if (p.slow)
			poke_store(s, alias, lo, 0, p.new, bp);
		else
			poke_store(s, alias, lo, p.at, p.new, p.width);
		return 1;
	default:	/* PH_NAIVE: every differing byte in place, one at a time */
		for (k = 0; k < s->size; k++)
			if (p.old[k] != p.new[k])
				poke_store(s, alias, lo, k, p.new, 1);
		return 1;
	}
}

/*
 * One phase over the marked sites of [from, to): the kernel's writable alias opened over the sites of one
 * text range at a time, from the first marked site to the end of the last (the range of every site is
 * sdt_text_range's; with no text ranges given, all of them, which sdt_init verified). Whether it stored.
 */
static SDT_CODE int poke_phase(struct sdt_site *from, struct sdt_site *to, int ph)
{
	struct sdt_site *s = from, *t, *last;
	int stored = 0;

	while (s < to) {
		sdt_word lo, hi;
		sdt_u8 *alias;
		int r;

		if (!s->next) {
			s++;
			continue;
		}
		r = sdt_text_range(sdt_site_address(s), s->size);
		for (last = s, t = s + 1; t < to; t++)
			if (t->next) {
				if (sdt_text_range(sdt_site_address(t), t->size) != r)
					break;
				last = t;
			}
		lo = sdt_site_address(s);
		hi = sdt_site_address(last) + last->size;
		alias = sdt_hooks.text_open ? (sdt_u8 *)sdt_hooks.text_open((void *)lo, hi - lo) : (sdt_u8 *)lo;
		for (; s <= last; s++)
			if (s->next)
				stored |= poke_site(s, ph, alias, lo);
		if (sdt_hooks.text_close)
			sdt_hooks.text_close(alias, hi - lo);
		s = t;
	}
	return stored;
}

/* Every marked site takes its new state (and keeps its old one in next, for the stores still to make). */
static SDT_CODE void poke_commit(struct sdt_site *from, struct sdt_site *to)
{
	struct sdt_site *s;

	for (s = from; s < to; s++)
		if (s->next) {
			sdt_u8 old = s->state;
			sdt_store_release(&s->state, s->next);
			s->next = old;
		}
}

/*
 * Change every marked site of every table from ``tables`` on (next != 0: the state it goes to; each table's
 * mark_lo and mark_hi bound its marked sites) by the protocol, and unmark it. The caller holds the runtime's lock
 * and has checked that each site's bytes are its state's. ``enabled``: whether any site is armed once the change
 * is made (SDT_PROBES_ENABLED(), from the commit).
 */
SDT_CODE void sdt_poke_run(struct sdt_module *tables, int enabled)
{
	struct sdt_module *t;
	struct sdt_site *s;

	committed = 0;
#ifndef SDT_NAIVE_PROTOCOL	/* the naive protocol: no breakpoint first, every byte in place at once */
	{
		struct sdt_poke p;
		int slow = 0, stored;

		for (t = tables; t && !slow; t = t->next)
			for (s = t->mark_lo; t->mark_lo && s < t->mark_hi && !slow; s++)
				slow = s->next && poke_plan(s, &p) && p.slow;
		if (slow) {
			for (t = tables, stored = 0; t; t = t->next)
				stored |= t->mark_lo ? poke_phase(t->mark_lo, t->mark_hi, PH_BREAKPOINT) : 0;
			if (stored)
				poke_sync();
			for (t = tables, stored = 0; t; t = t->next)
				stored |= t->mark_lo ? poke_phase(t->mark_lo, t->mark_hi, PH_TAIL) : 0;
			if (stored)
				poke_sync();
		}
	}
#endif
	for (t = tables; t; t = t->next)	/* the commit: every table's marked sites, before any final store */
		if (t->mark_lo)
			poke_commit(t->mark_lo, t->mark_hi);
	committed = 1;
	sdt_probes_enabled = enabled != 0;
	for (t = tables; t; t = t->next)
		if (t->mark_lo)
			poke_phase(t->mark_lo, t->mark_hi, LAST_PHASE);
	poke_sync();
#ifndef SDT_NAIVE_PROTOCOL
	for (t = tables; t; t = t->next)
		if (t->mark_lo)
			poke_phase(t->mark_lo, t->mark_hi, PH_AGAIN);
	poke_sync();
#endif
	for (t = tables; t; t = t->next) {
		for (s = t->mark_lo; t->mark_lo && s < t->mark_hi; s++)
			s->next = 0;
		t->mark_lo = t->mark_hi = 0;
	}
	committed = 0;
}
