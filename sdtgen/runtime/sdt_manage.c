/*
 * sdt_manage.c - boot-time patching, arming by probe spec, and the breakpoint handler (management layer).
 *
 * The site table is the linker set set_sdt_sites_set; its entries keep
 * their state (SDT_SITE_*) and verified length in place. sdt_init sorts it
 * by address (usually it already is: one check) so sdt_trap can bisect it,
 * verifies each site before its first write, and writes the disabled form.
 * After that every write is checked against the bytes the runtime last
 * wrote, so code someone else rewrote is left alone and reported.
 */
#include "sdt_internal.h"

struct sdt_hooks sdt_hooks;
volatile _Bool sdt_probes_enabled;

#define BATCH 64	/* sites one protocol run writes (each trap looks its site up among them) */

static struct sdt_site *sites, *sites_end;
static int ready;
static int lock;
static unsigned long armed;	/* sites armed: SDT_PROBES_ENABLED() is armed != 0 */
static struct sdt_poke batch[BATCH];
static unsigned nbatch;

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

/* -- the table ----------------------------------------------------------------------------- */

static SDT_CODE int probe_valid(const struct sdt_probe *p)
{
	sdt_word a = (sdt_word)p, lo = sdt_bound(__start_set_sdt_probes_set);

	return a >= lo && a < sdt_bound(__stop_set_sdt_probes_set) && (a - lo) % sizeof(*p) == 0 &&
	       p->nargs <= SDT_MAX_ARGS;
}

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
	to->pad[0] = from->pad[0];
	to->pad[1] = from->pad[1];
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

