/*
 * The runtime built for the host (with one architecture's encoders: their C is plain C, and 64-bit ones
 * have the host's word), so Python can call what the kernel cannot show from outside:
 *   - the probe-spec parser and glob of sdt_manage.c (static functions: this file includes the runtime);
 *   - a site table over a buffer of host memory holding sites GNU as assembled, booted by sdt_init and
 *     changed by sdt_enable, sdt_disable and sdt_set_mode, every store, sync and opened text span logged
 *     through the hooks, and after each store and sync how every site behaves for a CPU that runs it
 *     then: its bytes, or when they start with the breakpoint what sdt_trap makes of it.
 */
#include <sys/mman.h>

#include "sdt_runtime.c"	/* the runtime as a kernel compiles it: one file, its statics visible here */

/* -- specs ------------------------------------------------------------------------------------------ */

int host_glob(const char *pattern, const char *s)
{
	const char *end = pattern;

	while (*end)
		end++;
	return glob(pattern, end, s);
}

/* The four fields as offsets into ``text`` (start, end); -1 for a field the text does not give. */
int host_parse(const char *text, int *out)
{
	struct spec sp;
	const char *end = text;
	int i, r = parse_spec(text, &sp);

	while (*end)
		end++;
	for (i = 0; i < 4 && !r; i++) {
		int given = sp.field[i] >= text && sp.field[i] <= end;
		out[2 * i] = given ? (int)(sp.field[i] - text) : -1;
		out[2 * i + 1] = given ? (int)(sp.end[i] - text) : -1;
	}
	return r;
}

static struct {
	struct sdt_probe probe;
	char names[4][256];
} named;

static sdt_s32 rel(const void *to, const sdt_s32 *field)
{
	return (sdt_s32)((sdt_word)to - (sdt_word)field);
}

/* Whether ``spec`` matches the probe provider:module:function:name (each at most 255 bytes). */
int host_matches(const char *spec, const char *const names[4])
{
	sdt_s32 *fields[4] = {&named.probe.provider, &named.probe.module, &named.probe.function, &named.probe.name};
	struct spec sp;
	int i, k;

	if (parse_spec(spec, &sp))
		return -1;
	for (i = 0; i < 4; i++) {
		for (k = 0; names[i][k] && k < 255; k++)
			named.names[i][k] = names[i][k];
		named.names[i][k] = 0;
		*fields[i] = rel(named.names[i], fields[i]);
	}
	return matches(&sp, &kernel, &named.probe);
}

/* -- a site table over host memory ------------------------------------------------------------------ */

#define MAX_SITES 256
#define MAX_PROBES 64
#define MAX_EVENTS 4096
#define TEXT_BYTES (1 << 16)

/* The linker sets: as many entries as a test may use; those it does not are no entry at all (refused). */
struct sdt_site host_table[MAX_SITES] __attribute__((used, section("set_sdt_sites_set")));
struct sdt_probe host_probes[MAX_PROBES] __attribute__((used, section("set_sdt_probes_set")));
sdt_u8 host_text[TEXT_BYTES] __attribute__((aligned(4096)));	/* the sites, stubs and recorders */
static char host_names[MAX_PROBES][4][32];

struct host_site {	/* what the test says of site i: where (an offset in host_text), its probe, form, length */
	sdt_u32 offset, probe;
	sdt_u32 form, length;
};

struct host_probe {	/* offsets in host_text; the recorder holds a host `ret` (a trap calls it) */
	sdt_u32 stub, isenabled, recorder;
	char names[4][32];
};

struct host_event {	/* kind 1: a store (addr, width, the bytes it left); 2: a sync; 4: a span opened; 5: closed */
	sdt_u64 addr;
	sdt_u32 kind, width;
	sdt_u8 bytes[8];
};

#define BEHAVES_TORN 0xff	/* neither state's bytes nor the breakpoint */
#define BEHAVES_REFUSED 0xfe	/* the breakpoint, which sdt_trap did not resolve */

