/*
 * The runtime built for the host (with one architecture's encoders: their C is plain C, and 64-bit ones
 * have the host's word), so Python can call what the kernel cannot show from outside:
 *   - the probe-spec parser and glob of sdt_manage.c (static functions: this file includes the runtime);
 *   - the patch protocol of sdt_patch.c on sites in a host buffer, every store and sync it makes logged
 *     through the hooks, with a trap's lookup of its site tried after every store.
 */
#include "sdt_runtime.c"	/* the runtime as a kernel compiles it: one file, its statics visible here */

/* One entry in each linker set, so the linker defines their bounds. */
static struct sdt_site harness_site __attribute__((used, section("set_sdt_sites_set")));
static const struct sdt_probe harness_probe __attribute__((used, section("set_sdt_probes_set")));

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
	return matches(&sp, &named.probe);
}

/* -- the patch protocol ------------------------------------------------------------------------------ */

struct host_poke {
	sdt_u64 addr;
	sdt_u32 size, state;
	sdt_u8 old[SDT_SITE_MAX], new[SDT_SITE_MAX];
};

struct host_event {	/* kind 1: a store (addr, width, the bytes it left); 2: a sync; 3: a trap's lookup */
	sdt_u64 addr;
	sdt_u32 kind, width;
	sdt_u32 found, state;	/* kind 3: whether sdt_poke_find found the site, and what it says it becomes */
	sdt_u8 bytes[8];
};

#define MAX_SITES 64
#define MAX_EVENTS 65536

struct sdt_site host_sites[MAX_SITES];	/* site i is the one host_batch's in[i] changes */
static struct sdt_poke host_pokes[MAX_SITES];
static struct host_poke *host_in;
static unsigned host_n;
struct host_event host_log[MAX_EVENTS];
unsigned host_nlog;

static void log_event(sdt_u64 addr, unsigned kind, unsigned width)
{
	struct host_event *e;
	unsigned i;

	if (host_nlog == MAX_EVENTS)
		return;
	e = &host_log[host_nlog++];
	e->addr = addr;
	e->kind = kind;
	e->width = width;
	e->found = e->state = 0;
	for (i = 0; i < width && i < 8; i++)
		e->bytes[i] = ((const sdt_u8 *)(sdt_word)addr)[i];
}

static void on_store(void *addr, unsigned long len)
{
	unsigned i, k;

	log_event((sdt_word)addr, 1, (unsigned)len);
	/* a CPU trapping on a breakpoint now: does sdt_trap's lookup find the site, and what it becomes? */
	for (i = 0; i < host_n; i++) {
		const sdt_u8 *code = (const sdt_u8 *)(sdt_word)host_in[i].addr;
		const struct sdt_poke *p;
		int bp = 1;

		for (k = 0; k < sdt_arch_bp_len; k++)
			bp &= code[k] == sdt_arch_bp[k];
		if (!bp)
			continue;
		p = sdt_poke_find(host_in[i].addr);
		log_event(host_in[i].addr, 3, 0);
		host_log[host_nlog - 1].found = p != 0;
		host_log[host_nlog - 1].state = p ? p->state : 0;
		if (p)
			sdt_poke_put();
	}
}

static void on_sync(void)
{
	log_event(0, 2, 0);
}

/* Run one batch over ``n`` sites (their bytes are already ``old`` in host memory); the log tells the rest. */
int host_batch(struct host_poke *in, unsigned n)
{
	unsigned i, k;

	if (n > MAX_SITES)
		return -1;
	sdt_hooks.icache_flush = on_store;
	sdt_hooks.sync_cores = on_sync;
	host_in = in;
	host_n = n;
	host_nlog = 0;
	for (i = 0; i < n; i++) {
		host_pokes[i].site = &host_sites[i];
		host_pokes[i].addr = (sdt_word)in[i].addr;
		host_pokes[i].size = (sdt_u8)in[i].size;
		host_pokes[i].state = (sdt_u8)in[i].state;
		for (k = 0; k < SDT_SITE_MAX; k++) {
			host_pokes[i].old[k] = in[i].old[k];
			host_pokes[i].new[k] = in[i].new[k];
		}
	}
	sdt_poke_batch(host_pokes, n);
	host_n = 0;
	return (int)host_nlog;
}

/* The arch encoders, as the protocol's callers use them. */
unsigned host_encode(sdt_u8 *out, unsigned form, unsigned size, unsigned state, sdt_u64 site, sdt_u64 stub,
		     sdt_u64 recorder, unsigned keep)
{
	return sdt_arch_encode(out, form, size, state, (sdt_word)site, (sdt_word)stub, (sdt_word)recorder,
			       (sdt_u8)keep);
}
