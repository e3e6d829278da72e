"""What an is-enabled call site becomes: "result = 0" disabled, "result = 1" armed, exactly the call's length.

GNU as (each architecture's own) assembles the instructions the encodings must be, Capstone decodes
them, and Unicorn runs them from a return register full of garbage: the register must read the
value afterwards and execution must fall through to the next instruction, with no branch and no trap.
"""

from __future__ import annotations

import pytest
from helpers import cross_tool, run

from sdtgen import arch as arches

BASE = 0x100000
GARBAGE = 0x5A5A5A5A5A5A5A5A

# arch -> (as flags, [(site length, value, the assembler's text of what the site must become)])
CASES = {
    "x86_64": (["--64"], [
        (5, 0, "cs; cs; cs; xorl %eax, %eax"), (5, 1, "movl $1, %eax"),
        (6, 0, "cs; cs; cs; cs; xorl %eax, %eax"), (6, 1, "cs; movl $1, %eax"),
    ]),
    "i386": (["--32"], [
        (5, 0, "cs; cs; cs; xorl %eax, %eax"), (5, 1, "movl $1, %eax"),
        (6, 0, "cs; cs; cs; cs; xorl %eax, %eax"), (6, 1, "cs; movl $1, %eax"),
    ]),
    "aarch64": ([], [(4, 0, "mov w0, #0"), (4, 1, "mov w0, #1")]),
    "riscv64": (["-march=rv64imac"], [
        (8, 0, ".option norvc; li a0, 0; nop"), (8, 1, ".option norvc; li a0, 1; nop"),  # auipc+jalr
        (4, 0, ".option norvc; li a0, 0"), (4, 1, ".option norvc; li a0, 1"),  # relaxed to jal
    ]),
}
# What Capstone must see first: the instruction that sets the return register.
FIRST = {"x86_64": ("xor eax, eax", "mov eax, 1"), "i386": ("xor eax, eax", "mov eax, 1"),
         "aarch64": ("mov w0, #0", "mov w0, #1"), "riscv64": ("mv a0, zero", "addi a0, zero, 1")}


def gas(arch_name: str, text: str, tmp_path) -> bytes:
    flags, _ = CASES[arch_name]
    gas_tool, objcopy = cross_tool(arch_name, "as"), cross_tool(arch_name, "objcopy")
    src, obj, raw = tmp_path / "a.s", tmp_path / "a.o", tmp_path / "a.bin"
    src.write_text(".text\n" + text.replace("; ", "\n") + "\n")
    run([gas_tool, *flags, "-o", str(obj), str(src)])
    run([objcopy, "-O", "binary", "-j", ".text", str(obj), str(raw)])
    return raw.read_bytes()


def execute(arch, code: bytes) -> tuple[int, int]:
    """Run ``code`` alone from a garbage return register; (the register, where execution stopped)."""
    import unicorn

    uc = unicorn.Uc(*arch.unicorn())
    uc.mem_map(BASE, 0x1000)
    uc.mem_write(BASE, code)
    uc.reg_write(arch.regs.ret, GARBAGE & ((1 << arch.bits) - 1))
    uc.emu_start(BASE, BASE + len(code), timeout=1_000_000, count=16)
    return uc.reg_read(arch.regs.ret), uc.reg_read(arch.regs.pc)


@pytest.mark.parametrize("name", list(CASES))
def test_results_are_the_assemblers_encodings(name, tmp_path):
    arch = arches.by_name(name)
    for length, value, text in CASES[name][1]:
        assert arch.set_result(length, value) == gas(name, text, tmp_path), f"{name} {length} bytes = {value}"


@pytest.mark.parametrize("name", list(CASES))
def test_results_decode_as_one_setting_of_the_return_register(name):
    arch = arches.by_name(name)
    for length, value, _ in CASES[name][1]:
        code = arch.set_result(length, value)
        insns = list(arch.capstone().disasm(code, BASE))
        assert sum(i.size for i in insns) == length == len(code)
        assert f"{insns[0].mnemonic} {insns[0].op_str}" == FIRST[name][value]
        assert all(i.mnemonic == "nop" for i in insns[1:]), insns  # padding, if any, does nothing
        if name in ("x86_64", "i386"):
            assert len(insns) == 1  # one instruction: a disabled check costs it, its test and its branch


@pytest.mark.parametrize("name", list(CASES))
def test_results_run_to_the_value_without_a_branch(name):
    arch = arches.by_name(name)
    for length, value, _ in CASES[name][1]:
        ret, pc = execute(arch, arch.set_result(length, value))
        word = ret & 0xFFFFFFFF if name in ("aarch64", "riscv64") else ret
        assert (word, pc) == (value, BASE + length), f"{name} {length} bytes = {value}"
        if name == "x86_64":
            assert ret == value  # writing eax clears the upper half of rax: an int reads the same as a long
