/* sdt_internal.h - what the runtime's own files share (not for kernels). */
#ifndef SDTGEN_SDT_INTERNAL_H
#define SDTGEN_SDT_INTERNAL_H

#include "sdt_arch.h"

#define SDT_HIDDEN __attribute__((visibility("hidden")))

/*
 * AArch64 compilers may turn atomics into calls to libgcc's __aarch64_* helpers (-moutline-atomics: the
 * default of Debian's gcc, and of clang for Linux targets). A kernel links no libgcc, so the runtime's
 * atomics are always inline instructions, whatever flags the kernel gives: a file of the runtime that uses
 * atomics puts its functions between SDT_INLINE_ATOMICS_BEGIN and SDT_INLINE_ATOMICS_END.
 */
#if defined(__aarch64__) && defined(__clang__)
#define SDT_INLINE_ATOMICS_BEGIN \
	_Pragma("clang attribute push(__attribute__((target(\"no-outline-atomics\"))), apply_to = function)")
#define SDT_INLINE_ATOMICS_END _Pragma("clang attribute pop")
#elif defined(__aarch64__)
#define SDT_INLINE_ATOMICS_BEGIN _Pragma("GCC push_options") _Pragma("GCC target(\"no-outline-atomics\")")
#define SDT_INLINE_ATOMICS_END _Pragma("GCC pop_options")
#else
#define SDT_INLINE_ATOMICS_BEGIN
#define SDT_INLINE_ATOMICS_END
#endif
/* The runtime's code stays out of what it patches and traces: its own section, never instrumented. */
#define SDT_CODE __attribute__((no_instrument_function, section(".text.sdt_runtime")))

SDT_INLINE_ATOMICS_BEGIN	/* for the inline functions below */

extern struct sdt_site __start_set_sdt_sites_set[] SDT_HIDDEN;
extern struct sdt_site __stop_set_sdt_sites_set[] SDT_HIDDEN;
extern const struct sdt_probe __start_set_sdt_probes_set[] SDT_HIDDEN;
extern const struct sdt_probe __stop_set_sdt_probes_set[] SDT_HIDDEN;

/*
 * Copy ``n`` bytes. Compilers may turn a struct copy or a copying loop into a call to memcpy, which a
 * freestanding kernel need not have: the volatile accesses keep this a loop of its own.
 */
static inline void sdt_copy(void *to, const void *from, unsigned long n)
{
	volatile sdt_u8 *d = (volatile sdt_u8 *)to;
	const volatile sdt_u8 *s = (const volatile sdt_u8 *)from;

	while (n--)
		*d++ = *s++;
}

/* A linker set's bound, as a plain address: the compiler may not reason about two distinct arrays. */
static inline sdt_word sdt_bound(const void *p)
{
	sdt_word a = (sdt_word)p;

	__asm__("" : "+r"(a));
	return a;
}

/* A relative field: the address it names. */
static inline sdt_word sdt_rel(const sdt_s32 *field)
{
	return (sdt_word)field + (sdt_word)(long)*field;
}

static inline sdt_word sdt_site_address(const struct sdt_site *s)
{
	return sdt_rel(&s->site);
}

static inline const struct sdt_probe *sdt_site_probe(const struct sdt_site *s)
{
	return (const struct sdt_probe *)sdt_rel(&s->probe);
}

/* Where a site must go: its probe's stub, for an is-enabled check the is-enabled stub, and for an asm goto's
 * NOP its out-of-line target (what arming jumps to). */
static inline sdt_word sdt_site_stub(const struct sdt_site *s)
{
	const struct sdt_probe *p = sdt_site_probe(s);

	if (s->form == SDT_FORM_GOTO)
		return sdt_rel(&s->target);
	return s->form == SDT_FORM_ISEN ? sdt_rel(&p->isenabled) : sdt_rel(&p->stub);
}

/* What the site's bytes are in ``state`` (size bytes into out); 0 when the state has no encoding. */
static inline unsigned sdt_site_bytes(const struct sdt_site *s, unsigned state, sdt_u8 *out)
{
	const struct sdt_probe *p = sdt_site_probe(s);

	return sdt_arch_encode(out, s->form, s->size, state, sdt_site_address(s), sdt_site_stub(s),
			       p->recorder ? sdt_rel(&p->recorder) : 0, s->keep);
}

#define sdt_load_acquire(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define sdt_store_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)

/* Sequence numbers are u64 fields; a 32-bit CPU reads and writes their low word atomically (little-endian). */
static inline sdt_word sdt_seq_load(const sdt_u64 *p)
{
	return __atomic_load_n((const sdt_word *)p, __ATOMIC_ACQUIRE);
}

static inline void sdt_seq_store(sdt_u64 *p, sdt_word v)
{
	if (sizeof(sdt_word) < 8)
		((volatile sdt_u32 *)p)[1] = 0;
	__atomic_store_n((sdt_word *)p, v, __ATOMIC_RELEASE);
}

/* Advance a sequence number from ``from`` to ``from + 1``, unless another CPU already did: 1 when this one did. */
static inline int sdt_seq_claim(sdt_u64 *p, sdt_word from)
{
	sdt_word expect = from;

	return __atomic_compare_exchange_n((sdt_word *)p, &expect, from + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

SDT_INLINE_ATOMICS_END

/* One site's change as the patch protocol writes it: its bytes before and after, and how they are stored. */
struct sdt_poke {
	sdt_u8 old[SDT_SITE_MAX];
	sdt_u8 new[SDT_SITE_MAX];
	unsigned at, width;	/* the one store that makes the change, unless it is slow */
	int slow;	/* written through the breakpoint (the change is not one store fetch sees whole) */
};

/* What the control core (sdt_control.c, a unit of its own) and the layers of sdt_runtime.c reach across files. */

/* sdt_state.c */
int sdt_text_range(sdt_word a, unsigned n) SDT_HIDDEN;
const char *sdt_probe_field(const struct sdt_module *t, const struct sdt_probe *p, unsigned i) SDT_HIDDEN;
/* The kernel's table, first of the tables the runtime knows (next: the loaded modules', read with acquire). */
const struct sdt_module *sdt_tables(void) SDT_HIDDEN;
/* The table probe ``p`` is a descriptor of (the one being loaded included), or NULL. */
const struct sdt_module *sdt_probe_table(const struct sdt_probe *p) SDT_HIDDEN;

/* sdt_report.c */
void sdt_report_site(const struct sdt_site *s, const char *what, const sdt_u8 *found, unsigned n,
		     const sdt_u8 *expected) SDT_HIDDEN;
void sdt_report(const char *line) SDT_HIDDEN;

/* sdt_transport.c */
sdt_u32 sdt_readable(sdt_word p) SDT_HIDDEN;

/* sdt_patch.c */
void sdt_poke_run(struct sdt_module *tables, int enabled) SDT_HIDDEN;
void sdt_text_store(sdt_u8 *alias, const sdt_u8 *bytes, unsigned width) SDT_HIDDEN;

/* sdt_manage.c */
int sdt_probe_matches(const char *spec, const struct sdt_module *t, const struct sdt_probe *p) SDT_HIDDEN;
extern const struct sdt_entries sdt_runtime_entries;

#endif
