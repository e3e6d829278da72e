"""The one linker-set bounds lookup: where the array ``__start_X``..``__stop_X`` lies in a linked file.

A kernel finds its linker sets through the two symbols the linker defines (or the script does), so
that is what is read first. A stripped file has lost them; its section headers still name the
output section, and when the set has one of its own (sdtgen's scripts give each set its own
section), the section's address range is the set.
"""

from __future__ import annotations

from sdtgen.elf.reader import SHT_NOBITS, ElfFile
from sdtgen.plaindata import record


@record(frozen=True)
class SetBounds:
    lo: int
    hi: int
    by_section: bool = False  # found by the section's name: the file has no symbols

    @property
    def span(self) -> tuple[int, int]:
        return self.lo, self.hi


def stripped(elf: ElfFile) -> bool:
    """Whether the file has no symbol table (strip, objcopy --strip-all)."""
    return elf.symtab is None


def linker_set(elf: ElfFile, name: str, section: str | None = None) -> SetBounds | None:
    """``__start_<name>``..``__stop_<name>``; in a stripped file, the range of the section named
    ``section`` (``name`` by default). None when neither is there."""
    start, stop = f"__start_{name}", f"__stop_{name}"
    found = {**elf.symbol_values(start), **elf.symbol_values(stop)}
    if start in found and stop in found:
        return SetBounds(found[start], found[stop])
    if not stripped(elf):
        return None
    sec = elf.section(section or name)
    if sec is None or not sec.is_alloc or sec.type == SHT_NOBITS:
        return None
    return SetBounds(sec.addr, sec.addr + sec.size, by_section=True)


STRIPPED_FIX = ("give the image before it was stripped, or keep the table sections when stripping "
                "(strip only debug information: strip --strip-debug)")
