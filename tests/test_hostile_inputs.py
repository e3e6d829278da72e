"""Hostile and damaged ELF files: one clear line and exit 2, never a traceback or a hang."""

from __future__ import annotations

import struct

import pytest
from helpers import compile_c

from sdtgen.cli import main
from sdtgen.elf.reader import ElfFile

PROBED = """#include <sdt.h>
SDT_PROBE_DEFINE1(t, m, f, n, "int");
int f(int x) { SDT_PROBE1(t, m, f, n, x); return x; }
"""


@pytest.fixture
def obj(tmp_path):
    return compile_c(tmp_path, "k", PROBED)


def patched(path, tmp_path, edit) -> str:
    data = bytearray(path.read_bytes())
    edit(data)
    out = tmp_path / "bad.o"
    out.write_bytes(data)
    return str(out)


def shdr(path, name: str) -> tuple[int, int]:
    """File offset of a section's header, and its index."""
    with ElfFile(path) as elf:
        sec = elf.section(name)
        return elf.shoff + sec.index * elf.shentsize, sec.index


def expect_clean(capsys, argv: list[str], *needles: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ": error: " in err[0], err
    for n in needles:
        assert n in err[0], err[0]


def test_section_header_table_outside_the_file(obj, tmp_path, capsys):
    bad = patched(obj, tmp_path, lambda d: struct.pack_into("<Q", d, 0x28, len(d) + 4096))
    expect_clean(capsys, ["scan", bad], "corrupt ELF file", "section header table")


def test_absurd_section_count(obj, tmp_path, capsys):
    bad = patched(obj, tmp_path, lambda d: struct.pack_into("<H", d, 0x3C, 0xFEFF))
    expect_clean(capsys, ["scan", bad], "corrupt ELF file")


def test_wrong_section_header_size(obj, tmp_path, capsys):
    bad = patched(obj, tmp_path, lambda d: struct.pack_into("<H", d, 0x3A, 40))
    expect_clean(capsys, ["scan", bad], "section header size 40")


def test_section_contents_outside_the_file(obj, tmp_path, capsys):
    off, _ = shdr(obj, ".text")
    bad = patched(obj, tmp_path, lambda d: struct.pack_into("<Q", d, off + 0x20, 1 << 40))
    expect_clean(capsys, ["scan", bad], "lies outside the")


def test_relocations_for_a_section_that_does_not_exist(obj, tmp_path, capsys):
    off, _ = shdr(obj, ".rela.text")
    bad = patched(obj, tmp_path, lambda d: struct.pack_into("<I", d, off + 0x2C, 999))
    expect_clean(capsys, ["scan", bad], "applies to section 999, which does not exist")


def test_link_to_a_section_that_does_not_exist(obj, tmp_path, capsys):
    off, _ = shdr(obj, ".symtab")
    bad = patched(obj, tmp_path, lambda d: struct.pack_into("<I", d, off + 0x28, 4000))
    expect_clean(capsys, ["scan", bad], "links to section 4000")


def test_symbol_in_a_section_that_does_not_exist(obj, tmp_path, capsys):
    with ElfFile(obj) as elf:
        st = elf.symtab
        f = next(s for s in elf.symbols if s.name == "f")
        where = st.offset + f.index * st.entsize + 6
    bad = patched(obj, tmp_path, lambda d: struct.pack_into("<H", d, where, 0x7777))
    expect_clean(capsys, ["scan", bad], "refers to section 30583")


def test_symbol_name_outside_its_string_table(obj, tmp_path, capsys):
    with ElfFile(obj) as elf:
        st = elf.symtab
        sym = next(s for s in elf.symbols if s.name.startswith("__dtrace_sdt_"))
        where = st.offset + sym.index * st.entsize
    bad = patched(obj, tmp_path, lambda d: struct.pack_into("<I", d, where, 0x7FFFFFFF))
    expect_clean(capsys, ["probes", bad], "outside its")


def test_wrong_relocation_entry_size(obj, tmp_path, capsys):
    off, _ = shdr(obj, ".rela.text")
    bad = patched(obj, tmp_path, lambda d: struct.pack_into("<Q", d, off + 0x38, 7))
    expect_clean(capsys, ["scan", bad], "entry size 7")


def test_corrupt_descriptors(obj, tmp_path, capsys):
    with ElfFile(obj) as elf:
        sec = elf.section(".sdt_desc")
    bad = patched(obj, tmp_path, lambda d: d.__setitem__(slice(sec.offset, sec.offset + 4), b"XXXX"))
    expect_clean(capsys, ["scan", bad], "bad probe descriptors")


def test_descriptor_that_would_inject_assembly(tmp_path, capsys):
    src = ('#include <sdt.h>\nSDT_PROBE_DEFINE1(t, m, f, n, "int */ .byte 0x90; #");\n'
           "void f(int x) { SDT_PROBE1(t, m, f, n, x); }\n")
    obj = compile_c(tmp_path, "inj", src)
    out = tmp_path / "t.S"
    expect_clean(capsys, ["gen", str(obj), "--stubs", str(tmp_path / "s.c"), "--table", str(out)],
                 "argument type")
    assert not out.exists()


def test_program_headers_outside_the_file(kernel, tmp_path, capsys):
    data = bytearray(kernel.image.read_bytes())
    struct.pack_into("<Q", data, 0x20, len(data) + 64)
    bad = tmp_path / "bad.elf"
    bad.write_bytes(data)
    expect_clean(capsys, ["boot", str(bad)], "program header table")


def test_segment_too_large_to_be_a_kernel(kernel, tmp_path, capsys):
    data = bytearray(kernel.image.read_bytes())
    with ElfFile(kernel.image) as elf:
        ph = elf.phoff
    struct.pack_into("<Q", data, ph + 0x28, 1 << 40)  # p_memsz of the first segment
    bad = tmp_path / "bad.elf"
    bad.write_bytes(data)
    expect_clean(capsys, ["boot", str(bad)], "cannot be loaded")


def test_interrupted_gen_leaves_previous_outputs(kernel, tmp_path, monkeypatch):
    import os
    import shutil

    obj = tmp_path / "k.o"
    shutil.copy(kernel.partial, obj)
    stubs, table = tmp_path / "s.c", tmp_path / "t.S"
    stubs.write_text("old stubs\n")
    table.write_text("old table\n")
    before = obj.read_bytes()
    real = os.replace
    calls = []

    def interrupted(src, dst):
        calls.append(dst)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        from sdtgen.codegen import gen_files

        gen_files(obj, stubs, table)
    monkeypatch.setattr(os, "replace", real)
    assert stubs.read_text() == "old stubs\n" and table.read_text() == "old table\n" and obj.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.o", "s.c", "t.S"]  # no temporaries left


def test_a_probe_relocation_beyond_its_section_is_a_damaged_object(obj, tmp_path, capsys):
    """readelf places the probe's relocation; moved past the end of .text, scan names the object damaged."""
    from tables import readelf

    text, rela = readelf.section(obj, ".text"), readelf.section(obj, ".rela.text")
    (rows,) = [r.rows for r in readelf.relocations(obj) if r.name == ".rela.text"]
    syms = readelf.symbols(obj)
    row = next(i for i, r in enumerate(rows) if syms[r[1]].name.startswith("__dtrace_sdt_"))
    beyond = text.size + 0x10
    bad = patched(obj, tmp_path, lambda d: struct.pack_into("<Q", d, rela.offset + 24 * row, beyond))
    expect_clean(capsys, ["scan", bad], f".text+{beyond:#x}: a relocation against __dtrace_sdt_t_m_f_n lies "
                 "outside its section; the object is damaged; rebuild it")


SEVEN = """#include <sdt.h>
/* sdt.h's own record writer, asked for a seventh argument no macro of it accepts */
_SDT_DESC(t, m, f, seven, 7, _SDT_T("int") _SDT_T("int") _SDT_T("int") _SDT_T("int") _SDT_T("int") _SDT_T("int")
          _SDT_T("int"));
int f(int x) { SDT_PROBE1(t, m, f, seven, x); return x; }
"""


@pytest.mark.parametrize("command", ["scan", "probes", "gen"])
def test_a_descriptor_claiming_seven_arguments_is_one_error(tmp_path, capsys, command):
    obj = compile_c(tmp_path, "seven", SEVEN)
    outs = ["--stubs", str(tmp_path / "s.c"), "--table", str(tmp_path / "t.S")] if command == "gen" else []
    expect_clean(capsys, [command, str(obj), *outs], ".sdt_desc", "declares '7' arguments (0 to 6 allowed)")
    assert not (tmp_path / "s.c").exists() and not (tmp_path / "t.S").exists()


@pytest.mark.parametrize("command", ["probes", "boot"])
def test_an_image_probe_entry_claiming_seven_arguments_is_one_error(kernel, tmp_path, capsys, command):
    """The image's own probe table (layout PROBE), its first entry's nargs set to 7 after the link."""
    from sdtgen.layout import PROBE
    from sdtgen.table import PROBES_SET

    data = bytearray(kernel.image.read_bytes())
    with ElfFile(kernel.image) as elf:
        offset = elf.section(PROBES_SET).offset + PROBE.offsets(64)["nargs"]
    struct.pack_into("<H", data, offset, 7)
    bad = tmp_path / "seven.elf"
    bad.write_bytes(data)
    expect_clean(capsys, [command, str(bad)], "corrupt probe table", "declares 7 arguments, more than 6")


FOUR = """#include <sdt.h>
SDT_PROBE_DEFINE1(t, m, f, n, "int");
int f(int x) { SDT_PROBE1(t, m, f, n, x); SDT_PROBE1(t, m, f, n, x + 1); SDT_PROBE1(t, m, f, n, x + 2);
               SDT_PROBE1(t, m, f, n, x + 3); return x; }
"""


@pytest.mark.parametrize("command", ["scan", "gen"])
def test_a_relocation_naming_a_symbol_past_the_symbol_table_refuses_the_object(tmp_path, capsys, command):
    """gcc's object with four sites (readelf lists four relocations against the stub); one's symbol index set
    past .symtab (readelf reads that index back): scan and gen --module refuse the object in one line, where
    before they reported three sites of four and exit 0, and gen writes nothing."""
    from tables import readelf

    obj = compile_c(tmp_path, "four", FOUR)
    (rows,) = [r.rows for r in readelf.relocations(obj) if r.name == ".rela.text"]
    syms = readelf.symbols(obj)
    probe_rows = [i for i, r in enumerate(rows) if syms[r[1]].name.startswith("__dtrace_sdt_")]
    assert len(probe_rows) == 4
    rela = readelf.section(obj, ".rela.text")
    past = len(syms) + 3
    bad = patched(obj, tmp_path, lambda d: struct.pack_into("<I", d, rela.offset + 24 * probe_rows[2] + 12, past))
    (bad_rows,) = [r.rows for r in readelf.relocations(bad) if r.name == ".rela.text"]
    assert bad_rows[probe_rows[2]][1] == past  # readelf reads the index back as written
    outs = ["--module", "m", "--stubs", str(tmp_path / "s.c"), "--table", str(tmp_path / "t.S")] \
        if command == "gen" else []
    expect_clean(capsys, [command, bad, *outs], f".text+{bad_rows[probe_rows[2]][0]:#x}",
                 f"names symbol {past}, past the {len(syms)} symbols of .symtab", "rebuild it")
    assert not (tmp_path / "s.c").exists() and not (tmp_path / "t.S").exists()
