"""Branch arming's encodings (branch_to, retarget) against GNU as's own, decoded by Capstone.

Each architecture's assembler encodes a call and a jump to a `rec` label
from fixed offsets (.org), before and after it, and the linker places them
at the kernel's address; sdtgen's encoding of the same branch must be
byte-identical. The boot tests run them (tests/boot/test_datapath.py,
tests/test_architectures.py).
"""

from __future__ import annotations

import pytest
from helpers import ARCHES, assemble_text, cross_tool, run

from sdtgen import arch as arches
from sdtgen.arch.base import CALL, TAIL

FAR = 0x200000  # RISC-V: past jal's ±1 MiB

# arch -> (as flags, source, [(offset, form, site length, target offset)])
CASES = {
    "x86_64": (["--64"], """
        stub: ret
        .org 0x100; call rec
        .org 0x110; {disp32} jmp rec
        .org 0x120; cs; call rec  # a 6-byte site is one instruction: the call returns past the site
        .org 0x130; cs; {disp32} jmp rec
        .org 0x800; rec: ret
        .org 0x1000; call rec
        .org 0x1010; {disp32} jmp rec
    """, [(0x100, CALL, 5, 0x800), (0x110, TAIL, 5, 0x800), (0x120, CALL, 6, 0x800), (0x130, TAIL, 6, 0x800),
          (0x1000, CALL, 5, 0x800), (0x1010, TAIL, 5, 0x800)]),
    "aarch64": ([], """
        stub: ret
        .org 0x100; bl rec
        .org 0x110; b rec
        .org 0x800; rec: ret
        .org 0x1000; bl rec
        .org 0x1010; b rec
    """, [(0x100, CALL, 4, 0x800), (0x110, TAIL, 4, 0x800), (0x1000, CALL, 4, 0x800), (0x1010, TAIL, 4, 0x800)]),
    "riscv64": (["-march=rv64imac"], """
        .option norelax
        .option norvc
        stub: ret
        .org 0x100; jal ra, rec
        .org 0x110; jal zero, rec
        .org 0x120; jal ra, rec; nop  # an 8-byte site: only its first word changes, one store
        .org 0x130; jal zero, rec; nop
        .org 0x800; rec: ret
        .org 0x1000; jal ra, rec
        .org 0x1010; jal ra, rec; nop
    """, [(0x100, CALL, 4, 0x800), (0x110, TAIL, 4, 0x800), (0x120, CALL, 8, 0x800), (0x130, TAIL, 8, 0x800),
          (0x1000, CALL, 4, 0x800), (0x1010, CALL, 8, 0x800)]),
}
CASES["i386"] = (["--32"], CASES["x86_64"][1], CASES["x86_64"][2])


def assemble(arch_name: str, tmp_path) -> bytes:
    flags, source, _ = CASES[arch_name]
    return assemble_text(arch_name, flags, source, tmp_path, "rec")


@pytest.mark.parametrize("name", ARCHES)
def test_calls_and_jumps_to_the_recorder_are_what_the_assembler_encodes(name, tmp_path):
    arch, code = arches.by_name(name), assemble(name, tmp_path)
    base = arch.kernel_base
    cs = arch.capstone()
    for at, form, length, target in CASES[name][2]:
        ours = arch.branch_to(form, base + at, length, base + target)
        assert ours == code[at:at + length], (name, hex(at))
        first = next(cs.disasm(ours, base + at))
        assert first.mnemonic in {"call", "jmp", "bl", "b", "jal", "j"}, first.mnemonic
        if name in ("x86_64", "i386"):
            assert first.size == length  # one instruction fills the site


@pytest.mark.parametrize("name", ARCHES)
def test_a_recorder_out_of_range_is_no_branch(name):
    arch = arches.by_name(name)
    base = arch.kernel_base
    far = {"x86_64": 1 << 33, "i386": None, "aarch64": 1 << 28, "riscv64": 1 << 32}[name]
    if far is not None:
        assert arch.branch_to(CALL, base, 8 if name == "riscv64" else 5 if "x86" in name or name == "i386"
                              else 4, base - far) is None
    if name == "riscv64":
        assert arch.branch_to(CALL, base, 4, base + FAR) is None  # jal: ±1 MiB
        assert arch.branch_to(CALL, base, 8, base + FAR) is None  # no auipc+jalr pair: trapped instead
        assert arch.branch_to(TAIL, base, 2, base + 0x100) is None  # c.j sites are trapped


@pytest.mark.parametrize("name", ["x86_64", "i386"])
def test_a_conditional_tail_jump_is_sent_to_the_recorder_keeping_its_condition(name, tmp_path):
    arch = arches.by_name(name)
    gas, ld, objcopy = (cross_tool(name, t) for t in ("as", "ld", "objcopy"))
    src, obj, linked, raw = (tmp_path / f"jcc.{x}" for x in ("s", "o", "elf", "bin"))
    src.write_text(".text\nstub: ret\n.org 0x100; {disp32} jae stub\n.org 0x110; {disp32} jae rec\n"
                   ".org 0x120; {disp32} jle stub\n.org 0x130; {disp32} jle rec\n.org 0x800; rec: ret\n")
    run([gas, "--64" if name == "x86_64" else "--32", "-o", str(obj), str(src)])
    run([ld, f"-Ttext={arch.kernel_base:#x}", "-e", "stub", "-o", str(linked), str(obj)])
    run([objcopy, "-O", "binary", "-j", ".text", str(linked), str(raw)])
    code, base = raw.read_bytes(), arch.kernel_base
    for original, wanted in ((0x100, 0x110), (0x120, 0x130)):
        assert arch.retarget(code[original:original + 6], base + wanted, base + 0x800) == code[wanted:wanted + 6]
