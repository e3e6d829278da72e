"""The in-image probe tables: reading them back (their layout is sdtgen/layout.py's SITE and PROBE).

Two linker sets, each an array bounded by ``__start_<set>``/``__stop_<set>``.
Every pointer is a 32-bit PC-relative offset (target - &field), like Linux
jump-label entries, so the tables need no dynamic relocations in a PIE
kernel and read the same on 32- and 64-bit machines. In reloc mode the
linker resolves each site entry against an anchor symbol on the
instruction; in offset mode it is btext + the offset measured after the
partial link (the 2015 FreeBSD design). The site set is writable: the
runtime keeps each site's state and verified length in its entry.
"""

from __future__ import annotations

from collections.abc import Callable

from sdtgen.layout import FORMS, PROBE, SITE, SITE_STATES, VALUES
from sdtgen.plaindata import record

SITES_SET = "set_sdt_sites_set"
MODULE_TABLE_SECTION = "sdt_module_table"  # a module's struct sdt_module_table (gen --module)
MODULE_NAME_SECTION = ".sdt_module_name"  # its name, NUL-terminated, in a section nothing loads
PROBES_SET = "set_sdt_probes_set"
SITE_SIZE = SITE.size(64)
PROBE_SIZE = PROBE.size(64)
FORM_NAMES = {v: k for k, v in FORMS.items()}
MODES = {"reloc": VALUES["SDT_TABLE_RELOC"], "offset": VALUES["SDT_TABLE_OFFSET"]}
MODE_NAMES = {v: k for k, v in MODES.items()}
MAX_STRING = 256
MAX_ENTRIES = 4_000_000

Reader = Callable[[int, int], bytes]


class TableError(ValueError):
    pass


@record(frozen=True)
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
    recorder: int = 0  # the recorder gen wrote for it
    key: int = 0  # the event id of its records
    program: int = 0  # its program slot's address (sdt_enable_program writes it); 0 when it has none

    @property
    def spec(self) -> str:
        return f"{self.provider}:{self.module}:{self.function}:{self.name}"


@record(slots=True)
class TableSite:
    index: int
    addr: int  # where the entry says the site is
    probe: TableProbe
    form: str
    length: int
    mode: str
    state: str = "unseen"  # the runtime's SDT_SITE_* (a table read from memory after sdt_init)
    size: int = 0  # the length the runtime verified
    target: int = 0  # a goto site's out-of-line target (what arming jumps to); 0 for other forms


@record(frozen=True)
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
    off = PROBE.offsets(bits)
    for i, row in enumerate(PROBE.struct(bits, little).iter_unpack(raw)):
        base = lo + i * PROBE_SIZE
        stub, *names = (_rel(v, base + 4 * k, bits) for k, v in enumerate(row[:5]))
        nargs, pid = row[5], row[6]
        if nargs > VALUES["SDT_MAX_ARGS"]:
            raise TableError(f"probe entry {i} at {base:#x} declares {nargs} arguments, more than "
                             f"{VALUES['SDT_MAX_ARGS']}")
        args = tuple(read_string(read, _rel(row[7 + k], base + off["argtype"] + 4 * k, bits)) for k in range(nargs))
        isenabled = _rel(row[13], base + off["isenabled"], bits) if row[13] else 0
        xargs = tuple(read_string(read, _rel(row[14 + k], base + off["xargtype"] + 4 * k, bits)) if row[14 + k]
                      else None for k in range(nargs))
        recorder = _rel(row[20], base + off["recorder"], bits) if row[20] else 0
        prov, mod, func, name = (read_string(read, a) for a in names)
        program = _rel(row[22], base + off["program"], bits) if row[22] else 0
        probes[base] = TableProbe(base, pid, stub, prov, mod, func, name, args, isenabled, xargs, recorder, row[21],
                                  program)
    return probes


def read_tables(read: Reader, bounds: Bounds, bits: int, little: bool = True) -> list[TableSite]:
    """Decode the site set, with its probes, through ``read(addr, size)`` (file or emulated memory)."""
    probes = read_probes(read, bounds.probes, bits, little)
    _check_span("site", bounds.sites, SITE_SIZE)
    lo, hi = bounds.sites
    raw = read(lo, hi - lo) if hi > lo else b""
    sites = []
    mask = (1 << bits) - 1
    rows = SITE.struct(bits, little).iter_unpack(raw)
    states = SITE_STATES
    target_at = SITE.offset("target", bits)
    for i, (site, probe, form, length, mode, _keep, state, size, _p0, _p1, target) in enumerate(rows):  # keep it flat
        base = lo + i * SITE_SIZE
        entry = probes.get((base + 4 + probe) & mask)
        if entry is None or form not in FORM_NAMES or mode not in MODE_NAMES or not 1 <= length <= 16 \
                or state not in states:
            raise TableError(f"site entry {i} at {base:#x} is not a valid entry (probe {probe:+#x}, form {form}, "
                             f"length {length}, mode {mode})")
        sites.append(TableSite(i, (base + site) & mask, entry, FORM_NAMES[form], length, MODE_NAMES[mode],
                               states[state], size, (base + target_at + target) & mask if target else 0))
    return sites


def module_name(elf) -> str:
    """The module name `gen --module` gave a module's object (or a shared object built from it); "" if none."""
    sec = elf.section(MODULE_NAME_SECTION)
    if sec is None or sec.type == 8:  # NOBITS
        return ""
    name = bytes(elf.contents(sec)).split(b"\0")[0].decode("ascii", "replace")
    return name if name.isidentifier() else ""


def module_sites(read: Reader, bounds: Bounds, name: str, bits: int, little: bool = True) -> list[TableSite]:
    """A module's table (read from memory, or from the module as placed); a probe whose module field is empty
    takes the module's name, as the runtime's specs and lists give it."""
    from sdtgen.plaindata import replace

    sites = read_tables(read, bounds, bits, little)
    named: dict[int, TableProbe] = {}
    for s in sites:
        if not s.probe.module:
            s.probe = named.setdefault(s.probe.addr, replace(s.probe, module=name))
    return sites
