"""``__patchable_function_entries`` (gcc -fpatchable-function-entry=N,M): one address per function,
the first of its N patchable NOPs (M of them before the function's symbol)."""

from __future__ import annotations

from sdtgen.elf.reader import ElfFile
from sdtgen.tables.model import TableSite
from sdtgen.tables.symbols import CODE, Namer
from sdtgen.tables.words import address_array

SECTION = "__patchable_function_entries"


def read(elf: ElfFile, names: Namer | None = None) -> list[TableSite]:
    names = names or Namer(elf, CODE)
    out = []
    for place in address_array(elf, SECTION, None, f"table {SECTION}"):
        func = _function(names, place)
        out.append(TableSite("patchable", "patchable", func, func or str(place), place))
    return out


MAX_BEFORE = 256  # bytes of NOPs gcc may place before a function's symbol (M of -fpatchable-function-entry=N,M)


def _function(names: Namer, place) -> str:
    """The function the entry belongs to: with M > 0 the entry is M NOPs before the symbol, outside
    every function's range, and belongs to the next function."""
    inside = names.lookup(place)
    if inside is not None and inside[1] == 0:
        return inside[0]
    after = names.next_start(place)
    if after is not None and after[1] <= MAX_BEFORE:
        return after[0]
    return inside[0] if inside else ""
