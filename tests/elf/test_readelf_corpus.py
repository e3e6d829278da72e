"""A differential corpus, in the spirit of pyelftools' readelf tests: small odd ELF files made by real
tools (big-endian 64- and 32-bit, a shared object with only .dynsym, a PIE, i386 REL, more than 65,280
sections, a prelinked shared object's USDT notes), each read by sdtgen and diffed against
`readelf -SsrnW`."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import (
    READELF_SECTION_TYPES,
    cross_tool,
    need_tool,
    readelf_relocs,
    readelf_sections,
    readelf_symbols,
    run,
    sdtgen,
)
from tables import readelf

from sdtgen.elf.reader import ElfFile
from sdtgen.elf.symbols import CODE, DATA, SymbolIndex

STT = {0: "NOTYPE", 1: "OBJECT", 2: "FUNC", 3: "SECTION", 4: "FILE", 5: "COMMON", 6: "TLS", 10: "IFUNC"}
STB = {0: "LOCAL", 1: "GLOBAL", 2: "WEAK", 10: "UNIQUE"}
SPECIAL_NDX = {0: "UND", 0xFFF1: "ABS", 0xFFF2: "COM"}

C = """int counter = 3;
static int scale(int x) { return x * counter; }
int work(int x) { return scale(x) + 1; }
int *where = &counter;
"""


def build(kind: str, out: Path) -> Path:
    """One file of the corpus, made by the tools a developer would use."""
    src = out / "corpus.c"
    src.write_text(C)
    path = out / kind
    if kind == "ppc64-be.o":
        run([need_tool("clang", "clang"), "--target=powerpc64-linux-gnu", "-O2", "-c", "-o", str(path), str(src)])
    elif kind == "ppc64-be-pie":
        run([need_tool("clang", "clang"), "--target=powerpc64-linux-gnu", "-fuse-ld=lld", "-nostdlib", "-O2",
             "-Wl,-e,work", "-o", str(path), str(src)])
    elif kind == "mips-be.o":
        run([need_tool("clang", "clang"), "--target=mips-linux-gnu", "-O2", "-c", "-o", str(path), str(src)])
    elif kind == "i386-rel.o":
        run([cross_tool("i386", "gcc"), "-O2", "-fno-pic", "-c", "-o", str(path), str(src)])
    elif kind == "pie":
        (out / "main.c").write_text("int work(int);\nint main(void) { return work(2); }\n")
        run(["gcc", "-O2", "-fPIE", "-pie", "-o", str(path), str(src), str(out / "main.c")])
    elif kind == "dynsym-only.so":
        run(["gcc", "-O2", "-fPIC", "-shared", "-o", str(path), str(src)])
        run(["strip", "--strip-all", str(path)])
    elif kind == "many-sections.o":
        asm = out / "many.s"
        asm.write_text("".join(f'.section .text.f{i},"ax"\n.globl f{i}\n.type f{i},@function\nf{i}: ret\n'
                               f".size f{i}, 1\n" for i in range(66_000)))
        run(["as", "-o", str(path), str(asm)])
    elif kind == "prelinked-usdt.so":
        (out / "usdt.c").write_text("#include <sys/sdt.h>\nint hot(int x) { DTRACE_PROBE1(demo, hot, x); "
                                    "return x + 1; }\nlong cold(long y) { DTRACE_PROBE2(demo, cold, y, y * 2); "
                                    "return y; }\n")
        plain = out / "usdt.so"
        run(["gcc", "-O2", "-fPIC", "-shared", "-o", str(plain), str(out / "usdt.c")])
        # Prelink moved the sections after the notes were written; objcopy moves .stapsdt.base the same way.
        run(["objcopy", "--change-section-address", ".stapsdt.base+0x10000", str(plain), str(path)])
    else:
        raise AssertionError(kind)
    return path


KINDS = ["ppc64-be.o", "ppc64-be-pie", "mips-be.o", "i386-rel.o", "pie", "dynsym-only.so", "many-sections.o",
         "prelinked-usdt.so"]


@pytest.fixture(scope="module", params=KINDS)
def odd(request, tmp_path_factory) -> Path:
    if request.param == "prelinked-usdt.so" and not Path("/usr/include/x86_64-linux-gnu/sys/sdt.h").exists():
        need_tool("dtrace", "systemtap-sdt-dev")  # the header's package; fails under CI like a missing tool
    return build(request.param, tmp_path_factory.mktemp(request.param.replace(".", "-")))


def test_sections_match_readelf(odd):
    theirs = readelf_sections(odd)
    with ElfFile(odd) as elf:
        assert len(elf.sections) == len(theirs)
        ours = [(s.name, READELF_SECTION_TYPES.get(s.type) if s.type < 0x60000000 else None, s.offset, s.size)
                for s in elf.sections]
    # readelf names OS- and processor-specific types in its own words: compare those by position only.
    assert [o if o[1] else (o[0], t[1], o[2], o[3]) for o, t in zip(ours, theirs, strict=True)] == theirs


def test_symbols_match_readelf(odd):
    with ElfFile(odd) as elf:
        secs = elf.sections
        ours = [(s.value, s.size, STT.get(s.type, str(s.type)), STB.get(s.bind, str(s.bind)),
                 SPECIAL_NDX.get(s.shndx, str(s.shndx)) if s.special or not s.shndx else str(s.shndx),
                 secs[s.shndx].name if s.type == 3 and not s.name else s.name)
                for s in elf.symbols]
    assert ours == readelf_symbols(odd)


def test_relocations_match_readelf(odd):
    with ElfFile(odd) as elf:
        ours = [(rsec.name, r.offset, r.sym, r.type, r.addend if rsec.type == 4 else None)
                for rsec, _ in elf.reloc_sections() for r in elf.relocations(rsec)]
        bits = elf.bits
    assert ours == [(*t[:4], t[5]) for t in readelf_relocs(odd, bits)]


def test_functions_and_objects_are_named_as_readelf_places_them(odd):
    """The symbol index, from .symtab or (stripped) .dynsym, holds each function and object at its
    own address, as readelf --dyn-syms / -s list them."""
    dyn = not readelf_symbols(odd)
    theirs = dynamic_symbols(odd) if dyn else [(s[0], s[1], s[2], s[4], s[5]) for s in readelf_symbols(odd)]
    wanted = [t for t in theirs if t[2] in ("FUNC", "OBJECT") and t[3] not in ("UND", "ABS", "COM") and t[1]]
    assert wanted
    with ElfFile(odd) as elf:
        index = SymbolIndex(elf, CODE + DATA)
        relocatable = elf.type == 1
        key = (lambda t: t[3]) if relocatable else (lambda t: "")
        ordered = sorted(wanted, key=lambda t: (key(t), t[0]))
        for i, (value, size, _, ndx, name) in enumerate(ordered):
            section = int(ndx) if relocatable else None
            # ppc64's ELFv1 function symbols, for one, run over the data after their descriptors: those
            # overlapping another symbol are held by the smaller one, and checked only past their end.
            neighbours = ordered[max(i - 1, 0):i] + ordered[i + 1:i + 2]
            if not any(key(o) == key(ordered[i]) and o[0] < value + size and value < o[0] + o[1]
                       for o in neighbours):
                assert index.containing(value, section) == (name, 0), name
                assert index.containing(value + size - 1, section) == (name, size - 1), name
            assert index.containing(value + size, section) != (name, size), name


def dynamic_symbols(path: Path) -> list[tuple[int, int, str, str, str]]:
    """(value, size, type, section index, name) of .dynsym, per `readelf --dyn-syms -W`."""
    out = []
    for line in run(["readelf", "--dyn-syms", "-W", str(path)]).stdout.splitlines():
        f = line.split()
        if len(f) >= 8 and f[0].endswith(":") and f[0][:-1].isdigit():
            out.append((int(f[1], 16), int(f[2], 0), f[3], f[6], f[7].split("@")[0]))
    return out


def test_usdt_notes_match_readelf_moved_by_the_base_section(odd):
    """readelf -n prints each note as written; sdtgen moves it by .stapsdt.base's address minus the
    note's base, as systemtap and bpftrace do after prelink."""
    notes = readelf.notes(odd)
    if odd.name != "prelinked-usdt.so":
        assert notes == []
        return
    base = readelf.section(odd, ".stapsdt.base").addr
    assert {base - n.base for n in notes} == {0x10000}
    import json

    got = json.loads(sdtgen("probes", "--kind", "stapsdt", "--json", odd, check=True).stdout)["probes"]
    assert sorted((p["provider"], p["raw_name"], a) for p in got for a in p["addresses"]) == \
        sorted((n.provider, n.name, n.location + base - n.base) for n in notes)