struct host_event host_log[MAX_EVENTS];
sdt_u8 host_behaves[MAX_EVENTS][MAX_SITES];	/* after event k: the state site i behaves as (SDT_SITE_*) */
unsigned host_nlog;
static unsigned host_n;
static struct host_site host_in[MAX_SITES];
static int observing;	/* 1: stores and syncs are logged with how each site behaves; 2: only logged */
static struct sdt_range host_ranges[4];

/* A CPU trapping on site s's breakpoint now: the state whose instruction sdt_trap made it run. */
static sdt_u8 trapped_as(const struct sdt_site *s)
{
	sdt_word a = sdt_site_address(s), stack[4] = {0, 0, 0x5eed, 0};
	const struct sdt_probe *p = sdt_site_probe(s);
	struct sdt_frame f;
	unsigned k;
	int r;

	for (k = 0; k < 32; k++) {	/* flags under which a conditional site jumps (the taken path fires) */
		f.flags = (k & 1) | (k & 2) << 1 | (k & 4) << 4 | (k & 8) << 4 | (sdt_u64)(k & 16) << 7;
		if (s->form != SDT_FORM_COND || sdt_arch_cond_taken(&f, s->keep))
			break;
	}
	f.pc = a;
	f.pc = a + (a - sdt_arch_trap_address(&f));	/* x86 traps with the pc after the int3 */
	f.sp = (sdt_word)&stack[2];
	f.ret = 7;
	f.link = 0x11f0;
	for (k = 0; k < 6; k++)
		f.arg[k] = k;
	r = sdt_trap(&f);
	if (r == SDT_TRAP_FIRED)
		return SDT_SITE_TRAP;
	if (r != SDT_TRAP_EMULATED)
		return BEHAVES_REFUSED;
	if (s->form == SDT_FORM_ISEN)
		return f.ret == 1 ? SDT_SITE_BRANCH : f.ret == 0 ? SDT_SITE_OFF : BEHAVES_TORN;
	return f.pc == sdt_rel(&p->recorder) ? SDT_SITE_BRANCH : SDT_SITE_OFF;
}

static sdt_u8 behaves(unsigned i)
{
	sdt_word a = (sdt_word)host_text + host_in[i].offset;
	const struct sdt_site *s = find_site(&kernel, a);
	sdt_u8 now[SDT_SITE_MAX], want[SDT_SITE_MAX];
	static const unsigned states[] = {SDT_SITE_OFF, SDT_SITE_BRANCH, SDT_SITE_TRAP};	/* is-enabled: 1 is BRANCH */
	unsigned k, j;

	if (!s)
		return BEHAVES_REFUSED;
	if (s->state != SDT_SITE_OFF && s->state != SDT_SITE_TRAP && s->state != SDT_SITE_BRANCH)
		return s->state;	/* never written */
	read_text(now, a, s->size);
	if (sdt_arch_is_breakpoint(now))
		return trapped_as(s);
	for (j = 0; j < 3; j++) {
		if (sdt_site_bytes(s, states[j], want) != s->size)
			continue;
		for (k = 0; k < s->size && now[k] == want[k]; k++)
			;
		if (k == s->size)
			return (sdt_u8)states[j];
	}
	return BEHAVES_TORN;
}

static void log_event(sdt_u64 addr, unsigned kind, unsigned width)
{
	struct host_event *e;
	unsigned i;

	if (!observing || host_nlog == MAX_EVENTS)
		return;
	e = &host_log[host_nlog];
	e->addr = addr;
	e->kind = kind;
	e->width = width;
	for (i = 0; i < 8; i++)
		e->bytes[i] = kind == 1 && i < width ? ((const sdt_u8 *)(sdt_word)addr)[i] : 0;
	for (i = 0; i < host_n; i++)
		host_behaves[host_nlog][i] = kind <= 2 && observing == 1 ? behaves(i) : 0;
	host_nlog++;
}

static void on_store(void *addr, unsigned long len)
{
	log_event((sdt_word)addr, 1, (unsigned)len);
}

static void on_sync(void)
{
	log_event(0, 2, 0);
}

static void *on_open(void *addr, unsigned long len)
{
	log_event((sdt_word)addr, 4, (unsigned)len);
	return addr;
}

static void on_close(void *alias, unsigned long len)
{
	log_event((sdt_word)alias, 5, (unsigned)len);
}

