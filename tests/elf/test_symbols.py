"""The symbol index names an address as readelf's symbols do: the smallest symbol holding it, of
aliases the greatest name (as sorting readelf -s by address, size and name gives), and a label
(size 0) only up to the next symbol of its section."""

from __future__ import annotations

import pytest
from helpers import run
from tables import readelf

from sdtgen.elf.reader import ElfFile
from sdtgen.elf.symbols import SymbolIndex

SOURCE = """\
.text
.globl zeta, alpha, mid, big, outer, inner, label
.type zeta, @function
.type alpha, @function
.type mid, @function
.type big, @function
.type outer, @function
.type inner, @function
.type label, @function
zeta:
alpha:
    nop; nop; ret
.size zeta, 3
.size alpha, 3
big:
    nop
mid:
    nop; nop; ret
.size mid, 3
.size big, 4
outer:
    nop
inner:
    nop
.size inner, 1
    nop; ret
.size outer, 4
label:
    nop; nop
"""


@pytest.fixture(scope="module", params=["object", "image"])
def built(request, tmp_path_factory):
    d = tmp_path_factory.mktemp("symbols")
    (d / "s.s").write_text(SOURCE)
    run(["as", "-o", str(d / "s.o"), str(d / "s.s")])
    if request.param == "object":
        return d / "s.o"
    run(["ld", "-e", "zeta", "-o", str(d / "s.elf"), str(d / "s.o")])
    return d / "s.elf"


def expected(path, addr: int) -> str:
    """The smallest readelf symbol holding ``addr``; of aliases the last by name."""
    syms = sorted((s.value, s.size, s.name) for s in readelf.symbols(path).values() if s.type == "FUNC")
    holding = [s for s in syms if s[0] <= addr < s[0] + s[1]]
    return min(holding, key=lambda s: (s[1], [-ord(c) for c in s[2]]))[2] if holding else ""


def test_each_byte_is_named_as_readelf_places_it(built):
    text = readelf.section(built, ".text")
    base = 0 if built.suffix == ".o" else text.addr
    with ElfFile(built) as elf:
        index = SymbolIndex(elf)
        section = text.index if built.suffix == ".o" else None
        got = [index.containing(base + off, section) for off in range(text.size + 4)]
    names = [g[0] if g else "" for g in got]
    truth = [expected(built, base + off) for off in range(text.size)]
    label = next(s.value for s in readelf.symbols(built).values() if s.name == "label")
    # readelf gives the label no bytes (size 0); it holds the rest of its section, and nothing past it.
    truth = [t or ("label" if base + off >= label else "") for off, t in enumerate(truth)]
    assert names == [*truth, "", "", "", ""]
    assert names[:3] == ["zeta"] * 3 and "mid" in names and "big" in names
    assert names.count("inner") == 1 and names.count("outer") == 3  # outer holds the bytes after inner


def test_an_index_made_for_a_few_places_names_them_as_readelf_does(built):
    """SymbolIndex(near=...) keeps only the symbols that can answer for the places it is made for (a binary's
    few USDT notes): each byte, asked of an index made for it alone, or for it and two others, is named as
    readelf places it (a byte after ``inner`` is ``outer``'s, which starts before the last start), and the start
    before it and the symbol after it are the whole index's."""
    text = readelf.section(built, ".text")
    base = 0 if built.suffix == ".o" else text.addr
    section = text.index if built.suffix == ".o" else None
    label = next(s.value for s in readelf.symbols(built).values() if s.name == "label")
    with ElfFile(built) as elf:
        whole = SymbolIndex(elf)
        for off in range(text.size + 4):
            addr = base + off
            truth = (expected(built, addr) or ("label" if addr >= label else "")) if off < text.size else ""
            for near in ([addr], [base, addr, base + text.size - 1]):
                index = SymbolIndex(elf, near=[(a, section) for a in near])
                found = index.containing(addr, section)
                assert (found[0] if found else "") == truth, (off, near)
                assert index.preceding(addr, section) == whole.preceding(addr, section), (off, near)
                assert index.following(addr, section) == whole.following(addr, section), (off, near)
