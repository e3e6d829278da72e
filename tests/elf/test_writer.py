"""Symbols appended to an object: binutils sees them, the linker resolves them, readelf reads every rewrite."""

from __future__ import annotations

import shutil

import pytest
from helpers import (
    ARCHES,
    compile_c,
    compile_runtime,
    cross_tool,
    include_flag,
    readelf_sections,
    readelf_symbols,
    run,
    sdtgen,
)

from sdtgen.elf.reader import ElfFile
from sdtgen.elf.writer import NewSymbol, add_symbols

SECTIONS = 65_300  # past SHN_LORESERVE (0xff00 = 65,280): indices above it live in .symtab_shndx


def test_appended_symbols_are_hidden_globals_binutils_accepts(tmp_path):
    obj = compile_c(tmp_path, "f", "int f(int x) { return x + 1; }\nint g(int x) { return x * 2; }\n")
    with ElfFile(obj) as elf:
        text = elf.section(".text").index
        data = add_symbols(elf, [NewSymbol("__sdt_site_0", text, 0), NewSymbol("__sdt_site_1", text, 0x10)])
    out = tmp_path / "anchored.o"
    out.write_bytes(data)
    syms = run(["readelf", "-sW", str(out)]).stdout
    assert any(ln.split()[-1] == "__sdt_site_1" and "GLOBAL HIDDEN" in " ".join(ln.split()) and
               ln.split()[1].endswith("10") for ln in syms.splitlines() if "__sdt_site_" in ln)
    # Only e_shoff changes in the original bytes; everything new is appended.
    orig = obj.read_bytes()
    assert data[:0x28] == orig[:0x28] and data[0x30:len(orig)] == orig[0x30:]
    image = tmp_path / "a.elf"
    run(["ld", "-e", "f", "--defsym", "probe=__sdt_site_1", "-o", str(image), str(out)])
    nm = {ln.split()[-1]: int(ln.split()[0], 16) for ln in run(["nm", str(image)]).stdout.splitlines()}
    assert nm["probe"] == nm["f"] + 0x10
    run(["objdump", "-d", str(out)])  # still a well-formed object


@pytest.fixture(params=[*ARCHES, "x86_64-offset"])
def rewritten(request, kernel, kernel_offset, arch_kernel):
    """An object `gen` rewrote in place (the partial link of each build), as the fixture Makefile made it."""
    if request.param == "x86_64":
        return "x86_64", kernel.partial
    if request.param == "x86_64-offset":
        return "x86_64", kernel_offset.partial
    return request.param, arch_kernel(request.param).partial


def test_every_object_gen_rewrites_reads_back_in_readelf(rewritten):
    arch, rewritten = rewritten
    theirs = readelf_symbols(rewritten)  # and no readelf warning
    with ElfFile(rewritten) as elf:
        assert len(elf.symbols) == len(theirs)
        for ours, t in zip(elf.symbols, theirs, strict=True):
            assert (ours.value, ours.size) == t[:2]
            if t[4] not in ("UND", "ABS", "COM"):
                assert ours.shndx == int(t[4]) < len(elf.sections)
    run([cross_tool(arch, "objdump"), "-dr", str(rewritten)])  # its own disassembler reads it too


@pytest.fixture(scope="session")
def many_sections(tmp_path_factory):
    """A gcc-made object with 65,312 sections: one per variable, then the function with a probe call."""
    d = tmp_path_factory.mktemp("many-sections")
    src = d / "many.c"
    lines = [f'int v{i} __attribute__((section(".d.{i}"))) = {i};' for i in range(SECTIONS)]
    lines += ["extern void __dtrace_sdt_big_far(long);", "long far(long x) { __dtrace_sdt_big_far(x); return x + v1; }"]
    src.write_text("\n".join(lines) + "\n")
    obj = d / "many.o"
    run(["gcc", "-O2", "-fno-pic", "-mcmodel=kernel", "-mno-red-zone", "-fno-asynchronous-unwind-tables",
         "-ffunction-sections", "-fno-toplevel-reorder", include_flag(), "-c", "-o", str(obj), str(src)])
    return obj


def test_extended_section_indices_read_as_readelf_reads_them(many_sections):
    sections = readelf_sections(many_sections)
    assert len(sections) > 0xFF00
    with ElfFile(many_sections) as elf:
        assert [(s.name, s.offset, s.size) for s in elf.sections] == [(n, o, z) for n, _, o, z in sections]
        far = next(s for s in elf.symbols if s.name == "far")
        assert far.shndx > 0xFF00 and elf.sections[far.shndx].name == ".text.far"
        assert [(s.value, s.size, s.name) for s in elf.symbols] == [(t[0], t[1], t[5])
                                                                    for t in readelf_symbols(many_sections)]


def test_gen_writes_extended_indices_readelf_and_the_linker_follow(many_sections, tmp_path):
    obj = tmp_path / "many.o"
    shutil.copy(many_sections, obj)
    before = readelf_symbols(obj)
    far_ndx = next(t[4] for t in before if t[5] == "far")
    call = next(ln for ln in run(["objdump", "-d", "--section=.text.far", str(obj)]).stdout.splitlines()
                if "call" in ln)
    call_offset = int(call.split(":")[0], 16)
    stubs, table = tmp_path / "s.c", tmp_path / "t.S"
    sdtgen("gen", obj, "--stubs", stubs, "--table", table, check=True)
    after = readelf_symbols(obj)
    assert after[:len(before)] == before
    added = after[len(before):]
    assert [(value, ndx) for value, _, _, _, ndx, _ in added] == [(call_offset, far_ndx)]  # past 0xff00
    # The linker resolves the anchor through .symtab_shndx: check finds the site where the table says.
    sdt_objs = compile_runtime(tmp_path, "many", stubs, table)
    script = tmp_path / "final.ld"
    sdtgen("linker-script", "final", "-o", script, check=True)
    image = tmp_path / "many.elf"
    run(["ld", "-T", str(script), "-e", "far", "-o", str(image), str(obj), *map(str, sdt_objs)])
    proc = sdtgen("check", obj, image)
    assert proc.returncode == 0 and "1 stable" in proc.stdout, proc.stdout + proc.stderr