/*
 * A fresh runtime over sites[0..n) and probes[0..np) (host_text already holds their bytes): the table filled,
 * then sdt_init, given ``nranges`` text ranges (offsets in host_text; 0: none), its stores and spans logged.
 * Returns what sdt_init returned.
 */
int host_boot(const struct host_site *sites, unsigned n, const struct host_probe *probes, unsigned np,
	      const struct sdt_range *ranges, unsigned nranges)
{
	struct sdt_hooks hooks;
	unsigned i, k;

	if (n > MAX_SITES || np > MAX_PROBES || nranges > 4 ||
	    mprotect(host_text, TEXT_BYTES, PROT_READ | PROT_WRITE | PROT_EXEC))	/* the recorders run */
		return -100;
	for (i = 0; i < MAX_SITES; i++) {
		struct sdt_site *e = &host_table[i];
		e->site = e->probe = 0;
		e->form = e->length = e->mode = e->keep = e->state = e->size = 0;
		((sdt_u8 *)e)[14] = ((sdt_u8 *)e)[15] = 0;
		if (i >= n)
			continue;
		host_in[i] = sites[i];
		e->site = rel(host_text + sites[i].offset, &e->site);
		e->probe = rel(&host_probes[sites[i].probe], &e->probe);
		e->form = (sdt_u8)sites[i].form;
		e->length = (sdt_u8)sites[i].length;
	}
	for (i = 0; i < np; i++) {
		struct sdt_probe *p = &host_probes[i];
		sdt_s32 *names[4] = {&p->provider, &p->module, &p->function, &p->name};
		for (k = 0; k < 4; k++) {
			unsigned c;
			for (c = 0; c < 31 && probes[i].names[k][c]; c++)
				host_names[i][k][c] = probes[i].names[k][c];
			host_names[i][k][c] = 0;
			*names[k] = rel(host_names[i][k], names[k]);
		}
		p->stub = rel(host_text + probes[i].stub, &p->stub);
		p->isenabled = rel(host_text + probes[i].isenabled, &p->isenabled);
		p->recorder = rel(host_text + probes[i].recorder, &p->recorder);
		p->nargs = 0;
		p->id = (sdt_u16)i;
		p->key = i + 1;
	}
	host_n = n;
	ready = 0;
	armed = 0;
	sdt_probes_enabled = 0;
	for (i = 0; i < sizeof(hooks); i++)
		((sdt_u8 *)&hooks)[i] = 0;
	hooks.icache_flush = on_store;
	hooks.sync_cores = on_sync;
	hooks.text_open = on_open;
	hooks.text_close = on_close;
	for (i = 0; i < nranges; i++) {
		host_ranges[i].start = (sdt_word)host_text + ranges[i].start;
		host_ranges[i].size = ranges[i].size;
	}
	hooks.text = nranges ? host_ranges : 0;
	hooks.ntext = nranges;
	host_nlog = 0;
	observing = 2;
	i = (unsigned)sdt_init(&hooks);
	observing = 0;
	return (int)i;
}

/* One call: 0 sdt_enable(spec, mode), 1 sdt_disable(spec), 2 sdt_set_mode(mode); its result. The log says how. */
int host_change(int what, const char *spec, int mode)
{
	int r;

	host_nlog = 0;
	observing = 1;
	r = what == 0 ? sdt_enable(spec, mode) : what == 1 ? sdt_disable(spec) : sdt_set_mode(mode);
	observing = 0;
	return r;
}

/* The state the table keeps for the site at host_text + offset (0: no entry there). */
int host_state(sdt_u32 offset)
{
	const struct sdt_site *s = find_site(&kernel, (sdt_word)host_text + offset);

	return s ? s->state : 0;
}

/* The arch encoders, as the protocol's callers use them. */
unsigned host_encode(sdt_u8 *out, unsigned form, unsigned size, unsigned state, sdt_u64 site, sdt_u64 stub,
		     sdt_u64 recorder, unsigned keep)
{
	return sdt_arch_encode(out, form, size, state, (sdt_word)site, (sdt_word)stub, (sdt_word)recorder,
			       (sdt_u8)keep);
}
