"""The ELF reader agrees with pyelftools on real objects and images."""

from __future__ import annotations

from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

from sdtgen.elf.reader import ElfFile


def test_sections_symbols_and_relocations_match_pyelftools(kernel):
    for path in (kernel.partial, kernel.image):
        with open(path, "rb") as f, ElfFile(path) as ours:
            ref = ELFFile(f)
            assert [(s.name, s.type, s.offset, s.size) for s in ours.sections] == [
                (s.name, s.header.sh_type if isinstance(s.header.sh_type, int) else ours.sections[i].type,
                 s.header.sh_offset, s.header.sh_size) for i, s in enumerate(ref.iter_sections())]
            symtab = ref.get_section_by_name(".symtab")
            assert [(s.name, s.value, s.size) for s in ours.symbols] == [
                (s.name, s["st_value"], s["st_size"]) for s in symtab.iter_symbols()]
            for rsec, _target in ours.reloc_sections():
                theirs = ref.get_section(rsec.index)
                assert isinstance(theirs, RelocationSection)
                expected = [(r["r_offset"], r["r_info_sym"], r["r_info_type"], r["r_addend"])
                            for r in theirs.iter_relocations()]
                assert [(r.offset, r.sym, r.type, r.addend) for r in ours.relocations(rsec)] == expected


def test_prefix_lookup_finds_only_symbols_starting_with_it(kernel):
    with ElfFile(kernel.partial) as elf:
        found = elf.symbol_indices_with_prefix("__dtrace_sdt_")
        expected = {s.index: s.name for s in elf.symbols if s.name.startswith("__dtrace_sdt_")}
    assert found == expected and len(found) == 18


def test_segments_of_the_image(kernel):
    with open(kernel.image, "rb") as f, ElfFile(kernel.image) as ours:
        ref = ELFFile(f)
        assert [(s.vaddr, s.filesz, s.memsz) for s in ours.segments] == [
            (s["p_vaddr"], s["p_filesz"], s["p_memsz"]) for s in ref.iter_segments()]
        assert ours.segments[0].vaddr == 0xFFFFFFFF80000000
