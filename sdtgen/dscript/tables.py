"""A CPU's aggregation tables (struct sdt_agg and its arenas, sdtgen/layout.py) read out of a kernel's memory.

Bytes from a guest: nothing it claims is believed past what the host gave it. An arena is read up to
its ``used`` bytes, but never past the size the host attached; every entry's shape is checked against the
aggregation the host compiled for its id before a value is taken.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from sdtgen.layout import AGG, AGG_ENTRY, VALUES
from sdtgen.plaindata import factory, record

Reader = Callable[[int, int], bytes]
MAX_KEYS = VALUES["SDT_AGG_MAX_KEYS"]
MAX_VALS = VALUES["SDT_AGG_MAX_VALS"]


class AggTableError(ValueError):
    """The tables are not what the runtime writes: the message says which field of which CPU's."""


@record(frozen=True)
class Entry:
    id: int
    keys: tuple[int, ...]  # u64
    values: tuple[int, ...]  # u64


@record
class CpuTables:
    cpu: int
    entries: list[Entry] = factory(list)
    dropped: int = 0  # updates the halves read could not take
    errors: int = 0  # the CPU's running count: firings a program stopped
    nested: int = 0  # the CPU's running count: firings inside a program
    nindex: int = 0  # each half's index slots and arena bytes: what it can hold (capacity)
    arena_size: int = 0


def attach_size(bytes_given: int) -> tuple[int, int]:
    """(index slots, arena bytes) of each half when sdt_agg_attach is given ``bytes_given`` (its own arithmetic)."""
    half = (bytes_given // 2) & ~7
    nindex = 8
    while nindex * 2 <= half // 64:
        nindex *= 2
    return nindex, half - ((nindex * 4 + 7) & ~7)


def capacity(nindex: int, arena_size: int, nkeys: int = 1, nvals: int = 1) -> int:
    """Entries of ``nkeys`` keys and ``nvals`` values a half takes before it drops (the runtime's agg_update): three
    quarters of its index slots, fewer when their bytes fill the arena first."""
    return min(nindex - nindex // 4, arena_size // (AGG_ENTRY.size(64) + 8 * (nkeys + nvals)))


def read_cpu(read: Reader, addr: int, bits: int, little: bool = True, halves: tuple[int, ...] | None = (0, 1),
             given: int | None = None) -> CpuTables:
    """The entries of ``halves`` of the struct sdt_agg at ``addr`` (None: the half the last sdt_agg_switch froze
    for the consumer, the one its CPU does not add to). ``given``: the bytes the host attached (an arena claiming
    more is refused); without it, the arena size the structure states is the bound."""
    st = AGG.struct(bits, little)
    raw = dict(zip(AGG.names(), st.unpack(read(addr, st.size)), strict=True))
    cpu = raw["cpu"]
    where = f"CPU {cpu}'s aggregation table at {addr:#x}"
    if raw["self"] != addr:
        raise AggTableError(f"{where} is not one (its self field is {raw['self']:#x})")
    nindex, arena_size = raw["nindex"], raw["arena_size"]
    if given is not None and (nindex, arena_size) != attach_size(given):
        raise AggTableError(f"{where} claims {nindex} index slots and {arena_size}-byte arenas, not what "
                            f"{given} bytes make")
    if halves is None:
        if raw["want"] not in (0, 1):
            raise AggTableError(f"{where} says its CPU adds to half {raw['want']}, not 0 or 1")
        halves = (1 - raw["want"],)
    out = CpuTables(cpu, errors=raw["errors"], nested=raw["nested"], nindex=nindex, arena_size=arena_size)
    order = "<" if little else ">"
    head = AGG_ENTRY.struct(bits, little)
    for h in halves:
        used = raw[f"used[{h}]"]
        if used > arena_size or used % 8:
            raise AggTableError(f"{where}: half {h} claims {used} bytes used of a {arena_size}-byte arena")
        data = read(raw[f"arena[{h}]"], used) if used else b""
        at, n = 0, 0
        while at < used:
            if used - at < head.size:
                raise AggTableError(f"{where}: half {h} ends inside an entry at offset {at}")
            _hash, id_, nkeys, nvals, _pad = head.unpack_from(data, at)
            size = head.size + 8 * (nkeys + nvals)
            if nkeys > MAX_KEYS or not 1 <= nvals <= MAX_VALS:
                raise AggTableError(f"{where}: half {h}'s entry at offset {at} claims {nkeys} keys and {nvals} "
                                    "values")
            if at + size > used:
                raise AggTableError(f"{where}: half {h}'s entry at offset {at} ({nkeys} keys, {nvals} values) runs "
                                    f"past the {used} bytes used")
            words = struct.unpack_from(f"{order}{nkeys + nvals}Q", data, at + head.size)
            out.entries.append(Entry(id_, words[:nkeys], words[nkeys:]))
            at += size
            n += 1
        if n != raw[f"entries[{h}]"]:
            raise AggTableError(f"{where}: half {h} holds {n} entries, its count says {raw[f'entries[{h}]']}")
        out.dropped += raw[f"dropped[{h}]"]
    return out
