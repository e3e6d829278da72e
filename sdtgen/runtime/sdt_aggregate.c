/*
 * sdt_aggregate.c - per-CPU aggregation tables (the programs' AGG instruction; docs/aggregations.md).
 *
 * Each CPU aggregates into memory the kernel gave it (sdt_agg_attach), cut
 * in two halves. A half is an open-addressing index of u32 (an entry's
 * offset in the arena / 8, plus 1; 0: empty) and an arena the entries are
 * appended to. Only its CPU writes a table (the firing path takes no lock);
 * the consumer switches every CPU to its other half (sdt_agg_switch), after
 * which the half a CPU wrote until then is frozen for the consumer to read
 * and merge, as DTrace switches its aggregation buffers: the consumer adds
 * the halves it reads (count and sum add, min and max compare, avg is a
 * count and a sum, buckets add). An update a full half cannot take is
 * counted in that half's ``dropped``.
 */
#include "sdt_state.h"

#define INT64_MAX_ ((sdt_u64)0x7fffffffffffffffull)
#define INT64_MIN_ ((sdt_u64)0x8000000000000000ull)

static struct sdt_agg *agg_list;	/* every attached CPU (sdt_agg_switch and the grace period walk it) */

/* Zero ``n`` u32: volatile stores, so no memset call is made of it. */
static SDT_CODE void zero32(sdt_u32 *p, sdt_word n)
{
	volatile sdt_u32 *v = p;

	while (n--)
		*v++ = 0;
}

/* A half starts empty: its index cleared, its arena unused. */
static SDT_CODE void clear_half(struct sdt_agg *g, unsigned h)
{
	zero32((sdt_u32 *)(sdt_word)g->index[h], (sdt_word)g->nindex);
	g->used[h] = g->entries[h] = g->dropped[h] = 0;
}

/* ``g`` over ``mem`` (bytes checked), for area ``c``: both halves empty. */
static SDT_CODE void agg_init(struct sdt_cpu *c, struct sdt_agg *g, void *mem, unsigned long bytes)
{
	sdt_word half = (bytes / 2) & ~(sdt_word)7, nindex = 8, index_bytes;
	unsigned h;

	while (nindex * 2 <= half / 64)	/* one slot for every 64 bytes of a half */
		nindex *= 2;
	index_bytes = (nindex * 4 + 7) & ~(sdt_word)7;
	g->self = (sdt_word)g;
	g->cpu = c->cpu;
	g->seq = 0;
	g->want = 0;
	g->nindex = nindex;
	g->arena_size = half - index_bytes;
	for (h = 0; h < 2; h++) {
		g->index[h] = (sdt_word)mem + h * half;
		g->arena[h] = (sdt_word)mem + h * half + index_bytes;
		clear_half(g, h);
	}
	g->errors = g->nested = 0;
}

SDT_CODE int sdt_agg_attach(struct sdt_cpu *c, struct sdt_agg *g, void *mem, unsigned long bytes)
{
	struct sdt_agg *at;

	if (!c || !g || !mem || ((sdt_word)mem & 7) || ((sdt_word)g & 7) || bytes < SDT_AGG_MIN_BYTES)
		return SDT_ERR_ARG;
	agg_init(c, g, mem, bytes);
	take();
	for (at = agg_list; at && at != g; at = (struct sdt_agg *)(sdt_word)at->next)
		;
	if (!at) {
		g->next = (sdt_word)agg_list;
		agg_list = g;
	}
	give();
	sdt_seq_store(&c->agg, (sdt_word)g);	/* the firing path reads it: the table is ready first */
	return 0;
}

/* Wait until no CPU runs a program it began before the caller's last store: each CPU's seq is even, or has moved.
 * sync_cores first, so every CPU has either made its odd seq visible or will see what the caller stored. */
static SDT_CODE void agg_settled(struct sdt_agg *g)
{
	sdt_word s = sdt_seq_load(&g->seq);

	if (s & 1)
		while (sdt_seq_load(&g->seq) == s)
			;
}

static SDT_CODE void quiesce(void)
{
	struct sdt_agg *g;

	if (sdt_hooks.sync_cores)
		sdt_hooks.sync_cores();
	for (g = agg_list; g; g = (struct sdt_agg *)(sdt_word)g->next)
		agg_settled(g);
}

/* ``g``'s CPU adds to its other half from now on (the one frozen since the last switch, cleared: the consumer has
 * read it). */
static SDT_CODE void agg_flip(struct sdt_agg *g)
{
	unsigned next = (unsigned)(g->want & 1) ^ 1;

	clear_half(g, next);
	sdt_seq_store(&g->want, next);
}

SDT_CODE int sdt_agg_switch(void)
{
	struct sdt_agg *g;
	int n = 0;

	take();
	for (g = agg_list; g; g = (struct sdt_agg *)(sdt_word)g->next, n++)
		agg_flip(g);
	quiesce();	/* from here on every CPU adds to its new half; the old one is the consumer's */
	give();
	return n;
}

/* n / d and n % d, unsigned, d != 0. A 32-bit CPU has no 64-bit divide (and a kernel no libgcc): shift and
 * subtract, 64 steps. */
static SDT_CODE sdt_u64 udiv64(sdt_u64 n, sdt_u64 d, sdt_u64 *rem)
{
#if __SIZEOF_POINTER__ == 8
	*rem = n % d;
	return n / d;
#else
	sdt_u64 q = 0, r = 0;
	int i;

	for (i = 63; i >= 0; i--) {
		r = (r << 1) | ((n >> i) & 1);
		if (r >= d) {
			r -= d;
			q |= (sdt_u64)1 << i;
		}
	}
	*rem = r;
	return q;
#endif
}

