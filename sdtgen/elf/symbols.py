"""The one symbol index: which function (or object) holds an address, for every place sdtgen names.

A linked file is indexed by address; a relocatable object by section index and offset (each of
its sections starts at 0). A symbol holds ``[value, value + size)``. A size-0 symbol (a label,
assembler code without ``.size``) holds the bytes up to the next symbol of its section, and never
past its section's end: an address outside every section is in no function, however close the
last label is.
"""

from __future__ import annotations

import bisect
from itertools import compress
from operator import itemgetter

from sdtgen.elf.reader import ET_REL, STT_FUNC, STT_GNU_IFUNC, STT_OBJECT, ElfFile

CODE, DATA = (STT_FUNC, STT_GNU_IFUNC), (STT_OBJECT,)
_Row = tuple[int, int, int, int]  # start, end, name offset, section index


class SymbolIndex:
    """Symbols of some types (``CODE`` by default) by where they are; names are read from the file
    when asked for, so the file stays open while the index is used."""

    def __init__(self, elf: ElfFile, types: tuple[int, ...] = CODE, sections: set[int] | None = None,
                 near: list[tuple[int, int | None]] | None = None) -> None:
        """``near``: the only (addr, section) places this index will be asked about, when they are few: it then
        keeps only the symbols that can answer for them (``_near``), not a table of every symbol."""
        self.relocatable = elf.type == ET_REL
        self._name = elf.symbol_name
        rows = elf.typed_symbols(types, sections)
        if self.relocatable:  # each section is its own address space: keys carry the section above bit 64
            rows = [(x << 64 | v, x << 64 | e, n, x) for v, e, n, x in rows]
        if near is not None:
            rows = _near(rows, [self._key(a, s) for a, s in near])
        self._starts, self._rows, self._reach = _table(rows, elf.sections, self.relocatable, self._name)

    def _key(self, addr: int, section: int | None) -> int:
        return (section << 64 | addr) if self.relocatable and section is not None else addr

    def containing(self, addr: int, section: int | None = None) -> tuple[str, int] | None:
        """(name, offset into it) of the symbol holding ``addr`` (an offset in section index
        ``section`` of a relocatable object), or None."""
        key, rows, reach = self._key(addr, section), self._rows, self._reach
        i = bisect.bisect_right(self._starts, key) - 1
        while i >= 0 and reach[i] > key:  # an earlier symbol still reaches past addr
            start, end, name, _ = rows[i]
            if key < end:
                return self._name(name), key - start
            i -= 1
        return None

    def preceding(self, addr: int, section: int | None = None) -> int | None:
        """The start of the last symbol starting at or before ``addr`` (in its section), whether or not
        it holds it: a place where an instruction is known to begin."""
        key = self._key(addr, section)
        i = bisect.bisect_right(self._starts, key) - 1
        if i < 0 or self._starts[i] >> 64 != key >> 64:
            return None
        return self._starts[i] & _LOW

    def following(self, addr: int, section: int | None = None) -> tuple[str, int] | None:
        """(name, distance after ``addr``) of the first symbol starting at or after it (in its section)."""
        key = self._key(addr, section)
        i = bisect.bisect_left(self._starts, key)
        if i == len(self._rows) or self._starts[i] >> 64 != key >> 64:
            return None
        return self._name(self._rows[i][2]), self._starts[i] - key

    def name(self, addr: int, section: int | None = None) -> str:
        """``function+0xoff`` of an address, or the bare address in hex outside every symbol."""
        found = self.containing(addr, section)
        return f"{found[0]}+{found[1]:#x}" if found else f"{addr:#x}"


_LOW = (1 << 64) - 1


def _near(rows: list[_Row], keys: list[int]) -> list[_Row]:
    """The rows that decide ``containing``, ``preceding`` and ``following`` at each key: the symbols with a size
    that hold it, and every symbol starting at the last start at or before it or at the first start after it.
    No other row starts between those two, so a label at the first runs to the second in this table as in the
    whole one, and the walk back meets the same rows that hold the key, in the same order. Sorted and compared
    in C (no loop of Python over every symbol, as ``_table``'s): a few lookups, such as a binary's USDT notes,
    need not index 30,000 symbols."""
    rows = sorted(rows, key=_start)
    starts, ends = list(map(_start, rows)), list(map(itemgetter(1), rows))
    keep: set[int] = set()
    for key in keys:
        at = bisect.bisect_right(starts, key)  # rows[:at] start at or before the key
        for bound in starts[max(at - 1, 0):at + 1]:  # the last start at or before it, the first after it
            keep.update(range(bisect.bisect_left(starts, bound), bisect.bisect_right(starts, bound)))
        keep.update(compress(range(at), map(key.__lt__, ends[:at])))  # holding it: starting before, ending after
    return [rows[i] for i in sorted(keep)]


def _table(rows: list[_Row], sections, relocatable: bool, name_of) -> tuple[list[int], list[_Row], list[int]]:
    """The rows sorted by start, their starts, and the highest end up to each.

    At one start, labels (size 0) come first and then the biggest symbol, so the walk back of
    ``containing`` meets the smallest symbol first, and a label only when nothing with a size holds
    the address; of aliases (one start, one size) it meets the greatest name first, as a sort by
    address, size and name would, whatever order the symbol table has them in. A label runs to the
    next start, and never past its section."""
    rows = [r for r in rows if r[2]]  # unnamed symbols name nothing
    rows.sort(key=_start)  # by start alone (a tuple sort is slower), then the rare ties in order
    starts = list(map(_start, rows))
    if len(set(starts)) < len(starts):
        run = -1
        for i in [i for i in range(1, len(starts)) if starts[i] == starts[i - 1]]:
            if i - 1 > run:  # the first tie of a run of symbols at one start
                run = i
                while run + 1 < len(starts) and starts[run + 1] == starts[i]:
                    run += 1
                rows[i - 1:run + 1] = sorted(rows[i - 1:run + 1], key=lambda r: _tie(r, name_of))
    reach, top = [], 0
    for i, (start, end, name, shndx) in enumerate(rows):  # the one loop over every symbol
        if start == end:  # a label: to the next start, within its section
            sec = sections[shndx]
            lo = shndx << 64 if relocatable else sec.addr
            after = bisect.bisect_right(starts, start)
            hi = min(starts[after] if after < len(starts) else lo + sec.size, lo + sec.size)
            end = hi if lo <= start else start
            rows[i] = (start, end, name, shndx)
        if end > top:
            top = end
        reach.append(top)
    return starts, rows, reach


def _tie(row: _Row, name_of) -> tuple[bool, int, str]:
    return row[1] != row[0], row[0] - row[1], name_of(row[2])  # labels first, then the biggest, then by name


_start = itemgetter(0)
