/*
 * sdt_control.c - the control core: the commands a host sends to a kernel (management layer).
 *
 * One command a line, words separated by spaces, numbers in hexadecimal; the words and error codes
 * are the SDT_CTL_* and SDT_ERR_* of sdt_runtime.h (rendered from sdtgen/layout.py, which the host
 * reads too). Every command is answered through the caller's reply function, one line at a time,
 * the last line `ok COMMAND N` or `error CODE COMMAND: TEXT`. Whatever bytes arrive, a command the core cannot
 * use is refused that way: nothing is read or called that the words did not name and the kernel did
 * not allow (a call's address must lie in the kernel's text ranges).
 *
 * The kernel gives the means (struct sdt_control_ops): which CPU runs the command, how to run a
 * function on another CPU, how to catch a fault in a call, how to send the rings' packets. What the
 * kernel does not give, the commands that need it refuse (SDT_ERR_UNSUPPORTED). docs/control.md.
 */
#include "sdt_internal.h"

SDT_INLINE_ATOMICS_BEGIN

#define LINE 1024	/* a reply line: a probe's four names, each at most 255 bytes, fit */
#define MAX_READ 0x80	/* bytes one `read` answers */
#define PACE (1ul << 16)	/* torture: polls for a caller's call between two toggles, at most */
#define SETTLE (1ul << 24)	/* torture: polls for a caller's two calls after a disarm, at most (a vCPU descheduled) */

/* A call the host asked for: a function of the kernel's text and its arguments. */
struct call {
	sdt_word fn;
	sdt_word arg[SDT_MAX_ARGS];
};

/* What the core keeps per CPU, in the kernel's struct sdt_control_cpu. */
struct cpu {
	struct call call;
	sdt_word value;	/* what the call returned */
	struct sdt_control_fault fault;	/* or how it faulted */
	int faulted;
	volatile int done;	/* the job finished (stored with release) */
	sdt_word expect;	/* torture: what every call must return */
	unsigned long calls, faults, torn, wrong;
	sdt_u64 mark[3];	/* torture: what its area recorded when its sites were last disarmed (write_seq, events, discarded) */
	int marked;	/* mark holds, and the window is not checked yet */
};
_SDT_LAYOUT(sizeof(struct cpu) <= sizeof(struct sdt_control_cpu));

struct out {
	char buf[LINE];
	unsigned n;
	sdt_control_reply reply;
	const char *cmd;	/* the command's word, which its `error` line names (NULL: none yet) */
	unsigned long cmdlen;
};

#define ECHO 32	/* bytes of a word no command has that an `error` line names: enough to recognize it */

static struct sdt_control_ops ops;
static struct sdt_control_cpu *storage;
static int ready;
static int lock;
static int stop;	/* torture: the workers stop calling */
static volatile int quiet;	/* torture runs: the line stays free (sdt_control_quiet) */
static volatile int shared;	/* the host reads the rings in memory: packets stay off the line */
static struct sdt_control_input input;	/* sdt_control_input's line so far: the first channel's */
static char strings[SDT_MAX_ARGS][SDT_MAX_STRING + 1];	/* a call's string arguments */
/* The session the command acts on: `@NAME COMMAND` names it, NULL the default session (docs/sessions.md). */
static struct sdt_session *scope;

typedef sdt_word (*kernel_fn)(sdt_word, sdt_word, sdt_word, sdt_word, sdt_word, sdt_word);

static SDT_CODE struct cpu *cpu_at(unsigned k)
{
	return (struct cpu *)&storage[k];
}

/* -- replies ----------------------------------------------------------------------------------- */

static SDT_CODE void put(struct out *o, const char *s)
{
	while (*s && o->n < LINE)
		o->buf[o->n++] = *s++;
}

/* A space and a number in hexadecimal: how every number of the protocol is written. */
static SDT_CODE void put_hex(struct out *o, sdt_u64 v)
{
	int shift = 60;

	put(o, " ");
	while (shift > 0 && !(v >> shift))
		shift -= 4;
	for (; shift >= 0 && o->n < LINE; shift -= 4)
		o->buf[o->n++] = "0123456789abcdef"[(v >> shift) & 15];
}

static SDT_CODE void send(struct out *o)
{
	o->reply(o->buf, o->n);
	o->n = 0;
}

/* A string field of a reply line (say), as the sdt_u64 that carries it. */
#define SAID(s) ((sdt_u64)(sdt_word)(s))

/* One line of a reply as sdtgen/layout.py's REPLIES shapes it, ``shape`` its SDT_REPLY_*: the word, a space, then
 * one kind a field (x: a number, in hexadecimal; w, r: a string, given by SAID); ``v`` the fields, each at its
 * SDT_FIELD_*. (The `error` line has kinds of its own: error_head writes it.) */
static SDT_CODE void say(struct out *o, const char *shape, const sdt_u64 *v)
{
	while (*shape && *shape != ' ' && o->n < LINE)
		o->buf[o->n++] = *shape++;
	while (*shape && *++shape) {
		if (*shape == 'x') {
			put_hex(o, *v++);
			continue;
		}
		put(o, " ");
		put(o, (const char *)(sdt_word)*v++);
	}
	send(o);
}

/* `ok COMMAND N`: the last line of a command that succeeded, with its count (unsigned: a failure says `error`), or
 * its value (64 bits: `clock` on a 32-bit kernel). */
static SDT_CODE int ok(struct out *o, const char *what, sdt_u64 n)
{
	sdt_u64 v[SDT_FIELDS_OK];

	v[SDT_FIELD_OK_COMMAND] = SAID(what);
	v[SDT_FIELD_OK_COUNT] = n;
	say(o, SDT_REPLY_OK, v);
	return 0;
}

/* `error CODE COMMAND: TEXT`: the code in decimal (SDT_ERR_*, negative), as a person at a shell reads it too, and
 * the command refused (its first word as it came, at most ECHO bytes, each byte not printable ASCII as `?`; `?` for
 * none), so a host can tell whose reply it reads. This is the line up to TEXT. */