/* -- the writer: one update ------------------------------------------------------------------------------ */

static SDT_CODE sdt_u32 hash_keys(sdt_u32 id, const sdt_u64 *key, unsigned n)
{
	sdt_u32 h = id * 0x9e3779b1u;
	unsigned k;

	for (k = 0; k < n; k++) {
		h = (h ^ (sdt_u32)key[k]) * 0x85ebca6bu;
		h = (h ^ (sdt_u32)(key[k] >> 32)) * 0xc2b2ae35u;
		h ^= h >> 15;
	}
	return h;
}

/* The highest bit set in v (v != 0), without a builtin a 32-bit or Zbb-less CPU turns into a libgcc call. */
static SDT_CODE unsigned log2_u64(sdt_u64 v)
{
	unsigned n = 0;

	if (v >> 32)
		v >>= 32, n += 32;
	if (v >> 16)
		v >>= 16, n += 16;
	if (v >> 8)
		v >>= 8, n += 8;
	if (v >> 4)
		v >>= 4, n += 4;
	if (v >> 2)
		v >>= 2, n += 2;
	if (v >> 1)
		n += 1;
	return n;
}

/* DTrace's quantize bucket of x: 63 holds 0, 64 + k holds [2^k, 2^(k+1)), 62 - k holds (-2^(k+1), -2^k]. */
static SDT_CODE unsigned quantize_bucket(sdt_u64 x)
{
	unsigned k;

	if (x == 0)
		return SDT_AGG_ZERO_BUCKET;
	if (!(x & INT64_MIN_)) {
		k = log2_u64(x);
		return SDT_AGG_ZERO_BUCKET + 1 + (k > 62 ? 62 : k);
	}
	k = log2_u64(0 - x);	/* |x|; INT64_MIN is 2^63 */
	return k >= SDT_AGG_ZERO_BUCKET - 1 ? 0 : SDT_AGG_ZERO_BUCKET - 1 - k;
}

static SDT_CODE unsigned lquantize_bucket(const struct sdt_agg_desc *d, sdt_u64 x)
{
	sdt_u64 q, r;

	if ((long long)x < (long long)d->low)
		return 0;
	q = udiv64(x - d->low, d->step, &r);	/* x >= low: the difference fits unsigned */
	return q >= d->levels ? d->levels + 1 : (unsigned)q + 1;
}

/* Add x to the entry of keys ``key`` of aggregation ``d`` in half ``h`` of ``g`` (its CPU's own table). */
static inline __attribute__((always_inline)) void agg_update(struct sdt_agg *g, unsigned h,
							      const struct sdt_agg_desc *d, const sdt_u64 *key, sdt_u64 x)
{
	sdt_u32 *index = (sdt_u32 *)(sdt_word)g->index[h];
	sdt_u8 *arena = (sdt_u8 *)(sdt_word)g->arena[h];
	sdt_word mask = (sdt_word)g->nindex - 1, i, n, size;
	unsigned nk = d->nkeys, nv = d->nvals, k;
	sdt_u32 hash = hash_keys(d->id, key, nk);
	struct sdt_agg_entry *e;
	sdt_u64 *v;

	for (i = hash & mask, n = 0; n <= mask; n++, i = (i + 1) & mask) {
		sdt_u32 slot = index[i];
		if (!slot)
			break;
		e = (struct sdt_agg_entry *)(arena + (sdt_word)(slot - 1) * 8);
		if (e->hash != hash || e->id != d->id || e->nkeys != nk || e->nvals != nv)
			continue;
		v = (sdt_u64 *)(e + 1);
		for (k = 0; k < nk && v[k] == key[k]; k++)
			;
		if (k == nk)
			goto found;
	}
	size = sizeof(*e) + 8 * (sdt_word)(nk + nv);
	if (n > mask || g->entries[h] >= g->nindex - g->nindex / 4 || size > g->arena_size - g->used[h]) {
		g->dropped[h]++;
		return;
	}
	e = (struct sdt_agg_entry *)(arena + (sdt_word)g->used[h]);
	e->hash = hash;
	e->id = d->id;
	e->nkeys = (sdt_u16)nk;
	e->nvals = (sdt_u16)nv;
	e->pad = 0;
	{
		volatile sdt_u64 *w = (volatile sdt_u64 *)(e + 1);	/* volatile: no memset call made of it */
		sdt_u64 init = d->func == SDT_AGG_MIN ? INT64_MAX_ : d->func == SDT_AGG_MAX ? INT64_MIN_ : 0;
		for (k = 0; k < nk; k++)
			w[k] = key[k];
		for (k = 0; k < nv; k++)
			w[nk + k] = init;
	}
	index[i] = (sdt_u32)(g->used[h] / 8) + 1;
	g->used[h] += size;
	g->entries[h]++;
found:
	v = (sdt_u64 *)(e + 1) + nk;
	switch (d->func) {
	case SDT_AGG_COUNT:
		v[0]++;
		break;
	case SDT_AGG_SUM:
		v[0] += x;
		break;
	case SDT_AGG_MIN:
		if ((long long)x < (long long)v[0])
			v[0] = x;
		break;
	case SDT_AGG_MAX:
		if ((long long)x > (long long)v[0])
			v[0] = x;
		break;
	case SDT_AGG_AVG:
		v[0]++;
		v[1] += x;
		break;
	case SDT_AGG_QUANTIZE:
		v[quantize_bucket(x)]++;
		break;
	case SDT_AGG_LQUANTIZE:
		v[lquantize_bucket(d, x)]++;
		break;
	}
}
