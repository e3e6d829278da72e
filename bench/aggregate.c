/*
 * The cost of a firing on this machine's CPU (bench/run.py, aggregation_rows): one probe's site armed with a
 * branch to the recorder gen wrote, as a kernel arms it (sdt_init, sdt_enable / sdt_enable_program), fired in a
 * loop: with no program (the event recorded into a ring), and with each program given on the command line
 * (count(), quantize(arg0), a predicate that is false).
 *
 *   aggregate FIRINGS PROGRAM...      one JSON line: {"record": ns, "<program file>": ns, ...}
 *
 * Each is the best of 7 rounds, and a round measures them all in turn, so a machine whose load changes
 * (a shared one) slows them alike.
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

#include "cpu_loop.h"

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

static sdt_u64 clock_ns(void)	/* the hosted platform's clock (bench/cpu_loop.h) */
{
	return bench_clock_ns();
}

#define ROUNDS 7
#define MAX_PROGRAMS 8

/* Nanoseconds per firing of the site, over ``n`` firings. */
static double per_firing(long n)
{
	double t = bench_now();
	long i;

	for (i = 0; i < n; i++)
		bench_site(i, i);
	return (bench_now() - t) * 1e9 / (double)n;
}

int main(int argc, char **argv)
{
	static sdt_u64 programs[MAX_PROGRAMS][SDT_PROG_MAX_BYTES / 8];
	static const char spec[] = "bench:agg:loop:fire";
	size_t sizes[MAX_PROGRAMS];
	double best[MAX_PROGRAMS + 1];
	struct sdt_hooks hooks;
	int k, nprograms, round;
	long n;

	if (argc < 2 || argc > 2 + MAX_PROGRAMS)
		return 2;
	n = strtol(argv[1], 0, 0);
	nprograms = argc - 2;
	for (k = 0; k < nprograms; k++) {
		FILE *f = fopen(argv[k + 2], "rb");
		if (!f)
			return 5;
		sizes[k] = fread(programs[k], 1, sizeof(programs[k]), f);
		fclose(f);
	}
	page = sysconf(_SC_PAGESIZE);
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0))
		return 7;
	bench_calibrate();
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
	for (k = 0; k <= nprograms; k++)
		best[k] = 1e30;
	for (round = 0; round < ROUNDS; round++) {
		for (k = 0; k <= nprograms; k++) {	/* 0: the event recorded; k: program k - 1 */
			double t;
			if (k == 0 ? sdt_enable(spec, SDT_BRANCH) != 1 :
				     sdt_enable_program(spec, SDT_BRANCH, programs[k - 1], sizes[k - 1]) != 1)
				return 8;
			t = per_firing(n);
			if (t < best[k])
				best[k] = t;
			if ((k == 0 ? sdt_disable(spec) : sdt_disable_program(spec)) != 1)
				return 9;
		}
	}
	printf("{\"record\": %.3f", best[0]);
	for (k = 0; k < nprograms; k++)
		printf(", \"%s\": %.3f", argv[k + 2], best[k + 1]);
	printf(", \"errors\": %llu}\n", (unsigned long long)agg.errors);
	return 0;
}
