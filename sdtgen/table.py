"""The in-image probe tables: their binary layout, and reading them back.

Two linker sets, each an array bounded by ``__start_<set>``/``__stop_<set>``.
Every pointer is a 32-bit PC-relative offset (target - &field), like Linux
jump-label entries, so the tables need no dynamic relocations in a PIE
kernel and read the same on 32- and 64-bit machines.

set_sdt_sites_set, 12 bytes an entry:
    s32 site       site - &site. Reloc mode: the linker resolves an anchor
                   symbol on the instruction. Offset mode: btext + the offset
                   measured after the partial link (the 2015 FreeBSD design).
    s32 probe      probe entry - &probe
    u8  form       1 call, 2 tail jump, 3 conditional tail jump, 4 is-enabled call
    u8  length     instruction length in bytes
    u8  mode       0 reloc, 1 offset
    u8  reserved

set_sdt_probes_set, 76 bytes an entry:
    s32 stub       the probe's stub function
    s32 provider, module, function, name     NUL-terminated strings
    u16 nargs, u16 id
    s32 argtype[6] strings; 0 where there is no argument
    s32 isenabled  the probe's __dtrace_isenabled_ stub; 0 when no SDT_PROBE_ENABLED() asks
    s32 xargtype[6] translated types (the _XLATE forms); 0 where there is none
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

SITES_SET = "set_sdt_sites_set"
PROBES_SET = "set_sdt_probes_set"
SITE_SIZE = 12
PROBE_SIZE = 76
FORMS = {"call": 1, "tail": 2, "cond": 3, "isen": 4}
FORM_NAMES = {v: k for k, v in FORMS.items()}
MODES = {"reloc": 0, "offset": 1}
MODE_NAMES = {v: k for k, v in MODES.items()}
MAX_STRING = 256
MAX_ENTRIES = 4_000_000

Reader = Callable[[int, int], bytes]


class TableError(ValueError):
    pass


@dataclass(frozen=True)
class TableProbe:
    addr: int
    id: int
    stub: int
    provider: str
    module: str
    function: str
    name: str
    args: tuple[str, ...]
    isenabled: int = 0  # the is-enabled stub's address; 0 when no SDT_PROBE_ENABLED() asks
    xargs: tuple[str | None, ...] = ()  # translated types, None where there is none

    @property
    def spec(self) -> str:
        return f"{self.provider}:{self.module}:{self.function}:{self.name}"


@dataclass(slots=True)
class TableSite:
    index: int
    addr: int  # where the entry says the site is
    probe: TableProbe
    form: str
    length: int
    mode: str


@dataclass(frozen=True)
class Bounds:
    sites: tuple[int, int]
    probes: tuple[int, int]


def _rel(value: int, field: int, bits: int) -> int:
    return (field + value) & ((1 << bits) - 1)


def read_string(read: Reader, addr: int) -> str:
    """A NUL-terminated string; reads 32 bytes at a time, then byte by byte near the end of memory."""
    raw = b""
    while len(raw) < MAX_STRING:
        try:
            chunk = read(addr + len(raw), 32)
        except Exception:
            try:
                chunk = read(addr + len(raw), 1)
            except Exception:
                raise TableError(f"string at {addr:#x} runs into unreadable memory") from None
        end = chunk.find(b"\0")
        if end >= 0:
            return (raw + chunk[:end]).decode("ascii", "replace")
        raw += chunk
    raise TableError(f"string at {addr:#x} is longer than {MAX_STRING} bytes")


def _check_span(what: str, span: tuple[int, int], size: int) -> None:
    lo, hi = span
    if hi < lo or (hi - lo) % size or (hi - lo) // size > MAX_ENTRIES:
        raise TableError(f"the {what} set spans {lo:#x}..{hi:#x}, not a whole number of {size}-byte entries")


def read_probes(read: Reader, span: tuple[int, int], bits: int, little: bool = True) -> dict[int, TableProbe]:
    """The probe descriptors by entry address (a probe with no site still lists)."""
    _check_span("probe", span, PROBE_SIZE)
    lo, hi = span
    raw = read(lo, hi - lo) if hi > lo else b""
    probes: dict[int, TableProbe] = {}
    for i, row in enumerate(struct.iter_unpack(("<" if little else ">") + "5iHH6ii6i", raw)):
        base = lo + i * PROBE_SIZE
        stub, *names = (_rel(v, base + 4 * k, bits) for k, v in enumerate(row[:5]))
        nargs, pid = row[5], row[6]
        if nargs > 6:
            raise TableError(f"probe entry {i} at {base:#x} declares {nargs} arguments")
        args = tuple(read_string(read, _rel(row[7 + k], base + 24 + 4 * k, bits)) for k in range(nargs))
        isenabled = _rel(row[13], base + 48, bits) if row[13] else 0
        xargs = tuple(read_string(read, _rel(row[14 + k], base + 52 + 4 * k, bits)) if row[14 + k] else None
                      for k in range(nargs))
        prov, mod, func, name = (read_string(read, a) for a in names)
        probes[base] = TableProbe(base, pid, stub, prov, mod, func, name, args, isenabled, xargs)
    return probes


def read_tables(read: Reader, bounds: Bounds, bits: int, little: bool = True) -> list[TableSite]:
    """Decode the site set, with its probes, through ``read(addr, size)`` (file or emulated memory)."""
    probes = read_probes(read, bounds.probes, bits, little)
    _check_span("site", bounds.sites, SITE_SIZE)
    lo, hi = bounds.sites
    raw = read(lo, hi - lo) if hi > lo else b""
    sites = []
    mask = (1 << bits) - 1
    rows = struct.iter_unpack(("<" if little else ">") + "iiBBBB", raw)
    for i, (site, probe, form, length, mode, _r) in enumerate(rows):  # the hot loop of a boot: keep it flat
        base = lo + i * SITE_SIZE
        entry = probes.get((base + 4 + probe) & mask)
        if entry is None or form not in FORM_NAMES or mode not in MODE_NAMES or not 1 <= length <= 16:
            raise TableError(f"site entry {i} at {base:#x} is not a valid entry (probe {probe:+#x}, form {form}, "
                             f"length {length}, mode {mode})")
        sites.append(TableSite(i, (base + site) & mask, entry, FORM_NAMES[form], length, MODE_NAMES[mode]))
    return sites
