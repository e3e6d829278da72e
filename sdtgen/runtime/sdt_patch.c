/*
 * sdt_patch.c - the one way the runtime writes code other CPUs may be running (management layer).
 *
 * A change that lies inside one store the architecture lets instruction
 * fetch see whole (sdt_arch_single_store: x86 the first byte only, AArch64 a
 * word, RISC-V an aligned halfword or word of the site) is that store.
 * Anything else follows Linux's text_poke_bp_batch, over every site of the
 * batch at once:
 *   1. the breakpoint over each site's first bytes; sync every CPU
 *   2. the bytes behind it (no CPU executes them now); sync
 *   3. each site's new first bytes; sync
 * While it runs the batch is published (sdt_poke_find): a CPU that traps on
 * a transient breakpoint finds its site and sdt_trap emulates the new
 * instruction. Every store is followed by the icache hook for its bytes.
 *
 * Built with -DSDT_NAIVE_PROTOCOL the runtime instead stores the differing
 * bytes one at a time, in place: the states in between are neither
 * instruction, which is what `sdtgen torture` shows a protocol is for.
 */
#include "sdt_internal.h"

static struct sdt_poke *volatile inflight;
static volatile unsigned ninflight;
static int refs;	/* 1 while a batch is published, + 1 per trap handler looking at it */

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

/* Store ``width`` bytes of ``p``'s new bytes at offset ``at`` of its site, through the alias. */
static SDT_CODE void poke_store(const struct sdt_poke *p, sdt_u8 *alias, sdt_word lo, unsigned at, const sdt_u8 *bytes,
			   unsigned width)
{
	sdt_text_store(alias + (p->addr - lo) + at, bytes + at, width);
	if (sdt_hooks.icache_flush)
		sdt_hooks.icache_flush((void *)(p->addr + at), width);
}

#ifdef SDT_NAIVE_PROTOCOL
static SDT_CODE void poke_protocol(struct sdt_poke *p, unsigned n, sdt_u8 *alias, sdt_word lo)
{
	unsigned i, k;

	for (i = 0; i < n; i++)
		for (k = 0; k < p[i].size; k++)
			if (p[i].old[k] != p[i].new[k])
				poke_store(&p[i], alias, lo, k, p[i].new, 1);
	poke_sync();
}
#else
static SDT_CODE int poke_same(const sdt_u8 *a, const sdt_u8 *b, unsigned n)
{
	unsigned i;

	for (i = 0; i < n; i++)
		if (a[i] != b[i])
			return 0;
	return 1;
}

static SDT_CODE void poke_protocol(struct sdt_poke *p, unsigned n, sdt_u8 *alias, sdt_word lo)
{
	unsigned i, k, at, width, bp = sdt_arch_bp_len, unit = sdt_arch_tail_unit;
	int single = 0, slow = 0;

	for (i = 0; i < n; i++) {
		unsigned first = p[i].size, last = 0;
		p[i].slow = 0;
		for (k = 0; k < p[i].size; k++)
			if (p[i].old[k] != p[i].new[k]) {
				first = first < k ? first : k;
				last = k;
			}
		if (first == p[i].size)
			continue;
		if (sdt_arch_single_store(p[i].addr, p[i].size, first, last, &at, &width)) {
			poke_store(&p[i], alias, lo, at, p[i].new, width);
			single = 1;
		} else {
			p[i].slow = 1;
			slow = 1;
		}
	}
	if (single)
		poke_sync();
	if (!slow)
		return;
	for (i = 0; i < n; i++)
		if (p[i].slow && !poke_same(p[i].old, sdt_arch_bp, bp))
			poke_store(&p[i], alias, lo, 0, sdt_arch_bp, bp);
	poke_sync();
	for (i = 0; i < n; i++)
		for (k = bp; p[i].slow && k < p[i].size; k += unit)
			if (!poke_same(p[i].old + k, p[i].new + k, unit))
				poke_store(&p[i], alias, lo, k, p[i].new, unit);
	poke_sync();
	for (i = 0; i < n; i++)
		if (p[i].slow)
			poke_store(&p[i], alias, lo, 0, p[i].new, bp);
	poke_sync();
}
#endif

/*
 * Change every site of ``p`` from its old bytes to its new ones, and its state, by the protocol.
 * The caller holds the runtime's lock and has checked each site's old bytes.
 */
SDT_CODE void sdt_poke_batch(struct sdt_poke *p, unsigned n)
{
	sdt_word lo = ~(sdt_word)0, hi = 0;
	sdt_u8 *alias;
	unsigned i;

	if (!n)
		return;
	for (i = 0; i < n; i++) {
		lo = p[i].addr < lo ? p[i].addr : lo;
		hi = p[i].addr + p[i].size > hi ? p[i].addr + p[i].size : hi;
	}
	for (i = 1; i < n; i++) {	/* in address order: sdt_poke_find bisects the batch */
		struct sdt_poke t;
		unsigned k;
		sdt_copy(&t, &p[i], sizeof(t));
		for (k = i; k > 0 && p[k - 1].addr > t.addr; k--)
			sdt_copy(&p[k], &p[k - 1], sizeof(t));
		sdt_copy(&p[k], &t, sizeof(t));
	}
	/* Published for the whole change: a CPU that traps on a breakpoint being written, or on one a single
	 * store just armed, is resolved as the site's new state. */
	ninflight = n;
	__atomic_store_n(&refs, 1, __ATOMIC_RELEASE);
	sdt_store_release(&inflight, p);
	alias = sdt_hooks.text_open ? (sdt_u8 *)sdt_hooks.text_open((void *)lo, hi - lo) : (sdt_u8 *)lo;
	poke_protocol(p, n, alias, lo);
	for (i = 0; i < n; i++)
		sdt_store_release(&p[i].site->state, p[i].state);
	/* unpublish, then wait for the trap handlers still looking at it */
	sdt_store_release(&inflight, (struct sdt_poke *)0);
	__atomic_sub_fetch(&refs, 1, __ATOMIC_ACQ_REL);
	while (__atomic_load_n(&refs, __ATOMIC_ACQUIRE))
		;
	if (sdt_hooks.text_close)
		sdt_hooks.text_close(alias, hi - lo);
}

/* The published change of the site at ``addr``, if one is in flight; sdt_poke_put() when done with it. */
SDT_CODE const struct sdt_poke *sdt_poke_find(sdt_word addr)
{
	int r = __atomic_load_n(&refs, __ATOMIC_ACQUIRE);
	const struct sdt_poke *p;
	unsigned lo = 0, hi;

	do {
		if (!r)
			return 0;
	} while (!__atomic_compare_exchange_n(&refs, &r, r + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
	p = sdt_load_acquire(&inflight);
	hi = p ? ninflight : 0;
	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;
		if (p[mid].addr == addr)
			return &p[mid];
		if (p[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	sdt_poke_put();
	return 0;
}

SDT_CODE void sdt_poke_put(void)
{
	__atomic_sub_fetch(&refs, 1, __ATOMIC_ACQ_REL);
}
