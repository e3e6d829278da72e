"""dtrace -l style probe listings, from a relocatable object or a final image's own tables."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

from sdtgen.arch.base import REF
from sdtgen.elf.reader import ET_REL, ElfFile


@dataclass(frozen=True)
class ListedProbe:
    id: int
    provider: str
    module: str
    function: str
    name: str
    args: tuple[str, ...]
    sites: int

    def to_json(self) -> dict:
        d = asdict(self)
        d["args"] = list(self.args)
        return d


def list_probes(path: str) -> list[ListedProbe]:
    with ElfFile(path) as elf:
        relocatable = elf.type == ET_REL
    return _from_object(path) if relocatable else _from_image(path)


def _from_object(path: str) -> list[ListedProbe]:
    from sdtgen.scan import scan

    result = scan(path)
    counts = Counter(s.symbol for s in result.sites if s.form != REF)
    # Same order, so the same IDs, as the table `sdtgen gen` writes.
    probes = sorted(result.probes.values(), key=lambda p: (p.spec, p.symbol))
    return [ListedProbe(i + 1, p.provider, p.module, p.function, p.name, p.args, counts[p.symbol])
            for i, p in enumerate(probes)]


def _from_image(path: str) -> list[ListedProbe]:
    """The image's probes in table order, numbered from 1.

    An image linked from several generated objects carries one table per object, each numbered
    from 0, and a probe two objects call has an entry in each: list it once, with all its sites.
    """
    from sdtgen.image import Image
    from sdtgen.table import TableProbe

    with Image(path) as image:
        probes = sorted(image.probes(), key=lambda p: p.addr)
        counts = Counter(s.probe.addr for s in image.sites())
    merged: dict[tuple[str, int], tuple[TableProbe, int]] = {}
    for p in probes:
        first, sites = merged.get((p.spec, p.stub), (p, 0))
        merged[(p.spec, p.stub)] = (first, sites + counts[p.addr])
    return [ListedProbe(i + 1, p.provider, p.module, p.function, p.name, p.args, sites)
            for i, (p, sites) in enumerate(merged.values())]