static SDT_CODE struct sdt_site *find_site(sdt_word addr)
{
	unsigned long lo = 0, hi = (unsigned long)(sites_end - sites);

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

/* -- boot ---------------------------------------------------------------------------------- */

/* Whether [a, a + n) lies in one of the text ranges the kernel gave (any address, when it gave none). */
static SDT_CODE int in_text(sdt_word a, unsigned n)
{
	unsigned i;

	if (!sdt_hooks.ntext)
		return 1;
	for (i = 0; i < sdt_hooks.ntext; i++) {
		sdt_u64 off = (sdt_u64)a - sdt_hooks.text[i].start;
		if (off < sdt_hooks.text[i].size && n <= sdt_hooks.text[i].size - off)
			return 1;
	}
	return 0;
}

static SDT_CODE void read_text(sdt_u8 *to, sdt_word from, unsigned n)
{
	unsigned i;

	for (i = 0; i < n; i++)
		to[i] = ((const volatile sdt_u8 *)from)[i];
}

SDT_CODE int sdt_init(const struct sdt_hooks *hooks)
{
	struct sdt_site *s, *prev = 0;
	sdt_word lo = ~(sdt_word)0, hi = 0, end = 0;
	sdt_word s0 = sdt_bound(__start_set_sdt_sites_set), s1 = sdt_bound(__stop_set_sdt_sites_set);
	sdt_word p0 = sdt_bound(__start_set_sdt_probes_set), p1 = sdt_bound(__stop_set_sdt_probes_set);
	unsigned long n = (unsigned long)((s1 - s0) / sizeof(struct sdt_site));
	sdt_u8 *alias;
	sdt_u8 fixed[SDT_SITE_MAX];	/* the disabled form of the last site whose form sdt_arch_off_is_fixed */
	unsigned fixed_form = 0, fixed_size = 0;
	int patched = 0;

	if (ready || s1 < s0 || (s1 - s0) % sizeof(struct sdt_site) || p1 < p0 || (p1 - p0) % sizeof(struct sdt_probe))
		return SDT_ERR_INIT;
	sdt_copy(&sdt_hooks, hooks, sizeof(sdt_hooks));
	sites = (struct sdt_site *)s0;
	sites_end = (struct sdt_site *)s1;
	sort_sites(sites, n);
	if (n) {	/* in address order: the first and the last entry bound every site */
		lo = sdt_site_address(&sites[0]);
		hi = sdt_site_address(&sites[n - 1]) + SDT_SITE_MAX;
	}
	alias = n && sdt_hooks.text_open ? (sdt_u8 *)sdt_hooks.text_open((void *)lo, hi - lo) : (sdt_u8 *)lo;
	for (s = sites; s < sites_end; s++) {
		sdt_word a = sdt_site_address(s);
		const struct sdt_probe *p = sdt_site_probe(s);
		const sdt_u8 *code = (const sdt_u8 *)a;	/* one CPU runs: the text is read where it is */
		sdt_u8 off[SDT_SITE_MAX];
		const sdt_u8 *want;	/* the site's disabled form: off, or fixed when it is the same as the last */
		unsigned size, i;

		s->state = SDT_SITE_REFUSED;
		s->size = 0;
		if (!probe_valid(p) || s->form < SDT_FORM_CALL || s->form > SDT_FORM_ISEN || !s->length ||
		    s->length > SDT_SITE_MAX || (s->form == SDT_FORM_ISEN && !p->isenabled)) {
			sdt_report_site(s, "is not a valid table entry", 0, 0, 0);
			continue;
		}
		if (prev && a == sdt_site_address(prev) && sdt_site_probe(prev) == p && prev->form == s->form) {
			s->state = SDT_SITE_FOLDED;	/* identical code folding: one instruction, two entries */
			s->size = prev->size;
			continue;
		}
		if (a < end) {
			sdt_report_site(s, "overlaps the site before it", 0, 0, 0);
			continue;
		}
		if (!in_text(a, s->length)) {
			sdt_report_site(s, "is not in the kernel's text (or runs past its end)", 0, 0, 0);
			continue;
		}
		size = sdt_arch_verify(code, a, s->form, s->length, sdt_site_stub(s), &s->keep);
		if (!size) {
			sdt_report_site(s, "is not the expected call or jump to its stub", code, s->length, 0);
			continue;
		}
		s->size = (sdt_u8)size;
		want = fixed;
		if (s->form != fixed_form || size != fixed_size) {
			if (sdt_site_bytes(s, SDT_SITE_OFF, off) != size) {
				sdt_report_site(s, "has no disabled form", code, size, 0);
				continue;
			}
			want = off;
			if (sdt_arch_off_is_fixed(s->form)) {
				for (i = 0; i < size; i++)
					fixed[i] = off[i];
				fixed_form = s->form;
				fixed_size = size;
			}
		}
		for (i = 0; i < size; i++)	/* one CPU runs: plain stores, one sync at the end */
			if (code[i] != want[i])
				alias[a - lo + i] = want[i];
		s->state = SDT_SITE_OFF;
		prev = s;
		end = a + size;
		patched++;
	}
	if (n && sdt_hooks.text_close)
		sdt_hooks.text_close(alias, hi - lo);
	if (n && sdt_hooks.icache_flush)
		sdt_hooks.icache_flush((void *)lo, hi - lo);
	if (sdt_hooks.sync_cores)
		sdt_hooks.sync_cores();
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

static SDT_CODE int matches(const struct spec *sp, const struct sdt_probe *p)
{
	const sdt_s32 *names[4] = {&p->provider, &p->module, &p->function, &p->name};
	int i;

	for (i = 0; i < 4; i++)
		if (sp->field[i] != sp->end[i] && !glob(sp->field[i], sp->end[i], (const char *)sdt_rel(names[i])))
			return 0;
	return 1;
}

/* -- arming ---------------------------------------------------------------------------------- */

static SDT_CODE int is_armed(unsigned state)
{
	return state == SDT_SITE_TRAP || state == SDT_SITE_BRANCH;
}

static SDT_CODE void flush_batch(void)
{
	unsigned i;

	sdt_poke_batch(batch, nbatch);
	for (i = 0; i < nbatch; i++)
		if (is_armed(batch[i].state))
			armed++;
	nbatch = 0;
	sdt_probes_enabled = armed != 0;
}

/*
 * Queue site ``s`` to become ``state``, after checking its bytes are what the runtime last wrote there.
 * Returns 1 when the site is (or will be) in that state, 0 when it cannot be written.
 */
static SDT_CODE int queue(struct sdt_site *s, unsigned state, unsigned *far)
{
	struct sdt_poke *p;
	sdt_u8 now[SDT_SITE_MAX];
	unsigned cur = s->state, i;
	sdt_word a = sdt_site_address(s);

	if (s->form == SDT_FORM_ISEN && state == SDT_SITE_TRAP)
		state = SDT_SITE_BRANCH;	/* an is-enabled check armed is "result = 1" in either mode */
	if (state == SDT_SITE_BRANCH && !sdt_site_bytes(s, SDT_SITE_BRANCH, now)) {
		state = SDT_SITE_TRAP;	/* the recorder is out of this site's branch range */
		(*far)++;
	}
	if (cur == state)
		return 1;
	if (nbatch == BATCH)
		flush_batch();
	p = &batch[nbatch];
	p->site = s;
	p->addr = a;
	p->size = s->size;
	p->state = (sdt_u8)state;
	sdt_site_bytes(s, cur, p->old);
	sdt_site_bytes(s, state, p->new);
	read_text(now, a, s->size);
	for (i = 0; i < s->size; i++)
		if (now[i] != p->old[i]) {
			sdt_report_site(s, "changed since the runtime wrote it: left alone", now, s->size, p->old);
			s->state = SDT_SITE_CHANGED;
			if (is_armed(cur))
				armed--;
			return 0;
		}
	if (is_armed(cur))
		armed--;
	nbatch++;
	return 1;
}

static SDT_CODE int change(const char *text, int arm, int mode)
{
	struct spec sp;
	struct sdt_site *s;
	const struct sdt_probe *last = 0;
	unsigned far = 0;
	int hit = 0, count = 0;

	if (!ready)
		return SDT_ERR_INIT;
	if (arm && mode != SDT_TRAP && mode != SDT_BRANCH)
		return SDT_ERR_MODE;
	if (parse_spec(text, &sp))
		return SDT_ERR_SPEC;
	take();
	for (s = sites; s < sites_end; s++) {
		const struct sdt_probe *p = sdt_site_probe(s);
		if (s->state != SDT_SITE_OFF && !is_armed(s->state))
			continue;
		if (p != last) {
			last = p;
			hit = matches(&sp, p);
		}
		if (hit)
			count += queue(s, arm ? (mode == SDT_BRANCH ? SDT_SITE_BRANCH : SDT_SITE_TRAP) : SDT_SITE_OFF, &far);
	}
	flush_batch();
	give();
	if (far)
		sdt_report("sites out of branch range of their recorder were armed with the breakpoint");
	return count;
}

SDT_CODE int sdt_enable(const char *spec, int mode)
{
	return change(spec, 1, mode);
}

SDT_CODE int sdt_disable(const char *spec)
{
	return change(spec, 0, 0);
}

SDT_CODE int sdt_set_mode(int mode)
{
	struct sdt_site *s;
	unsigned far = 0;
	int count = 0;

	if (!ready)
		return SDT_ERR_INIT;
	if (mode != SDT_TRAP && mode != SDT_BRANCH)
		return SDT_ERR_MODE;
	take();
	for (s = sites; s < sites_end; s++)
		if (is_armed(s->state) && s->form != SDT_FORM_ISEN)
			count += queue(s, mode == SDT_BRANCH ? SDT_SITE_BRANCH : SDT_SITE_TRAP, &far);
	flush_batch();
	give();
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

SDT_CODE int sdt_trap(struct sdt_frame *f)
{
	sdt_word a = sdt_arch_trap_address(f);
	const struct sdt_poke *p;
	struct sdt_site *s;
	sdt_u8 code[SDT_SITE_MAX];
	int r;

	if (!ready)
		return SDT_TRAP_NOT_OURS;
	p = sdt_poke_find(a);
	if (p) {	/* a patch in flight: carry on as the new instruction */
		r = emulate(f, p->site, p->state);
		sdt_poke_put();
		return r == SDT_TRAP_FIRED ? r : SDT_TRAP_EMULATED;
	}
	s = find_site(a);
	if (!s || (s->state != SDT_SITE_OFF && !is_armed(s->state)))
		return SDT_TRAP_NOT_OURS;
	read_text(code, a, s->size);
	if (!sdt_arch_is_breakpoint(code)) {	/* disarmed since the CPU fetched it: run what is there now */
		f->pc = a;
		return SDT_TRAP_RETRY;
	}
	return emulate(f, s, sdt_load_acquire(&s->state));
}

/* -- where a host finds the runtime ----------------------------------------------------------- */

extern const char sdt_protocol[];

/* The entry points in a section of their own, which strip keeps: `sdtgen boot` calls them by it. */
__attribute__((used, section("sdt_entries"))) const struct sdt_entries sdt_runtime_entries = {
	SDT_ENTRIES_MAGIC, sdt_init, sdt_cpu_attach, sdt_enable, sdt_disable, sdt_set_mode, sdt_trap, sdt_flush,
	sdt_protocol, sdt_enable_program, sdt_disable_program, sdt_agg_attach, sdt_agg_switch,
};
