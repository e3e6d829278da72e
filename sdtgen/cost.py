"""`sdtgen cost`: what each disabled probe adds to its function's fall-through path, against a build without it.

The fall-through path of a function (docs/cli.md, `sdtgen cost`) is the instructions a CPU runs from the
function's entry when every conditional branch falls through (is not taken): the layout the compiler chose
for the likely path (gcc and clang lay out the unlikely side of __builtin_expect, and an asm goto's label,
out of line). It follows unconditional direct jumps inside the function, steps over calls (a call is one
instruction: its callee is not the function's), and ends at a return, a tail jump out of the function, an
indirect jump, a trap, or where it would run an instruction a second time (a loop's back edge). Probe sites
are read as sdt_init leaves them, disabled: each image with probe sites is booted in the emulator, and its
code read from memory once the runtime wrote every site it verified (a call site its NOP, a tail site its
return, an is-enabled check its "result = 0", an asm goto its NOP: the runtime's own encoders, nothing
sdtgen writes itself). Both are decoded by Capstone.

Each function that holds a site is compared with the function of the same name in the baseline (the build
with -DSDT_COMPILED_OUT, or any other build): instructions, NOPs, calls and spills (registers stored to the
stack: pushes, stores through the stack or frame pointer) on the two paths. The differences are attributed
to sites by aligning the two paths' mnemonics (difflib): an instruction the probed path adds or lacks is
charged to the first site at or after it on the path (arguments are prepared before a site), or to the last
site when none follows; a site off the path (in a cold branch) costs the path nothing.
"""

from __future__ import annotations

from sdtgen.arch.base import Flow
from sdtgen.errors import SdtError, printable
from sdtgen.image import Image
from sdtgen.plaindata import factory, record

MAX_PATH = 100_000  # instructions a path may have before it is cut (a function is never this long)


@record(frozen=True)
class Step:
    """One instruction of a fall-through path."""

    addr: int
    text: str  # mnemonic and operands
    key: str  # what two paths are aligned by: the mnemonic, and a call's callee
    nop: bool
    call: bool
    spills: int
    site: int | None  # the index of the site entry this instruction is (disabled), if it is one


@record
class SiteCost:
    probe: str
    form: str
    where: str  # function+0xoff
    on_path: bool
    instructions: int = 0
    nops: int = 0
    calls: int = 0
    spills: int = 0
    added: list[str] = factory(list)  # the instructions the probed path has and the baseline's lacks
    removed: list[str] = factory(list)  # and the other way round

    def to_json(self) -> dict:
        return {"probe": self.probe, "form": self.form, "site": self.where, "on_path": self.on_path,
                "instructions": self.instructions, "nops": self.nops, "calls": self.calls, "spills": self.spills,
                "added": self.added, "removed": self.removed}


@record
class FunctionCost:
    function: str
    probed: list[Step]  # its fall-through path, sites disabled
    baseline: list[Step] | None  # the baseline's, None when the baseline has no such function
    sites: list[SiteCost]

    def delta(self, what: str) -> int:
        if self.baseline is None:
            return 0
        if what == "instructions":
            return len(self.probed) - len(self.baseline)
        return _count(self.probed, what) - _count(self.baseline, what)

    def to_json(self) -> dict:
        return {"function": self.function, "path": len(self.probed),
                "baseline_path": None if self.baseline is None else len(self.baseline),
                "addresses": [s.addr for s in self.probed],
                "baseline_addresses": None if self.baseline is None else [s.addr for s in self.baseline],
                **{k: self.delta(k) for k in ("instructions", "nops", "calls", "spills")},
                "sites": [s.to_json() for s in self.sites]}


def _count(path: list[Step], what: str) -> int:
    if what == "nops":
        return sum(s.nop for s in path)
    if what == "calls":
        return sum(s.call for s in path)
    return sum(s.spills for s in path)


