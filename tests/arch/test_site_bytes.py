"""The byte rule check and the patcher share (match_site, decode), against GNU as's own encodings.

check and the boot patcher both accept a site only through the architecture's
match_site, so neither can catch a fault in it. Here GNU as (each
architecture's own, from the registry's cross prefix) assembles every form a
site takes and the near misses that must be refused: another target, another
opcode, another length. Each instruction sits at a fixed offset (.org) after a
`stub` label at offset 0, so where it goes is the assembler's word, not ours.
"""

from __future__ import annotations

import pytest
from helpers import ARCHES, assemble_text

from sdtgen import arch as arches
from sdtgen.arch.base import CALL, COND, TAIL

RELAXED_JMP = "jmp; nop (a relaxed GOT jmp)"  # a 6-byte site whose first 5 bytes are a jmp of their own
SLOT = 0x300  # x86-64: the pointer slot `call *slot(%rip)` goes through; it holds the stub's address

# arch -> (as flags, source, [(offset, form, length scan recorded, length expected or None, what)])
CASES = {
    "x86_64": (["--64"], """
        stub: ret
        .org 0x100; call stub
        .org 0x110; jmp stub
        .org 0x120; cs; call stub  # as gcc writes it: a bare `cs call` loses its prefix
        .org 0x130; cs; jmp stub
        .org 0x140; jne stub
        .org 0x150; call *slot(%rip)
        .org 0x160; jmp *slot(%rip)
        .org 0x170; addr32; call stub
        .org 0x180; jmp stub; nop
        .org 0x200; call *%rax
        .org 0x210; mov $0x12345678, %eax
        .org 0x220; ds; call stub
        .org 0x230; lea stub(%rip), %rax
        .org 0x240; call other
        .org 0x250; jmp 1f; 1: nop
        .org 0x2f0; other: ret
        .org 0x300; slot: .quad stub
    """, [
        (0x100, CALL, 5, 5, "call rel32"), (0x110, TAIL, 5, 5, "jmp rel32"),
        (0x120, CALL, 6, 6, "cs call rel32"), (0x130, TAIL, 6, 6, "cs jmp rel32"),
        (0x140, COND, 6, 6, "jcc rel32"), (0x150, CALL, 6, 6, "call *GOT"), (0x160, TAIL, 6, 6, "jmp *GOT"),
        (0x170, CALL, 6, 6, "addr32 call (a relaxed GOT call)"), (0x180, TAIL, 6, 6, RELAXED_JMP),
        (0x200, CALL, 2, None, "indirect call"), (0x210, CALL, 5, None, "mov imm32, the length of a call"),
        (0x220, CALL, 6, None, "ds call: a prefix no compiler puts on a site"),
        (0x230, CALL, 7, None, "lea of the stub's address"),
        (0x240, CALL, 5, None, "a call to another function"), (0x250, TAIL, 2, None, "short jmp"),
    ]),
    "i386": (["--32"], """
        stub: ret
        .org 0x100; call stub
        .org 0x110; jmp stub
        .org 0x120; cs; call stub  # as gcc writes it: a bare `cs call` loses its prefix
        .org 0x130; cs; jmp stub
        .org 0x140; jne stub
        .org 0x200; call *%eax
        .org 0x210; mov $0x12345678, %eax
        .org 0x220; call *slot
        .org 0x230; call other
        .org 0x2f0; other: ret
        .org 0x300; slot: .long stub
    """, [
        (0x100, CALL, 5, 5, "call rel32"), (0x110, TAIL, 5, 5, "jmp rel32"),
        (0x120, CALL, 6, 6, "cs call rel32"), (0x130, TAIL, 6, 6, "cs jmp rel32"), (0x140, COND, 6, 6, "jcc rel32"),
        (0x200, CALL, 2, None, "indirect call"), (0x210, CALL, 5, None, "mov imm32"),
        (0x220, CALL, 6, None, "call *abs32: i386 has no RIP-relative slot"),
        (0x230, CALL, 5, None, "a call to another function"),
    ]),
    "aarch64": ([], """
        stub: ret
        .org 0x100; bl stub
        .org 0x110; b stub
        .org 0x200; b.ne stub
        .org 0x210; blr x1
        .org 0x220; adr x0, stub
        .org 0x230; bl other
        .org 0x2f0; other: ret
    """, [
        (0x100, CALL, 4, 4, "bl"), (0x110, TAIL, 4, 4, "b"),
        (0x200, TAIL, 4, None, "conditional branch"), (0x210, CALL, 4, None, "indirect call"),
        (0x220, CALL, 4, None, "address of the stub"), (0x230, CALL, 4, None, "a call to another function"),
    ]),
    "riscv64": (["-march=rv64imac"], """
        .option norelax
        .option norvc
        stub: ret
        .org 0x100; auipc ra, 0; jalr ra, -0x100(ra)
        .org 0x110; jal ra, stub
        .org 0x120; auipc t1, 0; jalr zero, -0x120(t1)
        .org 0x130; j stub
        .org 0x140; .option rvc; c.j stub; .option norvc
        .org 0x200; beq a0, a1, stub
        .org 0x210; auipc ra, 0; addi ra, ra, -0x210
        .org 0x220; auipc t0, 0; jalr ra, -0x220(t1)
        .org 0x230; jal t0, stub
        .org 0x240; jalr ra, 0(a0)
        .org 0x250; auipc ra, 0; jalr ra, -0x24c(ra)
        .org 0x1800; auipc ra, 0xfffff; jalr ra, -2048(ra)
    """, [
        (0x100, CALL, 8, 8, "auipc+jalr ra"), (0x110, CALL, 8, 4, "jal ra (relaxed call)"),
        (0x120, TAIL, 8, 8, "auipc t1+jalr zero"), (0x130, TAIL, 8, 4, "j (relaxed tail)"),
        (0x140, TAIL, 8, 2, "c.j (relaxed tail)"), (0x1800, CALL, 8, 8, "auipc+jalr with a negative high part"),
        (0x200, TAIL, 4, None, "conditional branch"), (0x210, CALL, 8, None, "auipc+addi: an address"),
        (0x220, CALL, 8, None, "jalr through another register than auipc's"),
        (0x230, CALL, 4, None, "jal with a link register that is neither ra nor zero"),
        (0x240, CALL, 4, None, "indirect call"), (0x250, CALL, 8, None, "auipc+jalr to stub + 4"),
    ]),
}


