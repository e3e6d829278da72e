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
    from sdtgen.image import Image

    with Image(path) as image:
        probes = image.probes()
        counts = Counter(s.probe.addr for s in image.sites())
    return [ListedProbe(p.id + 1, p.provider, p.module, p.function, p.name, p.args, counts[p.addr])
            for p in sorted(probes, key=lambda p: p.id)]