@record
class CostReport:
    probed: str
    baseline: str
    arch: str
    functions: list[FunctionCost] = factory(list)

    def total(self, what: str) -> int:
        return sum(f.delta(what) for f in self.functions)

    def to_json(self) -> dict:
        return {"probed": self.probed, "baseline": self.baseline, "arch": self.arch,
                "functions": [f.to_json() for f in self.functions],
                "total": {k: self.total(k) for k in ("instructions", "nops", "calls", "spills")},
                "missing": [f.function for f in self.functions if f.baseline is None]}


def cost(probed_path: str, baseline_path: str) -> CostReport:
    with Image(probed_path) as probed, Image(baseline_path) as baseline:
        if probed.arch.name != baseline.arch.name:
            raise SdtError(baseline_path, f"is {baseline.arch.name} but {probed_path} is {probed.arch.name}",
                           "give two builds of one kernel for one architecture")
        if not probed.sites():
            raise SdtError(probed_path, "has no probe sites, so no probe costs anything there",
                           "give the build with probes first, the build without them (-DSDT_COMPILED_OUT) second")
        report = CostReport(probed_path, baseline_path, probed.arch.name)
        with BootedCode(probed) as mine, BootedCode(baseline) as theirs:
            sites = mine.sites
            by_function: dict[str, list[int]] = {}
            for i, s in enumerate(sites):
                found = probed.symbolize(s.addr)
                by_function.setdefault(found.rpartition("+")[0] if "+" in found else found, []).append(i)
            for name, indices in sorted(by_function.items(), key=lambda kv: sites[kv[1][0]].addr):
                report.functions.append(_function(name, indices, sites, probed, mine, baseline, theirs))
    return report


class BootedCode:
    """An image's code as it runs after sdt_init: booted in the emulator (without running anything) when it has
    probe sites, read from the file when it has none (a build with its probes compiled out)."""

    def __init__(self, image: Image) -> None:
        from sdtgen.elf.linkerset import linker_set
        from sdtgen.table import SITES_SET

        self.image, self.session = image, None
        self.sites: list = []
        if linker_set(image.elf, SITES_SET) is None or not image.sites():
            return
        import io

        from sdtgen.session.reporter import Reporter
        from sdtgen.session.starts import open_session

        quiet = io.StringIO()  # what the boot says (refused sites) is the report's to show, not the boot's
        self.session = open_session("emulator", image.path, Reporter(out=quiet, err=quiet, quiet=True))
        self.sites = [s for s in self.session.target.sites() if s.state != "folded"]

    def read(self, addr: int, size: int) -> bytes:
        if self.session is None:
            return self.image.read(addr, size)
        code = self.session.read(addr, size)
        if code is None:
            raise SdtError(self.image.path, f"{size} bytes at {addr:#x} are not in the booted kernel's memory")
        return code

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    def __enter__(self) -> BootedCode:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _function(name: str, indices: list[int], sites: list, probed: Image, mine: BootedCode, baseline: Image,
              theirs: BootedCode) -> FunctionCost:
    sym = probed.symbols.get(name)
    if sym is None or not sym.size:
        raise SdtError(probed.path, f"site at {probed.symbolize(sites[indices[0]].addr)} is in no function of a "
                       "known size", "build with the function symbols (no strip) and sizes (.size) in place")
    path = fall_through(mine, sym.value, sym.value + sym.size)
    other = baseline.symbols.get(name)
    base = fall_through(theirs, other.value, other.value + other.size) if other is not None and other.size else None
    on_path = {st.site: k for k, st in enumerate(path) if st.site is not None}  # each site's last instruction
    costs = {}
    for i in indices:
        s = sites[i]
        costs[i] = SiteCost(s.probe.spec, s.form, probed.symbolize(s.addr), i in on_path)
    if base is not None:
        _attribute(path, base, [(on_path[i], costs[i]) for i in indices if i in on_path] or
                   [(len(path), costs[indices[0]])])
    return FunctionCost(name, path, base, [costs[i] for i in indices])


