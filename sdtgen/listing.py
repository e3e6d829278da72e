"""dtrace -l style probe listings: sdtgen's own probes (object or image tables) and the tables binaries carry."""

from __future__ import annotations

import os
from collections import Counter

from sdtgen.elf.reader import ET_REL, ElfFile
from sdtgen.plaindata import as_dict, record
from sdtgen.tables import KINDS as TABLE_KINDS

KINDS = ("sdt", *TABLE_KINDS)


@record(frozen=True)
class ListedProbe:
    id: int
    provider: str
    module: str
    function: str
    name: str
    args: tuple[str, ...]
    sites: int
    kind: str = "sdt"
    addresses: tuple = ()  # link-time addresses, or "section+0xoff" in a relocatable object
    semaphore: int | str | None = None
    raw_name: str = ""  # the table's own name ("gc__start" lists as "gc-start")
    arg_specs: tuple = ()  # USDT: each argument's size, signedness and location
    site_args: tuple = ()  # USDT: each site's own argument specs (sites of one probe may differ)
    xargs: tuple = ()  # translated types (SDT_PROBE_DEFINEn_XLATE, SDT_PROBE_ARGTYPE), None where there is none
    checks: int = 0  # SDT_PROBE_ENABLED() sites asking about the probe (not counted in ``sites``)

    @property
    def translated(self) -> tuple[str | None, ...]:
        """One translated type or None for each argument."""
        return tuple((self.xargs[k] or None) if k < len(self.xargs) else None for k in range(len(self.args)))

    def verbose(self) -> list[str]:
        """dtrace -lv's "Argument Types" block: each argument's type, translated where it is."""
        pad = " " * 16
        lines = ["        Argument Types"]
        for k, (native, xtype) in enumerate(zip(self.args, self.translated, strict=True)):
            lines.append(f"{pad}args[{k}]: {xtype} (native: {native})" if xtype else f"{pad}args[{k}]: {native}")
        if not self.args:
            lines.append(f"{pad}None")
        if self.checks:
            lines.append(f"        Is-enabled checks: {self.checks}")
        return lines

    def to_json(self) -> dict:
        d = as_dict(self)
        d["args"] = list(self.args)
        d["xargs"] = list(self.translated)
        d["addresses"] = list(self.addresses)
        d["raw_name"] = self.raw_name or self.name
        d["arg_specs"] = [a.to_json() for a in self.arg_specs]
        d["site_args"] = [list(a) for a in self.site_args]
        return d


def list_all(path: str, kinds: tuple[str, ...] = ()) -> list[ListedProbe]:
    """Every probe of the asked kinds (every kind the file carries when none is asked), dtrace -l
    style: one row per provider, module, function and name, sdtgen's own probes first."""
    from sdtgen.tables.collect import read_tables

    want_sdt = "sdt" in kinds
    if not kinds:  # every kind the file carries (an open more: a file is read once per listing otherwise)
        with ElfFile(path) as elf:
            want_sdt = _has_sdt(elf)
    out = list_probes(path) if want_sdt else []
    others = tuple(k for k in (kinds or KINDS) if k != "sdt")
    groups: dict[tuple, list] = {}
    for site in read_tables(path, others) if others else []:
        groups.setdefault((site.kind, site.provider, site.function, site.name), []).append(site)
    module = os.path.basename(path)
    order = {k: i for i, k in enumerate(KINDS)}
    rows = sorted(groups.values(), key=lambda g: (order[g[0].kind], _place_key(g[0].place)))
    for sites in rows:
        first = sites[0]
        semaphore = next((s.semaphore for s in sites if s.semaphore is not None), None)
        out.append(ListedProbe(
            len(out) + 1, first.provider, module, first.function, first.name,
            tuple(a.spec for a in first.args), len(sites), first.kind,
            tuple(s.place.to_json() for s in sites), None if semaphore is None else semaphore.to_json(),
            first.raw_name, first.args,
            tuple(tuple(a.spec for a in s.args) for s in sites) if first.kind == "stapsdt" else ()))
    return out


def _place_key(place) -> tuple:
    return (place.section or "", place.symbol, place.value)


def _has_sdt(elf: ElfFile) -> bool:
    from sdtgen.probes import DEFAULT_PREFIX, DESC_SECTION

    if elf.type == ET_REL:
        from sdtgen.tracepoints import SET

        return (elf.section(DESC_SECTION) is not None or elf.section(SET) is not None
                or bool(elf.symbol_indices_with_prefix(DEFAULT_PREFIX)))
    from sdtgen.elf.linkerset import linker_set
    from sdtgen.table import PROBES_SET

    return linker_set(elf, PROBES_SET) is not None


def list_probes(path: str) -> list[ListedProbe]:
    with ElfFile(path) as elf:
        relocatable = elf.type == ET_REL
    return _from_object(path) if relocatable else _from_image(path)


def _from_object(path: str) -> list[ListedProbe]:
    from sdtgen.arch.base import ISEN, REF
    from sdtgen.probes import probe_symbol
    from sdtgen.scan import scan
    from sdtgen.table import module_name

    result = scan(path)
    with ElfFile(path) as elf:
        module = module_name(elf)  # a module's: its probes with no module field are in it
    counts = Counter(s.symbol for s in result.sites if s.form not in (REF, ISEN))
    checks = Counter(probe_symbol(s.symbol) for s in result.sites if s.form == ISEN)
    where: dict[str, list[str]] = {}
    for s in result.sites:
        if s.form not in (REF, ISEN):
            where.setdefault(s.symbol, []).append(f"{s.section}+{s.offset:#x}")
    # Same order, so the same IDs, as the table `sdtgen gen` writes.
    probes = sorted(result.probes.values(), key=lambda p: (p.spec, p.symbol))
    return [ListedProbe(i + 1, p.provider, p.module or module, p.function, p.name, p.args, counts[p.symbol],
                        addresses=tuple(where.get(p.symbol, ())), xargs=p.xargs, checks=checks[p.symbol])
            for i, p in enumerate(probes)]


def _from_image(path: str) -> list[ListedProbe]:
    """The image's probes in table order, numbered from 1.

    An image linked from several generated objects carries one table per object, each numbered
    from 0, and a probe two objects call has an entry in each: list it once, with all its sites.
    """
    from sdtgen.arch.base import ISEN
    from sdtgen.image import Image
    from sdtgen.table import TableProbe

    with Image(path) as image:
        probes = sorted(image.probes(), key=lambda p: p.addr)
        where: dict[int, list[int]] = {}
        checks: Counter[int] = Counter()
        for s in image.sites():
            if s.form == ISEN:
                checks[s.probe.addr] += 1
            else:
                where.setdefault(s.probe.addr, []).append(s.addr)
    merged: dict[tuple[str, int], tuple[TableProbe, list[int], list[int]]] = {}
    for p in probes:
        _, addrs, asks = merged.setdefault((p.spec, p.stub), (p, [], []))
        addrs.extend(where.get(p.addr, ()))
        asks.append(checks[p.addr])
    return [ListedProbe(i + 1, p.provider, p.module, p.function, p.name, p.args, len(addrs), addresses=tuple(addrs),
                        xargs=p.xargs, checks=sum(asks))
            for i, (p, addrs, asks) in enumerate(merged.values())]
