"""A breakpoint the kernel executes itself (a BUG(), a debugger's int3) is not a probe's: sdt_trap says it is
not its own, and boot reports it as a fault of the call, in one line naming where the instruction is (as
objdump places it), exit 1; the session goes on, and the next run fires its probe and returns."""

from __future__ import annotations

import re

import pytest
from helpers import ARCHES, build_c_kernel, cross_tool, run, sdtgen

# The kernel's own breakpoint: x86's int3, AArch64's brk with Linux's BUG() immediate (sdtgen's is another),
# RISC-V's ebreak (c.ebreak where the C extension compresses it): the same instruction sdtgen arms sites with.
BREAKPOINTS = {"x86_64": "int3", "i386": "int3", "aarch64": "brk #0x800", "riscv64": "ebreak"}

SOURCE = r"""
#include <sdt.h>
SDT_PROBE_DEFINE1(bk, , , hello, "int");
__attribute__((noinline)) int own_break(int v)
{
	v = v * 3 + 1;
	__asm__ volatile("%s" ::: "memory");
	return v;
}
int kmain(int v) { SDT_PROBE1(bk, , , hello, v); return v + 1; }
"""


def breakpoint_place(image, arch: str) -> str:
    """``.text:own_break+0xOFF`` of the breakpoint instruction, from the architecture's objdump."""
    objdump = cross_tool(arch, "objdump") if arch != "x86_64" else "objdump"
    start = None
    for line in run([objdump, "-d", str(image)]).stdout.splitlines():
        m = re.match(r"([0-9a-f]+) <own_break>:$", line)
        if m:
            start = int(m[1], 16)
        m = re.match(r"\s*([0-9a-f]+):\s+(?:[0-9a-f]{2,8} ?)+\s+(int3|brk|c?\.?ebreak)\b", line)
        if start is not None and m:
            return f".text:own_break+{int(m[1], 16) - start:#x}"
    raise AssertionError(f"no breakpoint in own_break of {image}")


@pytest.mark.parametrize("arch", ARCHES)
def test_a_breakpoint_of_the_kernels_own_is_one_line_and_the_session_goes_on(tmp_path, arch):
    image = build_c_kernel(tmp_path, arch, SOURCE % BREAKPOINTS[arch])
    proc = sdtgen("boot", image, "--enable", "bk:::", "--run", "own_break", "--arg", "2", "--run", "kmain", "--arg",
                  "4")
    assert proc.returncode == 1
    assert proc.stderr == (f"{image}: error: {breakpoint_place(image, arch)}: fault in own_break: breakpoint trap "
                           "that is not a probe site's (sdt_trap says not its own) (last probe fired: none)\n")
    assert proc.stdout.splitlines() == ["patched 1 sites (0 refused)", "bk:::hello  arg0=4", "kmain(4) = 5"]
