"""The consumer's totals: every CPU's entries merged as DTrace merges its per-CPU buffers.

count and sum add, min and max keep the smaller and the larger (signed), avg adds its count and its sum,
quantize and lquantize add bucket by bucket; every sum wraps at 2^64 as the kernel's do. An entry's keys
are rendered as the consumer shows them (a probe's key becomes the name it was keyed by), so entries of two
probes with one function name are one row of ``@[probefunc]``. Clearing is the consumer's: totals start
again from nothing, the kernel's tables are untouched.
"""

from __future__ import annotations

from sdtgen.dscript.compiler import AggInfo
from sdtgen.dscript.tables import AggTableError, CpuTables
from sdtgen.plaindata import factory, record

MASK = (1 << 64) - 1
FIELDS = {"probeprov": 0, "probemod": 1, "probefunc": 2, "probename": 3}
INT64_MAX, INT64_MIN = (1 << 63) - 1, 1 << 63  # as u64


def to_signed(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v


@record(frozen=True)
class Key:
    """One key of a row: the raw value (DTrace sorts by it) and what is shown."""

    raw: int | str
    shown: int | str


@record
class Totals:
    aggregations: tuple[AggInfo, ...]
    names: dict[int, tuple[str, str, str, str]]  # probe key -> its four names
    rows: dict[int, dict[tuple[Key, ...], list[int]]] = factory(dict)  # id -> keys -> values (u64)
    dropped: dict[int, int] = factory(dict)  # per CPU: updates its tables could not take
    errors: dict[int, int] = factory(dict)  # per CPU, the kernel's running counts
    nested: dict[int, int] = factory(dict)
    shape: dict[int, tuple[int, int]] = factory(dict)  # per CPU: a half's index slots, arena bytes

    def __post_init__(self) -> None:
        self.by_id = {a.id: a for a in self.aggregations}

    def add(self, tables: CpuTables) -> None:
        """Merge one CPU's entries (a half the consumer took, or a table read while its CPU is stopped); an entry no
        program made refuses the whole table (AggTableError) and leaves the totals as they were."""
        merged = []
        for e in tables.entries:
            info = self.by_id.get(e.id)
            if info is None:
                raise AggTableError(f"CPU {tables.cpu}'s tables hold aggregation {e.id}, which no program has")
            if len(e.keys) != len(info.keys) or len(e.values) != info.nvals:
                raise AggTableError(f"CPU {tables.cpu}'s entry of {display(info)} has {len(e.keys)} keys and "
                                    f"{len(e.values)} values, not {len(info.keys)} and {info.nvals}")
            merged.append((info, tuple(self.key(info, k, v) for k, v in zip(info.keys, e.keys, strict=True)), e))
        for info, keys, e in merged:
            have = self.rows.setdefault(e.id, {}).get(keys)
            self.rows[e.id][keys] = list(e.values) if have is None else combine(info.func, have, list(e.values))
        self.dropped[tables.cpu] = self.dropped.get(tables.cpu, 0) + tables.dropped
        self.errors[tables.cpu] = tables.errors
        self.nested[tables.cpu] = tables.nested
        if tables.nindex:
            self.shape[tables.cpu] = (tables.nindex, tables.arena_size)

    def extended(self, aggregations: tuple[AggInfo, ...], names: dict[int, tuple[str, str, str, str]]) -> Totals:
        """These totals, with more aggregations (another script's) to merge from now on."""
        return Totals(self.aggregations + aggregations, {**self.names, **names}, self.rows, self.dropped, self.errors,
                      self.nested, self.shape)

    def key(self, info: AggInfo, kind: str, value: int) -> Key:
        if kind == "int":
            return Key(value, to_signed(value))
        if kind == "uint":
            return Key(value, value)
        names = self.names.get(value)
        if names is None:
            raise AggTableError(f"an entry of {display(info)} is keyed by probe key {value:#x}, which the image "
                                "does not have")
        name = names[FIELDS[kind]]
        return Key(name, name)

    def clear(self) -> None:
        """What DTrace's clear() does to what the consumer holds: every row gone, drops and errors kept."""
        self.rows.clear()


def combine(func: str, a: list[int], b: list[int]) -> list[int]:
    if func == "min":
        return [a[0] if to_signed(a[0]) <= to_signed(b[0]) else b[0]]
    if func == "max":
        return [a[0] if to_signed(a[0]) >= to_signed(b[0]) else b[0]]
    return [(x + y) & MASK for x, y in zip(a, b, strict=True)]


def display(info: AggInfo) -> str:
    return f"@{info.name}" if info.name else "@"