_SDT_LAYOUT(SDT_FIELD_ERROR_CODE == 0 && SDT_FIELD_ERROR_COMMAND == 1 && SDT_FIELD_ERROR_TEXT == 2 &&
	    SDT_FIELDS_ERROR == 3);	/* the order error_head and error write REPLIES' `error` line in */
static SDT_CODE void error_head(struct out *o, int code)
{
	char d[12];
	unsigned i = 0, v = (unsigned)-code;
	unsigned long k;

	o->n = 0;
	put(o, SDT_CTL_ERROR " -");
	do {
		d[i++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (i-- > 0 && o->n < LINE)
		o->buf[o->n++] = d[i];
	put(o, " ");
	if (!o->cmd || !o->cmdlen)
		put(o, "?");
	for (k = 0; o->cmd && k < o->cmdlen && k < ECHO && o->n < LINE; k++)	/* printable ASCII, else `?` */
		o->buf[o->n++] = o->cmd[k] > ' ' && o->cmd[k] < 0x7f ? o->cmd[k] : '?';
	put(o, ": ");
}

/* The whole `error` line, ``text`` its TEXT: the command's result. */
static SDT_CODE int error(struct out *o, int code, const char *text)
{
	error_head(o, code);
	put(o, text);
	send(o);
	return code;
}

/* -- words ------------------------------------------------------------------------------------- */

struct words {
	const char *at;
};

static SDT_CODE const char *word(struct words *w, unsigned long *len)
{
	const char *start;

	while (*w->at == ' ')
		w->at++;
	start = w->at;
	while (*w->at && *w->at != ' ')
		w->at++;
	*len = (unsigned long)(w->at - start);
	return start;
}

static SDT_CODE int is(const char *s, unsigned long len, const char *name)
{
	unsigned long i;

	for (i = 0; i < len; i++)
		if (!name[i] || name[i] != s[i])
			return 0;
	return !name[len];
}

static SDT_CODE int hex_digit(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The next word as a hexadecimal number of at most a word's width; 0 when it is not one. */
static SDT_CODE int number(struct words *w, sdt_word *v)
{
	unsigned long len, i;
	const char *s = word(w, &len);

	*v = 0;
	if (!len || len > sizeof(sdt_word) * 2)
		return 0;
	for (i = 0; i < len; i++) {
		int d = hex_digit(s[i]);
		if (d < 0)
			return 0;
		*v = *v << 4 | (sdt_word)d;
	}
	return 1;
}

/* The rest of the line, spaces before it skipped: a probe spec. */
static SDT_CODE const char *rest(struct words *w)
{
	while (*w->at == ' ')
		w->at++;
	return w->at;
}

#define CYCLE (SDT_TRAP + SDT_BRANCH + 1)	/* torture: off, branch, trap, off... */
#define MODULE_CYCLE (CYCLE + 1)	/* torture: the module unloaded and loaded again, SPEC enabled throughout */

static SDT_CODE int mode_of(struct words *w, int cycle)
{
	unsigned long len;
	const char *s = word(w, &len);

	return is(s, len, SDT_CTL_TRAP) ? SDT_TRAP : is(s, len, SDT_CTL_BRANCH) ? SDT_BRANCH :
	       cycle && is(s, len, SDT_CTL_CYCLE) ? CYCLE : cycle && is(s, len, SDT_CTL_MODULE) ? MODULE_CYCLE : 0;
}

/* Whether [a, a + 1) lies in the kernel's text (any address, when it gave no text ranges) or a loaded module's. */
static SDT_CODE int is_text(sdt_word a)
{
	const struct sdt_module *t;
	unsigned i;

	if (!sdt_hooks.ntext)
		return 1;
	for (i = 0; i < sdt_hooks.ntext; i++)
		if ((sdt_u64)a - sdt_hooks.text[i].start < sdt_hooks.text[i].size)
			return 1;
	for (t = __atomic_load_n(&sdt_tables()->next, __ATOMIC_ACQUIRE); t; t = __atomic_load_n(&t->next, __ATOMIC_ACQUIRE))
		if ((sdt_u64)a - t->text < t->text_size)
			return 1;
	return 0;
}

/* ADDR NARGS ARG...: a function of the kernel's text and up to six arguments, each a number or `s:HEX`, a
 * string (its bytes in hexadecimal) the call gets a pointer to. 0, or the error's code with its text. */
static SDT_CODE int parse_call(struct words *w, struct call *c, const char **why)
{
	sdt_word n, i;

	*why = "usage: ADDR NARGS ARG... (hexadecimal; a string argument as s:HEX)";
	if (!number(w, &c->fn) || !number(w, &n) || n > SDT_MAX_ARGS)
		return SDT_ERR_USAGE;
	for (i = 0; i < SDT_MAX_ARGS; i++) {
		unsigned long len, k;
		const char *s;
		c->arg[i] = 0;
		if (i >= n)
			continue;
		s = word(w, &len);
		if (len >= 2 && s[0] == 's' && s[1] == ':') {
			if (len % 2 || (len - 2) / 2 > SDT_MAX_STRING)
				return SDT_ERR_USAGE;
			for (k = 2; k < len; k += 2) {
				int hi = hex_digit(s[k]), lo = hex_digit(s[k + 1]);
				if (hi < 0 || lo < 0)
					return SDT_ERR_USAGE;
				strings[i][(k - 2) / 2] = (char)(hi << 4 | lo);
			}
			strings[i][(len - 2) / 2] = 0;
			c->arg[i] = (sdt_word)strings[i];
			continue;
		}
		w->at = s;
		if (!number(w, &c->arg[i]))
			return SDT_ERR_USAGE;
	}
	if (!is_text(c->fn)) {
		*why = "the address is not in the kernel's text";
		return SDT_ERR_ARG;
	}
	return 0;
}

/* -- calls on CPUs ------------------------------------------------------------------------------- */


static SDT_CODE void call_it(void *arg)
{
	struct cpu *c = (struct cpu *)arg;
	const struct call *k = &c->call;

	c->value = ((kernel_fn)k->fn)(k->arg[0], k->arg[1], k->arg[2], k->arg[3], k->arg[4], k->arg[5]);
}

/* ``fn(c)`` on this CPU, a fault in it caught when the kernel can: whether it faulted (c->fault says how). */
static SDT_CODE int guarded(void (*fn)(void *), struct cpu *c)
{
	if (!ops.guarded) {
		fn(c);
		return 0;
	}
	return ops.guarded(fn, c, &c->fault) != 0;
}

/* A `run` job: the call, then this CPU's open packet closed so the host sees what it recorded. */
static SDT_CODE void job_run(void *arg)
{
	struct cpu *c = (struct cpu *)arg;

	c->faulted = guarded(call_it, c);
	sdt_flush();
	sdt_store_release(&c->done, 1);
}

/* A `flush` job: this CPU's open packet closed, so the host reads what it recorded. */
static SDT_CODE void job_flush(void *arg)
{
	struct cpu *c = (struct cpu *)arg;

	if (scope)
		sdt_session_flush(scope);
	else
		sdt_flush();
	sdt_store_release(&c->done, 1);
}

static SDT_CODE void job_torture_calls(void *arg)
{
	struct cpu *c = (struct cpu *)arg;

	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
		call_it(c);
		if (c->value != c->expect)
			c->wrong++;
		c->calls++;
	}
}

/* A `torture` worker: calls until told to stop. The calls run in batches under one guard each: a torn
 * instruction can also corrupt the stack and fault after its own call returned; that fault ends the batch,
 * is counted, and a new batch starts. */
static SDT_CODE void job_torture(void *arg)
{
	struct cpu *c = (struct cpu *)arg;

	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE))
		if (guarded(job_torture_calls, c)) {
			c->calls++;
			if (sdt_site_contains((sdt_word)c->fault.pc))
				c->torn++;
			else
				c->faults++;
		}
	sdt_flush();
	sdt_store_release(&c->done, 1);
}

