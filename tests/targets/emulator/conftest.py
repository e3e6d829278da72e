"""A small kernel of guest behaviours the fixture kernel does not have: a loop, a halt, self-modifying code."""

from __future__ import annotations

import pytest
from helpers import compile_c, final_link, partial_link

# Built with gcc and sdtgen's partial and final linker scripts, like any kernel.
TRICKS = r"""
#include <sdt.h>

SDT_PROVIDER_DEFINE(tk);
SDT_PROBE_DEFINE1(tk, code, probed, entry, "int");

__attribute__((noinline)) int probed(int x)
{
	SDT_PROBE1(tk, code, probed, entry, x);
	return 42;
}

/* What probed() is overwritten with: a function returning 1234. */
__attribute__((noinline)) int replacement(int x)
{
	(void)x;
	return 1234;
}

/* Self-modifying code: copy replacement() over probed(), as a module loader reusing memory would. */
void rewrite(void)
{
	volatile unsigned char *dst = (volatile unsigned char *)probed;
	const volatile unsigned char *src = (const volatile unsigned char *)replacement;
	for (int i = 0; i < 16; i++)
		dst[i] = src[i];
}

/* Runs until stopped: an argument of 0 never ends. */
unsigned long spin(unsigned long n)
{
	unsigned long i = 0;
	while (n == 0 || i < n) {
		i++;
		__asm__ volatile("" : "+r"(i));
	}
	return i;
}

void halt(void)
{
	__asm__ volatile("hlt");
}

/* A store to any address the caller names. */
void poke(unsigned long addr, unsigned long value)
{
	*(volatile unsigned long *)addr = value;
}

long read_at(unsigned long addr)
{
	return *(volatile long *)addr;
}
"""


@pytest.fixture(scope="session")
def tricks(tmp_path_factory):
    """The tricks kernel's image (x86-64, reloc mode)."""
    tmp = tmp_path_factory.mktemp("tricks")
    partial = partial_link(tmp, "tricks", compile_c(tmp, "tricks_src", TRICKS))
    return final_link(tmp, partial, name="tricks")
