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
.globl zeta, alpha, mid, big, label
.type zeta, @function
.type alpha, @function
.type mid, @function
.type big, @function
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