/* Start ``job`` on CPU k (here when it is this one); 0, or an SDT_ERR_*. */
static SDT_CODE int post(unsigned k, unsigned here, void (*job)(void *))
{
	struct cpu *c = cpu_at(k);

	c->done = 0;
	c->faulted = 0;
	if (k == here) {
		job(c);
		return 0;
	}
	if (!ops.start)
		return SDT_ERR_UNSUPPORTED;
	if (ops.start(k, job, c)) {
		c->done = 1;	/* nothing to wait for */
		return SDT_ERR_CPU;
	}
	return 0;
}

static SDT_CODE int is_done(void *arg)
{
	return sdt_load_acquire(&((struct cpu *)arg)->done);
}

static SDT_CODE void wait_for(unsigned k)
{
	if (ops.wait_until)
		ops.wait_until(is_done, cpu_at(k));
	while (!is_done(cpu_at(k)))
		;
}

/* -- commands ---------------------------------------------------------------------------------- */

/* CPU k's area of the session the command acts on (the default session's: the kernel's), or NULL. */
static SDT_CODE const struct sdt_cpu *area_of(unsigned k)
{
	if (scope)
		return k < scope->ncpus ? (const struct sdt_cpu *)(sdt_word)scope->cpus + k : 0;
	return ops.area ? ops.area(k) : 0;
}

static SDT_CODE unsigned this_cpu(void)
{
	unsigned k = ops.this_cpu ? ops.this_cpu() : 0;

	return k < ops.ncpus ? k : 0;
}

static SDT_CODE void drain(void)
{
	if (ops.drain && !shared)
		ops.drain();
}

/* `shared`: where each CPU's area and ring are in the machine's memory; from now on the host reads them there
 * (as sdt_consume does, claiming each packet after its copy) and nothing sends packets on the line. */
static SDT_CODE int cmd_shared(struct out *o, struct words *w)
{
	unsigned long len;
	const char *s = word(w, &len);
	unsigned k, n = 0;

	if (is(s, len, SDT_CTL_OFF)) {
		shared = 0;
		return ok(o, SDT_CTL_SHARED, 0);
	}
	if (!is(s, len, SDT_CTL_ON) || *rest(w))
		return error(o, SDT_ERR_USAGE, "usage: shared on|off");
	if (!ops.phys || !ops.area)
		return error(o, SDT_ERR_UNSUPPORTED, "the kernel does not say where its rings are in memory");
	for (k = 0; k < ops.ncpus; k++)
		if (!ops.area(k))
			return error(o, SDT_ERR_STATE, "a CPU has no ring yet");
	shared = 1;
	for (k = 0; k < ops.ncpus; k++, n++) {
		struct sdt_cpu *c = ops.area(k);
		sdt_u64 v[SDT_FIELDS_SHARED_AREA];
		v[SDT_FIELD_SHARED_AREA_CPU] = k;
		v[SDT_FIELD_SHARED_AREA_AREA] = ops.phys(c);
		v[SDT_FIELD_SHARED_AREA_RING] = ops.phys((const void *)(sdt_word)c->ring);
		say(o, SDT_REPLY_SHARED_AREA, v);
	}
	return ok(o, SDT_CTL_SHARED, n);
}

static SDT_CODE int cmd_hello(struct out *o, struct words *w)
{
	extern const char sdt_protocol[];
	const struct sdt_site *s;
	unsigned long patched = 0, refused = 0, folded = 0;
	sdt_u64 v[SDT_FIELDS_HELLO];

	(void)w;
	for (s = __start_set_sdt_sites_set; (sdt_word)s < sdt_bound(__stop_set_sdt_sites_set); s++) {
		refused += s->state == SDT_SITE_REFUSED;
		folded += s->state == SDT_SITE_FOLDED;
		patched += s->state == SDT_SITE_OFF || s->state == SDT_SITE_TRAP || s->state == SDT_SITE_BRANCH ||
			   s->state == SDT_SITE_CHANGED;
	}
	v[SDT_FIELD_HELLO_ARCH] = SAID(sdt_arch_name);
	v[SDT_FIELD_HELLO_CPUS] = ops.ncpus;
	v[SDT_FIELD_HELLO_CLOCK] = SAID(ops.clock_name ? ops.clock_name : "clock");
	v[SDT_FIELD_HELLO_CLOCK_HZ] = sdt_hooks.clock_hz;
	v[SDT_FIELD_HELLO_PATCHED] = patched;
	v[SDT_FIELD_HELLO_REFUSED] = refused;
	v[SDT_FIELD_HELLO_FOLDED] = folded;
	v[SDT_FIELD_HELLO_PROTOCOL] = SAID(sdt_protocol);
	v[SDT_FIELD_HELLO_ENTRIES] = (sdt_word)&sdt_runtime_entries;	/* where the kernel's image is: a relocated one says how far */
	v[SDT_FIELD_HELLO_VERSION] = SDT_CONTROL_VERSION;	/* a host of another protocol says so, instead of misreading replies */
	say(o, SDT_REPLY_HELLO, v);
	return ok(o, SDT_CTL_HELLO, 0);
}

