/* make bench: a disabled probe whose argument is expensive, in each probe form and compiled out
 * (asm_goto_rows in bench/run.py). Built for every architecture with the kernel's flags. */
#include <sdt.h>

SDT_PROVIDER_DEFINE(bn);
SDT_PROBE_DEFINE2(bn, cost, loop, item, "int", "unsigned int");
SDT_PROBE_DEFINE2(bn, cost, handle, done, "long", "unsigned int");

struct req {
	long id;
	unsigned int a, b;
	long c;
};

unsigned int bench_data[64] = { 1, 2, 3, 4 };
struct req bench_req = { 7, 1, 2, 3 };

/* What computing the argument costs: an FNV-1a hash of its bytes, out of the compiler's sight. */
__attribute__((noinline)) unsigned int bench_expensive(unsigned int x)
{
	unsigned int h = 2166136261u;

	for (int i = 0; i < 4; i++)
		h = (h ^ ((x >> (8 * i)) & 0xff)) * 16777619u;
	return h;
}

__attribute__((noinline)) long bench_process(unsigned int a)
{
	return (long)a * 3 + 1;
}

/* A hot loop with the probe in its body. */
__attribute__((noinline)) long bench_loop(const unsigned int *p, int n)
{
	long sum = 0;

	for (int i = 0; i < n; i++) {
		sum += p[i & 63];
		SDT_PROBE2(bn, cost, loop, item, i, bench_expensive(p[i & 63]));
	}
	return sum;
}

/* A kernel function as most are: it calls another, and its probe's argument is a call of its own. */
__attribute__((noinline)) long bench_handle(const struct req *r)
{
	long v = bench_process(r->a);

	SDT_PROBE2(bn, cost, handle, done, r->id, bench_expensive(r->b));
	return v + r->c;
}