def assemble(arch_name: str, tmp_path) -> bytes:
    flags, source, _ = CASES[arch_name]
    return assemble_text(arch_name, flags, source, tmp_path, "sites")


@pytest.fixture(params=ARCHES)
def assembled(request, tmp_path):
    name = request.param
    return arches.by_name(name), assemble(name, tmp_path), CASES[name][2]


def test_every_form_and_near_miss_is_judged_as_the_assembler_encoded_it(assembled):
    arch, code, cases = assembled
    base = arch.kernel_base
    stub = base

    def read_pointer(addr: int) -> int:  # what the linker put in the slot
        assert addr == base + SLOT
        return int.from_bytes(code[SLOT:SLOT + arch.bits // 8], "little")

    for off, form, recorded, expected, what in cases:
        got = arch.match_site(code[off:off + 16], base + off, form, recorded, stub, read_pointer)
        assert got == expected, f"{arch.name} {what} at {off:#x}: {got} != {expected}"


def test_sites_refuse_another_target_another_form_and_another_length(assembled):
    arch, code, cases = assembled
    base = arch.kernel_base
    step = 2 if arch.name == "riscv64" else 4

    def read_pointer(addr: int) -> int:  # what the linker put in the slot: the stub
        assert addr == base + SLOT
        return int.from_bytes(code[SLOT:SLOT + arch.bits // 8], "little")

    for off, form, recorded, expected, what in cases:
        if expected is None:
            continue
        site = code[off:off + 16]
        for stub in (base + step, base - step):
            assert arch.match_site(site, base + off, form, recorded, stub, read_pointer) is None, what
        other_forms = {CALL: (TAIL, COND), TAIL: (CALL, COND), COND: (CALL, TAIL)}[form]
        for other in other_forms:
            assert arch.match_site(site, base + off, other, recorded, base, read_pointer) is None, what
        if what != RELAXED_JMP:
            assert arch.match_site(site, base + off, form, expected - 1, base, read_pointer) is None, what
        if arch.name != "riscv64":  # RISC-V sites shrink under relaxation, never grow; x86 and AArch64 keep theirs
            assert arch.match_site(site, base + off, form, expected + 1, base, read_pointer) is None, what


def test_check_decodes_each_form_to_its_target(assembled):
    arch, code, cases = assembled
    base = arch.kernel_base
    for off, form, _, expected, what in cases:
        if expected is None:
            continue
        d = arch.decode(code[off:off + 16], base + off, lambda a: {base + SLOT: base}[a])
        assert (d.form, d.length, d.target) == (form, 5 if what == RELAXED_JMP else expected, base), what
