/*
 * sdt_manage.c - boot-time patching, arming by probe spec, and the breakpoint handler (management layer).
 *
 * The site table is the linker set set_sdt_sites_set; its entries keep
 * their state (SDT_SITE_*) and verified length in place. sdt_init sorts it
 * by address (usually it already is: one check) so sdt_trap can bisect it,
 * verifies each site before its first write, and writes the disabled form.
 * After that every write is checked against the bytes the runtime last
 * wrote, so code someone else rewrote is left alone and reported, and the
 * sites one call changes are marked in their entries and written by one
 * run of the patch protocol (sdt_patch.c). The specs enabled so far are
 * remembered here, for the modules loaded later (sdt_module.c replays them).
 * The state it shares with the other layers is sdt_state.c's.
 */
#include "sdt_state.h"

static unsigned long armed;	/* sites armed: SDT_PROBES_ENABLED() is armed != 0 */

/* -- the table ----------------------------------------------------------------------------- */

/* Put entry ``from`` at ``to``: its fields are relative to where they are, so they are rebased. Field by field:
 * a struct copy may become a call to memcpy, and a byte loop costs the sort most of its time. */
static SDT_CODE void move(struct sdt_site *to, const struct sdt_site *from)
{
	sdt_word site = sdt_site_address(from), probe = sdt_rel(&from->probe);

	to->site = (sdt_s32)(site - (sdt_word)&to->site);
	to->probe = (sdt_s32)(probe - (sdt_word)&to->probe);
	to->form = from->form;
	to->length = from->length;
	to->mode = from->mode;
	to->keep = from->keep;
	to->state = from->state;
	to->size = from->size;
	to->next = from->next;
	to->pad = from->pad;
	/* an asm goto's target, rebased like the site (0 for every other form) */
	to->target = from->form == SDT_FORM_GOTO ? (sdt_s32)(sdt_rel(&from->target) - (sdt_word)&to->target) : 0;
}

/* Entry ``e`` (whose address is ``key``) into the heap s[root..n) whose root's place is free: the larger child
 * moves up until ``e`` is no smaller than both. */
static SDT_CODE void sift(struct sdt_site *s, unsigned long root, unsigned long n, const struct sdt_site *e,
			  sdt_word key)
{
	for (;;) {
		unsigned long c = 2 * root + 1;
		sdt_word at;
		if (c >= n)
			break;
		at = sdt_site_address(&s[c]);
		if (c + 1 < n && sdt_site_address(&s[c + 1]) > at)
			at = sdt_site_address(&s[++c]);
		if (key >= at)
			break;
		move(&s[root], &s[c]);
		root = c;
	}
	move(&s[root], e);
}

/* In address order, so a trap finds its site by bisection: heapsort in place, unless it already is. */
static SDT_CODE void sort_sites(struct sdt_site *s, unsigned long n)
{
	struct sdt_site t;
	unsigned long i;

	for (i = 1; i < n && sdt_site_address(&s[i - 1]) <= sdt_site_address(&s[i]); i++)
		;
	if (i >= n)
		return;
	/* An entry held in ``t`` (on the stack, maybe further than 2 GiB from the text) keeps its relative fields
	 * right only modulo 2^32, which is all a move back needs: its address is taken where it was. */
	for (i = n / 2; i-- > 0;) {
		sdt_word key = sdt_site_address(&s[i]);
		move(&t, &s[i]);
		sift(s, i, n, &t, key);
	}
	for (i = n; i-- > 1;) {	/* the largest left to the end; the last entry of the heap sifted in from its root */
		sdt_word key = sdt_site_address(&s[i]);
		move(&t, &s[i]);
		move(&s[i], &s[0]);
		sift(s, 0, i, &t, key);
	}
}