static SDT_CODE int cmd_ring(struct out *o, struct words *w)
{
	sdt_word bytes, packet, policy, memory;
	int r;

	if (!number(w, &bytes) || !number(w, &packet) || !number(w, &policy) || !number(w, &memory))
		return error(o, SDT_ERR_USAGE, "usage: ring BYTES PACKET POLICY MEMORY");
	if (!ops.rings)
		return error(o, SDT_ERR_UNSUPPORTED, "the kernel attaches its own rings");
	r = ops.rings(bytes, packet, (int)policy, memory);
	if (r < 0)
		return error(o, r, r == SDT_ERR_STATE ? "the rings are attached already" :
			     "the kernel cannot give every CPU that ring (sizes: powers of two, at least two packets; "
			     "more memory?)");
	return ok(o, SDT_CTL_RING, ops.ncpus);
}

static SDT_CODE int refused(struct out *o, int r)
{
	return error(o, r, r == SDT_ERR_SPEC ? "the probe spec is not provider:module:function:name" :
		     r == SDT_ERR_INIT ? "the runtime is not initialized" :
		     r == SDT_ERR_SESSION ? "no such session (closed)" :
		     r == SDT_ERR_PROG_SLOT ? "a matched probe has no slot: a session other than the default takes none" :
		     r == SDT_ERR_MODE ? "not an arming mode" : "the runtime refused it");
}

enum arm { ARM_ENABLE, ARM_DISABLE, ARM_MODE };

static SDT_CODE int arm(struct out *o, struct words *w, enum arm what)
{
	static const char *const names[] = {SDT_CTL_ENABLE, SDT_CTL_DISABLE, SDT_CTL_MODE};
	int mode = 0, r;

	if (what != ARM_DISABLE && !(mode = mode_of(w, 0)))
		return error(o, SDT_ERR_USAGE, what == ARM_MODE ? "usage: mode trap|branch" :
			     "usage: enable trap|branch SPEC");
	if (scope && what == ARM_MODE)
		return error(o, SDT_ERR_USAGE, "mode is every session's: no @NAME");
	r = what == ARM_MODE ? sdt_set_mode(mode) :
	    scope ? (what == ARM_DISABLE ? sdt_session_disable(scope, rest(w)) : sdt_session_enable(scope, rest(w), mode)) :
	    what == ARM_DISABLE ? sdt_disable(rest(w)) : sdt_enable(rest(w), mode);
	return r < 0 ? refused(o, r) : ok(o, names[what], (unsigned long)r);
}

static SDT_CODE int cmd_enable(struct out *o, struct words *w)
{
	return arm(o, w, ARM_ENABLE);
}

static SDT_CODE int cmd_disable(struct out *o, struct words *w)
{
	return arm(o, w, ARM_DISABLE);
}

static SDT_CODE int cmd_mode(struct out *o, struct words *w)
{
	return arm(o, w, ARM_MODE);
}

static SDT_CODE void said_return(struct out *o, unsigned k)
{
	struct cpu *c = cpu_at(k);
	sdt_u64 v[SDT_FIELDS_RUN_FAULT > SDT_FIELDS_RUN_RETURN ? SDT_FIELDS_RUN_FAULT : SDT_FIELDS_RUN_RETURN];

	if (c->faulted) {
		v[SDT_FIELD_RUN_FAULT_CPU] = k;
		v[SDT_FIELD_RUN_FAULT_CAUSE] = c->fault.cause;
		v[SDT_FIELD_RUN_FAULT_PC] = c->fault.pc;
		v[SDT_FIELD_RUN_FAULT_ADDR] = c->fault.addr;
		say(o, SDT_REPLY_RUN_FAULT, v);
	} else {
		v[SDT_FIELD_RUN_RETURN_CPU] = k;
		v[SDT_FIELD_RUN_RETURN_VALUE] = c->value;
		say(o, SDT_REPLY_RUN_RETURN, v);
	}
}

/* CPU|all ADDR NARGS ARG...: the call on one CPU, or on every CPU at once; its packets, then its results. */
static SDT_CODE int cmd_run(struct out *o, struct words *w)
{
	unsigned here = this_cpu(), k, first, last;
	unsigned long len;
	const char *who = word(w, &len), *why;
	struct call call;
	sdt_word target = 0;
	int all = is(who, len, SDT_CTL_ALL), r;


	if (!all) {
		w->at = who;
		if (!number(w, &target))
			return error(o, SDT_ERR_USAGE, "usage: run CPU|all ADDR NARGS ARG...");
		if (target >= ops.ncpus)
			return error(o, SDT_ERR_CPU, "no such CPU");
	}
	r = parse_call(w, &call, &why);
	if (r)
		return error(o, r, why);
	first = all ? 0 : (unsigned)target;
	last = all ? ops.ncpus - 1 : (unsigned)target;
	if ((all && ops.ncpus > 1 && !ops.start) || (!all && target != here && !ops.start))
		return error(o, SDT_ERR_UNSUPPORTED, "the kernel runs calls on the CPU of the command only");
	for (k = first; k <= last; k++)
		sdt_copy(&cpu_at(k)->call, &call, sizeof(call));
	for (k = first; k <= last; k++)	/* the others first, then this CPU's own call */
		if (k != here && post(k, here, job_run))
			r = SDT_ERR_CPU;
	if (here >= first && here <= last && !r)
		post(here, here, job_run);
	for (k = first; k <= last; k++)
		wait_for(k);
	drain();
	if (r)
		return error(o, r, "a CPU did not start the call");
	for (k = first; k <= last; k++)
		said_return(o, k);
	return ok(o, SDT_CTL_RUN, last - first + 1);
}

