"""Final image vs the sites of the partial link -> a stability report.

For every call or tail-jump site found in the relocatable object, read the
table entry the final image carries for it, decode the instruction there with
Capstone and confirm it is the expected branch to that probe's stub. When it
is not, look where the site really went (its function's address in the image
plus its offset in the function) to tell "moved" from "missing", and name the
cause that can be seen.
"""

from __future__ import annotations

from sdtgen.arch.base import GOTO, ISEN, REF, Decoded, branch_form
from sdtgen.elf.linkerset import STRIPPED_FIX, stripped
from sdtgen.elf.reader import STB_LOCAL
from sdtgen.errors import SdtError, printable
from sdtgen.image import Image
from sdtgen.plaindata import factory, record
from sdtgen.probes import Site
from sdtgen.scan import ScanResult
from sdtgen.table import MODULE_TABLE_SECTION, PROBE_SIZE, SITE_SIZE, Bounds, TableSite

STABLE, MOVED, MISSING, FOLDED = "stable", "moved", "missing", "folded"
FINE = (STABLE, FOLDED)  # a folded site is the same code as a stable one: patched once, fires for both


@record
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
                "form": self.site.form, "status": self.status, "address": self.address, "actual": self.actual,
                "delta": self.delta, "cause": self.cause, "fix": self.fix}


@record
class StabilityReport:
    object: str
    image: str
    mode: str
    verdicts: list[Verdict] = factory(list)
    problems: list[str] = factory(list)  # whole-table problems
    extra: list[str] = factory(list)  # calls to stubs no entry covers (with find_extra)

    @property
    def ok(self) -> bool:
        return not self.problems and all(v.status in FINE for v in self.verdicts)

    def summary(self) -> str:
        """The causes in a few words: what moved and how, for tables and matrix cells."""
        if self.problems:
            return self.problems[0]
        moved = [v for v in self.verdicts if v.status == MOVED]
        missing = [v for v in self.verdicts if v.status == MISSING]
        parts = []
        if any("relaxation" in v.cause for v in moved + missing):
            parts.append(f"{len(moved) + len(missing)} sites lost: the linker relaxed calls and deleted bytes")
            moved, missing = [], []
        if moved:
            deltas = {v.delta for v in moved}
            if len(deltas) == 1:
                parts.append(f"{len(moved)} sites shifted by {deltas.pop():+#x}: something was linked before "
                             "the partial link's text")
            else:
                parts.append(f"{len(moved)} sites moved by {len(deltas)} different amounts: the final link "
                             "reordered text input sections")
        if missing:
            parts.append(f"{len(missing)} sites missing: {missing[0].cause}")
        return "; ".join(parts)

    def count(self, status: str) -> int:
        return sum(v.status == status for v in self.verdicts)

    @property
    def checks(self) -> int:
        """How many of the sites are SDT_PROBE_ENABLED() checks."""
        return sum(v.site.form == ISEN for v in self.verdicts)

    def to_json(self) -> dict:
        return {"object": self.object, "image": self.image, "mode": self.mode, "ok": self.ok,
                "stable": self.count(STABLE), "moved": self.count(MOVED), "missing": self.count(MISSING),
                "folded": self.count(FOLDED), "isenabled": self.checks, "extra": self.extra,
                "problems": self.problems,
                "sites": [v.to_json() for v in self.verdicts]}


def check(result: ScanResult, image: Image, find_extra: bool = False) -> StabilityReport:
    if stripped(image.elf):
        raise image.elf.fail("is stripped (no symbol table): check finds each site's stub and function by "
                             "their symbols", STRIPPED_FIX)
    sites = [s for s in result.sites if s.form != REF]
    refused = module_table_problem(image)
    if refused:  # a module whose loader refuses its table: no site of it is ever patched
        report = StabilityReport(result.object, image.path, "reloc")
        report.problems.append(refused)
        return report
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
    first_at: dict[int, Verdict] = {}
    stubs = _stubs(image)
    gotos = any(s.form == GOTO for s in sites)
    records = _records(image) if gotos else {}
    descriptors = {p.addr: p for p in image.probes()} if gotos else {}
    for i, site in enumerate(sites):
        entry = entries[i] if i < len(entries) else None
        verdict = _judge(site, entry, image, stubs)
        if verdict.status == STABLE and site.form == GOTO:
            verdict = _judge_goto(verdict, entry, image, records, descriptors)
        earlier = first_at.get(verdict.actual) if verdict.actual is not None else None
        if verdict.status == STABLE and earlier is not None:
            # Two sites, one address: identical code folding kept one copy of both functions.
            verdict.status = FOLDED
            verdict.cause = f"identical code folding merged {printable(site.function.partition('+')[0])} into " \
                            f"{printable(earlier.site.function.partition('+')[0])}; the copy kept fires for both"
        elif verdict.actual is not None:
            first_at.setdefault(verdict.actual, verdict)
        report.verdicts.append(verdict)
    if find_extra:
        report.extra = _unlisted_calls(image, {v.actual for v in report.verdicts if v.actual is not None},
                                       {s.symbol for s in sites})
    return report


