"""Names for the places tables point at, from the one symbol index (sdtgen.elf.symbols).

A linked file names addresses from .symtab, or from .dynsym when it was stripped (Debian's
libraries are); a relocatable object names offsets within each section from .symtab. A place in
a relocatable object names its section, and several sections may share a name: each is asked.
"""

from __future__ import annotations

from sdtgen.elf.reader import ET_REL, ElfFile
from sdtgen.elf.symbols import CODE, DATA, SymbolIndex
from sdtgen.tables.fields import Place

__all__ = ["CODE", "DATA", "Namer"]


class Namer:
    """Symbol lookups by place, for one file and one family of symbol types."""

    def __init__(self, elf: ElfFile, types: tuple[int, ...]) -> None:
        self.index = SymbolIndex(elf, types)
        self.sections: dict[str, list[int]] = {}
        if elf.type == ET_REL:
            for s in elf.sections:
                self.sections.setdefault(s.name, []).append(s.index)

    def _keys(self, place: Place) -> list[int] | list[None]:
        return [None] if place.section is None else self.sections.get(place.section, [])

    def lookup(self, place: Place) -> tuple[str, int] | None:
        """(symbol, offset into it) of the symbol holding ``place``, or None."""
        if place.symbol:
            return place.symbol, place.value
        for key in self._keys(place):
            found = self.index.containing(place.value, key)
            if found is not None:
                return found
        return None

    def next_start(self, place: Place) -> tuple[str, int] | None:
        """(symbol, its distance after ``place``) of the first symbol starting at or after it."""
        if place.symbol:
            return None
        found = [f for key in self._keys(place) if (f := self.index.following(place.value, key))]
        return min(found, key=lambda f: f[1]) if found else None

    def name(self, place: Place) -> str:
        found = self.lookup(place)
        return found[0] if found else ""