static const volatile sdt_u8 *read_at;
static sdt_u8 read_buf[MAX_READ];
static sdt_word read_len;
static char read_hex[2 * MAX_READ + 1];	/* read_buf in hexadecimal */

static SDT_CODE void read_bytes(void *arg)
{
	sdt_word i;

	(void)arg;
	for (i = 0; i < read_len; i++)
		read_buf[i] = read_at[i];
}

/* ADDR LEN: LEN bytes of the kernel's memory in hexadecimal, or `fault` where there is none. */
static SDT_CODE int cmd_read(struct out *o, struct words *w)
{
	sdt_word addr, i;
	sdt_u64 hex;

	if (!number(w, &addr) || !number(w, &read_len) || read_len > MAX_READ)
		return error(o, SDT_ERR_USAGE, "usage: read ADDR LEN (LEN at most 80)");
	if (!ops.guarded)
		return error(o, SDT_ERR_UNSUPPORTED, "the kernel cannot catch a fault in a read");
	read_at = (const volatile sdt_u8 *)addr;
	if (guarded(read_bytes, cpu_at(this_cpu()))) {
		say(o, SDT_REPLY_READ_FAULT, 0);
	} else {
		for (i = 0; i < read_len; i++) {
			read_hex[2 * i] = "0123456789abcdef"[read_buf[i] >> 4];
			read_hex[2 * i + 1] = "0123456789abcdef"[read_buf[i] & 15];
		}
		read_hex[2 * read_len] = 0;
		hex = SAID(read_hex);
		say(o, SDT_REPLY_READ_BYTES, &hex);
	}
	return ok(o, SDT_CTL_READ, read_len);
}

/* flush: every CPU's open packet closed on that CPU, as a host does before it leaves; `unflushed K EVENTS` for each CPU
 * whose packet stays open (the kernel runs no call there, or the job came inside a recorder), EVENTS what it holds. */
static SDT_CODE int cmd_flush(struct out *o, struct words *w)
{
	unsigned here = this_cpu(), k, n = 0;
	sdt_u64 v[SDT_FIELDS_FLUSH_UNFLUSHED];

	(void)w;
	for (k = 0; k < ops.ncpus; k++)	/* a CPU that cannot be started is marked done: its packet stays open */
		if (k != here && ops.start)
			post(k, here, job_flush);
	post(here, here, job_flush);
	for (k = 0; k < ops.ncpus; k++)
		if (k != here && ops.start)
			wait_for(k);
	if (!scope)
		drain();
	for (k = 0; k < ops.ncpus; k++) {
		const struct sdt_cpu *a = area_of(k);
		sdt_u64 events = a && __atomic_load_n(&a->current, __ATOMIC_ACQUIRE) ?
				 __atomic_load_n(&a->events, __ATOMIC_ACQUIRE) : 0;
		if (!events) {
			n++;
			continue;
		}
		v[SDT_FIELD_FLUSH_UNFLUSHED_CPU] = k;
		v[SDT_FIELD_FLUSH_UNFLUSHED_EVENTS] = events;
		say(o, SDT_REPLY_FLUSH_UNFLUSHED, v);
	}
	return ok(o, SDT_CTL_FLUSH, n);
}

static SDT_CODE int cmd_stats(struct out *o, struct words *w)
{
	unsigned k;

	(void)w;
	if (!ops.area && !scope)
		return error(o, SDT_ERR_UNSUPPORTED, "the kernel does not say where its CPUs' areas are");
	for (k = 0; k < ops.ncpus; k++) {
		const struct sdt_cpu *a = area_of(k);
		sdt_u64 v[SDT_FIELDS_STATS_CPU];
		v[SDT_FIELD_STATS_CPU_CPU] = k;
		v[SDT_FIELD_STATS_CPU_DISCARDED] = a ? a->discarded : 0;
		v[SDT_FIELD_STATS_CPU_OVERWRITTEN] = a ? a->overwritten : 0;
		say(o, SDT_REPLY_STATS_CPU, v);
	}
	return ok(o, SDT_CTL_STATS, ops.ncpus);
}

static char named[LINE + 1];	/* `list`: a probe's four names, joined */

/* [SPEC]: every probe SPEC matches, with its sites and how many are armed. */
static SDT_CODE int cmd_list(struct out *o, struct words *w)
{
	const char *spec = rest(w);
	const struct sdt_module *t;
	const struct sdt_probe *p;
	const struct sdt_site *s;
	unsigned long n = 0;
	int r;

	for (t = sdt_tables(); t; t = __atomic_load_n(&t->next, __ATOMIC_ACQUIRE))
	for (p = t->probes; p < t->probes_end; p++) {
		unsigned long sites = 0, armed = 0, len;
		unsigned i;
		sdt_u64 v[SDT_FIELDS_LIST_PROBE];
		r = sdt_probe_matches(*spec ? spec : ":::", t, p);
		if (r < 0)
			return refused(o, r);
		if (!r)
			continue;
		for (s = t->sites; s < t->sites_end; s++)
			if (sdt_site_probe(s) == p && s->state != SDT_SITE_FOLDED) {
				sites++;
				armed += s->state == SDT_SITE_TRAP || s->state == SDT_SITE_BRANCH;
			}
		for (i = 0, len = 0; i < 4; i++) {	/* PROVIDER:MODULE:FUNCTION:NAME */
			const char *f = sdt_probe_field(t, p, i);
			while (*f && len < LINE)
				named[len++] = *f++;
			if (i < 3 && len < LINE)
				named[len++] = ':';
		}
		named[len] = 0;
		v[SDT_FIELD_LIST_PROBE_KEY] = p->key;
		v[SDT_FIELD_LIST_PROBE_SITES] = sites;
		v[SDT_FIELD_LIST_PROBE_ARMED] = armed;
		v[SDT_FIELD_LIST_PROBE_SPEC] = SAID(named);
		say(o, SDT_REPLY_LIST_PROBE, v);
		n++;
	}
	return ok(o, SDT_CTL_LIST, n);
}

