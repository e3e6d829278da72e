"""Final image vs the sites of the partial link -> a stability report.

For every call or tail-jump site found in the relocatable object, read the
table entry the final image carries for it, decode the instruction there with
Capstone and confirm it is the expected branch to that probe's stub. When it
is not, look where the site really went (its function's address in the image
plus its offset in the function) to tell "moved" from "missing", and name the
cause that can be seen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sdtgen.arch.base import REF, Decoded
from sdtgen.errors import SdtError
from sdtgen.image import Image
from sdtgen.probes import Site
from sdtgen.scan import ScanResult
from sdtgen.table import TableSite

STABLE, MOVED, MISSING = "stable", "moved", "missing"


@dataclass
class Verdict:
    site: Site
    status: str
    address: int | None  # where the table says the site is
    actual: int | None = None  # where it really is, when found
    cause: str = ""
    fix: str = ""

    @property
    def delta(self) -> int | None:
        if self.address is None or self.actual is None:
            return None
        return self.actual - self.address

    def to_json(self) -> dict:
        return {"probe": self.site.probe, "site": self.site.function, "section": self.site.section,
                "status": self.status, "address": self.address, "actual": self.actual,
                "delta": self.delta, "cause": self.cause, "fix": self.fix}


@dataclass
class StabilityReport:
    object: str
    image: str
    mode: str
    verdicts: list[Verdict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # whole-table problems

    @property
    def ok(self) -> bool:
        return not self.problems and all(v.status == STABLE for v in self.verdicts)

    def count(self, status: str) -> int:
        return sum(v.status == status for v in self.verdicts)

    def to_json(self) -> dict:
        return {"object": self.object, "image": self.image, "mode": self.mode, "ok": self.ok,
                "stable": self.count(STABLE), "moved": self.count(MOVED), "missing": self.count(MISSING),
                "problems": self.problems, "sites": [v.to_json() for v in self.verdicts]}


def check(result: ScanResult, image: Image) -> StabilityReport:
    sites = [s for s in result.sites if s.form != REF]
    entries = image.sites()
    mode = entries[0].mode if entries else "reloc"
    report = StabilityReport(result.object, image.path, mode)
    if image.arch.name != result.arch.name:
        report.problems.append(f"the image is {image.arch.name} but the object is {result.arch.name}")
        return report
    if len(entries) != len(sites):
        report.problems.append(
            f"the image's table has {len(entries)} site entries but {result.object} has {len(sites)} sites: "
            "the table was generated from another object; rerun `sdtgen gen` and relink")
    for i, site in enumerate(sites):
        entry = entries[i] if i < len(entries) else None
        report.verdicts.append(_judge(site, entry, image))
    return report


def _decode(image: Image, addr: int, length: int) -> Decoded | None:
    """Decode one instruction; None when the image holds no code there."""
    for size in (16, length):  # 16 covers any instruction; near a section's end take just the site
        try:
            code = image.read(addr, size)
        except SdtError:
            continue
        try:
            return image.arch.decode(code, addr, image.read_pointer)
        except SdtError:  # an indirect branch through a slot the image does not hold
            return None
    return None


def _branches_to(d: Decoded | None, site: Site, stub: int) -> bool:
    return d is not None and d.form == site.form and d.target == stub and d.length == site.length


def _judge(site: Site, entry: TableSite | None, image: Image) -> Verdict:
    stub_sym = image.symbols.get(site.symbol)
    if stub_sym is None:
        return Verdict(site, MISSING, None, cause=f"the image defines no {site.symbol}: the stubs were not linked")
    stub = stub_sym.value
    if entry is None:
        return Verdict(site, MISSING, None, cause="the image's table has no entry for this site")
    if entry.probe.spec != site.probe or entry.probe.stub != stub:
        return Verdict(site, MISSING, entry.addr, cause=(
            f"table entry {entry.index} is for {entry.probe.spec} at stub {entry.probe.stub:#x}, not "
            f"{site.probe} at {stub:#x}: the table does not belong to this object"))
    here = _decode(image, entry.addr, site.length)
    if _branches_to(here, site, stub):
        return Verdict(site, STABLE, entry.addr, entry.addr)
    found = _locate(site, image, stub)
    seen = f"`{here.text}`" if here else "no decodable instruction"
    if found is not None:
        if entry.mode == "offset":
            return Verdict(site, MOVED, entry.addr, found,
                           "the final link moved text after the partial link, which offset mode cannot follow",
                           "use --mode reloc (the default)")
        return Verdict(site, MOVED, entry.addr, found, f"the table entry points at {seen}",
                       "the table is corrupt: rerun `sdtgen gen` and relink")
    func = site.function.partition("+")[0]
    if func and func not in image.symbols:
        return Verdict(site, MISSING, entry.addr,
                       cause=f"{func} is not in the image (removed by --gc-sections, inlined or folded by ICF)")
    return Verdict(site, MISSING, entry.addr,
                   cause=f"the entry points at {image.symbolize(entry.addr)} holding {seen}, and no {site.form} "
                         f"to {site.symbol} is left in {func or 'its function'}",
                   fix="rebuild; if it persists, report the link mode (see README, 'Diagnostics')")


def _locate(site: Site, image: Image, stub: int) -> int | None:
    """Where the site is in the image, going by its function symbol and offset."""
    func, plus, off = site.function.partition("+")
    sym = image.symbols.get(func) if plus else None
    if sym is None:
        return None
    try:
        addr = sym.value + int(off, 16)
    except ValueError:
        return None
    return addr if _branches_to(_decode(image, addr, site.length), site, stub) else None