TABLE_FIX = "the module's table is damaged: rerun `sdtgen gen --module NAME` on the module and link it again"


def module_table_problem(image: Image) -> str:
    """What sdt_module_load refuses in a placed module's table (the section sdt_module_table), in one sentence;
    "" when the loader takes it, or when ``image`` is no module. Every check the loader makes, in its order:
    the magic, the four bounds (whole entries, sites only with probes), then its entries (each valid, in the
    module's code, none overlapping another); and one a loader cannot make: the bounds are the sets gen wrote."""
    from sdtgen.layout import MODULE_TABLE, VALUES
    from sdtgen.table import TableError, read_tables

    sec = image.elf.section(MODULE_TABLE_SECTION)
    if sec is None:
        return ""
    bits, little = image.arch.bits, image.elf.little
    size, mask = MODULE_TABLE.size(bits), (1 << bits) - 1
    if sec.size < size:
        return f"its module table (section {MODULE_TABLE_SECTION}) is {sec.size} bytes, not a struct " \
               f"sdt_module_table's {size}: {TABLE_FIX}"
    field = dict(zip(MODULE_TABLE.names(), MODULE_TABLE.struct(bits, little).unpack(image.read(sec.addr, size)),
                     strict=True))
    refuse = "sdt_module_load refuses it (SDT_ERR_MODULE_TABLE)"
    if field["magic"] != VALUES["SDT_MODULE_TABLE_MAGIC"]:
        return f"its module table's magic is {field['magic']:#x}, not SDT_MODULE_TABLE_MAGIC " \
               f"({VALUES['SDT_MODULE_TABLE_MAGIC']:#x}): {refuse}; {TABLE_FIX}"
    s0, s1, p0, p1 = ((sec.addr + MODULE_TABLE.offset(n, bits) + field[n]) & mask
                      for n in ("sites", "sites_end", "probes", "probes_end"))
    sets = image.bounds
    for (name, at), want in zip((("sites", s0), ("sites_end", s1), ("probes", p0), ("probes_end", p1)),
                                (*sets.sites, *sets.probes), strict=True):
        if at != want:  # the loader's own checks below may pass it: it cannot see where the sets end
            d = at - want
            return f"its module table's {name} is {abs(d):#x} bytes {'past' if d > 0 else 'before'} where the " \
                   f"module's {name.split('_')[0]} {'end' if name.endswith('end') else 'start'} " \
                   f"({want:#x}): the loader would take other bytes for its entries; {TABLE_FIX}"
    if s1 < s0 or (s1 - s0) % SITE_SIZE or p1 < p0 or (p1 - p0) % PROBE_SIZE or (s1 > s0 and p1 == p0):
        return f"its module table's bounds are not whole entries (sites {s0:#x}..{s1:#x} in {SITE_SIZE}-byte " \
               f"entries, probes {p0:#x}..{p1:#x} in {PROBE_SIZE}-byte ones, sites only with probes): {refuse}; " \
               f"{TABLE_FIX}"
    try:
        entries = read_tables(image.read, Bounds((s0, s1), (p0, p1)), bits, little)
    except (TableError, SdtError) as e:
        return f"its module table holds an entry that is not a valid one ({e}): {refuse}; {TABLE_FIX}"
    code = [(s.addr, s.addr + s.size) for s in image.elf.sections if s.is_alloc and s.is_exec and s.size]
    lo, hi = min(a for a, _ in code), max(b for _, b in code)
    end, last = 0, None
    for e in sorted(entries, key=lambda e: e.addr):
        if not lo <= e.addr <= hi - e.length or (e.form == GOTO and not lo <= e.target < hi):
            return f"its module table's entry {e.index} ({printable(e.probe.spec)}) is at {e.addr:#x}, outside " \
                   f"the module's code {lo:#x}..{hi:#x}: {refuse}; {TABLE_FIX}"
        if e.form == ISEN and not e.probe.isenabled:
            return f"its module table's entry {e.index} is an is-enabled check of a probe with no is-enabled " \
                   f"stub: {refuse}; {TABLE_FIX}"
        folded = last is not None and e.addr == last.addr and e.probe.addr == last.probe.addr and e.form == last.form
        if e.addr < end and not folded:
            return f"its module table's entries {last.index} and {e.index} overlap at {e.addr:#x}: {refuse}; " \
                   f"{TABLE_FIX}"
        end, last = max(end, e.addr + e.length), e
    return ""


def _unlisted_calls(image: Image, listed: set[int], symbols: set[str]) -> list[str]:
    """Direct branches to probe stubs that no table entry points at: sites the table does not know."""
    from sdtgen.elf.reader import SHT_NOBITS

    stubs = {image.symbols[s].value for s in symbols if s in image.symbols}
    found = []
    for sec in image.elf.sections:
        if sec.is_exec and sec.type != SHT_NOBITS and sec.size:
            found += image.arch.branches_to(bytes(image.elf.contents(sec)), sec.addr, stubs)
    return [image.symbolize(a) for a in sorted(set(found) - listed)]


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


