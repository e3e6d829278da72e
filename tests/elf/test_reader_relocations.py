"""Relocations against a few symbols, found by their index bytes, are exactly readelf -r's rows for
those symbols, in order, on 32- and 64-bit objects of both relocation formats."""

from __future__ import annotations

import re

import pytest
from helpers import CROSS, need_tool, run

from sdtgen.elf.reader import ElfFile

SOURCE = """
extern int ext(int);
extern int table[];
static int helper(int x) { return ext(x) + table[x]; }
int api(int x) { return helper(x) + ext(x + 1) + table[2]; }
int *refs[] = { table, &table[3], 0 };
"""


def readelf_rows(obj) -> dict[str, list[tuple[int, int]]]:
    """(offset, symbol index) of every relocation, per relocation section, as readelf -rW lists them."""
    is64 = "ELF64" in run(["readelf", "-h", str(obj)]).stdout
    out, current = {}, None
    for line in run(["readelf", "-rW", str(obj)]).stdout.splitlines():
        m = re.match(r"Relocation section '(\S+)'", line)
        if m:
            current = out.setdefault(m[1], [])
            continue
        f = line.split()
        if current is not None and len(f) >= 3 and f[2].startswith("R_"):
            info = int(f[1], 16)
            current.append((int(f[0], 16), info >> 32 if is64 else info >> 8))
    return out


@pytest.mark.parametrize("arch", ["x86_64", "i386", "riscv64"])
def test_relocations_of_a_few_symbols_are_readelfs_rows(tmp_path, arch):
    cc = need_tool(*CROSS[arch]) if arch in CROSS else "gcc"
    src = tmp_path / "r.c"
    src.write_text(SOURCE)
    obj = tmp_path / "r.o"
    run([cc, "-O2", "-fno-pic", "-c", "-o", str(obj), str(src)])
    expected = readelf_rows(obj)
    with ElfFile(obj) as elf:
        nsyms = len(elf.symbols)
        for rsec, _ in elf.reloc_sections():
            rows = expected[rsec.name]
            for wanted in ({a, b} for a in range(nsyms) for b in range(a, nsyms)):
                got = [(r.offset, r.sym) for r in elf.relocations(rsec, wanted)]
                assert got == [row for row in rows if row[1] in wanted], (rsec.name, wanted)
