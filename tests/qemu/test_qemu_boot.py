"""The kernel patches itself at boot: before any probe fires, every site in QEMU's memory is no longer
the call or jump to its stub that the image file has (objdump's truth), but the NOP or return Capstone
reads there; enabled, it is the architecture's breakpoint."""

from __future__ import annotations

import re

import pytest
from helpers import cross_tool, run
from qemu_helpers import ARCHES, Qemu

from sdtgen import arch as arches
from sdtgen.image import Image

DISABLED = {"call": {"nop", "c.nop"}, "tail": {"ret", "c.jr"}}
BREAKPOINT = {"riscv64": {"ebreak", "c.ebreak"}, "aarch64": {"brk"}, "x86_64": {"int3"}, "i386": {"int3"}}


def objdump_at(image, arch: str, addr: int, length: int) -> str:
    """objdump's disassembly of the instruction at ``addr`` in the image file."""
    objdump = cross_tool(arch, "objdump") if arches.by_name(arch).toolchain.cross_prefix else "objdump"
    out = run([objdump, "-d", "--no-show-raw-insn", f"--start-address={addr:#x}", f"--stop-address={addr + length:#x}",
               str(image)]).stdout
    lines = [ln for ln in out.splitlines() if re.match(rf"\s*{addr:x}:", ln)]
    return lines[0].split(":", 1)[1].strip() if lines else ""


@pytest.mark.parametrize("arch", ARCHES)
def test_every_site_is_a_nop_in_memory_before_any_probe_fires_and_a_breakpoint_when_enabled(qemu_kernel, arch):
    image = qemu_kernel(arch)
    with Image(str(image)) as im:
        sites = im.sites()
        cs = im.arch.capstone()
        stubs = {s.probe.stub for s in sites}
    assert len(sites) > 15
    q = Qemu(image)
    try:
        before = {s.addr: q.session.read(s.addr, s.length) for s in sites}
        q.session.enable(":::")
        armed = {s.addr: q.session.read(s.addr, s.length) for s in sites}
    finally:
        q.close()
    for s in sites:
        in_file = objdump_at(image, arch, s.addr, s.length)
        assert any(f"{stub:x}" in in_file for stub in stubs), (s.probe.spec, in_file)  # the call the compiler wrote
        insn = next(cs.disasm(before[s.addr], s.addr))
        assert insn.mnemonic in DISABLED[s.form], (s.probe.spec, insn.mnemonic, insn.op_str)
        assert next(cs.disasm(armed[s.addr], s.addr)).mnemonic in BREAKPOINT[arch], s.probe.spec
