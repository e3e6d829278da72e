/*
 * A preemptible kernel's task on two CPUs, in one host process: the runtime, gen's recorders and the probed
 * code of preempt_probes.c (built as sdtgen.mk builds a kernel), with a timer that preempts and migrates the
 * task whenever the kernel's preemption count allows it.
 *
 * cpu_area raises the count (Linux's get_cpu), cpu_release lowers it (put_cpu). The timer ticks on every
 * PERIOD-th clock reading, which the runtime makes in the middle of every event (its timestamp) and when it
 * opens and closes a packet: with the count at 0 the task moves to the other CPU there and then, and the CPU
 * it left runs another task, which fires a probe of its own; otherwise the switch waits until the count is
 * back to 0 (as preempt_enable runs the scheduler). A recorder that let the task move while it held its
 * CPU's area would finish its event in the other CPU's packet, and the other task's event on that CPU would
 * be discarded as nested.
 *
 *   preempt_harness MODE ITERATIONS DIR    MODE trap or branch; streams to DIR/stream_<cpu>; one JSON line
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <sdt_runtime.h>

#define NCPU 2
#define PACKET 1024
#define RING (256 * PACKET)
#define PERIOD 5	/* clock readings between two ticks */

void task_step(long i);	/* preempt_probes.c */
void other_task(long k);

static struct sdt_cpu areas[NCPU];
static _Alignas(4096) unsigned char rings[NCPU][RING];
static int cpu;	/* the CPU the task runs on */
static int preempt;	/* the preemption count */
static int pending;	/* a tick came while preemption was off */
static int in_other;
static long page;
static unsigned long ticks, deferred, migrations, others, foreign, unbalanced;

/* The timer: the task goes to the other CPU, and the one it left runs another task, which fires a probe. */
static void tick(void)
{
	int from = cpu;

	if (in_other)
		return;
	if (preempt) {
		pending = 1;
		deferred++;
		return;
	}
	pending = 0;
	migrations++;
	in_other = 1;
	other_task((long)++others);	/* on the CPU the task leaves */
	in_other = 0;
	cpu = (from + 1) % NCPU;
}

static sdt_u64 clock_fn(void)
{
	if (++ticks % PERIOD == 0)
		tick();
	return ticks;
}

static struct sdt_cpu *cpu_area(void)
{
	preempt++;
	return &areas[cpu];
}

static void cpu_release(struct sdt_cpu *c)
{
	if (c != &areas[cpu])	/* the task moved while it held an area: it wrote another CPU's */
		foreign++;
	if (--preempt < 0) {
		unbalanced++;
		preempt = 0;
	}
	if (!preempt && pending)
		tick();
}

static void *text_open(void *addr, unsigned long len)
{
	unsigned long lo = (unsigned long)addr & ~(page - 1), hi = ((unsigned long)addr + len + page - 1) & ~(page - 1);

	if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC))
		exit(3);
	return addr;
}

static void text_close(void *alias, unsigned long len)
{
	unsigned long lo = (unsigned long)alias & ~(page - 1), hi = ((unsigned long)alias + len + page - 1) & ~(page - 1);

	if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_EXEC))
		exit(3);
}

static const greg_t argregs[6] = {REG_RDI, REG_RSI, REG_RDX, REG_RCX, REG_R8, REG_R9};

static void on_trap(int sig, siginfo_t *info, void *ctx)
{
	greg_t *r = ((ucontext_t *)ctx)->uc_mcontext.gregs;
	struct sdt_frame f;
	int i;

	(void)sig;
	(void)info;
	f.pc = (sdt_u64)r[REG_RIP];
	f.sp = (sdt_u64)r[REG_RSP];
	f.flags = (sdt_u64)r[REG_EFL];
	f.ret = (sdt_u64)r[REG_RAX];
	f.link = 0;
	for (i = 0; i < 6; i++)
		f.arg[i] = (sdt_u64)r[argregs[i]];
	if (sdt_trap(&f) == SDT_TRAP_NOT_OURS)
		abort();
	r[REG_RIP] = (greg_t)f.pc;
	r[REG_RSP] = (greg_t)f.sp;
	r[REG_RAX] = (greg_t)f.ret;
}

int main(int argc, char **argv)
{
	struct sdt_hooks hooks;
	struct sigaction sa;
	long i, n;
	int k, patched, armed;

	if (argc != 4)
		return 2;
	page = sysconf(_SC_PAGESIZE);
	n = strtol(argv[2], 0, 0);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_trap;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER;
	sigaction(SIGTRAP, &sa, 0);
	for (k = 0; k < NCPU; k++)
		if (sdt_cpu_attach(&areas[k], (unsigned)k, rings[k], RING, PACKET, SDT_DISCARD))
			return 2;
	memset(&hooks, 0, sizeof(hooks));
	hooks.text_open = text_open;
	hooks.text_close = text_close;
	hooks.cpu_area = cpu_area;
	hooks.cpu_release = cpu_release;
	hooks.clock = clock_fn;
	hooks.clock_hz = 1000000000;
	patched = sdt_init(&hooks);
	armed = sdt_enable(":::", strcmp(argv[1], "trap") ? SDT_BRANCH : SDT_TRAP);
	for (i = 0; i < n; i++)
		task_step(i);
	for (k = 0; k < NCPU; k++) {	/* each CPU's open packet closed, on that CPU */
		cpu = k;
		sdt_flush();
	}
	for (k = 0; k < NCPU; k++) {
		char path[4096];
		const struct sdt_packet *pk;
		sdt_u64 seq;
		FILE *f;
		snprintf(path, sizeof(path), "%s/stream_%d", argv[3], k);
		f = fopen(path, "wb");
		if (!f)
			return 3;
		while ((pk = sdt_consume(&areas[k], &seq))) {
			if (fwrite(pk, 1, PACKET, f) != PACKET)
				return 3;
			sdt_consume_done(&areas[k], seq);
		}
		fclose(f);
	}
	printf("{\"patched\": %d, \"armed\": %d, \"ticks\": %lu, \"deferred\": %lu, \"migrations\": %lu, "
	       "\"others\": %lu, \"foreign\": %lu, \"unbalanced\": %lu, \"preempt\": %d, \"discarded\": [%llu, %llu]}\n",
	       patched, armed, ticks / PERIOD, deferred, migrations, others, foreign, unbalanced, preempt,
	       (unsigned long long)areas[0].discarded, (unsigned long long)areas[1].discarded);
	return 0;
}
