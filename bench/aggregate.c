/*
 * The cost of a firing on this machine's CPU (bench/run.py, aggregation_rows): one probe's site armed with a
 * branch to the recorder gen wrote, as a kernel arms it (sdt_init, sdt_enable / sdt_enable_program), fired in a
 * loop: with no program (the event recorded into a ring), and with each program given on the command line
 * (count(), quantize(arg0), a predicate that is false).
 *
 *   aggregate FIRINGS PROGRAM...      one JSON line: {"record": ns, "<program file>": ns, ...}, best of 5
 *
 * The runtime's hooks are a process's (as fixtures/process): text made writable with mprotect, membarrier for
 * sync_cores, this thread's area, the TSC in nanoseconds; no consumer (the ring overwrites its oldest packets,
 * so recording never stops).
 */
#define _GNU_SOURCE
#include <linux/membarrier.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <sdt.h>
#include <sdt_runtime.h>

SDT_PROVIDER_DEFINE(bench);
SDT_PROBE_DEFINE2(bench, agg, loop, fire, "long", "long");

/* The probe's site, in a function of its own: the loop calls it as a kernel's code would. */
__attribute__((noinline)) void bench_site(long a, long b)
{
	SDT_PROBE2(bench, agg, loop, fire, a, b);
}

static struct sdt_cpu area;
static struct sdt_agg agg;
static unsigned char ring[1 << 20] __attribute__((aligned(64)));
static unsigned char tables[1 << 20] __attribute__((aligned(64)));
static sdt_u64 ns_mult;
static long page;

static void *text_open(void *addr, unsigned long len)
{
	unsigned long lo = (unsigned long)addr & ~(page - 1), hi = ((unsigned long)addr + len + page - 1) & ~(page - 1);

	if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE | PROT_EXEC))
		exit(6);
	return addr;
}

static void text_close(void *alias, unsigned long len)
{
	unsigned long lo = (unsigned long)alias & ~(page - 1), hi = ((unsigned long)alias + len + page - 1) & ~(page - 1);

	if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_EXEC))
		exit(6);
}

static void sync_cores(void)
{
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0))
		exit(7);
}

static struct sdt_cpu *cpu_area(void)
{
	return &area;
}

static sdt_u64 tsc(void)
{
	unsigned lo, hi;

	__asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
	return (sdt_u64)hi << 32 | lo;
}

static sdt_u64 clock_ns(void)
{
	return (sdt_u64)(((unsigned __int128)tsc() * ns_mult) >> 32);
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static void calibrate(void)
{
	struct timespec pause = {0, 50 * 1000 * 1000};
	double w0 = now(), w1;
	sdt_u64 t0 = tsc(), t1;

	nanosleep(&pause, 0);
	t1 = tsc();
	w1 = now();
	ns_mult = (sdt_u64)((w1 - w0) * 1e9 / (double)(t1 - t0) * 4294967296.0);
}

/* Nanoseconds per firing of the site, best of 5 runs of ``n``. */
static double per_firing(long n)
{
	double best = 1e30;
	int round;

	for (round = 0; round < 5; round++) {
		double t = now();
		long i;
		for (i = 0; i < n; i++)
			bench_site(i, i);
		t = (now() - t) * 1e9 / (double)n;
		if (t < best)
			best = t;
	}
	return best;
}

int main(int argc, char **argv)
{
	static sdt_u64 programs[8][SDT_PROG_MAX_BYTES / 8];
	static const char spec[] = "bench:agg:loop:fire";
	struct sdt_hooks hooks;
	long n;
	int k;

	if (argc < 2 || argc > 10)
		return 2;
	n = strtol(argv[1], 0, 0);
	page = sysconf(_SC_PAGESIZE);
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0))
		return 7;
	calibrate();
	memset(&hooks, 0, sizeof(hooks));
	hooks.text_open = text_open;
	hooks.text_close = text_close;
	hooks.sync_cores = sync_cores;
	hooks.cpu_area = cpu_area;
	hooks.clock = clock_ns;
	hooks.clock_hz = 1000000000;
	if (sdt_cpu_attach(&area, 0, ring, sizeof(ring), 4096, SDT_OVERWRITE) ||
	    sdt_agg_attach(&area, &agg, tables, sizeof(tables)) || sdt_init(&hooks) < 1)
		return 3;
	if (sdt_enable(spec, SDT_BRANCH) != 1)
		return 4;
	printf("{\"record\": %.3f", per_firing(n));
	for (k = 2; k < argc; k++) {
		FILE *f = fopen(argv[k], "rb");
		size_t size;
		if (!f)
			return 5;
		size = fread(programs[k - 2], 1, sizeof(programs[k - 2]), f);
		fclose(f);
		if (sdt_disable(spec) != 1 || sdt_enable_program(spec, SDT_BRANCH, programs[k - 2], size) != 1)
			return 8;
		printf(", \"%s\": %.3f", argv[k], per_firing(n));
		if (sdt_disable_program(spec) != 1 || sdt_enable(spec, SDT_BRANCH) != 1)
			return 9;
	}
	printf(", \"errors\": %llu}\n", (unsigned long long)agg.errors);
	return 0;
}
