"""The runtime's C layouts, measured by each compiler, are the layouts Python's readers use (sdtgen/layout.py)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from helpers import ROOT, cross_tool, need_tool, readelf_symbols, run

from sdtgen import layout

INCLUDE = ROOT / "sdtgen" / "include"

# (compiler command, pointer bits): the four cross gccs and clang for two targets.
COMPILERS = {
    "gcc": (["gcc"], 64),
    "i686-gcc": (["i386:gcc"], 32),
    "aarch64-gcc": (["aarch64:gcc"], 64),
    "riscv64-gcc": (["riscv64:gcc"], 64),
    "clang-i686": (["clang", "--target=i686-linux-gnu"], 32),
    "clang-riscv64": (["clang", "--target=riscv64-linux-gnu"], 64),
}


def compiler(name: str) -> tuple[list[str], int]:
    cmd, bits = COMPILERS[name]
    if ":" in cmd[0]:
        arch, tool = cmd[0].split(":")
        return [cross_tool(arch, tool), *cmd[1:]], bits
    return [need_tool(cmd[0], cmd[0]), *cmd[1:]], bits


def measuring_source() -> str:
    """One symbol per measure, its size the measure + 1 (a 0-byte array is not C): nothing is asserted in C."""
    out = ["#include <sdt_runtime.h>"]
    for lay in layout.LAYOUTS:
        out.append(f"char size__{lay.name}[sizeof(struct {lay.name}) + 1];")
        out.append(f"char align__{lay.name}[__alignof__(struct {lay.name}) + 1];")
        for f in lay.fields:
            out.append(f"char off__{lay.name}__{f.name}[__builtin_offsetof(struct {lay.name}, {f.name}) + 1];")
            out.append(f"char len__{lay.name}__{f.name}[sizeof(((struct {lay.name} *)0)->{f.name}) + 1];")
    return "\n".join(out) + "\n"


def python_measures(bits: int) -> dict[str, int]:
    out = {}
    for lay in layout.LAYOUTS:
        out[f"size__{lay.name}"] = lay.size(bits)
        out[f"align__{lay.name}"] = max(f.size(bits) for f in lay.fields)
        for f in lay.fields:
            out[f"off__{lay.name}__{f.name}"] = lay.offset(f.name, bits)
            out[f"len__{lay.name}__{f.name}"] = f.size(bits) * f.count
    return out


def header_without_asserts(tmp_path) -> str:
    """sdt_runtime.h with its _Static_asserts switched off: the compiler measures, it does not check."""
    text, n = re.subn(r"#define _SDT_LAYOUT\(e\) .*", "#define _SDT_LAYOUT(e)", (INCLUDE / "sdt_runtime.h").read_text())
    assert n == 2  # the C and the C++ definitions
    (tmp_path / "sdt_runtime.h").write_text(text)
    return str(tmp_path)


@pytest.mark.parametrize("name", list(COMPILERS))
def test_every_offset_and_size_the_compiler_lays_out_is_pythons(tmp_path, name):
    cmd, bits = compiler(name)
    src, obj = tmp_path / "measure.c", tmp_path / "measure.o"
    src.write_text(measuring_source())
    run([*cmd, "-ffreestanding", "-O0", "-fno-common", f"-I{header_without_asserts(tmp_path)}", "-c", "-o", str(obj),
         str(src)])
    measured = {sym: size - 1 for _, size, _, _, _, sym in readelf_symbols(obj) if "__" in sym}
    assert measured == python_measures(bits)


@pytest.mark.parametrize("name", list(COMPILERS))
def test_the_installed_header_compiles_with_its_static_assertions(tmp_path, name):
    cmd, _ = compiler(name)
    src = tmp_path / "use.c"
    src.write_text("#include <sdt_runtime.h>\nint sdt_layout_ok;\n")
    run([*cmd, "-ffreestanding", "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE}", "-fsyntax-only",
         str(src)])


@pytest.mark.parametrize("flags", [["gcc", "-std=c99", "-pedantic-errors"], ["clang", "-std=c99", "-pedantic-errors"],
                                   ["g++", "-x", "c++", "-std=c++11", "-pedantic-errors"],
                                   ["clang++", "-x", "c++", "-std=c++11", "-pedantic-errors"]])
def test_the_header_compiles_as_c99_pedantic_and_as_cplusplus(tmp_path, flags):
    need_tool(flags[0], "g++" if flags[0] == "g++" else "clang")
    src = tmp_path / "use.c"
    src.write_text("#include <sdt_runtime.h>\nint sdt_layout_ok;\n")
    run([*flags, "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE}", "-fsyntax-only", str(src)])


def test_the_committed_header_block_is_what_layout_py_renders():
    out = subprocess.run([sys.executable, "-m", "sdtgen.layout"], capture_output=True, text=True, check=True,
                         cwd=ROOT).stdout
    committed = layout.current_block((INCLUDE / "sdt_runtime.h").read_text())
    assert committed + "\n" == out


def test_every_constant_error_code_and_protocol_word_the_header_defines_is_pythons(tmp_path):
    """The numbers and words guest and host share (constants, SDT_ERR_* codes, the control protocol's words and the
    shapes of its reply lines, the names of the files a host hands a kernel), as a program built with the installed
    header prints them."""
    names = [n for n, _, _ in layout.CONSTANTS]
    lines = ['#include <stdio.h>', '#include <sdt_runtime.h>', "int main(void) {"]
    lines += [f'\tprintf("{n} %lld\\n", (long long){n});' for n in names]
    lines += [f'\tprintf("{n} %s\\n", {n});' for n, _, _ in layout.WORDS + layout.STRINGS]
    replies = {layout.reply_name(c, w): f"{layout.WORD[w]} {''.join(f.split(':')[1] for f in fs)}"
               for c, w, fs in layout.REPLIES}  # the word, a space, a kind for each field
    lines += [f'\tprintf("{n} %s\\n", {n});' for n in replies]
    lines += ["\treturn 0;", "}"]
    src, exe = tmp_path / "words.c", tmp_path / "words"
    src.write_text("\n".join(lines) + "\n")
    run([need_tool("gcc", "gcc"), f"-I{INCLUDE}", "-o", str(exe), str(src)])
    printed = dict(line.split(" ", 1) for line in run([str(exe)]).stdout.splitlines())
    want = {n: str(v) for n, v, _ in layout.CONSTANTS}
    want.update({n: text for n, text, _ in layout.WORDS + layout.STRINGS})
    want.update(replies)
    assert printed == want


@pytest.mark.parametrize("lay", [layout.SITE, layout.PROBE], ids=lambda lay: lay.name)
@pytest.mark.parametrize("arch", ["x86_64", "i386", "aarch64", "riscv64"])
def test_the_table_entries_gen_assembles_are_the_structs_the_compiler_lays_out(tmp_path, lay, arch):
    """render_asm (what gen's .S table is written with) against the compiler: an entry with a distinct value in
    every field (each array element), assembled by GNU as, is byte for byte the struct gcc initializes with the
    same values through the installed header."""
    bits = 32 if arch == "i386" else 64
    values, c_fields, n = {}, [], 1
    for f in lay.fields:
        top = (1 << (8 * min(f.size(bits), 4) - 1)) - 1  # fits every field kind, signed ones included
        items = [(n + k) % top + 1 for k in range(f.count)]
        n += f.count
        values[f.name] = [str(v) for v in items] if f.count > 1 else str(items[0])
        c_fields.append(f".{f.name} = {{{', '.join(map(str, items))}}}" if f.count > 1 else f".{f.name} = {items[0]}")
    asm, c = tmp_path / "entry.S", tmp_path / "entry.c"
    asm.write_text("\t.data\n\t.globl entry\nentry:\n" + "\n".join(layout.render_asm(lay, bits, values)) + "\n")
    c.write_text(f"#include <sdt_runtime.h>\nstruct {lay.name} entry = {{ {', '.join(c_fields)} }};\n")
    data = {}
    for src in (asm, c):
        obj = tmp_path / f"{src.suffix[1:]}.o"
        run([cross_tool(arch, "gcc"), "-c", f"-I{INCLUDE}", "-o", str(obj), str(src)])
        raw = tmp_path / f"{src.suffix[1:]}.bin"
        run([cross_tool(arch, "objcopy"), "-O", "binary", "-j", ".data", str(obj), str(raw)])
        data[src.suffix] = raw.read_bytes()
    assert len(data[".S"]) == lay.size(bits) and data[".S"] == data[".c"]


def test_render_asm_refuses_a_field_the_layout_does_not_have_or_an_array_of_the_wrong_length():
    with pytest.raises(ValueError, match="no field"):
        layout.render_asm(layout.SITE, 64, {"nosuch": "1"})
    with pytest.raises(ValueError, match="6 elements"):
        layout.render_asm(layout.PROBE, 64, {"argtype": ["0"] * 5})