def _branches_to(image: Image, addr: int, site: Site, stub: int) -> bool:
    """The bytes at ``addr`` are a branch of the site's form to the stub that the runtime accepts (for an
    asm goto, the NOP it verifies): the same rule, so check passes exactly the sites the boot will patch.
    (Capstone decodes a site only to say what is there instead; tests hold both against objdump.)"""
    try:
        code = image.read(addr, site.length)
    except SdtError:
        return False
    if site.form == GOTO:
        return code == image.arch.goto_nop
    form = branch_form(site.form)  # an is-enabled check is a plain call to its own stub
    return image.arch.match_site(code, addr, form, site.length, stub, image.read_pointer) is not None


def _stubs(image: Image) -> dict[str, int]:
    """The probe stubs the image defines, by name: found by their prefixes, not from a map of every
    symbol (a kernel image has hundreds of thousands)."""
    from sdtgen.probes import DEFAULT_PREFIX, ISENABLED_PREFIX

    elf, out = image.elf, {}
    for prefix in (DEFAULT_PREFIX, ISENABLED_PREFIX):
        for i, name in elf.symbol_indices_with_prefix(prefix).items():
            if elf.symbol_defined(i) and (name not in out or elf.symbol(i).bind != STB_LOCAL):
                out[name] = elf.symbol(i).value
    return out


def _judge(site: Site, entry: TableSite | None, image: Image, stubs: dict[str, int]) -> Verdict:
    stub = stubs.get(site.symbol)
    if stub is None:
        return Verdict(site, MISSING, None,
                       cause=f"the image defines no {printable(site.symbol)}: the stubs were not linked")
    if entry is None:
        return Verdict(site, MISSING, None, cause="the image's table has no entry for this site")
    listed = entry.probe.isenabled if site.form == ISEN else entry.probe.stub
    if entry.probe.spec != site.probe or listed != stub or entry.form != site.form:
        return Verdict(site, MISSING, entry.addr, cause=(
            f"table entry {entry.index} is for {printable(entry.probe.spec)} ({entry.form}) at stub {listed:#x}, not "
            f"{printable(site.probe)} ({site.form}) at {stub:#x}: the table does not belong to this object"))
    if _branches_to(image, entry.addr, site, stub):
        return Verdict(site, STABLE, entry.addr, entry.addr)
    here = _decode(image, entry.addr, site.length)
    found = _locate(site, image, stub)
    seen = f"`{here.text}`" if here else "no decodable instruction"
    if entry.mode == "offset" and image.arch.relaxes:
        cause = ("the final link relaxed calls and deleted their spare bytes (RISC-V linker relaxation), "
                 "so offsets measured after the partial link no longer hold")
        fix = "use --mode reloc (the default), or build with -mno-relax and link with --no-relax"
        return Verdict(site, MOVED if found is not None else MISSING, entry.addr, found, cause, fix)
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
                       cause=f"{printable(func)} is not in the image (removed by --gc-sections, inlined or folded "
                             "by ICF)")
    return Verdict(site, MISSING, entry.addr,
                   cause=f"the entry points at {printable(image.symbolize(entry.addr))} holding {seen}, and no "
                         f"{site.form} to {printable(site.symbol)} is left in {printable(func) or 'its function'}",
                   fix="rebuild; if it persists, report the link mode (see README, 'Diagnostics')")


def _records(image: Image) -> dict[int, object]:
    """The image's asm goto records (set_sdt_tracepoint_set) by patch point."""
    from sdtgen.tracepoints import image_records

    return {r.patch: r for r in image_records(image.elf, image.read, image.arch.bits)}


def _judge_goto(verdict: Verdict, entry: TableSite, image: Image, records: dict[int, object],
                descriptors: dict[int, object]) -> Verdict:
    """An asm goto's NOP is where the table says: its record (FreeBSD's table, which the compiler wrote)
    must have that patch point, name the site's probe, and have the target the table's entry jumps to."""
    site = verdict.site
    record = records.get(entry.addr)
    if record is None:
        return Verdict(site, MISSING, entry.addr, cause=(
            f"no asm goto record in set_sdt_tracepoint_set has the patch point {entry.addr:#x}: the image's "
            "records were not linked"), fix="link with sdtgen's final script, or INCLUDE sdt_data.ld in yours")
    probe = descriptors.get(record.probe)
    if probe is None or probe.spec != site.probe:
        named = printable(probe.spec) if probe else f"{record.probe:#x}, no probe descriptor"
        return Verdict(site, MISSING, entry.addr, cause=f"its asm goto record names probe {named}, not "
                       f"{printable(site.probe)}", fix="rerun `sdtgen gen` and relink")
    if record.target != entry.target:
        return Verdict(site, MISSING, entry.addr, cause=(
            f"the table's entry jumps to {image.symbolize(entry.target)}, but the asm goto's record says its "
            f"target is {image.symbolize(record.target)}"), fix="the table is corrupt: rerun `sdtgen gen` and relink")
    return verdict


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
    return addr if _branches_to(image, addr, site, stub) else None
