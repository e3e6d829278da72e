"""The ELF reader agrees with readelf on real objects and images of every architecture.

readelf is the truth for sections (names, types, offsets, sizes), symbols and
relocations: x86-64 and i386 (REL relocations), AArch64 and RISC-V objects
from the cross compilers, and an object with more sections than a 16-bit
index holds (see test_writer.py, which makes it).
"""

from __future__ import annotations

import pytest
from elftools.elf.elffile import ELFFile
from helpers import (
    ARCHES,
    READELF_MACHINE_SECTION_TYPES,
    READELF_SECTION_TYPES,
    readelf_relocs,
    readelf_sections,
    readelf_symbols,
)

from sdtgen import arch as arches
from sdtgen.elf.reader import ElfFile

STT = {0: "NOTYPE", 1: "OBJECT", 2: "FUNC", 3: "SECTION", 4: "FILE", 5: "COMMON", 6: "TLS"}
STB = {0: "LOCAL", 1: "GLOBAL", 2: "WEAK"}
SPECIAL_NDX = {0: "UND", 0xFFF1: "ABS", 0xFFF2: "COM"}


@pytest.fixture(params=ARCHES)
def built(request, kernel, arch_kernel):
    """The fixture kernel's partial object and final image, for each architecture of the registry."""
    return kernel if request.param == "x86_64" else arch_kernel(request.param)


def ours_sections(path) -> list[tuple[str, str, int, int]]:
    with ElfFile(path) as elf:
        names = {**READELF_SECTION_TYPES, **READELF_MACHINE_SECTION_TYPES[elf.machine]}
        return [(s.name, names.get(s.type, f"unknown type {s.type:#x}"), s.offset, s.size) for s in elf.sections]


def ours_symbols(path) -> list[tuple[int, int, str, str, str, str]]:
    with ElfFile(path) as elf:
        secs = elf.sections
        return [(s.value, s.size, STT.get(s.type, str(s.type)), STB.get(s.bind, str(s.bind)),
                 SPECIAL_NDX.get(s.shndx, str(s.shndx)),
                 secs[s.shndx].name if s.type == 3 and not s.name else s.name) for s in elf.symbols]


def ours_relocs(path) -> list[tuple[str, int, int, int, str, int | None]]:
    with ElfFile(path) as elf:
        arch = arches.for_elf(elf)
        out = []
        for rsec, _ in elf.reloc_sections():
            for r in elf.relocations(rsec):
                out.append((rsec.name, r.offset, r.sym, r.type, arch.reloc_names.get(r.type),
                            r.addend if rsec.type == 4 else None))
        return out


def test_sections_match_readelf(built):
    for path in (built.partial, built.image):
        assert ours_sections(path) == readelf_sections(path)


def test_symbols_match_readelf(built):
    for path in (built.partial, built.image):
        assert ours_symbols(path) == readelf_symbols(path)


def test_relocations_and_their_names_match_readelf(built):
    with ElfFile(built.partial) as elf:
        bits = elf.bits
    theirs = readelf_relocs(built.partial, bits)
    ours = ours_relocs(built.partial)
    assert len(ours) == len(theirs) > 0
    for o, t in zip(ours, theirs, strict=True):
        name = o[4] if o[4] is not None else t[4]  # a type sdtgen does not name need not match a name
        assert (*o[:4], name, o[5]) == t


def test_i386_objects_carry_rel_relocations_named_r_386(arch_kernel):
    rels = readelf_relocs(arch_kernel("i386").partial, 32)
    assert {r[0] for r in rels if r[0].endswith(".text")} == {".rel.text"}
    assert {r[4] for r in rels} >= {"R_386_PC32", "R_386_32"} and all(r[5] is None for r in rels)


def test_pyelftools_agrees_on_sections_and_symbols(kernel):
    for path in (kernel.partial, kernel.image):
        with open(path, "rb") as f, ElfFile(path) as ours:
            ref = ELFFile(f)
            assert [(s.name, s.offset, s.size) for s in ours.sections] == [
                (s.name, s.header.sh_offset, s.header.sh_size) for s in ref.iter_sections()]
            symtab = ref.get_section_by_name(".symtab")
            assert [(s.name, s.value, s.size) for s in ours.symbols] == [
                (s.name, s["st_value"], s["st_size"]) for s in symtab.iter_symbols()]


def test_prefix_lookup_finds_only_symbols_starting_with_it(kernel):
    with ElfFile(kernel.partial) as elf:
        found = elf.symbol_indices_with_prefix("__dtrace_sdt_")
        expected = {s.index: s.name for s in elf.symbols if s.name.startswith("__dtrace_sdt_")}
    assert found == expected and len(found) == 18


def test_segments_of_the_image(built):
    from helpers import run

    theirs = []
    for line in run(["readelf", "-lW", str(built.image)]).stdout.splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            theirs.append((int(f[2], 16), int(f[4], 16), int(f[5], 16)))
    with ElfFile(built.image) as ours:
        assert [(s.vaddr, s.filesz, s.memsz) for s in ours.segments if s.type == 1] == theirs
        first = next(s for s in ours.segments if s.type == 1)
        assert first.vaddr == arches.for_elf(ours).kernel_base  # where the final script links it


def test_prefix_lookup_finds_names_the_linker_stored_as_tails_of_others(kernel):
    """GNU ld shares string tails: __dtrace_sdt_x is stored as the end of __sdt_rec___dtrace_sdt_x."""
    theirs = {i: name for i, (_, _, _, _, _, name) in enumerate(readelf_symbols(kernel.image))
              if name.startswith("__dtrace_sdt_")}
    with ElfFile(kernel.image) as elf:
        assert elf.symbol_indices_with_prefix("__dtrace_sdt_") == theirs
    assert len(theirs) == 18