/* Calls the torture's callers have made so far (each CPU's own count, read as it stands). */
static SDT_CODE unsigned long calls_made(unsigned here)
{
	unsigned long n = 0;
	unsigned k;

	for (k = 0; k < ops.ncpus; k++)
		if (k != here)
			n += __atomic_load_n(&cpu_at(k)->calls, __ATOMIC_RELAXED);
	return n;
}

/* CPU k's recording as it stands: packets opened, events in the open one, events discarded. */
static SDT_CODE void recorded(unsigned k, sdt_u64 out[3])
{
	const struct sdt_cpu *a = ops.area ? ops.area(k) : 0;

	out[0] = a ? __atomic_load_n(&a->write_seq, __ATOMIC_ACQUIRE) : 0;
	out[1] = a ? __atomic_load_n(&a->events, __ATOMIC_ACQUIRE) : 0;
	out[2] = a ? __atomic_load_n(&a->discarded, __ATOMIC_ACQUIRE) : 0;
}

/* SPEC was just disarmed: once each caller has returned from two more calls (a firing in flight when the sites
 * changed is done), what each has recorded is marked. A CPU that makes no call meanwhile is not checked. */
static SDT_CODE void mark_disarmed(unsigned here)
{
	unsigned k;

	for (k = 0; k < ops.ncpus; k++) {
		struct cpu *c = cpu_at(k);
		unsigned long before = __atomic_load_n(&c->calls, __ATOMIC_ACQUIRE), spin;
		c->marked = 0;
		if (k == here || !ops.area || !ops.area(k))
			continue;
		for (spin = 0; spin < SETTLE && __atomic_load_n(&c->calls, __ATOMIC_ACQUIRE) - before < 2; spin++)
			;
		if (__atomic_load_n(&c->calls, __ATOMIC_ACQUIRE) - before < 2)
			continue;
		recorded(k, c->mark);
		c->marked = 1;
	}
}

/* SPEC is about to be armed again: a caller that recorded anything since it was marked fired from a disarmed site
 * (its only calls are the function's, whose probes SPEC names). Windows checked and leaks added to *windows, *leaked. */
static SDT_CODE void check_disarmed(unsigned long *windows, unsigned long *leaked)
{
	unsigned k;

	for (k = 0; k < ops.ncpus; k++) {
		struct cpu *c = cpu_at(k);
		sdt_u64 now[3];
		if (!c->marked)
			continue;
		recorded(k, now);
		*windows += 1;
		*leaked += now[0] != c->mark[0] || now[1] != c->mark[1] || now[2] != c->mark[2];
		c->marked = 0;
	}
}

/* ADDR NARGS ARG... TOGGLES MODE SPEC: every other CPU calls the function while this one arms and disarms SPEC. */
static SDT_CODE int cmd_torture(struct out *o, struct words *w)
{
	extern const char sdt_protocol[];
	unsigned here = this_cpu(), k;
	unsigned long calls = 0, faults = 0, torn = 0, wrong = 0, windows = 0, leaked = 0;
	struct call call;
	sdt_word toggles, i;
	const char *spec, *why;
	int mode, r, started = 1;
	struct cpu *me = cpu_at(here);
	sdt_u64 v[SDT_FIELDS_TORTURE];

	r = parse_call(w, &call, &why);
	if (r)
		return error(o, r, why);
	if (!number(w, &toggles) || !(mode = mode_of(w, 1)) || !*(spec = rest(w)))
		return error(o, SDT_ERR_USAGE, "usage: torture ADDR NARGS ARG... TOGGLES trap|branch|cycle|module SPEC");
	if (mode == MODULE_CYCLE && !ops.module)
		return error(o, SDT_ERR_UNSUPPORTED, "the kernel loads no modules");
	if (ops.ncpus < 2)
		return error(o, SDT_ERR_CPU, "torture needs two CPUs or more: one arms, the others call");
	if (!ops.start)
		return error(o, SDT_ERR_UNSUPPORTED, "the kernel runs calls on the CPU of the command only");
	sdt_copy(&me->call, &call, sizeof(call));
	if (guarded(call_it, me))	/* nothing armed: what every call must return */
		return error(o, SDT_ERR_ARG, "the function faults by itself");
	quiet = 1;	/* the line would pace the CPUs: packets wait in the rings */
	__atomic_store_n(&stop, 0, __ATOMIC_RELEASE);
	for (k = 0; k < ops.ncpus; k++) {
		struct cpu *c = cpu_at(k);
		sdt_copy(&c->call, &call, sizeof(call));
		c->expect = me->value;
		c->calls = c->faults = c->torn = c->wrong = 0;
		c->marked = 0;
		c->done = 1;
	}
	for (k = 0; k < ops.ncpus && started; k++)
		if (k != here && post(k, here, job_torture))
			started = 0;
	r = mode == MODULE_CYCLE ? sdt_enable(spec, SDT_BRANCH) : 1;	/* what each load of the module arms */
	for (i = 0; i < toggles && r > 0 && started; i++) {
		unsigned long before = calls_made(here), spin;
		unsigned step = mode == CYCLE ? (unsigned)(i % 3) : i % 2 ? 2 : mode == SDT_TRAP;
		int disarm = mode == MODULE_CYCLE ? !(i % 2) : step == 2;
		if (!disarm)	/* the window since the last disarm: nothing may have fired */
			check_disarmed(&windows, &leaked);
		if (mode == MODULE_CYCLE)	/* unloaded while its sites run and trap, loaded while the spec arms */
			r = (r = ops.module((int)(i % 2))) >= 0 ? 1 : r;
		else
			r = step == 2 ? sdt_disable(spec) : sdt_enable(spec, step == 1 ? SDT_TRAP : SDT_BRANCH);
		if (disarm && r > 0)
			mark_disarmed(here);
		for (spin = 0; spin < PACE && calls_made(here) == before; spin++)
			;	/* the callers run between two toggles, however the machine schedules its CPUs */
	}
	check_disarmed(&windows, &leaked);
	if (mode == MODULE_CYCLE && toggles % 2)
		ops.module(1);	/* loaded, as it was */
	if (r > 0)
		sdt_disable(spec);	/* every site left as it was */
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	for (k = 0; k < ops.ncpus; k++) {
		struct cpu *c = cpu_at(k);
		wait_for(k);
		if (k == here)
			continue;
		calls += c->calls;
		faults += c->faults;
		torn += c->torn;
		wrong += c->wrong;
	}
	quiet = 0;
	drain();
	if (!started || r <= 0)
			return !started ? error(o, SDT_ERR_CPU, "a CPU did not start its calls") :
		       r < 0 ? refused(o, r) : error(o, SDT_ERR_SPEC, "the spec matches no site");
	v[SDT_FIELD_TORTURE_PROTOCOL] = SAID(sdt_protocol);
	v[SDT_FIELD_TORTURE_CPUS] = ops.ncpus;
	v[SDT_FIELD_TORTURE_TOGGLES] = toggles;
	v[SDT_FIELD_TORTURE_CALLS] = calls;
	v[SDT_FIELD_TORTURE_FAULTS] = faults;
	v[SDT_FIELD_TORTURE_TORN] = torn;
	v[SDT_FIELD_TORTURE_WRONG] = wrong;
	v[SDT_FIELD_TORTURE_LEAKED] = leaked;
	v[SDT_FIELD_TORTURE_WINDOWS] = windows;
	say(o, SDT_REPLY_TORTURE, v);
	return ok(o, SDT_CTL_TORTURE, 1);
}