def _attribute(path: list[Step], base: list[Step], anchors: list[tuple[int, SiteCost]]) -> None:
    """Charge each instruction one path has and the other lacks to the first site at or after it on the
    probed path (the last site when none follows)."""
    from difflib import SequenceMatcher

    anchors.sort(key=lambda a: a[0])

    def charge(at: int) -> SiteCost:
        return next((c for k, c in anchors if k >= at), anchors[-1][1])

    matcher = SequenceMatcher(None, [s.key for s in path], [s.key for s in base], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        for k in range(i1, i2):
            _add(charge(k), path[k], 1)
        for k in range(j1, j2):
            _add(charge(i1), base[k], -1)


def _add(c: SiteCost, step: Step, sign: int) -> None:
    c.instructions += sign
    c.nops += sign * step.nop
    c.calls += sign * step.call
    c.spills += sign * step.spills
    (c.added if sign > 0 else c.removed).append(step.text)


def fall_through(code: BootedCode, start: int, end: int) -> list[Step]:
    """The fall-through path of the function at [start, end) of ``code``."""
    arch = code.image.arch
    cs = arch.capstone()
    cs.detail = True
    text = code.read(start, end - start)
    sites = {}  # every address a disabled site covers -> its entry (an 8-byte RISC-V site is two NOPs)
    for i, s in enumerate(code.sites):
        if s.state == "off" and start <= s.addr < end:
            sites.update((a, i) for a in range(s.addr, s.addr + s.size))
    out, seen, pc = [], set(), start
    while start <= pc < end and pc not in seen and len(out) < MAX_PATH:
        insn = next(cs.disasm(text[pc - start:pc - start + 16], pc, 1), None)
        if insn is None:
            break
        seen.add(pc)
        kind, target = arch.flow(insn)
        nop = insn.mnemonic in ("nop", "c.nop")
        call = kind == Flow.CALLS
        words = f"{insn.mnemonic} {insn.op_str}".strip()
        if call and target is not None:
            callee = code.image.symbolize(target).removesuffix("+0x0")
            words, key = f"{insn.mnemonic} {callee}", f"call {callee}"
        else:
            key = insn.mnemonic
        out.append(Step(pc, words, key, nop, call, arch.spills(insn), sites.get(pc)))
        pc += insn.size
        if kind in (Flow.RETURNS, Flow.STOPS):
            break
        if kind == Flow.JUMPS:
            if target is None or not start <= target < end:
                break  # an indirect jump, or a tail call out of the function
            pc = target
    return out


def render(report: CostReport, verbose: bool = False) -> str:
    """The report as a table: a row a function, a line a site under it; -v lists the instructions."""
    lines = [f"{'FUNCTION':<28} {'SITES':>5} {'INSNS':>6} {'NOPS':>5} {'CALLS':>6} {'SPILLS':>6}  PATH"]
    for f in report.functions:
        path = f"{len(f.probed)} -> {len(f.baseline)}" if f.baseline is not None else f"{len(f.probed)} (no baseline)"
        lines.append(f"{printable(f.function)[:28]:<28} {len(f.sites):>5} {f.delta('instructions'):>+6} "
                     f"{f.delta('nops'):>+5} {f.delta('calls'):>+6} {f.delta('spills'):>+6}  {path}")
        for s in f.sites:
            what = f"{s.instructions:+d} insns, {s.nops:+d} NOPs, {s.calls:+d} calls, {s.spills:+d} spills"
            if not s.on_path:  # charged only what the path differs by when no site of the function is on it
                what = "off the fall-through path" + (f" ({what})" if s.added or s.removed else "")
            lines.append(f"  {printable(s.probe)} ({s.form} at {printable(s.where)}): {what}")
            if verbose:
                lines += [f"      + {t}" for t in s.added] + [f"      - {t}" for t in s.removed]
    missing = [f.function for f in report.functions if f.baseline is None]
    sites = sum(len(f.sites) for f in report.functions)
    lines.append(f"total: {len(report.functions)} functions, {sites} sites: {report.total('instructions'):+d} "
                 f"instructions, {report.total('nops'):+d} NOPs, {report.total('calls'):+d} calls, "
                 f"{report.total('spills'):+d} spills on their fall-through paths")
    if missing:
        lines.append(f"not in {report.baseline}: {', '.join(printable(m) for m in missing)}")
    return "\n".join(lines)
