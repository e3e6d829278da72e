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

NEAR_MAX = 16  # places named without an index of every symbol: each costs passes over the symbols


class Namer:
    """Symbol lookups by place, for one file and one family of symbol types."""

    def __init__(self, elf: ElfFile, types: tuple[int, ...]) -> None:
        self._elf, self._types = elf, types
        self._index: SymbolIndex | None = None  # every symbol, made at the first lookup
        self.sections: dict[str, list[int]] = {}
        if elf.type == ET_REL:
            for s in elf.sections:
                self.sections.setdefault(s.name, []).append(s.index)

    @property
    def index(self) -> SymbolIndex:
        if self._index is None:
            self._index = SymbolIndex(self._elf, self._types)
        return self._index

    def names(self, places: list[Place]) -> list[str]:
        """``name`` of each place, all known at once: a few are named from the symbols near them alone, not
        from an index of every symbol (a binary's handful of USDT notes among 30,000 functions)."""
        if self._index is not None or len(places) > NEAR_MAX:
            return [self.name(p) for p in places]
        near = [(p.value, key) for p in places if not p.symbol for key in self._keys(p)]
        index = SymbolIndex(self._elf, self._types, near=near)
        return [found[0] if (found := self._lookup(p, index)) else "" for p in places]

    def _keys(self, place: Place) -> list[int] | list[None]:
        return [None] if place.section is None else self.sections.get(place.section, [])

    def lookup(self, place: Place) -> tuple[str, int] | None:
        """(symbol, offset into it) of the symbol holding ``place``, or None."""
        return self._lookup(place, self.index)

    def _lookup(self, place: Place, index: SymbolIndex) -> tuple[str, int] | None:
        if place.symbol:
            return place.symbol, place.value
        for key in self._keys(place):
            found = index.containing(place.value, key)
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