/* load|unload: the kernel's loader loads its module again (the specs enabled arm it), or unloads it. */
static SDT_CODE int cmd_module(struct out *o, struct words *w)
{
	unsigned long len;
	const char *s = word(w, &len);
	int load = is(s, len, "load"), r;

	if (!load && !is(s, len, "unload"))
		return error(o, SDT_ERR_USAGE, "usage: module load|unload");
	if (!ops.module)
		return error(o, SDT_ERR_UNSUPPORTED, "the kernel loads no modules");
	r = ops.module(load);
	return r < 0 ? refused(o, r) : ok(o, SDT_CTL_MODULE, (sdt_word)r);
}

/* drain: every CPU's closed packets sent now. */
static SDT_CODE int cmd_drain(struct out *o, struct words *w)
{
	(void)w;
	if (scope) {	/* a session's areas are the runtime's: the kernel sends each one the control core names */
		unsigned k;
		if (!ops.drain_area)
			return error(o, SDT_ERR_UNSUPPORTED, "the kernel does not send a session's packets on the line "
				     "(no drain_area): read them in its memory (docs/sessions.md)");
		for (k = 0; k < scope->ncpus; k++)
			ops.drain_area((struct sdt_cpu *)(sdt_word)scope->cpus + k);
		return ok(o, SDT_CTL_DRAIN, scope->ncpus);
	}
	if (!ops.drain)
		return error(o, SDT_ERR_UNSUPPORTED, "the kernel's own consumer reads the rings");
	drain();
	return ok(o, SDT_CTL_DRAIN, 0);
}

/* exit CODE: the kernel powers off. */
static SDT_CODE int cmd_exit(struct out *o, struct words *w)
{
	sdt_word code;

	if (!number(w, &code))
		return error(o, SDT_ERR_USAGE, "usage: exit CODE");
	if (!ops.power_off)
		return error(o, SDT_ERR_UNSUPPORTED, "the kernel cannot power off");
	ops.power_off((int)code);
	return ok(o, SDT_CTL_EXIT, 0);
}

/* clock: the clock events are stamped with, read now (`ok clock TICKS`). The host reads its real-time clock before
 * it sends the line and after the reply, and puts this reading at the midpoint: where a trace of this kernel stands
 * against the host's time, within half the round trip (docs/trace.md, "Machines"). */
static SDT_CODE int cmd_clock(struct out *o, struct words *w)
{
	if (*rest(w))
		return error(o, SDT_ERR_USAGE, "usage: clock");
	if (!sdt_hooks.clock)
		return error(o, SDT_ERR_UNSUPPORTED, "the kernel gave sdt_init no clock");
	return ok(o, SDT_CTL_CLOCK, sdt_hooks.clock());
}

#include "sdt_control_programs.c"	/* program, pbytes, penable, pdisable, tables, switch, take */
#include "sdt_control_sessions.c"	/* session open, session close, sessions */

/* -- the commands, by their words --------------------------------------------------------------------------- */

/* Every command the core takes: its word (SDT_CTL_*, from sdtgen/layout.py) and what runs it on the rest of the
 * line. A word not here is refused with the words that are. */
static const struct command {
	const char *word;
	int (*run)(struct out *o, struct words *w);
} commands[] = {
	{SDT_CTL_HELLO, cmd_hello},
	{SDT_CTL_RING, cmd_ring},
	{SDT_CTL_ENABLE, cmd_enable},
	{SDT_CTL_DISABLE, cmd_disable},
	{SDT_CTL_MODE, cmd_mode},
	{SDT_CTL_RUN, cmd_run},
	{SDT_CTL_READ, cmd_read},
	{SDT_CTL_DRAIN, cmd_drain},
	{SDT_CTL_FLUSH, cmd_flush},
	{SDT_CTL_STATS, cmd_stats},
	{SDT_CTL_LIST, cmd_list},
	{SDT_CTL_TORTURE, cmd_torture},
	{SDT_CTL_EXIT, cmd_exit},
	{SDT_CTL_SHARED, cmd_shared},
	{SDT_CTL_MODULE, cmd_module},
	{SDT_CTL_TABLES, cmd_tables},
	{SDT_CTL_PROGRAM, cmd_program},
	{SDT_CTL_PBYTES, cmd_pbytes},
	{SDT_CTL_PENABLE, cmd_penable},
	{SDT_CTL_PDISABLE, cmd_pdisable},
	{SDT_CTL_SWITCH, cmd_switch},
	{SDT_CTL_TAKE, cmd_take},
	{SDT_CTL_SESSION, cmd_session},
	{SDT_CTL_SESSIONS, cmd_sessions},
	{SDT_CTL_SNAPSHOT, cmd_snapshot},
	{SDT_CTL_CLOCK, cmd_clock},
};

