/*
 * Several CPUs firing one probe's program at once on this machine's cores, a consumer switching their
 * tables all the while, and signals firing the probe again inside the firings they interrupt.
 *
 *   program_threads PROGRAM_FILE THREADS FIRINGS KEY > snapshots
 *
 * Thread k is CPU k: it fires the probe FIRINGS times with arg0 = i, arg1 = 3 * i, arg2 = k. An interrupter
 * thread sends SIGUSR1 to the workers; the handler fires the probe on the interrupted CPU with
 * arg0 = HANDLER_VALUE. A consumer thread calls sdt_agg_switch over and over and writes every frozen half
 * it took; when the workers are done it switches once more and writes the last ones. stdout: per snapshot,
 * per CPU, the struct sdt_agg as it stood (its address first) and the frozen half's arena (its address and
 * length first); then per CPU one line-free record of the firings its handler made.
 */
#define _GNU_SOURCE
#include <linux/membarrier.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <sdt_runtime.h>

static struct sdt_site harness_site __attribute__((used, section("set_sdt_sites_set")));
static const struct sdt_probe harness_probe __attribute__((used, section("set_sdt_probes_set")));

#define MAX_CPUS 8
#define MEM (1 << 20)
#define HANDLER_VALUE 1000003

struct cpu {
	struct sdt_cpu area;
	struct sdt_agg agg;
	pthread_t thread;
	unsigned id;
	volatile int finished;	/* its loop is done (the thread stays until main joins it) */
	volatile unsigned long handled;	/* firings its signal handler made */
	unsigned char mem[MEM] __attribute__((aligned(64)));
};

static struct cpu cpus[MAX_CPUS];
static unsigned ncpus;
static unsigned long firings;
static unsigned key;
static __thread struct cpu *self;
static struct sdt_slot probe_slot;	/* its program has no predicate: no guard (a span of every value) */
static volatile int workers_done, consumer_stop;
static unsigned char *out;
static size_t out_len, out_cap;

static void emit(const void *p, size_t n)
{
	if (out_len + n > out_cap) {
		out_cap = (out_len + n) * 2;
		out = realloc(out, out_cap);
		if (!out)
			abort();
	}
	memcpy(out + out_len, p, n);
	out_len += n;
}

static void sync_cores(void)
{
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0))
		abort();
}

static void fire(struct cpu *c, sdt_word a0, sdt_word a1)
{
	sdt_program_fire(&c->area, probe_slot.program[0], key, a0, a1, c->id, 0, 0, 0);
}

static void on_signal(int sig)
{
	(void)sig;
	if (self) {
		fire(self, HANDLER_VALUE, 7);
		self->handled++;
	}
}

static void *worker(void *arg)
{
	struct cpu *c = arg;
	unsigned long i;

	self = c;
	for (i = 0; i < firings; i++)
		fire(c, i, 3 * i);
	c->finished = 1;
	return 0;
}

/* Each CPU's frozen half, as the consumer holds it until the next switch. */
static void snapshot(void)
{
	unsigned k;
	sdt_u64 n = ncpus;

	emit(&n, 8);
	for (k = 0; k < ncpus; k++) {
		struct sdt_agg *g = &cpus[k].agg;
		unsigned h = (unsigned)(g->want & 1) ^ 1;
		sdt_u64 addr = (sdt_u64)(unsigned long)g, arena = g->arena[h], used = g->used[h];
		emit(&addr, 8);
		emit(g, sizeof(*g));
		emit(&arena, 8);
		emit(&used, 8);
		emit((void *)(unsigned long)arena, used);
	}
}

static void *consumer(void *arg)
{
	(void)arg;
	while (!consumer_stop) {
		sdt_agg_switch();
		snapshot();
	}
	return 0;
}

static void *interrupter(void *arg)
{
	struct timespec pause = {0, 20000};
	unsigned k = 0;

	(void)arg;
	while (!workers_done) {
		pthread_kill(cpus[k].thread, SIGUSR1);
		k = (k + 1) % ncpus;
		nanosleep(&pause, 0);
	}
	return 0;
}

int main(int argc, char **argv)
{
	static sdt_u64 program[SDT_PROG_MAX_BYTES / 8];
	struct sigaction sa;
	pthread_t cons, intr;
	FILE *f;
	size_t n;
	unsigned k;
	int r;

	if (argc != 5)
		return 2;
	f = fopen(argv[1], "rb");
	if (!f)
		return 2;
	n = fread(program, 1, sizeof(program), f);
	fclose(f);
	ncpus = (unsigned)atoi(argv[2]);
	firings = strtoul(argv[3], 0, 0);
	key = (unsigned)strtoul(argv[4], 0, 0);
	if (!ncpus || ncpus > MAX_CPUS)
		return 2;
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0))
		return 3;
	sdt_hooks.sync_cores = sync_cores;
	r = sdt_program_verify(program, n);
	if (r) {
		fprintf(stderr, "refused: %d\n", r);
		return 4;
	}
	probe_slot.guard_span = ~(sdt_u64)0;
	probe_slot.program[0] = (const struct sdt_program *)program;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGUSR1, &sa, 0);
	for (k = 0; k < ncpus; k++) {
		cpus[k].id = k;
		cpus[k].area.cpu = k;
		if (sdt_agg_attach(&cpus[k].area, &cpus[k].agg, cpus[k].mem, MEM))
			return 5;
	}
	pthread_create(&cons, 0, consumer, 0);
	for (k = 0; k < ncpus; k++)
		pthread_create(&cpus[k].thread, 0, worker, &cpus[k]);
	pthread_create(&intr, 0, interrupter, 0);
	for (k = 0; k < ncpus; k++)	/* every thread exists until joined: the interrupter stops first */
		while (!cpus[k].finished)
			usleep(1000);
	workers_done = 1;
	pthread_join(intr, 0);
	for (k = 0; k < ncpus; k++)
		pthread_join(cpus[k].thread, 0);
	consumer_stop = 1;
	pthread_join(cons, 0);
	sdt_agg_switch();	/* what came after the consumer's last switch */
	snapshot();
	sdt_agg_switch();	/* and the half it switched to last: empty, nothing fired since */
	snapshot();
	{
		sdt_u64 end = 0;
		emit(&end, 8);
	}
	for (k = 0; k < ncpus; k++) {
		sdt_u64 h = cpus[k].handled;
		emit(&h, 8);
	}
	fwrite(out, 1, out_len, stdout);
	return 0;
}
