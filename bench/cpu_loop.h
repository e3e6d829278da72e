/*
 * The loop every real-CPU comparison runs (bench/run.py, cpu_rows): an event with two integer arguments
 * fired through a function of its own, never inlined, ns per iteration timed with
 * CLOCK_MONOTONIC around the whole loop (BENCH_LOOP_FUNCTION); and the clock sdtgen's
 * hosted platform gives its events (the TSC in nanoseconds, a 32.32 multiplier calibrated against
 * CLOCK_MONOTONIC), for a program that gives it itself (barectf's platform, bench/aggregate.c's hooks).
 */
#ifndef BENCH_CPU_LOOP_H
#define BENCH_CPU_LOOP_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

static inline double bench_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/*
 * ``double name(long n)``: nanoseconds an iteration of ``fire(i, i ^ 0x5a)`` over ``n`` iterations, ``fire``
 * called directly, as a kernel's code calls a function with a probe. Defined beside ``fire`` (as
 * BENCH_FIRE_FUNCTION), each loop and each function on a 64-byte boundary and opaque to the optimizer
 * (noipa: the loop knows nothing of the registers ``fire`` uses), so two builds of one site file differ
 * only in the site's own code, not in their loops' code or alignment.
 */
#if defined(__clang__)
#define BENCH_OPAQUE __attribute__((noinline, aligned(64)))
#else
#define BENCH_OPAQUE __attribute__((noipa, aligned(64)))
#endif

#define BENCH_FIRE_FUNCTION(fire) \
	void fire(long a, long b); \
	BENCH_OPAQUE void fire(long a, long b)

#define BENCH_LOOP_FUNCTION(name, fire)                                         \
	double name(long n);                                                    \
	BENCH_OPAQUE double name(long n)                                        \
	{                                                                       \
		double t = bench_now();                                         \
		for (long i = 0; i < n; i++)                                    \
			fire(i, i ^ 0x5a);                                      \
		return (bench_now() - t) * 1e9 / (double)n;                     \
	}

static inline double bench_min(double a, double b)
{
	return a < b ? a : b;
}

static uint64_t bench_ns_mult;

static inline uint64_t bench_tsc(void)
{
	unsigned lo, hi;

	__asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
	return (uint64_t)hi << 32 | lo;
}

static inline uint64_t bench_clock_ns(void)
{
	return (uint64_t)(((unsigned __int128)bench_tsc() * bench_ns_mult) >> 32);
}

static inline void bench_calibrate(void)
{
	struct timespec pause = {0, 50 * 1000 * 1000};
	double w0 = bench_now(), w1;
	uint64_t t0 = bench_tsc(), t1;

	nanosleep(&pause, 0);
	t1 = bench_tsc();
	w1 = bench_now();
	bench_ns_mult = (uint64_t)((w1 - w0) * 1e9 / (double)(t1 - t0) * 4294967296.0);
}

#endif