/* The commands `@NAME` may come before: those that act on one session. */
static const char *const scoped[] = {SDT_CTL_ENABLE, SDT_CTL_DISABLE, SDT_CTL_PENABLE, SDT_CTL_PDISABLE, SDT_CTL_DRAIN,
				     SDT_CTL_STATS, SDT_CTL_TABLES, SDT_CTL_SWITCH, SDT_CTL_TAKE, SDT_CTL_FLUSH};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

/* `error CODE COMMAND: unknown command (hello ring ...)`: the words of the table, in its order. */
static SDT_CODE int unknown(struct out *o)
{
	unsigned long i;

	error_head(o, SDT_ERR_UNKNOWN);
	put(o, "unknown command (");
	for (i = 0; i < NCOMMANDS; i++) {
		put(o, commands[i].word);
		put(o, i + 1 < NCOMMANDS ? " " : ")");
	}
	send(o);
	return SDT_ERR_UNKNOWN;
}

/* The command ``line`` names, run. A function of its own (never inlined): tools/stack_usage.py bounds the stack a
 * command needs by the deepest of the functions its table calls. */
static SDT_CODE __attribute__((noinline)) int command(struct out *o, const char *line)
{
	struct words w = {line};
	unsigned long len, i;
	const char *c = word(&w, &len);

	scope = 0;
	if (len && c[0] == (char)SDT_CTL_AT) {	/* @NAME COMMAND: the command on session NAME */
		const char *at = c;
		unsigned long at_len = len;
		c = word(&w, &len);	/* the reply names the command after @NAME, as a host waits for it */
		o->cmd = len ? c : at;
		o->cmdlen = len ? len : at_len;
		if (!session_word(at + 1, at_len - 1) || !(scope = sdt_session_find(session_name)))
			return error(o, SDT_ERR_SESSION, "no session of that name is open (sessions)");
		for (i = 0; i < sizeof(scoped) / sizeof(scoped[0]); i++)
			if (is(c, len, scoped[i]))
				break;
		if (i == sizeof(scoped) / sizeof(scoped[0]))
			return error(o, SDT_ERR_USAGE, "@NAME comes before enable, disable, penable, pdisable, drain, "
				     "stats, tables, switch, take or flush");
		if (scope->id == 0)	/* @default: the commands as they are without it */
			scope = 0;
	}
	o->cmd = c;
	o->cmdlen = len;
	for (i = 0; i < NCOMMANDS; i++)
		if (is(c, len, commands[i].word))
			return commands[i].run(o, &w);
	return unknown(o);
}

/* -- the entry points --------------------------------------------------------------------------- */

SDT_CODE int sdt_control_init(const struct sdt_control_ops *given, struct sdt_control_cpu *cpus)
{
	if (!given || !cpus || !given->ncpus)
		return SDT_ERR_ARG;
	if (given->ncpus > SDT_MAX_CPUS)	/* its hello would say CPUs no host takes */
		return SDT_ERR_CPU;
	sdt_copy(&ops, given, sizeof(ops));
	storage = cpus;
	__atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
	return 0;
}

SDT_CODE int sdt_control_line(const char *line, sdt_control_reply reply)
{
	static struct out o;	/* under the lock: one command at a time */
	int r;

	if (!reply)
		return SDT_ERR_ARG;
	/* What a host puts before every command starts it: a kernel that assembles lines itself may hold a partial
	 * line before it (a stray `lis`), which is no part of the command. */
	for (r = 0; line && line[r]; r++)
		if (line[r] == SDT_CONTROL_ESCAPE) {
			line += r + 1;
			r = -1;
		}
	if (!line || !__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
		static struct out mine;	/* a static: no memset call to zero it */
		struct words w = {line ? line : ""};
		mine.reply = reply;
		mine.cmd = word(&w, &mine.cmdlen);	/* the error names the command it answers, as every reply does */
		return error(&mine, line ? SDT_ERR_INIT : SDT_ERR_ARG,
			     line ? "the control core is not started" : "no line");
	}
	while (__atomic_exchange_n(&lock, 1, __ATOMIC_ACQUIRE))
		while (__atomic_load_n(&lock, __ATOMIC_RELAXED))
			;
	o.n = 0;
	o.reply = reply;
	r = command(&o, line);
	__atomic_store_n(&lock, 0, __ATOMIC_RELEASE);
	return r;
}

SDT_CODE void sdt_control_input_on(struct sdt_control_input *in, const char *data, unsigned long len,
				   sdt_control_reply reply)
{
	unsigned long i;

	for (i = 0; in && data && i < len; i++) {
		char c = data[i];
		if (c == SDT_CONTROL_ESCAPE) {	/* a command starts: what came before it was never a whole line */
			in->len = 0;
			in->overlong = 0;
			continue;
		}
		if (c != '\n' && c != '\r') {
			if (in->len < SDT_CONTROL_LINE && c)
				in->line[in->len++] = c;
			else
				in->overlong = 1;
			continue;
		}
		if (in->overlong && reply) {
			static struct out o;
			struct words w = {in->line};
			in->line[in->len] = 0;
			o.reply = reply;
			o.cmd = word(&w, &o.cmdlen);	/* the command too long, as far as it was held */
			error(&o, SDT_ERR_LONG, "the line is longer than the control core takes (or holds a NUL)");
		} else if (in->len) {
			in->line[in->len] = 0;
			sdt_control_line(in->line, reply);
		}
		in->len = 0;
		in->overlong = 0;
	}
}

SDT_CODE void sdt_control_input(const char *data, unsigned long len, sdt_control_reply reply)
{
	sdt_control_input_on(&input, data, len, reply);
}

SDT_CODE int sdt_control_claims(char c)
{
	static int claiming;	/* inside a line that began with the escape: one console, one line at a time */

	if (c == SDT_CONTROL_ESCAPE)
		claiming = 1;
	else if (!claiming)
		return 0;
	else if (c == '\n' || c == '\r')
		claiming = 0;	/* the line's end is still the core's */
	return 1;
}

SDT_CODE void sdt_control_announce(sdt_control_reply reply)
{
	static struct out o;

	if (reply && __atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
		o.n = 0;
		o.reply = reply;
		cmd_hello(&o, 0);
	}
}

SDT_CODE int sdt_control_quiet(void)
{
	return quiet || shared;
}

SDT_INLINE_ATOMICS_END
