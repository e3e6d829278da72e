"""A kernel that sets its own per-CPU register (x86-64's GS base, AArch64's TPIDR_EL1, RISC-V's tp; on i386 a
segment of its own GDT in %fs, as 32-bit Linux has it) to its own per-CPU area is not disturbed by armed
probes: the runtime finds its per-CPU data through the area the platform gave sdt_cpu_attach, never a register
of its choosing. Checked by the kernel itself (its register and area unchanged after every firing) and
against nm (the address the probe recorded is its area's)."""

from __future__ import annotations

import json

import pytest
from helpers import build_c_kernel, cross_tool, run, sdtgen

SOURCE = r"""
#include <sdt.h>
SDT_PROVIDER_DEFINE(pc);
SDT_PROBE_DEFINE2(pc, own, reg, hit, "long", "unsigned long");

/* The kernel's own per-CPU area, which its per-CPU register points at. */
static unsigned long area[8] = {0x1111, 0x2222, 0x3333, 0x4444, 0x5555, 0x6666, 0x7777, 0x8888};

#if defined(__x86_64__)
#define GS_BASE 0xC0000101
static void set_reg(unsigned long v)
{
	__asm__ volatile("wrmsr" :: "c"(GS_BASE), "a"((unsigned)v), "d"((unsigned)(v >> 32)));
}
static unsigned long get_reg(void)
{
	unsigned lo, hi;
	__asm__ volatile("rdmsr" : "=a"(lo), "=d"(hi) : "c"(GS_BASE));
	return (unsigned long)hi << 32 | lo;
}
static unsigned long via_reg(void) { unsigned long x; __asm__ volatile("movq %%gs:8, %0" : "=r"(x)); return x; }
#elif defined(__i386__)
/* A GDT of flat code and data and a data segment based at the area (4 GiB limits, 32-bit): loaded, and
 * every segment register with it (a far jump for %cs), as an i386 kernel does at boot; then %fs:N is the
 * area's byte N. */
static unsigned long long gdt[4];
static struct __attribute__((packed)) { unsigned short limit; unsigned long base; } gdtr = {
	sizeof gdt - 1, (unsigned long)gdt};
static unsigned long long segment(unsigned long base, unsigned type)
{
	unsigned long long low = 0xFFFFULL | (unsigned long long)(base & 0xFFFFFF) << 16;
	return low | (unsigned long long)type << 40 | 0xCFULL << 48 | (unsigned long long)(base >> 24) << 56;
}
static void set_reg(unsigned long v)
{
	gdt[1] = segment(0, 0x9A);
	gdt[2] = segment(0, 0x92);
	gdt[3] = segment(v, 0x92);
	__asm__ volatile("lgdt %0\n\tljmp $0x08, $1f\n1:\n\tmov %1, %%ds\n\tmov %1, %%es\n\tmov %1, %%ss\n\t"
		"mov %1, %%gs\n\tmov %2, %%fs" :: "m"(gdtr), "r"(0x10), "r"(0x18) : "memory");
}
/* The base of the segment in %fs, from the descriptor its selector names. */
static unsigned long get_reg(void)
{
	unsigned short sel;
	unsigned long long d;
	__asm__ volatile("mov %%fs, %0" : "=r"(sel));
	d = gdt[sel >> 3];
	return (unsigned long)((d >> 16) & 0xFFFFFF) | (unsigned long)(d >> 56) << 24;
}
static unsigned long via_reg(void) { unsigned long x; __asm__ volatile("movl %%fs:4, %0" : "=r"(x)); return x; }
#elif defined(__aarch64__)
static void set_reg(unsigned long v) { __asm__ volatile("msr tpidr_el1, %0" :: "r"(v)); }
static unsigned long get_reg(void) { unsigned long v; __asm__ volatile("mrs %0, tpidr_el1" : "=r"(v)); return v; }
static unsigned long via_reg(void) { return ((unsigned long *)get_reg())[1]; }
#elif defined(__riscv)
static void set_reg(unsigned long v) { __asm__ volatile("mv tp, %0" :: "r"(v)); }
static unsigned long get_reg(void) { unsigned long v; __asm__ volatile("mv %0, tp" : "=r"(v)); return v; }
static unsigned long via_reg(void) { return ((unsigned long *)get_reg())[1]; }
#endif

__attribute__((noinline)) long fire(long x) { SDT_PROBE2(pc, own, reg, hit, x, get_reg()); return x + 1; }

long kmain(long x)
{
	long sum = 0, bad = 0;
	set_reg((unsigned long)area);
	for (long i = 0; i < x; i++)
		sum += fire(i);
	if (get_reg() != (unsigned long)area) bad |= 1;
	if (via_reg() != 0x2222) bad |= 2;
	for (int i = 0; i < 8; i++)
		if (area[i] != 0x1111UL * (i + 1)) bad |= 4;
	return bad ? -bad : sum;
}
"""


@pytest.fixture(scope="module", params=["x86_64", "i386", "aarch64", "riscv64"])
def image(request, tmp_path_factory):
    return request.param, build_c_kernel(tmp_path_factory.mktemp(f"percpu-{request.param}"), request.param,
                                         SOURCE)


@pytest.mark.parametrize("cpus", [1, 2])
@pytest.mark.parametrize("arm", ["trap", "branch"])
def test_armed_probes_leave_the_kernels_per_cpu_register_and_area_alone(image, arm, cpus):
    arch, path = image
    nm = cross_tool(arch, "nm") if arch != "x86_64" else "nm"
    (area,) = [int(ln.split()[0], 16) for ln in run([nm, str(path)]).stdout.splitlines() if ln.endswith(" area")]
    proc = sdtgen("boot", path, "--json", "--arm", arm, "--cpus", str(cpus), "--enable", ":::", "--run", "kmain",
                  "--arg", "3")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [e["value"] for e in events if e["event"] == "return"] == [1 + 2 + 3] * cpus  # no bit of `bad` set
    fires = sorted((e.get("cpu", 0), e["args"][0], e["args"][1]) for e in events if e["event"] == "fire")
    assert fires == [(c, i, area) for c in range(cpus) for i in range(3)]