static SDT_CODE struct sdt_site *find_site(const struct sdt_module *t, sdt_word addr)
{
	struct sdt_site *sites = t->sites;
	unsigned long lo = 0, hi = (unsigned long)(t->sites_end - sites);

	while (lo < hi) {
		unsigned long mid = lo + (hi - lo) / 2;
		sdt_word a = sdt_site_address(&sites[mid]);
		if (a == addr) {
			while (mid > 0 && sdt_site_address(&sites[mid - 1]) == addr)
				mid--;	/* folded entries follow the one that was patched */
			return &sites[mid];
		}
		if (a < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

/* Whether ``pc`` lies inside a site's bytes of table ``t``. */
static SDT_CODE int table_contains(const struct sdt_module *t, sdt_word pc)
{
	const struct sdt_site *sites = t->sites;
	unsigned long lo = 0, hi = (unsigned long)(t->sites_end - sites);

	while (lo < hi) {	/* the first site past pc */
		unsigned long mid = lo + (hi - lo) / 2;
		if (sdt_site_address(&sites[mid]) <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	while (lo-- > 0) {	/* the sites at or before pc, nearest first; folded entries share an address */
		sdt_word a = sdt_site_address(&sites[lo]);
		unsigned size = sites[lo].size ? sites[lo].size : sites[lo].length;
		if (pc - a < size)
			return 1;
		if (pc - a >= SDT_SITE_MAX)
			return 0;
	}
	return 0;
}

/* Whether ``pc`` lies inside a probe site's bytes: where an instruction seen half written would fault. */
SDT_CODE int sdt_site_contains(sdt_word pc)
{
	const struct sdt_module *t;

	for (t = &kernel; t; t = next_table(t))
		if (table_contains(t, pc))
			return 1;
	return 0;
}

/* -- boot ---------------------------------------------------------------------------------- */

static inline __attribute__((always_inline)) int entry_valid(const struct sdt_module *t, const struct sdt_site *s)
{
	const struct sdt_probe *p = sdt_site_probe(s);

	return probe_valid(t, p) && s->form >= SDT_FORM_CALL && s->form <= SDT_FORM_GOTO && s->length &&
	       s->length <= SDT_SITE_MAX && (s->form != SDT_FORM_ISEN || p->isenabled);
}

/* The length of the instruction at site ``s`` (a valid entry) when it lies in text below ``limit`` (the end of its
 * text range: see init_span) and is the expected call or jump to its stub (sdt_arch_verify); else 0, and with
 * ``report`` the kernel's log says which it is not. */
static inline __attribute__((always_inline)) unsigned verify_site(struct sdt_site *s, sdt_word limit, int report)
{
	sdt_word a = sdt_site_address(s);
	unsigned size;

	if (a + s->length > limit || a + s->length < a ||
	    (s->form == SDT_FORM_GOTO && sdt_hooks.ntext && sdt_text_range(sdt_site_stub(s), 1) < 0)) {
		if (report)
			sdt_report_site(s, "is not in the kernel's text (or runs past its end)", 0, 0, 0);
		return 0;
	}
	size = sdt_arch_verify((const sdt_u8 *)a, a, s->form, s->length, sdt_site_stub(s), &s->keep);
	if (!size && report)
		sdt_report_site(s, s->form == SDT_FORM_GOTO ? "is not the NOP of an asm goto"
							     : "is not the expected call or jump to its stub",
				(const sdt_u8 *)a, s->length, 0);
	return size;
}

/*
 * The sites from ``s`` on that sdt_init writes through one alias, [s, *stop), the bytes [*lo, *hi) it opens for
 * them, and the end of text they must lie below (*limit): the sites that start in the text range ``s`` starts in
 * (up to the first at its end: the table is sorted), or with no text ranges given, every site, the span from the
 * first that verifies to the end of the last. Never memory outside a text range, or outside verified sites.
 * *lo == *hi: nothing to open (``s`` is in no text range).
 */
static SDT_CODE void init_span(struct sdt_site *s, struct sdt_site **stop, sdt_word *lo, sdt_word *hi,
			       sdt_word *limit)
{
	*lo = *hi = *limit = 0;
	if (sdt_hooks.ntext) {
		int r = sdt_text_range(sdt_site_address(s), 1);
		struct sdt_site *sites = kernel.sites;
		unsigned long a = (unsigned long)(s - sites) + 1, b = (unsigned long)(kernel.sites_end - sites);
		sdt_word e;
		if (r < 0) {
			*stop = s + 1;
			return;
		}
		e = (sdt_word)(sdt_hooks.text[r].start + sdt_hooks.text[r].size);
		if (e <= sdt_site_address(s))	/* the range ends at the top of memory: its last byte is left out */
			e = ~(sdt_word)0;
		while (a < b) {	/* the first site at or past the range's end */
			unsigned long mid = a + (b - a) / 2;
			if (sdt_site_address(&sites[mid]) < e)
				a = mid + 1;
			else
				b = mid;
		}
		*stop = &sites[a];
		*lo = sdt_site_address(s);
		*hi = sdt_site_address(&sites[a - 1]) + SDT_SITE_MAX;
		if (*hi > e || *hi < *lo)
			*hi = e;
		*limit = e;
		return;
	}
	*stop = kernel.sites_end;
	*limit = ~(sdt_word)0;
	for (; s < kernel.sites_end; s++)
		if (entry_valid(&kernel, s) && verify_site(s, *limit, 0)) {
			*lo = sdt_site_address(s);
			break;
		}
	/* the end of the last one, and of any before it that reaches past it (a table of overlapping entries) */
	for (s = kernel.sites_end; s-- > kernel.sites && (!*hi || sdt_site_address(s) + SDT_SITE_MAX > *hi);)
		if (entry_valid(&kernel, s)) {
			sdt_word a = sdt_site_address(s), size = verify_site(s, *limit, 0);
			*hi = size && a + size > *hi ? a + size : *hi;
		}
}

/* What a recorder calls when the kernel gave no cpu_area or clock: nothing is recorded, nothing is stamped. */
static SDT_CODE struct sdt_cpu *no_area(void)
{
	return 0;
}

static SDT_CODE sdt_u64 no_clock(void)
{
	return 0;
}

/* The disabled form of the last site whose form sdt_arch_off_is_fixed: encoded once for a run of such sites. */
struct fixed_off {
	sdt_u8 bytes[SDT_SITE_MAX];
	unsigned form, size;
};

/*
 * What sdt_init and sdt_module_load check of entry ``s`` of table ``t`` before its bytes, after ``prev`` (the
 * last entry written, or NULL) ending at ``end``: 0 to go on with it; else it is settled (refused and
 * reported, or folded into ``prev``: identical code folding, one instruction, two entries).
 */
static SDT_CODE int settle_entry(const struct sdt_module *t, struct sdt_site *s, const struct sdt_site *prev,
				 sdt_word end)
{
	sdt_word a = sdt_site_address(s);

	s->state = SDT_SITE_REFUSED;
	s->size = 0;
	s->next = 0;
	if (!entry_valid(t, s)) {
		sdt_report_site(s, "is not a valid table entry", 0, 0, 0);
		return 1;
	}
	if (prev && a == sdt_site_address(prev) && sdt_site_probe(prev) == sdt_site_probe(s) && prev->form == s->form) {
		s->state = SDT_SITE_FOLDED;
		s->size = prev->size;
		return 1;
	}
	if (a < end) {
		sdt_report_site(s, "overlaps the site before it", 0, 0, 0);
		return 1;
	}
	return 0;
}

/* Write verified site ``s`` (``size`` bytes) its disabled form through ``alias`` (the span from ``lo``), no CPU
 * running it: plain stores of the bytes that differ. 1 when it is disabled, 0 when it has no disabled form. */
static SDT_CODE int write_off(struct sdt_site *s, unsigned size, sdt_u8 *alias, sdt_word lo, struct fixed_off *fx)
{
	sdt_word a = sdt_site_address(s);
	const sdt_u8 *code = (const sdt_u8 *)a;
	sdt_u8 off[SDT_SITE_MAX];
	const sdt_u8 *want = fx->bytes;	/* the site's disabled form: fx's when it is the same as the last */
	unsigned i;

	s->size = (sdt_u8)size;
	if (s->form != fx->form || size != fx->size) {
		if (sdt_site_bytes(s, SDT_SITE_OFF, off) != size) {
			sdt_report_site(s, "has no disabled form", code, size, 0);
			return 0;
		}
		want = off;
		if (sdt_arch_off_is_fixed(s->form)) {
			for (i = 0; i < size; i++)
				fx->bytes[i] = off[i];
			fx->form = s->form;
			fx->size = size;
		}
	}
	for (i = 0; i < size; i++)
		if (code[i] != want[i])
			alias[a - lo + i] = want[i];
	s->state = SDT_SITE_OFF;
	return 1;
}

SDT_CODE int sdt_init(const struct sdt_hooks *hooks)
{
	struct sdt_site *s, *prev = 0, *stop;
	sdt_word end = 0;
	sdt_word s0 = sdt_bound(__start_set_sdt_sites_set), s1 = sdt_bound(__stop_set_sdt_sites_set);
	sdt_word p0 = sdt_bound(__start_set_sdt_probes_set), p1 = sdt_bound(__stop_set_sdt_probes_set);
	unsigned long n = (unsigned long)((s1 - s0) / sizeof(struct sdt_site));
	struct fixed_off fixed;	/* its bytes are read only once form and size say they were written */
	int patched = 0;

	if (!hooks || (hooks->ntext && !hooks->text) || (hooks->nreadable && !hooks->readable) ||
	    (hooks->cpu_release && !hooks->cpu_area))
		return SDT_ERR_ARG;
	if (ready || s1 < s0 || (s1 - s0) % sizeof(struct sdt_site) || p1 < p0 || (p1 - p0) % sizeof(struct sdt_probe))
		return SDT_ERR_INIT;
	fixed.form = fixed.size = 0;	/* no aggregate initializer: a compiler may make it a call to memset */
	sdt_copy(&sdt_hooks, hooks, sizeof(sdt_hooks));
	if (!sdt_hooks.cpu_area)	/* the recorders call both without a test */
		sdt_hooks.cpu_area = no_area;
	if (!sdt_hooks.clock)
		sdt_hooks.clock = no_clock;
	kernel.sites = (struct sdt_site *)s0;
	kernel.sites_end = (struct sdt_site *)s1;
	kernel.probes = (const struct sdt_probe *)p0;
	kernel.probes_end = (const struct sdt_probe *)p1;
	kernel.name = "";
	kernel.next = 0;	/* no module is loaded before the kernel's own tables are */
	kernel.magic = SDT_MODULE_MAGIC;
	kernel.state = SDT_MODULE_LOADED;
	sort_sites(kernel.sites, n);
	for (s = kernel.sites; s < kernel.sites_end; s = stop) {
		sdt_word lo, hi, limit;
		sdt_u8 *alias;

		init_span(s, &stop, &lo, &hi, &limit);
		alias = lo == hi ? 0 : sdt_hooks.text_open ? (sdt_u8 *)sdt_hooks.text_open((void *)lo, hi - lo) : (sdt_u8 *)lo;
		for (; s < stop; s++) {	/* one CPU runs: the text is read where it is, plain stores, one sync */
			unsigned size;

			if (settle_entry(&kernel, s, prev, end))
				continue;
			size = verify_site(s, limit, 1);
			if (!size || !write_off(s, size, alias, lo, &fixed))
				continue;
			prev = s;
			end = sdt_site_address(s) + size;
			patched++;
		}
		if (alias && sdt_hooks.text_close)
			sdt_hooks.text_close(alias, hi - lo);
		if (alias && sdt_hooks.icache_flush)
			sdt_hooks.icache_flush((void *)lo, hi - lo);
	}
	if (sdt_hooks.sync_cores)
		sdt_hooks.sync_cores();
	kernel.patched = (sdt_u32)patched;
	sessions_init();
	ready = 1;
	return patched;
}

/* -- probe specs ----------------------------------------------------------------------------- */

/* fnmatch(3) without flags, as Python's fnmatch.fnmatchcase: * ? [set] [!set], a stray [ is literal. */
static SDT_CODE int glob(const char *p, const char *pe, const char *s)
{
	const char *star = 0, *resume = 0;

	while (*s) {
		if (p < pe && *p == '*') {
			star = ++p;
			resume = s;
			continue;
		}
		if (p < pe && *p == '[') {
			const char *q = p + 1;
			int neg = 0, hit = 0;
			if (q < pe && *q == '!') {
				neg = 1;
				q++;
			}
			if (q < pe && *q == ']')	/* a ] first is part of the set */
				q++;
			while (q < pe && *q != ']')
				q++;
			if (q < pe) {	/* a complete set: p+1..q */
				const char *c = p + 1 + neg;
				while (c < q) {
					if (c + 2 < q && c[1] == '-') {
						hit |= (unsigned char)*s >= (unsigned char)c[0] &&
						       (unsigned char)*s <= (unsigned char)c[2];
						c += 3;
					} else {
						hit |= *c == *s;
						c++;
					}
				}
				if (hit != neg) {
					p = q + 1;
					s++;
					continue;
				}
				goto backtrack;
			}
		}
		if (p < pe && (*p == '?' || *p == *s)) {
			p++;
			s++;
			continue;
		}
backtrack:
		if (!star)
			return 0;
		p = star;
		s = ++resume;
	}
	while (p < pe && *p == '*')
		p++;
	return p == pe;
}

struct spec {
	const char *field[4];
	const char *end[4];
};

#define SPEC_MAX 1024

/* provider:module:function:name, filled from the right ("name", "function:name", ...). */
static SDT_CODE int parse_spec(const char *text, struct spec *sp)
{
	const char *start[4], *stop[4], *c = text;
	int n = 0, i;

	if (!*text)	/* an empty description: DTrace refuses it (":::" matches every probe) */
		return SDT_ERR_SPEC;
	start[0] = c;
	for (; *c; c++) {
		if (c - text >= SPEC_MAX)
			return SDT_ERR_SPEC;
		if (*c == ':') {
			if (n == 3)
				return SDT_ERR_SPEC;
			stop[n++] = c;
			start[n] = c + 1;
		}
	}
	stop[n++] = c;
	for (i = 0; i < 4; i++)
		sp->field[i] = sp->end[i] = "";
	for (i = 0; i < n; i++) {
		sp->field[4 - n + i] = start[i];
		sp->end[4 - n + i] = stop[i];
	}
	return 0;
}

static SDT_CODE int matches(const struct spec *sp, const struct sdt_module *t, const struct sdt_probe *p)
{
	int i;

	for (i = 0; i < 4; i++)
		if (sp->field[i] != sp->end[i] && !glob(sp->field[i], sp->end[i], sdt_probe_field(t, p, (unsigned)i)))
			return 0;
	return 1;
}

/* Whether ``spec`` matches probe ``p`` of table ``t`` (1 or 0), or SDT_ERR_SPEC. */
SDT_CODE int sdt_probe_matches(const char *spec, const struct sdt_module *t, const struct sdt_probe *p)
{
	struct spec sp;

	if (!spec || parse_spec(spec, &sp))
		return SDT_ERR_SPEC;
	return matches(&sp, t, p);
}

/* -- what a module loaded later gets: the specs enabled so far, in order ----------------------------------- */

struct remembered {
	char text[SDT_MODULE_SPEC_BYTES];
	int mode;	/* SDT_TRAP or SDT_BRANCH; 0: the spec was disabled */
	unsigned session;	/* the session that enabled (disabled) it */
};

static struct remembered specs[SDT_MODULE_SPECS];
static unsigned nspecs;

static SDT_CODE int same_text(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

/* Forget the entries of session ``id`` (with ``text`` only, unless it is NULL); how many of the session's are left. */
static SDT_CODE unsigned forget(int id, const char *text)
{
	unsigned i, n, left = 0;

	for (i = 0; i < nspecs;)
		if (specs[i].session == (unsigned)id && (!text || same_text(specs[i].text, text))) {
			for (n = i; n + 1 < nspecs; n++)
				sdt_copy(&specs[n], &specs[n + 1], sizeof(specs[n]));	/* a struct copy may be a memcpy */
			nspecs--;
		} else {
			left += specs[i].session == (unsigned)id;
			i++;
		}
	return left;
}

/*
 * After session ``id``'s enable (``mode``) or disable (0) of ``text``, under the lock: the list a loaded module
 * replays. An earlier entry of the session with the same text is superseded; a disable with nothing of the
 * session's left enabled leaves nothing to replay.
 */
static SDT_CODE void remember(int id, const char *text, int mode)
{
	unsigned n;

	if (!forget(id, text) && !mode)
		return;
	for (n = 0; text[n] && n < SDT_MODULE_SPEC_BYTES; n++)
		;
	if (n >= SDT_MODULE_SPEC_BYTES || nspecs == SDT_MODULE_SPECS) {
		sdt_report("a spec longer than SDT_MODULE_SPEC_BYTES, or past SDT_MODULE_SPECS of them, is not applied "
			   "to modules loaded later");
		return;
	}
	sdt_copy(specs[nspecs].text, text, n + 1);
	specs[nspecs].session = (unsigned)id;
	specs[nspecs++].mode = mode;
}

/* sdt_set_mode: what is armed is armed with ``mode`` from now on, in modules loaded later too. */
static SDT_CODE void remembered_mode(int mode)
{
	unsigned i;

	for (i = 0; i < nspecs; i++)
		if (specs[i].mode)
			specs[i].mode = mode;
}

/* The state the remembered specs give site ``s`` of module ``m``, and the sessions that take its probe (*taken):
 * for each session the last of its specs matching the probe decides; the site is armed as the last spec that
 * enabled it says. */
static SDT_CODE unsigned replayed_state(const struct sdt_module *m, const struct sdt_site *s, sdt_u32 *taken)
{
	unsigned state = SDT_SITE_OFF, i;
	struct spec sp;

	*taken = 0;
	for (i = 0; i < nspecs; i++)
		if (!parse_spec(specs[i].text, &sp) && matches(&sp, m, sdt_site_probe(s))) {
			sdt_u32 bit = 1u << (specs[i].session & (SDT_MAX_SESSIONS - 1));
			*taken = specs[i].mode ? *taken | bit : *taken & ~bit;
			if (specs[i].mode)
				state = specs[i].mode == SDT_BRANCH ? SDT_SITE_BRANCH : SDT_SITE_TRAP;
		}
	return *taken ? state : SDT_SITE_OFF;
}

/* -- slots: who takes a probe's firings (docs/sessions.md) ------------------------------------------------- */

static SDT_CODE struct sdt_slot *probe_slot(const struct sdt_probe *p)
{
	return p->program ? (struct sdt_slot *)sdt_rel(&p->program) : 0;
}

/*
 * The route of ``slot`` after its sessions or programs changed (under the lock). The default session alone with no
 * program: 0, the recorder's fast path. Else 1: the slow path serves the sessions (none: a firing on the way while
 * the sites are disarmed is recorded nowhere). The default session's program's guard is copied in only while the
 * route is 0 (no recorder reads it then); any other session present, there is no guard (a span of every value).
 */
static SDT_CODE void slot_settle(struct sdt_slot *slot)
{
	const struct sdt_program *p0 = slot->program[0];

	if (slot->sessions == 1 && !p0) {
		__atomic_store_n(&slot->route, (sdt_word)0, __ATOMIC_RELEASE);
		return;
	}
	if (slot->sessions == 1 && !slot->route) {	/* the default session's program alone: its guard first */
		slot->guard_lo = p0->guard_lo;
		slot->guard_arg = p0->guard_arg;
		slot->guard_shift = p0->guard_shift;
		slot->guard_flip = p0->guard_flip;
		__atomic_store_n(&slot->guard_span, p0->guard_span, __ATOMIC_RELAXED);
	} else if (slot->sessions != 1) {
		__atomic_store_n(&slot->guard_span, ~(sdt_u64)0, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&slot->route, (sdt_word)1, __ATOMIC_RELEASE);
}

/* Session ``id`` takes the probe of ``slot`` with program ``prog`` (NULL: every firing), under the lock: the
 * guard gone first when another session joins, the program before the session's bit (the recorder reads the bit
 * with acquire, then the program). */
static SDT_CODE void slot_join(struct sdt_slot *slot, int id, const struct sdt_program *prog)
{
	if (id)
		__atomic_store_n(&slot->guard_span, ~(sdt_u64)0, __ATOMIC_RELAXED);
	__atomic_store_n(&slot->program[id], prog, __ATOMIC_RELEASE);
	__atomic_store_n(&slot->sessions, slot->sessions | 1u << id, __ATOMIC_RELEASE);
	slot_settle(slot);
}

/* Session ``id`` lets the probe of ``slot`` go (its program stays in the slot until the caller waited for the
 * recorders that read the bit: see slot_forget). */
static SDT_CODE void slot_leave(struct sdt_slot *slot, int id)
{
	__atomic_store_n(&slot->sessions, slot->sessions & ~(1u << id), __ATOMIC_RELEASE);
	slot_settle(slot);
}

/* Once no recorder reads session ``id``'s bit (visits_wait after slot_leave): its program is gone from the slot. */
static SDT_CODE void slot_forget(struct sdt_slot *slot, int id)
{
	if (!(slot->sessions & 1u << id) && slot->program[id])
		__atomic_store_n(&slot->program[id], (const struct sdt_program *)0, __ATOMIC_RELEASE);
}

/* -- arming ---------------------------------------------------------------------------------- */

static SDT_CODE int is_armed(unsigned state)
{
	return state == SDT_SITE_TRAP || state == SDT_SITE_BRANCH;
}

/*
 * Mark site ``s`` (of table ``t``: its mark_lo and mark_hi bound the sites marked for the run) to become ``state`` in the coming run (its entry's ``next``), after checking its bytes are what
 * the runtime last wrote there. Returns 1 when the site is (or will be) in that state, 0 when it cannot be written.
 */
static SDT_CODE int mark(struct sdt_module *t, struct sdt_site *s, unsigned state, unsigned *far)
{
	sdt_u8 now[SDT_SITE_MAX], old[SDT_SITE_MAX];
	unsigned cur = s->state, i;

	if ((s->form == SDT_FORM_ISEN || s->form == SDT_FORM_GOTO) && state == SDT_SITE_TRAP)
		state = SDT_SITE_BRANCH;	/* "result = 1", or the asm goto's jump, in either mode */
	if (state == SDT_SITE_BRANCH && !sdt_site_bytes(s, SDT_SITE_BRANCH, now)) {
		state = SDT_SITE_TRAP;	/* the recorder is out of this site's branch range */
		(*far)++;
	}
	if (cur == state)
		return 1;
	sdt_site_bytes(s, cur, old);
	read_text(now, sdt_site_address(s), s->size);
	for (i = 0; i < s->size; i++)
		if (now[i] != old[i]) {
			sdt_report_site(s, "changed since the runtime wrote it: left alone", now, s->size, old);
			s->state = SDT_SITE_CHANGED;
			if (is_armed(cur))
				armed--;
			return 0;
		}
	if (is_armed(cur))
		armed--;
	if (is_armed(state))
		armed++;
	s->next = (sdt_u8)state;
	if (!t->mark_lo)
		t->mark_lo = s;
	t->mark_hi = s + 1;
	return 1;
}

/* Make every marked change, in every table: one run of the patch protocol, whatever the number of sites. */
static SDT_CODE void run_marked(void)
{
	sdt_poke_run(&kernel, armed != 0);
	sdt_probes_enabled = armed != 0;
}

/* A site whose probe no session takes any more (its slot's sessions 0; no slot: the default session let it go) is
 * marked to be disarmed: 1 when it will be (as mark counts), and 1 for a site another session keeps armed. */
static SDT_CODE int let_go(struct sdt_module *t, struct sdt_site *s, const struct sdt_slot *slot, unsigned *far)
{
	if (slot && slot->sessions)
		return 1;
	return mark(t, s, SDT_SITE_OFF, far);
}

/*
 * Whether every probe ``sp`` matches has a slot, which a session other than the default one needs (its bit lives
 * there): 0, or SDT_ERR_PROG_SLOT (under the lock, before anything changes).
 */
static SDT_CODE int slots_for(const struct spec *sp)
{
	struct sdt_module *t;
	struct sdt_site *s;

	for_each_site(t, s)
		if ((s->state == SDT_SITE_OFF || is_armed(s->state)) && !probe_slot(sdt_site_probe(s)) &&
		    matches(sp, t, sdt_site_probe(s)))
			return SDT_ERR_PROG_SLOT;
	return 0;
}

/* Session ``x`` enables (``arm``, with ``mode``) or disables the probes ``text`` matches: the sites armed (let go). */
static SDT_CODE int change(const struct sdt_session *x, const char *text, int arm, int mode)
{
	struct spec sp;
	struct sdt_module *t;
	struct sdt_site *s;
	const struct sdt_probe *last = 0;
	unsigned far = 0, state = mode == SDT_BRANCH ? SDT_SITE_BRANCH : SDT_SITE_TRAP;
	int count = 0, hit = 0, id;

	if (!text)
		return SDT_ERR_ARG;
	if (!ready)
		return SDT_ERR_INIT;
	if (arm && mode != SDT_TRAP && mode != SDT_BRANCH)
		return SDT_ERR_MODE;
	if (parse_spec(text, &sp))
		return SDT_ERR_SPEC;
	take();
	id = session_id(x);	/* under the lock: a session closing meanwhile is closed */
	count = id < 0 ? SDT_ERR_SESSION : id ? slots_for(&sp) : 0;
	if (count) {
		give();
		return count;
	}
	for_each_site(t, s) {
		const struct sdt_probe *p = sdt_site_probe(s);
		struct sdt_slot *slot;
		if (s->state != SDT_SITE_OFF && !is_armed(s->state))
			continue;
		if (p != last) {
			last = p;
			hit = matches(&sp, t, p);
		}
		if (!hit)
			continue;
		slot = probe_slot(p);
		if (arm) {	/* its bit before its sites: an armed site's firing finds the session */
			if (slot && !(slot->sessions & 1u << id))
				slot_join(slot, id, slot->program[id]);
			count += mark(t, s, state, &far);
		} else {
			if (slot && (slot->sessions & 1u << id))
				slot_leave(slot, id);
			count += let_go(t, s, slot, &far);
		}
	}
	run_marked();
	remember(id, text, arm ? mode : 0);
	give();
	if (far)
		sdt_report("sites out of branch range of their recorder were armed with the breakpoint");
	return count;
}

SDT_CODE int sdt_enable(const char *spec, int mode)
{
	return change(&default_session, spec, 1, mode);
}

SDT_CODE int sdt_disable(const char *spec)
{
	return change(&default_session, spec, 0, 0);
}

SDT_CODE int sdt_set_mode(int mode)
{
	struct sdt_module *t;
	struct sdt_site *s;
	unsigned far = 0;
	int count = 0;

	if (!ready)
		return SDT_ERR_INIT;
	if (mode != SDT_TRAP && mode != SDT_BRANCH)
		return SDT_ERR_MODE;
	take();
	for_each_site(t, s)
		if (is_armed(s->state) && s->form != SDT_FORM_ISEN && s->form != SDT_FORM_GOTO)
			count += mark(t, s, mode == SDT_BRANCH ? SDT_SITE_BRANCH : SDT_SITE_TRAP, &far);
	run_marked();
	remembered_mode(mode);
	give();
	if (far)
		sdt_report("sites out of branch range of their recorder were armed with the breakpoint");
	return count;
}

/* -- the breakpoint handler ------------------------------------------------------------------ */

typedef void (*recorder_fn)(sdt_word, sdt_word, sdt_word, sdt_word, sdt_word, sdt_word);

static SDT_CODE void fire(struct sdt_frame *f, const struct sdt_site *s)
{
	const struct sdt_probe *p = sdt_site_probe(s);
	sdt_word a[SDT_MAX_ARGS];
	unsigned k;

	if (!p->recorder)
		return;
	for (k = 0; k < SDT_MAX_ARGS; k++)
		a[k] = k < p->nargs ? sdt_arch_arg(f, k, s->form) : 0;
	((recorder_fn)sdt_rel(&p->recorder))(a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* Do what site ``s`` does in ``state``, with the CPU stopped on the breakpoint at its start. */
static SDT_CODE int emulate(struct sdt_frame *f, const struct sdt_site *s, unsigned state)
{
	sdt_word a = sdt_site_address(s), next = a + s->size;
	const struct sdt_probe *p = sdt_site_probe(s);
	sdt_word rec = p->recorder ? sdt_rel(&p->recorder) : 0;
	int fired = 0;

	switch (s->form) {
	case SDT_FORM_ISEN:
		sdt_arch_set_result(f, state == SDT_SITE_OFF ? 0 : 1);
		f->pc = next;
		break;
	case SDT_FORM_CALL:
		if (state == SDT_SITE_BRANCH && rec) {
			sdt_arch_emulate_call(f, rec, next);
			break;
		}
		if (state == SDT_SITE_TRAP)
			fire(f, s), fired = 1;
		f->pc = next;
		break;
	case SDT_FORM_TAIL:
		if (state == SDT_SITE_BRANCH && rec) {
			f->pc = rec;
			break;
		}
		if (state == SDT_SITE_TRAP)
			fire(f, s), fired = 1;
		sdt_arch_emulate_return(f);
		break;
	case SDT_FORM_GOTO:	/* armed, the jump to the target (whose code fires); disabled, the NOP */
		f->pc = state == SDT_SITE_OFF ? next : sdt_site_stub(s);
		break;
	case SDT_FORM_COND:
		if (!sdt_arch_cond_taken(f, s->keep)) {
			f->pc = next;
			break;
		}
		if (state == SDT_SITE_BRANCH && rec) {
			f->pc = rec;
			break;
		}
		if (state == SDT_SITE_TRAP)
			fire(f, s), fired = 1;
		sdt_arch_emulate_return(f);	/* taken, the jump reaches the empty stub, which returns */
		break;
	}
	return fired ? SDT_TRAP_FIRED : SDT_TRAP_EMULATED;
}

/* A breakpoint at ``a``, in no table: resumed there when it is gone (a site of a module unloaded since the CPU
 * took it, its disabled form written); else not the runtime's (the caller looks again when ``a`` is in_gone). */
static SDT_CODE int trap_gone(struct sdt_frame *f, sdt_word a)
{
	sdt_u8 code[SDT_SITE_MAX];

	if (!in_gone(a))
		return SDT_TRAP_NOT_OURS;
	read_text(code, a, sdt_arch_bp_len);
	if (sdt_arch_is_breakpoint(code))
		return SDT_TRAP_NOT_OURS;
	f->pc = a;
	return SDT_TRAP_RETRY;
}

static SDT_CODE int trap_in(struct sdt_frame *f, sdt_word a)
{
	const struct sdt_module *t;
	struct sdt_site *s = 0;
	sdt_u8 code[SDT_SITE_MAX];

	for (t = &kernel; t && !s; t = next_table(t))
		s = find_site(t, a);
	if (!s) {	/* a site of a module unloaded since the CPU took the breakpoint? */
		int r = trap_gone(f, a);
		if (r != SDT_TRAP_NOT_OURS || !in_gone(a))
			return r;
		/* a breakpoint there again: the module was loaded again meanwhile, and arms it (its table is on the
		 * list before its first breakpoint is written) */
		for (t = &kernel; t && !s; t = next_table(t))
			s = find_site(t, a);
		if (!s)
			return SDT_TRAP_NOT_OURS;
	}
	if (s->state != SDT_SITE_OFF && !is_armed(s->state))
		return SDT_TRAP_NOT_OURS;
	read_text(code, a, s->size);
	if (!sdt_arch_is_breakpoint(code)) {	/* gone since the CPU fetched it: run what is there now */
		f->pc = a;
		return SDT_TRAP_RETRY;
	}
	/* An armed trap, or a change in flight's breakpoint: what the site's state says, its old one until the
	 * change commits (sdt_patch.c). */
	return emulate(f, s, sdt_load_acquire(&s->state));
}

SDT_CODE int sdt_trap(struct sdt_frame *f)
{
	unsigned side;
	int r;

	if (!f)
		return SDT_ERR_ARG;
	if (!ready)
		return SDT_TRAP_NOT_OURS;
	side = trap_enter();	/* sdt_module_unload waits for this CPU to leave before it forgets a module */
	r = trap_in(f, sdt_arch_trap_address(f));
	trap_leave(side);
	return r;
}

/* -- where a host finds the runtime ----------------------------------------------------------- */

extern const char sdt_protocol[];

/* The entry points in a section of their own, which strip keeps: `sdtgen boot` calls them by it. */
__attribute__((used, section("sdt_entries"))) const struct sdt_entries sdt_runtime_entries = {
	SDT_ENTRIES_MAGIC, sdt_init, sdt_cpu_attach, sdt_enable, sdt_disable, sdt_set_mode, sdt_trap, sdt_flush,
	sdt_protocol, sdt_enable_program, sdt_disable_program, sdt_agg_attach, sdt_agg_switch, sdt_module_load,
	sdt_module_unload, sdt_session_open, sdt_session_close, sdt_session_enable, sdt_session_disable,
	sdt_session_enable_program, sdt_session_disable_program, sdt_session_switch, sdt_session_flush,
	sdt_session_bytes, sdt_snapshot,
};
